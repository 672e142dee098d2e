"""The port ``langgraph dev`` serves this example on, and the URL a client reaches it at: one place.

``langgraph dev`` listens on 2024 unless told ``--port``. Set ``LANGGRAPH_PORT`` (or pass ``--port``)
and the server this module starts (``python dev_server.py``, extra flags passed through) serves there;
it also notes the port in ``.langgraph_port`` beside this file. ``client.py`` then finds the server
that answers: ``LANGGRAPH_PORT`` if set, else the noted port, else 2024 and the next few ports; when
none answers it says, in one line, which port to set.
"""

from __future__ import annotations

import os
import shutil
import sys
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

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


PORT_FILE = Path(__file__).with_name(".langgraph_port")
"""Where ``python dev_server.py`` notes the port it serves on, for ``client.py``."""
NEARBY = range(DEFAULT_PORT, DEFAULT_PORT + 7)
"""Ports tried when nothing says which one: the default and the next ones a user picks when it is taken."""


def answers(port_number: int) -> bool:
    """Whether a LangGraph server answers its health check (``GET /ok``) on this loopback port."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port_number}/ok", timeout=1.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def noted_port(path: Path = PORT_FILE) -> int | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def find_server(env: Mapping[str, str] | None = None, *, noted: Path = PORT_FILE, nearby: Iterable[int] = NEARBY,
                probe: Callable[[int], bool] = answers) -> str:
    """The URL of the dev server that answers: ``LANGGRAPH_PORT`` when set (only that one), else the port
    ``dev_server.py`` noted, else ``nearby``. None answering ends the client with one line saying what to set."""
    environ = os.environ if env is None else env
    if environ.get("LANGGRAPH_PORT", "").strip():
        candidates = [port(environ)]
    else:
        first = noted_port(noted)
        candidates = list(dict.fromkeys([*([first] if first else []), *nearby]))
    for candidate in candidates:
        if probe(candidate):
            return f"http://127.0.0.1:{candidate}"
    tried = ", ".join(str(c) for c in candidates)
    raise SystemExit(f"error: no LangGraph dev server answers on 127.0.0.1 port {tried}: start it with "
                     "`python dev_server.py --allow-blocking`, or set LANGGRAPH_PORT to the port `langgraph dev` "
                     "printed (its line 'API: http://127.0.0.1:PORT')")


def dev_command(*flags: str, env: Mapping[str, str] | None = None) -> list[str]:
    """``langgraph dev`` on this port, offline: no browser, no reload (SQLite also needs --allow-blocking).

    The CLI next to this interpreter (the venv's), else the one on ``PATH``."""
    beside = os.path.join(os.path.dirname(sys.executable), "langgraph")
    cli = beside if os.path.exists(beside) else shutil.which("langgraph") or "langgraph"
    return [cli, "dev", "--host", "127.0.0.1", "--port", str(port(env)), "--no-reload", "--no-browser", *flags]


def serving_port(command: list[str]) -> int:
    """The port ``command`` serves on: the last ``--port`` wins, as in the CLI's own parsing."""
    values = [command[i + 1] for i, flag in enumerate(command[:-1]) if flag == "--port"]
    values += [flag.split("=", 1)[1] for flag in command if flag.startswith("--port=")]
    return int(values[-1]) if values and values[-1].isdigit() else port()


if __name__ == "__main__":
    os.environ.setdefault("LANGGRAPH_CLI_NO_ANALYTICS", "1")
    command = dev_command(*sys.argv[1:])
    PORT_FILE.write_text(f"{serving_port(command)}\n", encoding="utf-8")
    os.execv(command[0], command)
