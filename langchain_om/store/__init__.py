"""Storage backends of Observational Memory and the contract they share.

``default_store()`` is what ``ObservationalMemory(store=None)`` uses: an embedded SQLite
file, so the package works with zero configuration. PostgreSQL is for several workers.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

from .base import (
    IMPLICIT_RESOURCE_PREFIX,
    SCHEMA_VERSION,
    BufferedChunk,
    BufferedReflection,
    InvalidStoreInput,
    MessageKind,
    NewMessage,
    ObservationGroup,
    OMRecord,
    OMStore,
    RecordConflictError,
    RecordStamp,
    SearchHit,
    StoredMessage,
    StoreError,
    SupportsLoopBinding,
    SupportsRecordStamp,
    SupportsThreadHead,
    ThreadInfo,
    ValueUpdate,
    VectorBatch,
    VectorItem,
    check_id,
    implicit_resource,
    record_key,
)
from .memory import InMemoryStore
from .search import decode_vector, encode_vector
from .sqlite import SQLiteStore
from .step_fast_paths import SupportsForkProbe, SupportsIncarnationAppend

if TYPE_CHECKING:
    from .postgres import PostgresStore

DB_ENV = "LANGCHAIN_OM_DB"
DEFAULT_DB_PATH = "./langchain_om.db"


def default_store() -> SQLiteStore:
    """The zero-configuration store: SQLite at ``$LANGCHAIN_OM_DB`` or ``./langchain_om.db``."""
    return SQLiteStore(os.environ.get(DB_ENV) or DEFAULT_DB_PATH)


__all__ = [
    "DB_ENV",
    "DEFAULT_DB_PATH",
    "IMPLICIT_RESOURCE_PREFIX",
    "SCHEMA_VERSION",
    "BufferedChunk",
    "BufferedReflection",
    "InMemoryStore",
    "InvalidStoreInput",
    "MessageKind",
    "NewMessage",
    "OMRecord",
    "OMStore",
    "ObservationGroup",
    "PostgresStore",
    "RecordConflictError",
    "RecordStamp",
    "SQLiteStore",
    "SearchHit",
    "StoreError",
    "StoredMessage",
    "SupportsForkProbe",
    "SupportsIncarnationAppend",
    "SupportsLoopBinding",
    "SupportsRecordStamp",
    "SupportsThreadHead",
    "ThreadInfo",
    "ValueUpdate",
    "VectorBatch",
    "VectorItem",
    "check_id",
    "decode_vector",
    "default_store",
    "encode_vector",
    "implicit_resource",
    "record_key",
]


def __getattr__(name: str) -> Any:
    """``PostgresStore`` is imported on first use: psycopg loads only for a PostgreSQL store."""
    if name == "PostgresStore":
        value = importlib.import_module(".postgres", __name__).PostgresStore
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
