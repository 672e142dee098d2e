"""The engine layer: ``ObservationalMemory`` and the modules it is made of.

``planner`` (pure decisions) <- ``step`` (one agent step) -> ``observation``, ``reflection``,
``activation``, ``background``, ``resource_scope`` (the cycles) -> ``model_runs`` (OM's model
calls with their events) -> ``core`` (store, caches, reads); ``rendering`` and ``status`` build
what the step returns; ``facade`` holds the public methods. docs/architecture.md has the map.
"""

from .core import MessageListener, SectionProvider
from .facade import ObservationalMemory
from .state import PHASES, OMAborted, OMContext, Phase

__all__ = [
    "PHASES",
    "MessageListener",
    "OMAborted",
    "OMContext",
    "ObservationalMemory",
    "Phase",
    "SectionProvider",
    "default_db_path",
]


def default_db_path() -> str:
    """The embedded SQLite file OM uses when no store is given (``LANGCHAIN_OM_DB`` overrides it)."""
    import os

    return os.environ.get("LANGCHAIN_OM_DB", "./langchain_om.db")
