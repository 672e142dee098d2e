"""Which extra of ``langchain-om`` brings an optional package, and the error that says so.

The base install holds what the embedded SQLite default needs (issue 47); model providers,
PostgreSQL and the ui app are extras. A missing one is reported the way ``init_chat_model``
reports a missing provider package, naming the extra first since that pins versions that
work together, then the package alone.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

EXTRA_OF_MODULE: dict[str, str] = {
    "langchain_openai": "openai",
    "langchain_google_genai": "google",
    "psycopg": "postgres",
    "psycopg_pool": "postgres",
    "langchain_postgres": "postgres",
    "starlette": "ui",
    "fastapi": "ui",
    "uvicorn": "ui",
    "numpy": "vector",
}
"""Top-level module -> the extra (``pip install "langchain-om[<extra>]"``) that installs it."""


class MissingExtraError(ImportError):
    """An optional package is missing; the message names the extra to install."""

    def __init__(self, what: str, module: str, extra: str | None = None) -> None:
        self.extra = extra if extra is not None else EXTRA_OF_MODULE.get(module)
        self.module = module
        super().__init__(f"{what} needs the {module} package, which is not installed: "
                         f"{install_hint(module, self.extra)}", name=module)


def install_hint(module: str, extra: str | None = None) -> str:
    """``pip install "langchain-om[openai]"`` for a module an extra brings, else ``pip install <package>``."""
    extra = extra if extra is not None else EXTRA_OF_MODULE.get(module)
    package = module.replace("_", "-")
    if extra is None:
        return f"pip install {package}"
    return f'pip install "langchain-om[{extra}]" (or pip install {package})'


def missing_modules(modules: Iterable[str]) -> list[str]:
    """The modules of ``modules`` that cannot be imported here (none imported by the check)."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_modules(what: str, modules: Iterable[str], extra: str | None = None) -> None:
    """Raise ``MissingExtraError`` for the first of ``modules`` that is not installed."""
    for name in missing_modules(modules):
        raise MissingExtraError(what, name, extra)
