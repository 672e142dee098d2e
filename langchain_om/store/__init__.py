"""Storage layer: the contract every backend keeps, the helpers they share, one package per backend.

At this level: ``base`` (the ``OMStore`` protocol, records, messages, errors), ``ids`` (id checks
and the private-resource namespace), ``search`` and ``cjk`` (query parsing, ranking and the CJK
normaliser every backend uses), ``vector_segments``, ``known``, ``thread_summaries`` and
``step_fast_paths`` (optional capabilities a backend may offer). None of them names or imports a
backend. Below, one package per backend, each laid out the same way (``store``, ``connection``,
``schema``, ``records``, ``search``, ``vectors``, ...):

- ``sqlite/``: the embedded default (``default_store()``, what ``ObservationalMemory(store=None)`` uses);
- ``postgres/``: several workers on one database (psycopg loads only when it is first used);
- ``memory/``: in-process, for tests and notebooks.

A new backend implements ``OMStore`` in a package of its own and joins the one conformance suite
(``tests/test_store_contract.py``, parametrised over ``tests/conftest.py``'s ``STORE_FACTORIES``).
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
        try:
            value = importlib.import_module(".postgres", __name__).PostgresStore
        except ModuleNotFoundError as exc:  # the base install leaves PostgreSQL out: name the extra
            if (exc.name or "").split(".")[0] not in ("psycopg", "psycopg_pool"):
                raise
            raise ImportError(f"PostgresStore needs the {exc.name} package, which is not installed: "
                              f'pip install "langchain-om[postgres]"', name=exc.name) from exc
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
