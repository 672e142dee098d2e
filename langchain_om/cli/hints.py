"""How to spell a ``langchain-om`` command so that it works when the user pastes it.

The console script lives in the virtualenv's ``bin``: printed as plain ``langchain-om`` it
fails with "command not found" in a shell where the venv is not active. The demo prints its
follow-up commands with the prefix this module picks.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

LAUNCHER_ENV = "LANGCHAIN_OM_LAUNCHER"
"""Set by ``scripts/langchain-om.sh`` (and ``scripts/demo.sh``) to the wrapper's own path."""


def _shown(path: Path, cwd: Path) -> str:
    """``path`` relative to ``cwd`` when it lies below it (``./scripts/x.sh``), else absolute."""
    absolute = Path(os.path.abspath(path))  # not resolve(): a venv's python is a symlink to the base one
    try:
        relative = absolute.relative_to(os.path.abspath(cwd))
    except ValueError:
        return shlex.quote(str(absolute))
    return shlex.quote(f"./{relative.as_posix()}")


def cli_prefix(env: Mapping[str, str] | None = None, cwd: str | Path | None = None) -> str:
    """The command that runs ``langchain-om`` from the user's shell as it is now.

    Through a repository wrapper: that wrapper. Otherwise ``langchain-om`` if the shell finds
    this very installation's script on ``PATH``; else this interpreter with ``-m langchain_om``.
    """
    environ = os.environ if env is None else env
    here = Path(cwd) if cwd is not None else Path.cwd()
    launcher = environ.get(LAUNCHER_ENV)
    if launcher and Path(launcher).is_file():
        return _shown(Path(launcher), here)
    found = shutil.which("langchain-om", path=environ.get("PATH"))
    if found and os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(sys.executable)):
        return "langchain-om"
    return f"{_shown(Path(sys.executable), here)} -m langchain_om"


def inspect_command(thread_id: str, db: str, *, env: Mapping[str, str] | None = None) -> str:
    """The ``inspect`` command for a thread the demo just wrote, ready to paste."""
    return f"{cli_prefix(env)} inspect {shlex.quote(thread_id)} --db {shlex.quote(db)}"
