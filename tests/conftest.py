"""Shared fixtures.

Stores: ``store`` is parametrized over every backend in ``STORE_FACTORIES`` and yields a fresh,
set-up store (SQLite in ``tmp_path``, PostgreSQL in a throw-away schema). To add a backend,
add a factory to ``STORE_FACTORIES``; to add unrelated fixtures, append them below the
"Other fixtures" marker.

PostgreSQL comes from ``$LANGCHAIN_OM_TEST_PG_DSN`` (``.ci/run`` and ``.ci/start_postgres.sh``
start a private cluster and set it). Without it the PostgreSQL cases skip locally, but fail
when ``CI=true``, so CI can never pass by silently skipping PostgreSQL.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest

from langchain_om.store import InMemoryStore, OMStore, PostgresStore, SQLiteStore

PG_DSN_ENV = "LANGCHAIN_OM_TEST_PG_DSN"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() == "true"


def require_pg_dsn() -> str:
    """The test DSN; skips when it is missing locally, fails when it is missing in CI."""
    dsn = os.environ.get(PG_DSN_ENV, "").strip()
    if dsn:
        return dsn
    message = f"{PG_DSN_ENV} is not set (run .ci/run, or `source .ci/start_postgres.sh`)"
    if in_ci():
        pytest.fail(f"CI=true but {message}: PostgreSQL tests must not be skipped in CI", pytrace=False)
    pytest.skip(message)


def unique_schema(prefix: str = "om_test") -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


async def drop_pg_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


# ---- store factories ------------------------------------------------------------------------
# Each factory opens one fresh, set-up store and cleans it up on exit.

StoreFactory = Callable[[pytest.FixtureRequest], AbstractAsyncContextManager[OMStore]]


@asynccontextmanager
async def _memory_store(request: pytest.FixtureRequest) -> AsyncIterator[OMStore]:
    store = InMemoryStore()
    await store.asetup()
    yield store
    await store.aclose()


@asynccontextmanager
async def _sqlite_store(request: pytest.FixtureRequest) -> AsyncIterator[OMStore]:
    path: Path = request.getfixturevalue("tmp_path") / f"om-{uuid.uuid4().hex[:8]}.db"
    store = SQLiteStore(path)
    await store.asetup()
    try:
        yield store
    finally:
        await store.aclose()


@asynccontextmanager
async def _postgres_store(request: pytest.FixtureRequest) -> AsyncIterator[OMStore]:
    dsn = require_pg_dsn()
    schema = unique_schema()
    store = PostgresStore(dsn, schema=schema)
    try:
        await store.asetup()
        yield store
    finally:
        await store.aclose()
        await drop_pg_schema(dsn, schema)


STORE_FACTORIES: dict[str, StoreFactory] = {
    "memory": _memory_store,
    "sqlite": _sqlite_store,
    "postgres": _postgres_store,
}
_NEEDS_POSTGRES = {"postgres"}


def _store_params() -> list[object]:
    return [
        pytest.param(kind, id=kind, marks=[pytest.mark.postgres] if kind in _NEEDS_POSTGRES else [])
        for kind in STORE_FACTORIES
    ]


@pytest.fixture(params=_store_params())
def store_kind(request: pytest.FixtureRequest) -> str:
    """The backend name of the current ``store`` parameter ("memory", "sqlite", "postgres")."""
    kind: str = request.param
    return kind


@pytest.fixture
async def store(store_kind: str, request: pytest.FixtureRequest) -> AsyncIterator[OMStore]:
    """A fresh, set-up store of each backend in turn."""
    async with STORE_FACTORIES[store_kind](request) as opened:
        yield opened


@pytest.fixture
async def open_store(request: pytest.FixtureRequest) -> AsyncIterator[Callable[[str], Awaitable[OMStore]]]:
    """``await open_store("sqlite")``: extra fresh stores of any backend, closed at teardown."""
    async with AsyncExitStack() as stack:

        async def opener(kind: str) -> OMStore:
            return await stack.enter_async_context(STORE_FACTORIES[kind](request))

        yield opener


@pytest.fixture
def pg_dsn() -> str:
    """DSN of the test PostgreSQL (skip locally / fail in CI when missing)."""
    return require_pg_dsn()


@pytest.fixture
async def pg_schema(pg_dsn: str) -> AsyncIterator[str]:
    """A unique schema name, dropped (with everything in it) after the test."""
    schema = unique_schema()
    yield schema
    await drop_pg_schema(pg_dsn, schema)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    """A path for a SQLite database file inside the test's temp dir (not yet created)."""
    return tmp_path / "langchain_om_test.db"


# ---- Other fixtures -------------------------------------------------------------------------


LOCAL_MODEL_ENV = "LANGCHAIN_OM_LOCAL_MODEL"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """``local_model`` tests run only when LANGCHAIN_OM_LOCAL_MODEL names a model (a .gguf path or
    an init_chat_model string) and never in CI: one call of a small local model takes minutes."""
    if os.environ.get(LOCAL_MODEL_ENV) and os.environ.get("CI", "").lower() != "true":
        return
    reason = f"opt-in: set {LOCAL_MODEL_ENV}=path.gguf to run OM on a local model (docs/local-models.md)"
    for item in items:
        if "local_model" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=reason))
