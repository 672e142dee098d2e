"""The PostgreSQL store's connection: the pool, the schema on first use, one transaction per call.

``PostgresConnection`` is the base of ``PostgresStore``: it opens the pool (or takes the
caller's), creates or migrates the schema once (``postgres/schema``), binds the schema name
into query templates (``_q``) and runs each call in one transaction on a pooled connection
(``_tx``). The store's tables are read and written by its subclasses; the concurrency rules
are in ``postgres/store.py``'s docstring.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from .. import _util as u
from ..base import InvalidStoreInput, StoreError, check_id
from . import fingerprints as postgres_fingerprints
from .backfill import RETRYABLE
from .cjk import backfill_batch
from .schema import Cursor, migrate

DSN_ENV = "LANGCHAIN_OM_PG_DSN"


class PostgresConnection:
    """A pool on one schema, opened and migrated on first use; subclasses run SQL through ``_tx``."""

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

    def _q(self, template: str) -> sql.Composed:
        """A query with ``{s}`` bound to the quoted schema name (cached; templates are constants).

        Kept rendered, as one literal part: a composed query quotes its identifier again at every
        execute, and a step runs a dozen statements."""
        query = self._queries.get(template)
        if query is None:
            rendered = sql.SQL(template).format(s=sql.Identifier(self.schema)).as_string(None)
            query = sql.Composed([sql.SQL(rendered)])
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
                    # the CJK index and the fingerprint column of older messages: one committed batch at a time
                    for batch in (backfill_batch, postgres_fingerprints.backfill_batch):
                        done = False
                        while not done:
                            try:
                                async with conn.transaction():
                                    async with conn.cursor(row_factory=dict_row) as cur:
                                        done = await batch(cur, self._q, self.schema)
                            except RETRYABLE:
                                await asyncio.sleep(0.05)  # a serving worker holds a row: let it finish
            except psycopg.Error as exc:
                raise StoreError(f"PostgreSQL setup failed: {exc}") from exc
            self._setup_done = True

    async def _migrate(self, cur: Cursor) -> None:
        await migrate(cur, self.schema, self._q)

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
    async def _one(self) -> AsyncIterator[Cursor]:
        """One statement on a pooled connection, outside an explicit transaction: the pool's
        connections are in autocommit, so the statement is its own transaction. One round trip
        instead of three (BEGIN, statement, COMMIT) for the reads and single-statement writes
        every step makes; each round trip costs Python CPU in psycopg and the event loop."""
        if not self._setup_done:
            await self.asetup()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                async with conn.cursor(row_factory=dict_row) as cur:
                    yield cur
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    @asynccontextmanager
    async def _tx(self) -> AsyncIterator[Cursor]:
        """One transaction on a pooled connection; database errors surface as ``StoreError``."""
        if not self._setup_done:
            await self.asetup()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                async with conn.transaction():
                    async with conn.cursor(row_factory=dict_row) as cur:
                        yield cur
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    @asynccontextmanager
    async def _script(self) -> AsyncIterator[Cursor]:
        """A cursor that binds parameters on the client (``psycopg.AsyncClientCursor``), so one
        execute may send several statements as one simple query: one round trip, and PostgreSQL
        runs them as one implicit transaction (committed after the last, rolled back on an error),
        each statement with its own snapshot under READ COMMITTED. ``_tx`` costs BEGIN and COMMIT
        as round trips of their own; server-side parameters allow one statement per execute."""
        if not self._setup_done:
            await self.asetup()
        assert self._pool is not None
        try:
            async with self._pool.connection() as conn:
                async with psycopg.AsyncClientCursor(conn, row_factory=dict_row) as cur:
                    yield cur
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc

    @asynccontextmanager
    async def _locked_tx(self, lock: str) -> AsyncIterator[Cursor]:
        """``_tx`` that holds the advisory lock ``hashtext(lock)`` from its start: BEGIN and the
        lock go in one round trip (two statements of one simple query, the text quoted as a
        literal), so an append costs four round trips instead of five. The block's statements
        run after the lock, each with its own snapshot (READ COMMITTED), as in ``_tx``."""
        if not self._setup_done:
            await self.asetup()
        assert self._pool is not None
        begin = sql.SQL("BEGIN; SELECT pg_advisory_xact_lock(hashtext({}))").format(sql.Literal(lock))
        try:
            async with self._pool.connection() as conn:
                async with conn.cursor(row_factory=dict_row) as cur:
                    try:
                        await cur.execute(begin)
                        yield cur
                    except BaseException:
                        # the block's error wins: a connection that cannot roll back now (a
                        # cancelled statement still running) is reset or dropped by the pool
                        with contextlib.suppress(psycopg.Error):
                            await conn.rollback()
                        raise
                    await conn.commit()
        except psycopg.Error as exc:
            raise StoreError(f"PostgreSQL error: {exc}") from exc
