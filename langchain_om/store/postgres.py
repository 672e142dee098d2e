"""PostgreSQL store for several workers sharing one database (psycopg 3 async + a connection pool).

Everything lives in its own schema (``langchain_om`` by default). Concurrency rules:

- ``acommit_record`` locks the record row (``SELECT ... FOR UPDATE``; a create races through
  ``INSERT ... ON CONFLICT DO NOTHING``), compares versions and marks messages observed in the
  same transaction, so exactly one of two racing workers wins a version.
- ``aappend_messages`` takes ``pg_advisory_xact_lock(hashtext(thread_id))`` so ``seq`` numbers
  of a thread are assigned by one transaction at a time.
- Schema creation and migration run under an advisory lock, so workers starting together are safe.

All values are bound parameters; the schema name is quoted with ``psycopg.sql.Identifier``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import psycopg
from psycopg import AsyncCursor, sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from . import _util as u
from .base import (
    IMPLICIT_RESOURCE_PREFIX,
    SCHEMA_VERSION,
    InvalidStoreInput,
    NewMessage,
    OMRecord,
    RecordConflictError,
    RecordStamp,
    SearchHit,
    StoredMessage,
    StoreError,
    ThreadInfo,
    ValueUpdate,
    VectorBatch,
    VectorItem,
    check_id,
    check_resource_id,
    check_thread_id,
    record_key,
    utcnow,
)
from .search import (
    RANK_CANDIDATES,
    check_space,
    check_vector_items,
    merge_ranked,
    search_arguments,
    search_text,
    tsquery_text,
)

DSN_ENV = "LANGCHAIN_OM_PG_DSN"

_SCHEMA_V1 = [
    "CREATE TABLE IF NOT EXISTS {s}.threads ("
    " ord BIGSERIAL NOT NULL,"
    " thread_id TEXT PRIMARY KEY,"
    " resource_id TEXT NOT NULL,"
    " title TEXT,"
    " created_at TIMESTAMPTZ NOT NULL,"
    " updated_at TIMESTAMPTZ NOT NULL,"
    " metadata JSONB NOT NULL DEFAULT '{{}}'::jsonb)",
    "CREATE INDEX IF NOT EXISTS threads_by_resource ON {s}.threads (resource_id, created_at DESC, ord DESC)",
    "CREATE TABLE IF NOT EXISTS {s}.messages ("
    " id TEXT NOT NULL,"
    " resource_id TEXT NOT NULL,"
    " thread_id TEXT NOT NULL,"
    " seq BIGINT NOT NULL,"
    " kind TEXT NOT NULL,"
    " data JSONB NOT NULL,"
    " tokens BIGINT NOT NULL DEFAULT 0,"
    " created_at TIMESTAMPTZ NOT NULL,"
    " observed BOOLEAN NOT NULL DEFAULT FALSE,"
    " observed_at TIMESTAMPTZ,"
    " UNIQUE (thread_id, id),"
    " UNIQUE (thread_id, seq))",
    "CREATE INDEX IF NOT EXISTS messages_recall ON {s}.messages (resource_id, thread_id, seq)",
    "CREATE INDEX IF NOT EXISTS messages_by_id ON {s}.messages (resource_id, id)",
    "CREATE TABLE IF NOT EXISTS {s}.records ("
    " key TEXT PRIMARY KEY,"
    " resource_id TEXT NOT NULL,"
    " thread_id TEXT,"
    " scope TEXT NOT NULL,"
    " version BIGINT NOT NULL,"
    " body JSONB NOT NULL,"
    " updated_at TIMESTAMPTZ NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.kv ("
    " resource_id TEXT NOT NULL,"
    " namespace TEXT NOT NULL,"
    " key TEXT NOT NULL,"
    " value JSONB NOT NULL,"
    " updated_at TIMESTAMPTZ NOT NULL,"
    " PRIMARY KEY (resource_id, namespace, key))",
]



async def _move_implicit_resources(store: PostgresStore, cur: Cursor) -> None:
    """Migration 2: threads used without a resource move to their private resource
    (``u.V1_IMPLICIT_THREADS_SQL`` says which). Runs inside the migration's transaction, so a
    crash leaves version 1 untouched and the next open redoes it; on version 2 nothing matches."""
    query = u.V1_IMPLICIT_THREADS_SQL.format(threads="{s}.threads", records="{s}.records")
    await cur.execute(store._q(f"CREATE TEMP TABLE om_implicit ON COMMIT DROP AS {query}"))
    await cur.execute(store._q(
        "SELECT key, resource_id, thread_id, body FROM {s}.records "
        "WHERE resource_id IN (SELECT thread_id FROM om_implicit)"
    ))
    for record in await cur.fetchall():  # bodies name their resource too
        private = IMPLICIT_RESOURCE_PREFIX + record["resource_id"]
        moved = u.record_body_for_resource(u.from_jsonb_safe(record["body"]), private)
        await cur.execute(
            store._q("UPDATE {s}.records SET key = %s, resource_id = %s, body = %s WHERE key = %s"),
            (record_key(private, record["thread_id"]), private, _jsonb(moved, "record"), record["key"]),
        )
    for table in ("threads", "messages", "kv"):
        await cur.execute(
            store._q(f"UPDATE {{s}}.{table} SET resource_id = %s::text || resource_id "
                     "WHERE resource_id IN (SELECT thread_id FROM om_implicit)"),
            (IMPLICIT_RESOURCE_PREFIX,),
        )


# MIGRATIONS[n] takes a schema at version n - 1 to version n (all run in one transaction):
# SQL statements, or a coroutine function of the store and the migration's cursor.
# v3: a partial index of the unobserved rows, so marking a range observed touches only those rows
_UNOBSERVED_INDEX_V3 = [
    "CREATE INDEX IF NOT EXISTS messages_unobserved ON {s}.messages (thread_id, seq) WHERE NOT observed",
]
SEARCH_CONFIG = "english"
"""The text search configuration of the keyword index (stemming like SQLite's porter tokenizer)."""

_SCHEMA_V4 = [
    # the keyword index: narrow rows (no message body), so ranking reads little; pos orders by recency
    "CREATE TABLE IF NOT EXISTS {s}.message_search ("
    " pos BIGSERIAL PRIMARY KEY,"
    " resource_id TEXT NOT NULL,"
    " thread_id TEXT NOT NULL,"
    " message_id TEXT NOT NULL,"
    " search tsvector NOT NULL)",
    "CREATE INDEX IF NOT EXISTS message_search_recent ON {s}.message_search (resource_id, pos)",
    "CREATE INDEX IF NOT EXISTS message_search_words ON {s}.message_search USING GIN (search)",
    "CREATE INDEX IF NOT EXISTS message_search_thread ON {s}.message_search (thread_id)",
    "CREATE TABLE IF NOT EXISTS {s}.vector_deletions (resource_id TEXT PRIMARY KEY, deleted BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS {s}.message_vectors ("
    " pos BIGSERIAL PRIMARY KEY,"
    " resource_id TEXT NOT NULL,"
    " space TEXT NOT NULL,"
    " thread_id TEXT NOT NULL,"
    " message_id TEXT NOT NULL,"
    " vector BYTEA NOT NULL,"
    " UNIQUE (thread_id, message_id, space))",
    "CREATE INDEX IF NOT EXISTS message_vectors_scan ON {s}.message_vectors (resource_id, space, pos)",
]

_BACKFILL_BATCH = 1000
_INSERT_SEARCH = (
    "INSERT INTO {s}.message_search (resource_id, thread_id, message_id, search) "
    f"VALUES (%s, %s, %s, to_tsvector('{SEARCH_CONFIG}', %s))"
)


async def _migrate_v4(store: PostgresStore, cur: Cursor) -> None:
    """Recall search: the ``tsvector`` index table, backfilled from every stored message (paged
    by key, oldest first, in the migration's transaction), and the embeddings tables."""
    for statement in _SCHEMA_V4:
        await cur.execute(store._q(statement))
    last: tuple[str, int] = ("", 0)
    while True:
        await cur.execute(
            store._q(
                "SELECT resource_id, thread_id, seq, id, kind, data FROM {s}.messages "
                "WHERE (thread_id, seq) > (%s, %s) ORDER BY thread_id, seq LIMIT %s"
            ),
            (*last, _BACKFILL_BATCH),
        )
        rows = await cur.fetchall()
        if not rows:
            return
        last = (rows[-1]["thread_id"], rows[-1]["seq"])
        entries = [
            (row["resource_id"], row["thread_id"], row["id"], text)
            for row in rows
            if (text := search_text(u.from_jsonb_safe(row["data"]), row["kind"]))
        ]
        if entries:
            await cur.executemany(store._q(_INSERT_SEARCH), entries)


# v5: leases, so concurrent workers on one record do not pay the Observer twice for one range
_LEASES_V5 = [
    "CREATE TABLE IF NOT EXISTS {s}.leases ("
    " name TEXT PRIMARY KEY,"
    " owner TEXT NOT NULL,"
    " expires_at DOUBLE PRECISION NOT NULL)",
]
# v6: each thread remembers how far its messages are all observed (``observed_through``), so a
# commit marks the range (observed_through, mark] through the (thread_id, seq) key. The partial
# index of v3 did not bound that walk on PostgreSQL: rows marked observed leave dead entries in it
# until VACUUM, and a commit's scan visited every one of them (the whole history after a bulk mark).
# The backfill reads the v3 index once (the first unobserved seq of each thread), then drops it.
_OBSERVED_THROUGH_V6 = [
    "ALTER TABLE {s}.threads ADD COLUMN IF NOT EXISTS observed_through BIGINT NOT NULL DEFAULT 0",
    "UPDATE {s}.threads AS t SET observed_through = COALESCE("
    " (SELECT MIN(m.seq) - 1 FROM {s}.messages AS m WHERE m.thread_id = t.thread_id AND NOT m.observed),"
    " (SELECT MAX(m.seq) FROM {s}.messages AS m WHERE m.thread_id = t.thread_id), 0)",
    "DROP INDEX IF EXISTS {s}.messages_unobserved",
]
MIGRATIONS: dict[int, list[str] | Callable[[PostgresStore, Cursor], Awaitable[None]]] = {
    1: _SCHEMA_V1,
    2: _move_implicit_resources,
    3: _UNOBSERVED_INDEX_V3,
    4: _migrate_v4,
    5: _LEASES_V5,
    6: _OBSERVED_THROUGH_V6,
}

# The statements a step runs against a thread's history name only columns that lead to a bounded
# index range whatever the planner's statistics say (right after a bulk load there are none, and
# a filter on resource_id alone let it choose the (resource_id, thread_id, seq) index and read the
# whole thread). The resource is still checked, on the rows found.
MESSAGES_BY_IDS_SQL = (
    "SELECT id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at "
    "FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s)"
)
"""A bounded lookup of a thread's ids: the (thread_id, id) unique key."""
MARK_OBSERVED_SQL = (
    "UPDATE {s}.messages SET observed = TRUE, observed_at = %s "
    "WHERE thread_id = %s AND seq > %s AND seq <= %s AND NOT observed AND resource_id = %s"
)
"""Mark a thread's range (observed_through, mark]: the (thread_id, seq) unique key, only the new rows."""
OBSERVED_THROUGH_SQL = (
    "UPDATE {s}.threads SET observed_through = GREATEST(observed_through, COALESCE("
    "(SELECT MAX(seq) FROM {s}.messages WHERE thread_id = %s AND seq <= %s), 0)) "
    "WHERE thread_id = %s AND resource_id = %s"
)
"""Advance the thread's all-observed prefix to its last stored row at or below the mark (a mark
past the last row must not cover rows appended later)."""

_THREAD_COLUMNS = "thread_id, resource_id, title, created_at, updated_at, metadata"
_MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"
# Timestamps are read as UTC wall time (``AT TIME ZONE 'UTC'``, naive, which ``u.to_utc`` takes as
# UTC) so the session's TimeZone cannot matter: read as timestamptz in, say, America/New_York,
# 0001-01-01T02:00Z would be a BC date that psycopg refuses to load.
_THREAD_SELECT = (
    "thread_id, resource_id, title, created_at AT TIME ZONE 'UTC' AS created_at, "
    "updated_at AT TIME ZONE 'UTC' AS updated_at, metadata"
)
_MESSAGE_SELECT = (
    "id, resource_id, thread_id, seq, kind, data, tokens, created_at AT TIME ZONE 'UTC' AS created_at, "
    "observed, observed_at AT TIME ZONE 'UTC' AS observed_at"
)

Cursor = AsyncCursor[dict[str, Any]]


def _thread(row: dict[str, Any]) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        title=row["title"],
        created_at=u.to_utc(row["created_at"]),
        updated_at=u.to_utc(row["updated_at"]),
        metadata=u.from_jsonb_safe(row["metadata"]),
    )


