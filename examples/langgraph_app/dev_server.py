"""The port ``langgraph dev`` serves this example on, and the URL a client reaches it at: one place.

``langgraph dev`` listens on 2024 unless told ``--port``. Set ``LANGGRAPH_PORT`` and both the server
this module starts (``python dev_server.py``, extra flags passed through) and ``client.py`` use it, so
a taken port is changed once instead of in the command and in every client.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping

DEFAULT_PORT = 2024
"""``langgraph dev``'s own default."""


def port(env: Mapping[str, str] | None = None) -> int:
    """``LANGGRAPH_PORT`` if set, else 2024; a value that is not a port is refused naming the variable."""
    text = (os.environ if env is None else env).get("LANGGRAPH_PORT", "").strip()
    if not text:
        return DEFAULT_PORT
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise SystemExit(f"error: LANGGRAPH_PORT: expected a port number (1-65535), got {text!r}")
    return int(text)


def url(env: Mapping[str, str] | None = None) -> str:
    return f"http://127.0.0.1:{port(env)}"


def dev_command(*flags: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``langgraph dev`` on this port, offline: no browser, no reload (SQLite also needs --allow-blocking).

    The CLI next to this interpreter (the venv's), else the one on ``PATH``."""
    beside = os.path.join(os.path.dirname(sys.executable), "langgraph")
    cli = beside if os.path.exists(beside) else shutil.which("langgraph") or "langgraph"
    return [cli, "dev", "--host", "127.0.0.1", "--port", str(port(env)), "--no-reload", "--no-browser", *flags]


if __name__ == "__main__":
    os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
    command = dev_command(*sys.argv[1:])
    os.execv(command[0], command)
