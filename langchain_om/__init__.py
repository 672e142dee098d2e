"""Observational Memory for LangGraph and LangChain.

A bounded context for long-running agents: an Observer model rewrites old messages into a
dated observation log, a Reflector condenses the log, background buffering keeps both off
the agent's critical path, and a ``recall`` tool pages back through the raw messages.

Everything in ``__all__`` is public API (see DESIGN.md); other modules are internals.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from . import events
    from .engine import ObservationalMemory, OMAborted, OMContext
    from .extensions.branches import ForeignResourceError
    from .extensions.extractors import Extractor
    from .extensions.recall import RecallInput, RecallTool
    from .extensions.working_memory import WorkingMemoryExtractor
    from .foundation.config import (
        FailurePolicyConfig,
        ObservationConfig,
        OMConfigError,
        ReflectionConfig,
        RetrievalConfig,
    )
    from .foundation.context import OM_CONTEXT_MESSAGE_ID
    from .foundation.hooks import HookContext, ObserveHooks
    from .foundation.run_ids import ConflictingResourceError
    from .integrations.callbacks import OMConsoleHandler, OMEventHandler, SyncOMEventHandler
    from .integrations.graph import add_observational_memory, om_pre_model_hook, om_turn_end_node
    from .integrations.history import ObservationalChatMessageHistory, one_system_message
    from .integrations.middleware import ObservationalMemoryMiddleware
    from .integrations.runnable_history import RunnableWithObservationalMemory, UnmergedSystemMessagesWarning
    from .integrations.tools import om_tools
    from .model_calls.failures import OMObservationError
    from .model_calls.models import ModelByInputTokens, ModelSelectionError, ModelWithRetries, OMModelError
    from .store import InMemoryStore, OMRecord, OMStore, PostgresStore, SQLiteStore

__version__ = "0.1.0"

# Every public name is imported on first use (PEP 562): ``import langchain_om`` stays about as
# cheap as ``import langgraph.graph``, psycopg loads only with ``PostgresStore`` and
# ``langchain.agents`` only with the middleware. ``from langchain_om import X`` works as before.
_EXPORTS: dict[str, str] = {
    "events": ".events",
    "ObservationalMemory": ".engine",
    "OMAborted": ".engine",
    "OMContext": ".engine",
    "ForeignResourceError": ".extensions.branches",
    "Extractor": ".extensions.extractors",
    "RecallInput": ".extensions.recall",
    "RecallTool": ".extensions.recall",
    "WorkingMemoryExtractor": ".extensions.working_memory",
    "FailurePolicyConfig": ".foundation.config",
    "ObservationConfig": ".foundation.config",
    "OMConfigError": ".foundation.config",
    "ReflectionConfig": ".foundation.config",
    "RetrievalConfig": ".foundation.config",
    "OM_CONTEXT_MESSAGE_ID": ".foundation.context",
    "HookContext": ".foundation.hooks",
    "ObserveHooks": ".foundation.hooks",
    "ConflictingResourceError": ".foundation.run_ids",
    "OMConsoleHandler": ".integrations.callbacks",
    "OMEventHandler": ".integrations.callbacks",
    "SyncOMEventHandler": ".integrations.callbacks",
    "add_observational_memory": ".integrations.graph",
    "om_pre_model_hook": ".integrations.graph",
    "om_tools": ".integrations.tools",
    "om_turn_end_node": ".integrations.graph",
    "ObservationalChatMessageHistory": ".integrations.history",
    "one_system_message": ".integrations.history",
    "ObservationalMemoryMiddleware": ".integrations.middleware",
    "RunnableWithObservationalMemory": ".integrations.runnable_history",
    "UnmergedSystemMessagesWarning": ".integrations.runnable_history",
    "OMObservationError": ".model_calls.failures",
    "ModelByInputTokens": ".model_calls.models",
    "ModelSelectionError": ".model_calls.models",
    "ModelWithRetries": ".model_calls.models",
    "OMModelError": ".model_calls.models",
    "InMemoryStore": ".store",
    "OMRecord": ".store",
    "OMStore": ".store",
    "PostgresStore": ".store",
    "SQLiteStore": ".store",
}


__all__ = [
    "OM_CONTEXT_MESSAGE_ID",
    "ConflictingResourceError",
    "Extractor",
    "FailurePolicyConfig",
    "ForeignResourceError",
    "HookContext",
    "InMemoryStore",
    "ModelByInputTokens",
    "ModelSelectionError",
    "ModelWithRetries",
    "OMAborted",
    "OMConfigError",
    "OMConsoleHandler",
    "OMContext",
    "OMEventHandler",
    "OMModelError",
    "OMObservationError",
    "OMRecord",
    "OMStore",
    "ObservationConfig",
    "ObservationalChatMessageHistory",
    "ObservationalMemory",
    "ObservationalMemoryMiddleware",
    "ObserveHooks",
    "PostgresStore",
    "RecallInput",
    "RecallTool",
    "ReflectionConfig",
    "RetrievalConfig",
    "RunnableWithObservationalMemory",
    "SQLiteStore",
    "SyncOMEventHandler",
    "UnmergedSystemMessagesWarning",
    "WorkingMemoryExtractor",
    "__version__",
    "add_observational_memory",
    "events",
    "om_pre_model_hook",
    "om_tools",
    "om_turn_end_node",
    "one_system_message",
]


_OLD_IMPORT_PATHS: dict[str, tuple[str, str]] = {
    "langchain_om.callbacks": ("langchain_om.integrations.callbacks", "0.3.0"),
    "langchain_om.config": ("langchain_om.foundation.config", "0.3.0"),
    "langchain_om.events": ("langchain_om.foundation.events", "0.3.0"),
    "langchain_om.graph": ("langchain_om.integrations.graph", "0.3.0"),
    "langchain_om.history": ("langchain_om.integrations.history", "0.3.0"),
    "langchain_om.middleware": ("langchain_om.integrations.middleware", "0.3.0"),
    "langchain_om.ui": ("langchain_om.integrations.ui", "0.3.0"),
    "langchain_om.integrations.graph.om_tools": ("langchain_om.integrations.tools.om_tools", "0.3.0"),
    "langchain_om.integrations.graph.ids_from_config": ("langchain_om.integrations.turn.ids_from_config", "0.3.0"),
    "langchain_om.integrations.graph.TRIPWIRE_KEY": ("langchain_om.integrations.turn.TRIPWIRE_KEY", "0.3.0"),
}
"""Every re-export that only keeps an older import path alive: old path -> (where the thing lives
now, the release that removes the old path). The root's one-line modules are the flat layout's;
the ``integrations.graph`` names date from before the shared turn moved to ``integrations/turn.py``
(issue 42). ``langchain_om.store.sqlite`` / ``.postgres`` / ``.memory`` are not shims: they are the
backend packages, and their ``__init__`` names what they export. ``tests/test_import_graph.py``
holds this list to the files."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        # a subpackage (``langchain_om.store``), as the eager root used to make reachable
        if name.startswith("_") or importlib.util.find_spec(f"{__name__}.{name}") is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = f".{name}"
    imported = importlib.import_module(module, __name__)
    value = imported if module == f".{name}" else getattr(imported, name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