def _message(row: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        seq=row["seq"],
        data=u.from_jsonb_safe(row["data"]),
        tokens=row["tokens"],
        created_at=u.to_utc(row["created_at"]),
        kind=row["kind"],
        observed=row["observed"],
        observed_at=u.to_utc(row["observed_at"]) if row["observed_at"] is not None else None,
    )


def _jsonb(value: Any, field: str) -> Jsonb:
    return Jsonb(u.to_jsonb_safe(value, field))


class PostgresStore:
    """``OMStore`` on PostgreSQL; safe for many workers and processes on one database."""

    def __init__(
        self,
        dsn: str | None = None,
        *,
        pool: AsyncConnectionPool | None = None,
        schema: str = "langchain_om",
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        if dsn is not None and pool is not None:
            raise InvalidStoreInput("pool", "pass either dsn or pool, not both")
        if dsn is None and pool is None:
            dsn = os.environ.get(DSN_ENV) or None
            if dsn is None:
                raise StoreError(f"PostgresStore needs dsn=, pool= or the {DSN_ENV} environment variable")
        self.schema = check_id(schema, "schema", max_len=63)
        self._dsn = dsn
        self._pool: AsyncConnectionPool | None = pool
        self._owns_pool = pool is None
        self._min_size = max(1, u.check_count(min_size, "min_size"))
        self._max_size = max(self._min_size, u.check_count(max_size, "max_size"))
        self._setup_done = False
        self._setup_lock: asyncio.Lock | None = None
        self._bound_loop: asyncio.AbstractEventLoop | None = None
        self._queries: dict[str, sql.Composed] = {}

    @classmethod
    def from_env(cls, *, schema: str = "langchain_om") -> PostgresStore:
        """A store on the DSN in ``$LANGCHAIN_OM_PG_DSN``."""
        dsn = os.environ.get(DSN_ENV)
        if not dsn:
            raise StoreError(f"{DSN_ENV} is not set")
        return cls(dsn, schema=schema)

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"

    def _q(self, template: str) -> sql.Composed:
        """A query with ``{s}`` bound to the quoted schema name (cached; templates are constants)."""
        query = self._queries.get(template)
        if query is None:
            query = sql.SQL(template).format(s=sql.Identifier(self.schema))
            self._queries[template] = query
        return query

    # ---- pool and schema ----------------------------------------------------------------

    async def asetup(self) -> None:
        """Open the pool (if this store made it) and create or migrate the schema (idempotent)."""
        if self._setup_done:
            return
        if self._setup_lock is None:
            self._setup_lock = asyncio.Lock()
        async with self._setup_lock:
            if self._setup_done:
                return
            try:
                if self._pool is None:
                    self._pool = AsyncConnectionPool(
                        self._dsn or "",
                        min_size=self._min_size,
                        max_size=self._max_size,
                        kwargs={"autocommit": True},
                        open=False,
                        name=f"langchain_om.{self.schema}",
                    )
                if self._owns_pool:
                    await self._pool.open(wait=True)
                self._bound_loop = asyncio.get_running_loop()  # psycopg's async pool lives on this loop
                async with self._pool.connection() as conn:
                    async with conn.transaction():
                        async with conn.cursor(row_factory=dict_row) as cur:
                            await self._migrate(cur)
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL setup failed: {exc}") from exc
            self._setup_done = True

    async def _stored_version(self, cur: Cursor) -> int:
        await cur.execute(
            "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'schema_version'",
            (self.schema,),
        )
        if await cur.fetchone() is None:
            return 0
        await cur.execute(self._q("SELECT COALESCE(MAX(version), 0) AS v FROM {s}.schema_version"))
        row = await cur.fetchone()
        return int(row["v"]) if row is not None else 0

    async def _migrate(self, cur: Cursor) -> None:
        await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"langchain_om.migrate:{self.schema}",))
        version = await self._stored_version(cur)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"schema {self.schema!r} has langchain-om schema version {version}, newer than this code's "
                f"{SCHEMA_VERSION}; upgrade langchain-om (nothing was changed)"
            )
        if version == SCHEMA_VERSION:
            return
        await cur.execute(self._q("CREATE SCHEMA IF NOT EXISTS {s}"))
        await cur.execute(self._q("CREATE TABLE IF NOT EXISTS {s}.schema_version (version INTEGER NOT NULL)"))
        for target in range(version + 1, SCHEMA_VERSION + 1):
            migration = MIGRATIONS[target]
            if callable(migration):
                await migration(self, cur)
                continue
            for statement in migration:
                await cur.execute(self._q(statement))
        await cur.execute(self._q("DELETE FROM {s}.schema_version"))
        await cur.execute(self._q("INSERT INTO {s}.schema_version (version) VALUES (%s)"), (SCHEMA_VERSION,))

    async def aclose(self) -> None:
        """Close the pool if this store created it; a pool passed in belongs to the caller."""
        if self._owns_pool and self._pool is not None:
            await self._pool.close()
            self._pool = None
        self._setup_done = False
        self._bound_loop = None

    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The loop the pool was opened on (``SupportsLoopBinding``): its connections, and the
        workers that open new ones, run there."""
        loop = self._bound_loop
        return loop if loop is not None and not loop.is_closed() else None

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Cursor]:
        """One transaction on a pooled connection; database errors surface as ``StoreError``."""
        await self.asetup()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                async with conn.transaction():
                    async with conn.cursor(row_factory=dict_row) as cur:
                        yield cur
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    # ---- threads ------------------------------------------------------------------------

    async def _select_thread(self, cur: Cursor, resource_id: str, thread_id: str) -> ThreadInfo | None:
        await cur.execute(
            self._q(f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE thread_id = %s AND resource_id = %s"),
            (thread_id, resource_id),
        )
        row = await cur.fetchone()
        return _thread(row) if row is not None else None

    async def _claim(
        self, cur: Cursor, resource_id: str, thread_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> None:
        """Create the thread unless it exists; raise if another resource owns the id."""
        now = utcnow()
        await cur.execute(
            self._q(
                f"INSERT INTO {{s}}.threads ({_THREAD_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (thread_id) DO NOTHING"
            ),
            (thread_id, resource_id, title, now, now, _jsonb(metadata or {}, "metadata")),
        )
        await cur.execute(self._q("SELECT resource_id FROM {s}.threads WHERE thread_id = %s"), (thread_id,))
        row = await cur.fetchone()
        if row is None or row["resource_id"] != resource_id:
            raise InvalidStoreInput("thread_id", "is not available")

    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing; an existing thread is returned unchanged."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        async with self._tx() as cur:
            await self._claim(cur, resource_id, thread_id, title, meta)
            thread = await self._select_thread(cur, resource_id, thread_id)
        assert thread is not None
        return thread

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._tx() as cur:
            return await self._select_thread(cur, resource_id, thread_id)

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Replace the title (when given) and merge ``metadata`` keys into the stored metadata."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE thread_id = %s AND resource_id = %s FOR UPDATE"
                ),
                (thread_id, resource_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise InvalidStoreInput("thread_id", "no such thread")
            thread = _thread(row)
            merged = {**thread.metadata, **meta} if meta is not None else thread.metadata
            await cur.execute(
                self._q(
                    "UPDATE {s}.threads SET title = %s, metadata = %s, updated_at = %s "
                    "WHERE thread_id = %s AND resource_id = %s"
                ),
                (
                    title if title is not None else thread.title,
                    _jsonb(merged, "metadata"),
                    utcnow(),
                    thread_id,
                    resource_id,
                ),
            )
            updated = await self._select_thread(cur, resource_id, thread_id)
        assert updated is not None
        return updated

    async def alist_threads(
        self,
        resource_id: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        offset: int = 0,
        limit: int = 20,
    ) -> list[ThreadInfo]:
        """Threads of a resource, newest first (creation time, then creation order)."""
        resource_id = check_resource_id(resource_id)
        before_dt = u.check_datetime(before, "before")
        after_dt = u.check_datetime(after, "after")
        start = u.check_count(offset, "offset")
        count = u.check_limit(limit)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE resource_id = %s "
                    "AND (%s::timestamptz IS NULL OR created_at < %s::timestamptz) "
                    "AND (%s::timestamptz IS NULL OR created_at > %s::timestamptz) "
                    "ORDER BY created_at DESC, ord DESC LIMIT %s OFFSET %s"
                ),
                (resource_id, before_dt, before_dt, after_dt, after_dt, count, start),
            )
            return [_thread(row) for row in await cur.fetchall()]

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order (``COLLATE "C"`` compares UTF-8
        bytes, whatever the database's locale), after ``after_id`` (keyset paging)."""
        resource_id = check_resource_id(resource_id)
        start = None if after_id is None else check_thread_id(after_id, "after_id")
        count = u.check_limit(limit)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT thread_id FROM {s}.threads WHERE resource_id = %s "
                    'AND (%s::text IS NULL OR thread_id COLLATE "C" > %s::text COLLATE "C") '
                    'ORDER BY thread_id COLLATE "C" LIMIT %s'
                ),
                (resource_id, start, start, count),
            )
            return [str(row["thread_id"]) for row in await cur.fetchall()]

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove the thread, its messages and its thread-scope record, and forget it in the
        resource-scope record (``u.record_without_thread``), in one transaction; another
        resource's thread is untouched."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (thread_id,))
            await self._forget_in_resource_record(cur, resource_id, thread_id)
            await cur.execute(
                self._q("DELETE FROM {s}.threads WHERE thread_id = %s AND resource_id = %s RETURNING thread_id"),
                (thread_id, resource_id),
            )
            if await cur.fetchone() is None:
                return
            await cur.execute(
                self._q("DELETE FROM {s}.message_search WHERE thread_id = %s AND resource_id = %s"),
                (thread_id, resource_id),
            )
            await cur.execute(
                self._q("DELETE FROM {s}.message_vectors WHERE thread_id = %s AND resource_id = %s"),
                (thread_id, resource_id),
            )
            if cur.rowcount > 0:
                await cur.execute(
                    self._q(
                        "INSERT INTO {s}.vector_deletions (resource_id, deleted) VALUES (%s, %s) "
                        "ON CONFLICT (resource_id) DO UPDATE SET deleted = {s}.vector_deletions.deleted + "
                        "excluded.deleted"
                    ),
                    (resource_id, cur.rowcount),
                )
            await cur.execute(
                self._q("DELETE FROM {s}.messages WHERE thread_id = %s AND resource_id = %s"), (thread_id, resource_id)
            )
            await cur.execute(
                self._q("DELETE FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )

    async def _forget_in_resource_record(self, cur: Cursor, resource_id: str, thread_id: str) -> None:
        key = record_key(resource_id, None)
        await cur.execute(self._q("SELECT version, body FROM {s}.records WHERE key = %s FOR UPDATE"), (key,))
        row = await cur.fetchone()
        if row is None:
            return
        forgotten = u.record_without_thread(OMRecord.model_validate(u.from_jsonb_safe(row["body"])), thread_id)
        if forgotten is None:
            return
        now = utcnow()
        version = int(row["version"]) + 1
        body_text = u.record_json(forgotten.model_copy(update={"version": version, "updated_at": now}))
        await cur.execute(
            self._q("UPDATE {s}.records SET version = %s, body = %s, updated_at = %s WHERE key = %s"),
            (version, _jsonb(json.loads(body_text), "record"), now, key),
        )

    # ---- messages -----------------------------------------------------------------------

    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order with seq = last + 1, ...; ids already in the thread are skipped."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        batch = u.check_messages(messages)
        encoded = [(m, _jsonb(m.data, "data")) for m in batch]
        async with self._tx() as cur:
            if not encoded:
                await cur.execute(self._q("SELECT resource_id FROM {s}.threads WHERE thread_id = %s"), (thread_id,))
                row = await cur.fetchone()
                if row is not None and row["resource_id"] != resource_id:
                    raise InvalidStoreInput("thread_id", "is not available")
                return []
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (thread_id,))
            await self._claim(cur, resource_id, thread_id, None, None)
            await cur.execute(
                self._q("SELECT id FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s)"),
                (thread_id, [m.id for m, _ in encoded]),
            )
            seen = {row["id"] for row in await cur.fetchall()}
            await cur.execute(
                self._q("SELECT COALESCE(MAX(seq), 0) AS last FROM {s}.messages WHERE thread_id = %s"), (thread_id,)
            )
            last_row = await cur.fetchone()
            last = int(last_row["last"]) if last_row is not None else 0
            inserted: list[StoredMessage] = []
            rows: list[tuple[Any, ...]] = []
            entries: list[tuple[str, str, str, str]] = []
            for message, data in encoded:
                if message.id in seen:
                    continue
                seen.add(message.id)
                last += 1
                rows.append(
                    (message.id, resource_id, thread_id, last, message.kind, data, message.tokens, message.created_at)
                )
                if text := search_text(message.data, message.kind):
                    entries.append((resource_id, thread_id, message.id, text))
                inserted.append(
                    StoredMessage(
                        id=message.id,
                        thread_id=thread_id,
                        resource_id=resource_id,
                        seq=last,
                        data=message.data,
                        tokens=message.tokens,
                        created_at=message.created_at,
                        kind=message.kind,
                    )
                )
            if rows:
                await cur.executemany(
                    self._q(
                        "INSERT INTO {s}.messages (id, resource_id, thread_id, seq, kind, data, tokens, created_at) "
                        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
                    ),
                    rows,
                )
                if entries:
                    await cur.executemany(self._q(_INSERT_SEARCH), entries)
                await cur.execute(
                    self._q("UPDATE {s}.threads SET updated_at = %s WHERE thread_id = %s"), (utcnow(), thread_id)
                )
        return inserted

    async def aget_messages(
        self,
        resource_id: str,
        thread_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        low = u.check_count(after_seq, "after_seq")
        high = u.check_optional_count(before_seq, "before_seq")
        count = u.check_limit(limit)
        order = "DESC" if descending else "ASC"
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_MESSAGE_SELECT} FROM {{s}}.messages "
                    "WHERE resource_id = %s AND thread_id = %s AND seq > %s "
                    f"AND (%s::bigint IS NULL OR seq < %s::bigint) ORDER BY seq {order} LIMIT %s"
                ),
                (resource_id, thread_id, low, high, high, count),
            )
            return [_message(row) for row in await cur.fetchall()]

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """The earliest message with this id among the resource's threads."""
        resource_id = check_resource_id(resource_id)
        message_id = check_id(message_id, "message_id")
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_MESSAGE_SELECT} FROM {{s}}.messages WHERE resource_id = %s AND id = %s "
                    "ORDER BY created_at, thread_id, seq LIMIT 1"
                ),
                (resource_id, message_id),
            )
            row = await cur.fetchone()
        return _message(row) if row is not None else None

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)
        if not wanted:
            return []
        async with self._tx() as cur:
            await cur.execute(self._q(MESSAGES_BY_IDS_SQL), (thread_id, wanted))
            return [_message(row) for row in await cur.fetchall() if row["resource_id"] == resource_id]

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        resource_id, thread_id, new, _text = u.check_replacement(resource_id, thread_id, message_id, data, tokens)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "UPDATE {s}.messages SET data = %s, tokens = %s WHERE resource_id = %s AND thread_id = %s "
                    "AND id = %s AND NOT observed AND kind = 'message'"
                ),
                (_jsonb(new.data, "data"), new.tokens, resource_id, thread_id, message_id),
            )
            return bool(cur.rowcount)

    async def acount_messages(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT COUNT(*) AS n FROM {s}.messages WHERE resource_id = %s AND thread_id = %s"),
                (resource_id, thread_id),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row is not None else 0

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT COALESCE(MAX(seq), 0) AS n FROM {s}.messages WHERE resource_id = %s AND thread_id = %s"
                ),
                (resource_id, thread_id),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row is not None else 0

    # ---- search -------------------------------------------------------------------------

    @property
    def keyword_search_available(self) -> bool:
        """PostgreSQL's full-text search is built in."""
        return True

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """``tsvector`` search (GIN index) ranked by ``ts_rank``, inside the resource."""
        resource_id, thread_id, terms, count = search_arguments(resource_id, query, thread_id, limit)
        if not terms:
            return []
        thread_filter = "" if thread_id is None else " AND thread_id = %(thread)s"
        # the newest RANK_CANDIDATES matches (a backward scan of (resource_id, pos) that stops
        # early for common words, the GIN index for rare ones), then ts_rank on those alone
        statement = self._q(
            f"SELECT {', '.join('m.' + c for c in _MESSAGE_COLUMNS.split(', '))}, r.score FROM ("
            f" SELECT thread_id, message_id, ts_rank(search, to_tsquery('{SEARCH_CONFIG}', %(q)s)) AS score FROM ("
            "  SELECT thread_id, message_id, search FROM {s}.message_search"
            f"  WHERE resource_id = %(resource)s{thread_filter}"
            f"  AND search @@ to_tsquery('{SEARCH_CONFIG}', %(q)s) ORDER BY pos DESC LIMIT %(candidates)s) AS c"
            " ORDER BY score DESC LIMIT %(limit)s) AS r "
            "JOIN {s}.messages AS m ON m.thread_id = r.thread_id AND m.id = r.message_id "
            "WHERE m.resource_id = %(resource)s ORDER BY r.score DESC, m.created_at DESC"
        )
        params = {"resource": resource_id, "thread": thread_id, "candidates": RANK_CANDIDATES, "limit": count}
        async with self._tx() as cur:

            async def ranked(every: bool) -> list[SearchHit]:
                # never a prepared statement: a generic plan cannot know how common the words are
                await cur.execute(statement, {**params, "q": tsquery_text(terms, every=every)}, prepare=False)
                return [SearchHit(message=_message(row), score=float(row["score"])) for row in await cur.fetchall()]

            every = await ranked(True) if len(terms) > 1 else []
            if len(every) >= count:
                return every
            return merge_ranked(every, await ranked(False), count)

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        checked = check_vector_items(items)
        if not checked:
            return 0
        async with self._tx() as cur:
            await cur.executemany(
                self._q(
                    "INSERT INTO {s}.message_vectors (resource_id, space, thread_id, message_id, vector) "
                    "SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {s}.messages "
                    "WHERE thread_id = %s AND id = %s AND resource_id = %s) "
                    "ON CONFLICT (thread_id, message_id, space) DO NOTHING"
                ),
                [(resource_id, space, item.thread_id, item.message_id, item.vector,
                  item.thread_id, item.message_id, resource_id) for item in checked],
            )
            return max(cur.rowcount, 0)  # psycopg sums the rows of every statement of executemany

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        low = u.check_count(after_pos, "after_pos")
        count = None if limit is None else u.check_count(limit, "limit")
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT pos, thread_id, message_id, vector FROM {s}.message_vectors "
                    "WHERE resource_id = %s AND space = %s AND pos > %s ORDER BY pos LIMIT %s"
                ),
                (resource_id, space, low, count),
                binary=True,  # bytea as raw bytes: the text format would double them as hex
            )
            rows = await cur.fetchall()
        return VectorBatch.of([(r["pos"], r["thread_id"], r["message_id"], r["vector"]) for r in rows])

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT (SELECT COALESCE(MAX(deleted), 0) FROM {s}.vector_deletions WHERE resource_id = %s) AS n,"
                    " (SELECT COALESCE(MAX(pos), 0) FROM {s}.message_vectors WHERE resource_id = %s AND space = %s)"
                    " AS top"
                ),
                (resource_id, resource_id, space),
            )
            row = await cur.fetchone()
        return (int(row["n"]), int(row["top"])) if row is not None else (0, 0)

    # ---- records ------------------------------------------------------------------------

    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT body FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )
            row = await cur.fetchone()
        return OMRecord.model_validate(u.from_jsonb_safe(row["body"])) if row is not None else None

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT version, updated_at AT TIME ZONE 'UTC' AS updated_at FROM {s}.records "
                        "WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )
            row = await cur.fetchone()
        return (int(row["version"]), u.to_utc(row["updated_at"])) if row is not None else None

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the lease ``name`` for ``owner`` unless another owner holds an unexpired one.

        A lease row with an expiry rather than an advisory lock: an advisory lock lives as long as
        its session, and pooled connections outlive the worker step that took it."""
        now = time.time()
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.leases (name, owner, expires_at) VALUES (%s, %s, %s) ON CONFLICT (name) "
                    "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
                    "WHERE {s}.leases.expires_at < %s OR {s}.leases.owner = excluded.owner RETURNING owner"
                ),
                (name, owner, now + ttl_s, now),
            )
            return await cur.fetchone() is not None

    async def arelease_lease(self, name: str, owner: str) -> None:
        """Give the lease back (a no-op when ``owner`` no longer holds it)."""
        async with self._tx() as cur:
            await cur.execute(self._q("DELETE FROM {s}.leases WHERE name = %s AND owner = %s"), (name, owner))

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Compare-and-swap the record (row lock) and mark messages observed in the same transaction."""
        record, expected = u.check_record(record, expected_version)
        marks = u.check_mark_observed(mark_observed)
        thread_part = u.record_thread(record)
        key = record_key(record.resource_id, thread_part)
        now = utcnow()
        stored = record.model_copy(update={"version": expected + 1, "updated_at": now})
        body_text = u.record_json(stored)
        body = _jsonb(json.loads(body_text), "record")
        async with self._tx() as cur:
            for thread_id in sorted(marks):
                # the thread's append lock, taken before the record's row lock as adelete_thread
                # does: no append is half done while observed_through moves past its rows
                await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (thread_id,))
            if expected == 0:
                await cur.execute(
                    self._q(
                        "INSERT INTO {s}.records (key, resource_id, thread_id, scope, version, body, updated_at) "
                        "VALUES (%s, %s, %s, %s, 1, %s, %s) ON CONFLICT (key) DO NOTHING RETURNING version"
                    ),
                    (key, record.resource_id, thread_part, record.scope, body, now),
                )
                if await cur.fetchone() is None:
                    raise RecordConflictError(f"record {key!r} already exists (expected to create it)")
            else:
                await cur.execute(
                    self._q("SELECT version FROM {s}.records WHERE key = %s AND resource_id = %s FOR UPDATE"),
                    (key, record.resource_id),
                )
                row = await cur.fetchone()
                current = int(row["version"]) if row is not None else 0
                if current != expected:
                    raise RecordConflictError(f"record {key!r} is at version {current}, expected {expected}")
                await cur.execute(
                    self._q("UPDATE {s}.records SET version = %s, body = %s, updated_at = %s WHERE key = %s"),
                    (expected + 1, body, now, key),
                )
            for thread_id, seq in sorted(marks.items()):
                await self._mark_observed(cur, record.resource_id, thread_id, seq, now)
        return u.record_from_json(body_text)

    async def _mark_observed(self, cur: Cursor, resource_id: str, thread_id: str, seq: int, now: datetime) -> None:
        """Mark the thread's rows up to ``seq`` observed, touching only those past its
        ``observed_through`` (every row at or below it is observed already: a flag is never
        cleared and a new row always takes a higher seq). Runs under the thread's append lock."""
        await cur.execute(
            self._q("SELECT observed_through FROM {s}.threads WHERE thread_id = %s AND resource_id = %s"),
            (thread_id, resource_id),
        )
        row = await cur.fetchone()
        if row is None or int(row["observed_through"]) >= seq:
            return  # another resource's thread (or none): nothing of this resource to mark
        await cur.execute(self._q(MARK_OBSERVED_SQL), (now, thread_id, int(row["observed_through"]), seq, resource_id))
        await cur.execute(self._q(OBSERVED_THROUGH_SQL), (thread_id, seq, thread_id, resource_id))

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q("DELETE FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )

    # ---- values -------------------------------------------------------------------------

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT value FROM {s}.kv WHERE resource_id = %s AND namespace = %s AND key = %s"), slot
            )
            row = await cur.fetchone()
        return u.from_jsonb_safe(row["value"]) if row is not None else None

    async def _lock_value(self, cur: Cursor, slot: tuple[str, str, str]) -> None:
        """Serialise writers of one value (a missing row has nothing ``FOR UPDATE`` could lock)."""
        await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ("langchain_om.kv\x1f" + "\x1f".join(slot),))

    async def aupdate_value(self, resource_id: str, namespace: str, key: str, update: ValueUpdate) -> Any:
        """Read, apply ``update`` and write in one transaction under the value's advisory lock."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        apply = u.check_update(update)
        async with self._tx() as cur:
            await self._lock_value(cur, slot)
            await cur.execute(
                self._q("SELECT value FROM {s}.kv WHERE resource_id = %s AND namespace = %s AND key = %s"), slot
            )
            row = await cur.fetchone()
            value = u.json_roundtrip(apply(u.from_jsonb_safe(row["value"]) if row is not None else None), "value")
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.kv (resource_id, namespace, key, value, updated_at) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
                ),
                (*slot, _jsonb(value, "value"), utcnow()),
            )
        return value

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        encoded = _jsonb(value, "value")
        async with self._tx() as cur:
            await self._lock_value(cur, slot)
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.kv (resource_id, namespace, key, value, updated_at) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
                ),
                (*slot, encoded, utcnow()),
            )
