"""Observational Memory for LangGraph and LangChain.

A bounded context for long-running agents: an Observer model rewrites old messages into a
dated observation log, a Reflector condenses the log, background buffering keeps both off
the agent's critical path, and a ``recall`` tool pages back through the raw messages.

Everything in ``__all__`` is public API (see DESIGN.md); other modules are internals.
"""

from __future__ import annotations

from . import events
from .engine import ObservationalMemory, OMAborted, OMContext
from .extensions.branches import ForeignResourceError
from .extensions.extractors import Extractor
from .extensions.recall import RecallInput, RecallTool
from .extensions.working_memory import WorkingMemoryExtractor
from .foundation.config import FailurePolicyConfig, ObservationConfig, OMConfigError, ReflectionConfig, RetrievalConfig
from .foundation.context import OM_CONTEXT_MESSAGE_ID
from .foundation.hooks import HookContext, ObserveHooks
from .foundation.run_ids import ConflictingResourceError
from .integrations.callbacks import OMConsoleHandler, OMEventHandler, SyncOMEventHandler
from .integrations.graph import add_observational_memory, om_pre_model_hook, om_tools, om_turn_end_node
from .integrations.history import ObservationalChatMessageHistory, one_system_message
from .integrations.middleware import ObservationalMemoryMiddleware
from .model_calls.failures import OMObservationError
from .model_calls.models import ModelByInputTokens, ModelSelectionError, ModelWithRetries, OMModelError
from .store import InMemoryStore, OMRecord, OMStore, PostgresStore, SQLiteStore

__version__ = "0.1.0"

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
    "SQLiteStore",
    "SyncOMEventHandler",
    "WorkingMemoryExtractor",
    "__version__",
    "add_observational_memory",
    "events",
    "om_pre_model_hook",
    "om_tools",
    "om_turn_end_node",
    "one_system_message",
]
