"""The embedded default store: one SQLite file (or ``":memory:"``), stdlib ``sqlite3`` only.

One connection per store, guarded by a threading lock, with calls pushed to a worker thread
so the event loop never waits on a lock or a disk flush. Writes that read-then-write
(appending with the next ``seq``, compare-and-swap of a record) run inside ``BEGIN
IMMEDIATE``, which takes SQLite's write lock up front; with ``busy_timeout`` that makes
several processes on one file safe: the second writer waits instead of interleaving.

Two hot calls of every agent step skip the thread hop (~0.2 ms on two cores) when they
cannot make the loop wait: one-row reads, and appending a step's messages while no other
connection holds the write lock (tried with a zero busy timeout; if it is held, the append
waits in a thread like any call). Under WAL with ``synchronous = NORMAL`` a commit only
writes to the log, without a flush; the flushing part, checkpoints, is taken off the
commit (``wal_autocheckpoint = 0``) and run in the worker thread every
``_CHECKPOINT_AFTER_CHANGES`` changed rows.

Durability: a commit that marks messages observed runs with ``synchronous = FULL`` (the WAL
is flushed before it returns). Such a commit is what lets an integration drop the messages
from the graph state, and LangGraph's SqliteSaver checkpoints with FULL; under NORMAL a power
loss could keep the checkpoint that dropped them and lose the commit that observed them. The
WAL is one ordered log, so flushing that commit also makes every earlier append durable.
Other commits keep NORMAL (a lost one is redone: an append is replayed from the state, a
lost reflection runs again); ``synchronous="full"`` flushes every commit, for
``keep_in_state="turn"``, where merely stored messages leave the state.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

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
    fts5_match,
    merge_ranked,
    scope_token,
    search_arguments,
    search_text,
)

T = TypeVar("T")

# about 1000 WAL pages (SQLite's own autocheckpoint size) of agent steps: each step's append
# changes three rows (two messages, the thread) and writes about six pages
_CHECKPOINT_AFTER_CHANGES = 500

_SCHEMA_V1 = """
CREATE TABLE IF NOT EXISTS threads (
    thread_id   TEXT PRIMARY KEY,
    resource_id TEXT NOT NULL,
    title       TEXT,
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    metadata    TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS threads_by_resource ON threads (resource_id, created_at);
CREATE TABLE IF NOT EXISTS messages (
    id          TEXT NOT NULL,
    resource_id TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    kind        TEXT NOT NULL,
    data        TEXT NOT NULL,
    tokens      INTEGER NOT NULL DEFAULT 0,
    created_at  TEXT NOT NULL,
    observed    INTEGER NOT NULL DEFAULT 0,
    observed_at TEXT,
    UNIQUE (thread_id, id),
    UNIQUE (thread_id, seq)
);
CREATE INDEX IF NOT EXISTS messages_recall ON messages (resource_id, thread_id, seq);
CREATE INDEX IF NOT EXISTS messages_by_id ON messages (resource_id, id);
CREATE TABLE IF NOT EXISTS records (
    key         TEXT PRIMARY KEY,
    resource_id TEXT NOT NULL,
    thread_id   TEXT,
    scope       TEXT NOT NULL,
    version     INTEGER NOT NULL,
    body        TEXT NOT NULL,
    updated_at  TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    resource_id TEXT NOT NULL,
    namespace   TEXT NOT NULL,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    PRIMARY KEY (resource_id, namespace, key)
);
"""



def _move_implicit_resources(conn: sqlite3.Connection) -> None:
    """Migration 2: threads used without a resource move to their private resource
    (``u.V1_IMPLICIT_THREADS_SQL`` says which). Runs inside the migration's transaction, so a
    crash leaves version 1 untouched and the next open redoes it; on version 2 nothing matches."""
    query = u.V1_IMPLICIT_THREADS_SQL.format(threads="threads", records="records")
    conn.execute(f"CREATE TEMP TABLE om_implicit AS {query}")
    records = conn.execute(
        "SELECT key, resource_id, thread_id, body FROM records WHERE resource_id IN (SELECT thread_id FROM om_implicit)"
    ).fetchall()
    for key, resource_id, record_thread, body in records:  # bodies name their resource too
        private = IMPLICIT_RESOURCE_PREFIX + resource_id
        moved = u.record_body_for_resource(json.loads(body), private)
        conn.execute(
            "UPDATE records SET key = ?, resource_id = ?, body = ? WHERE key = ?",
            (record_key(private, record_thread), private, u.dumps(moved, "record"), key),
        )
    for table in ("threads", "messages", "kv"):
        conn.execute(
            f"UPDATE {table} SET resource_id = ? || resource_id "
            "WHERE resource_id IN (SELECT thread_id FROM om_implicit)",
            (IMPLICIT_RESOURCE_PREFIX,),
        )
    conn.execute("DROP TABLE om_implicit")


# MIGRATIONS[n] takes a database at version n - 1 to version n (all run in one transaction):
# SQL statements, or a function of the connection.
# v3: the unobserved rows of a thread have their own (partial) index, so marking a range observed
# touches only the rows it changes instead of scanning the thread's whole history
_UNOBSERVED_INDEX_V3 = """
CREATE INDEX IF NOT EXISTS messages_unobserved ON messages (thread_id, seq) WHERE observed = 0;
"""
_SCHEMA_V4_VECTORS = """
CREATE TABLE IF NOT EXISTS message_vectors (
    pos         INTEGER PRIMARY KEY AUTOINCREMENT,
    resource_id TEXT NOT NULL,
    space       TEXT NOT NULL,
    thread_id   TEXT NOT NULL,
    message_id  TEXT NOT NULL,
    vector      BLOB NOT NULL,
    UNIQUE (thread_id, message_id, space)
);
CREATE INDEX IF NOT EXISTS message_vectors_scan ON message_vectors (resource_id, space, pos);
CREATE TABLE IF NOT EXISTS vector_deletions (
    resource_id TEXT PRIMARY KEY,
    deleted     INTEGER NOT NULL
);
"""


@functools.cache
def fts5_available() -> bool:
    """Whether this Python's SQLite was built with FTS5 (most are; some minimal builds are not)."""
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("CREATE VIRTUAL TABLE probe USING fts5(body)")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def _has_search_index(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'message_search'"
    ).fetchone() is not None


def _create_search_index(conn: sqlite3.Connection) -> None:
    """The FTS5 keyword index of recall search, filled from the stored messages (inside the
    caller's transaction). ``scope`` holds a resource and a thread token, so a search reads only
    one resource's entries; ``rank`` weighs only ``body``."""
    conn.execute(
        "CREATE VIRTUAL TABLE message_search USING fts5(body, scope, thread_id UNINDEXED, "
        "message_id UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2')"
    )
    conn.execute("INSERT INTO message_search (message_search, rank) VALUES ('rank', 'bm25(1.0, 0.0)')")
    rows = conn.execute("SELECT resource_id, thread_id, id, kind, data FROM messages")
    while batch := rows.fetchmany(1000):
        conn.executemany(
            "INSERT INTO message_search (body, scope, thread_id, message_id) VALUES (?, ?, ?, ?)",
            [
                (text, _scope(row[0], row[1]), row[1], row[2])
                for row in batch
                if (text := search_text(json.loads(row[4]), row[3]))
            ],
        )


def _scope(resource_id: str, thread_id: str) -> str:
    return f"{scope_token('r', resource_id)} {scope_token('t', thread_id)}"


def _migrate_v4(conn: sqlite3.Connection) -> None:
    """Recall search: the embeddings table, and the keyword index backfilled from every stored
    message (skipped on a SQLite without FTS5; created on a later open by one that has it)."""
    for statement in _split_statements(_SCHEMA_V4_VECTORS):
        conn.execute(statement)
    if fts5_available() and not _has_search_index(conn):
        _create_search_index(conn)


# v5: leases, so concurrent workers on one record do not pay the Observer twice for one range
_LEASES_V5 = """
CREATE TABLE IF NOT EXISTS leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    1: _SCHEMA_V1,
    2: _move_implicit_resources,
    3: _UNOBSERVED_INDEX_V3,
    4: _migrate_v4,
    5: _LEASES_V5,
}

_MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"
_THREAD_COLUMNS = "thread_id, resource_id, title, created_at, updated_at, metadata"


MARK_OBSERVED_SQL = (
    "UPDATE messages INDEXED BY messages_unobserved SET observed = 1, observed_at = ? "
    "WHERE thread_id = ? AND observed = 0 AND seq <= ? AND resource_id = ?"
)
_ID_CHUNK = 500  # ids per IN (...) list: well under SQLite's 32,766 bound variables
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (named in sqlite3 only from Python 3.11)


def _is_busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused because another connection holds a lock."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _BUSY_CODES  # an extended code keeps the primary one in its low byte
    return "locked" in str(exc)  # Python 3.10: "database is locked", "database table is locked"


def _split_statements(script: str) -> list[str]:
    return [part.strip() for part in script.split(";") if part.strip()]


def _thread(row: sqlite3.Row) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        title=row["title"],
        created_at=u.from_iso(row["created_at"]),
        updated_at=u.from_iso(row["updated_at"]),
        metadata=json.loads(row["metadata"]),
    )


def _message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        seq=row["seq"],
        data=json.loads(row["data"]),
        tokens=row["tokens"],
        created_at=u.from_iso(row["created_at"]),
        kind=row["kind"],
        observed=bool(row["observed"]),
        observed_at=u.from_iso(row["observed_at"]) if row["observed_at"] else None,
    )


class SQLiteStore:
    """``OMStore`` on a SQLite file; safe for several stores and processes on the same file."""

    _FULL_SYNC_OBSERVED = True
    """Flush commits that mark messages observed (see the module docstring); the storage
    benchmark turns it off to measure what it costs."""

    def __init__(
        self,
        path: str | Path = "./langchain_om.db",
        *,
        busy_timeout_ms: int = 30_000,
        synchronous: Literal["normal", "full"] = "normal",
    ) -> None:
        if not isinstance(path, (str, Path)) or str(path) == "":
            raise InvalidStoreInput("path", "must be a file path or ':memory:'")
        if "\x00" in str(path):
            raise InvalidStoreInput("path", "must not contain NUL characters")
        self.path = str(path)
        self.busy_timeout_ms = u.check_count(busy_timeout_ms, "busy_timeout_ms")
        if synchronous not in ("normal", "full"):
            raise InvalidStoreInput("synchronous", f"must be 'normal' or 'full', got {synchronous!r}")
        self.synchronous = synchronous
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._changes_at_checkpoint = 0
        self._fts = fts5_available()  # confirmed (index present) on every open, in _migrate

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @property
    def keyword_search_available(self) -> bool:
        """Keyword search needs SQLite's FTS5 extension (built into nearly every Python)."""
        return self._fts

    @property
    def in_memory(self) -> bool:
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    # ---- connection and schema ----------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if not self.in_memory:
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path if self.in_memory else str(Path(self.path).expanduser()),
            timeout=self.busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit; transactions are explicit BEGIN IMMEDIATE
            check_same_thread=False,  # the threading lock serialises use across worker threads
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            self._check_not_newer(conn)
            if not self.in_memory:
                conn.execute("PRAGMA journal_mode = WAL")
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _checkpoint_due and _checkpoint
            self._migrate(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    @staticmethod
    def _stored_version(conn: sqlite3.Connection) -> int:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
        ).fetchone()
        if exists is None:
            return 0
        row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        return int(row[0] or 0)

    def _check_not_newer(self, conn: sqlite3.Connection) -> None:
        version = self._stored_version(conn)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has langchain-om schema version {version}, newer than this code's "
                f"{SCHEMA_VERSION}; upgrade langchain-om (the file was left untouched)"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with _immediate(conn):
            self._check_not_newer(conn)  # re-check under the write lock: another process may have migrated
            version = self._stored_version(conn)
            if version == SCHEMA_VERSION:
                if fts5_available() and not _has_search_index(conn):
                    _create_search_index(conn)  # migrated by a SQLite without FTS5: index now
                self._fts = fts5_available()
                return
            self._fts = fts5_available()
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            for target in range(version + 1, SCHEMA_VERSION + 1):
                migration = MIGRATIONS[target]
                if callable(migration):
                    migration(conn)
                    continue
                for statement in _split_statements(migration):
                    conn.execute(statement)
            conn.execute("DELETE FROM schema_version")
            conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the calling (worker) thread, then a checkpoint if one is due."""
        with self._lock:
            result = self._locked_call(fn)
            if self._conn is not None and self._checkpoint_due(self._conn):
                self._locked_call(self._checkpoint)
            return result

    def _checkpoint_due(self, conn: sqlite3.Connection) -> bool:
        return not self.in_memory and conn.total_changes - self._changes_at_checkpoint >= _CHECKPOINT_AFTER_CHANGES

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database without waiting for anyone (PASSIVE), so the log
        stays bounded; readers or writers in other processes just make it copy less."""
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._changes_at_checkpoint = conn.total_changes

    def _locked_call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection (opened on first use); the caller holds ``_lock``."""
        try:
            if self._conn is None:
                self._conn = self._connect()
                self._changes_at_checkpoint = 0  # total_changes counts from each connection's opening
            return fn(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._call, fn)

    async def _run_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A short call of a step (a one-row read, an append), run inline when nothing can make
        it wait; handing it to a worker thread costs ~0.2 ms, as much as the call itself.

        Inline only when the connection is free (the lock is only tried, never waited for), no
        checkpoint is due, and SQLite need not wait for another connection: the call runs with
        a zero busy timeout, so if another connection (or process) holds a lock it needs, it
        fails at once, rolls back, and runs again in a worker thread, waiting there as long as
        ``busy_timeout_ms`` allows. ``fn`` must therefore be a read or a whole transaction.
        """

        def without_waiting(conn: sqlite3.Connection) -> T:
            conn.execute("PRAGMA busy_timeout = 0")
            try:
                return fn(conn)
            finally:
                conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")

        if self._lock.acquire(blocking=False):
            try:
                if self._conn is not None and not self._checkpoint_due(self._conn):
                    try:
                        return self._locked_call(without_waiting)
                    except StoreError as exc:
                        if not _is_busy(exc.__cause__):
                            raise
            finally:
                self._lock.release()
        # the connection is in use or not open yet, a checkpoint is due, or a lock was held
        return await self._run(fn)

    async def asetup(self) -> None:
        """Open the file, switch to WAL and create or migrate the schema (idempotent)."""
        await self._run(lambda conn: None)

    async def aclose(self) -> None:
        """Close the connection; a later call reopens it (a ``:memory:`` database starts empty again)."""

        def close() -> None:
            with self._lock:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await asyncio.to_thread(close)

    # ---- threads ------------------------------------------------------------------------

    @staticmethod
    def _owner(conn: sqlite3.Connection, thread_id: str) -> str | None:
        row = conn.execute("SELECT resource_id FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _insert_thread(
        conn: sqlite3.Connection, resource_id: str, thread_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> None:
        now = u.iso(utcnow())
        conn.execute(
            f"INSERT INTO threads ({_THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (thread_id, resource_id, title, now, now, u.dumps(metadata or {}, "metadata")),
        )

    @staticmethod
    def _select_thread(conn: sqlite3.Connection, resource_id: str, thread_id: str) -> ThreadInfo | None:
        row = conn.execute(
            f"SELECT {_THREAD_COLUMNS} FROM threads WHERE thread_id = ? AND resource_id = ?",
            (thread_id, resource_id),
        ).fetchone()
        return _thread(row) if row is not None else None

    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing; an existing thread is returned unchanged."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)

        def run(conn: sqlite3.Connection) -> ThreadInfo:
            with _immediate(conn):
                owner = self._owner(conn, thread_id)
                if owner is not None and owner != resource_id:
                    raise InvalidStoreInput("thread_id", "is not available")
                if owner is None:
                    self._insert_thread(conn, resource_id, thread_id, title, meta)
                thread = self._select_thread(conn, resource_id, thread_id)
                assert thread is not None
                return thread

        return await self._run(run)

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        # a one-row read on every agent step (the engine's thread incarnation check): inline
        return await self._run_inline(lambda conn: self._select_thread(conn, resource_id, thread_id))

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Replace the title (when given) and merge ``metadata`` keys into the stored metadata."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)

        def run(conn: sqlite3.Connection) -> ThreadInfo:
            with _immediate(conn):
                thread = self._select_thread(conn, resource_id, thread_id)
                if thread is None:
                    raise InvalidStoreInput("thread_id", "no such thread")
                merged = {**thread.metadata, **meta} if meta is not None else thread.metadata
                conn.execute(
                    "UPDATE threads SET title = ?, metadata = ?, updated_at = ? "
                    "WHERE thread_id = ? AND resource_id = ?",
                    (
                        title if title is not None else thread.title,
                        u.dumps(merged, "metadata"),
                        u.iso(utcnow()),
                        thread_id,
                        resource_id,
                    ),
                )
                updated = self._select_thread(conn, resource_id, thread_id)
                assert updated is not None
                return updated

        return await self._run(run)

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
        query = f"SELECT {_THREAD_COLUMNS} FROM threads WHERE resource_id = ?"
        params: list[Any] = [resource_id]
        if before_dt is not None:
            query += " AND created_at < ?"
            params.append(u.iso(before_dt))
        if after_dt is not None:
            query += " AND created_at > ?"
            params.append(u.iso(after_dt))
        query += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        params += [-1 if count is None else count, start]
        return await self._run(lambda conn: [_thread(row) for row in conn.execute(query, params)])

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order (SQLite's BINARY collation compares
        UTF-8 bytes, which orders like code points), after ``after_id`` (keyset paging)."""
        resource_id = check_resource_id(resource_id)
        start = None if after_id is None else check_thread_id(after_id, "after_id")
        count = u.check_limit(limit)
        query = "SELECT thread_id FROM threads WHERE resource_id = ?"
        params: list[Any] = [resource_id]
        if start is not None:
            query += " AND thread_id > ?"
            params.append(start)
        query += " ORDER BY thread_id LIMIT ?"
        params.append(-1 if count is None else count)
        return await self._run(lambda conn: [str(row[0]) for row in conn.execute(query, params)])

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove the thread, its messages and its thread-scope record, and forget it in the
        resource-scope record (``u.record_without_thread``), in one transaction; another
        resource's thread is untouched."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                self._forget_in_resource_record(conn, resource_id, thread_id)
                if self._owner(conn, thread_id) != resource_id:
                    return
                if self._fts:
                    conn.execute(
                        "DELETE FROM message_search WHERE message_search MATCH ?",
                        (f'scope : "{scope_token("t", thread_id)}"',),
                    )
                dropped = conn.execute("DELETE FROM message_vectors WHERE thread_id = ? AND resource_id = ?",
                                       (thread_id, resource_id)).rowcount
                if dropped:
                    conn.execute(
                        "INSERT INTO vector_deletions (resource_id, deleted) VALUES (?, ?) ON CONFLICT (resource_id) "
                        "DO UPDATE SET deleted = deleted + excluded.deleted",
                        (resource_id, dropped),
                    )
                conn.execute("DELETE FROM messages WHERE thread_id = ? AND resource_id = ?", (thread_id, resource_id))
                conn.execute(
                    "DELETE FROM records WHERE key = ? AND resource_id = ?",
                    (record_key(resource_id, thread_id), resource_id),
                )
                conn.execute("DELETE FROM threads WHERE thread_id = ? AND resource_id = ?", (thread_id, resource_id))

        await self._run(run)

    @staticmethod
    def _forget_in_resource_record(conn: sqlite3.Connection, resource_id: str, thread_id: str) -> None:
        key = record_key(resource_id, None)
        row = conn.execute("SELECT version, body FROM records WHERE key = ?", (key,)).fetchone()
        forgotten = u.record_without_thread(u.record_from_json(row[1]), thread_id) if row is not None else None
        if forgotten is None:
            return
        now = utcnow()
        version = int(row[0]) + 1
        body = u.record_json(forgotten.model_copy(update={"version": version, "updated_at": now}))
        conn.execute(
            "UPDATE records SET version = ?, body = ?, updated_at = ? WHERE key = ?", (version, body, u.iso(now), key)
        )

    # ---- messages -----------------------------------------------------------------------

    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order with seq = last + 1, ...; ids already in the thread are skipped."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        encoded = u.check_messages_json(messages)

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            with _immediate(conn):
                owner = self._owner(conn, thread_id)
                if owner is not None and owner != resource_id:
                    raise InvalidStoreInput("thread_id", "is not available")
                if not encoded:
                    return []
                if owner is None:
                    self._insert_thread(conn, resource_id, thread_id, None, None)
                row = conn.execute("SELECT MAX(seq) FROM messages WHERE thread_id = ?", (thread_id,)).fetchone()
                last = int(row[0] or 0)
                scope = _scope(resource_id, thread_id)
                inserted: list[StoredMessage] = []
                seen: set[str] = set()
                for message, data in encoded:
                    if message.id in seen:
                        continue
                    seen.add(message.id)
                    added = conn.execute(
                        f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, NULL) "
                        "ON CONFLICT (thread_id, id) DO NOTHING",  # already stored: skipped, seq not used
                        (
                            message.id,
                            resource_id,
                            thread_id,
                            last + 1,
                            message.kind,
                            data,
                            message.tokens,
                            u.iso(message.created_at),
                        ),
                    ).rowcount
                    if not added:
                        continue
                    last += 1
                    if self._fts and (text := search_text(message.data, message.kind)):
                        conn.execute(
                            "INSERT INTO message_search (body, scope, thread_id, message_id) VALUES (?, ?, ?, ?)",
                            (text, scope, thread_id, message.id),
                        )
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
                if inserted:
                    conn.execute("UPDATE threads SET updated_at = ? WHERE thread_id = ?", (u.iso(utcnow()), thread_id))
                return inserted

        return await self._run_inline(run)

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
        query = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE resource_id = ? AND thread_id = ? AND seq > ?"
        params: list[Any] = [resource_id, thread_id, low]
        if high is not None:
            query += " AND seq < ?"
            params.append(high)
        query += f" ORDER BY seq {'DESC' if descending else 'ASC'} LIMIT ?"
        params.append(-1 if count is None else count)
        return await self._run(lambda conn: [_message(row) for row in conn.execute(query, params)])

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """The earliest message with this id among the resource's threads."""
        resource_id = check_resource_id(resource_id)
        message_id = check_id(message_id, "message_id")

        def run(conn: sqlite3.Connection) -> StoredMessage | None:
            row = conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE resource_id = ? AND id = ? "
                "ORDER BY created_at, thread_id, seq LIMIT 1",
                (resource_id, message_id),
            ).fetchone()
            return _message(row) if row is not None else None

        return await self._run(run)

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows: list[StoredMessage] = []
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start:start + _ID_CHUNK]
                marks = ", ".join("?" * len(chunk))
                # the unique (thread_id, id) index answers it; '+resource_id' keeps the planner off
                # the (resource_id, thread_id, seq) index, which would walk the thread's history
                rows.extend(_message(row) for row in conn.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND id IN ({marks}) "
                    "AND +resource_id = ?", [thread_id, *chunk, resource_id]))
            return rows

        return await self._run(run) if wanted else []

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        resource_id, thread_id, new, text = u.check_replacement(resource_id, thread_id, message_id, data, tokens)

        def run(conn: sqlite3.Connection) -> bool:
            with _immediate(conn):
                changed = conn.execute(
                    "UPDATE messages SET data = ?, tokens = ? WHERE thread_id = ? AND id = ? AND +resource_id = ? "
                    "AND observed = 0 AND kind = 'message'",
                    (text, new.tokens, thread_id, message_id, resource_id),
                ).rowcount
            return bool(changed)

        return await self._run(run)

    async def acount_messages(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        return await self._run(
            lambda conn: int(
                conn.execute(
                    "SELECT COUNT(*) FROM messages WHERE resource_id = ? AND thread_id = ?", (resource_id, thread_id)
                ).fetchone()[0]
            )
        )

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        return await self._run_inline(
            lambda conn: int(
                conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE resource_id = ? AND thread_id = ?",
                    (resource_id, thread_id),
                ).fetchone()[0]
            )
        )

    # ---- search -------------------------------------------------------------------------

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """FTS5 search ranked by BM25 over the message text; only the resource's index entries are read."""
        resource_id, thread_id, terms, count = search_arguments(resource_id, query, thread_id, limit)
        if not self._fts:
            raise StoreError("keyword search needs SQLite's FTS5 extension, which this Python's sqlite3 lacks")
        if not terms:
            return []

        def ranked(conn: sqlite3.Connection, match: str) -> list[SearchHit]:
            # rank only the newest RANK_CANDIDATES matches: the rowid of the last of them is found
            # by walking the doclists alone (no ranking), then FTS5 ranks rows at or above it
            floor = conn.execute(
                "SELECT rowid FROM message_search WHERE message_search MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
                (match, RANK_CANDIDATES - 1),
            ).fetchone()
            rows = conn.execute(
                f"SELECT {', '.join('m.' + c for c in _MESSAGE_COLUMNS.split(', '))}, s.rank AS rank FROM "
                "(SELECT thread_id, message_id, rank FROM message_search WHERE message_search MATCH ? "
                "AND rowid >= ? ORDER BY rank LIMIT ?) AS s "
                "JOIN messages AS m ON m.thread_id = s.thread_id AND m.id = s.message_id "
                "WHERE m.resource_id = ? ORDER BY s.rank",
                (match, floor[0] if floor is not None else 0, count, resource_id),
            )
            return [SearchHit(message=_message(row), score=-float(row["rank"])) for row in rows]

        def run(conn: sqlite3.Connection) -> list[SearchHit]:
            every = ranked(conn, fts5_match(terms, resource_id, thread_id, every=True)) if len(terms) > 1 else []
            if len(every) >= count:
                return every
            return merge_ranked(every, ranked(conn, fts5_match(terms, resource_id, thread_id)), count)

        return await self._run(run)

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        checked = check_vector_items(items)
        if not checked:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            with _immediate(conn):
                before = conn.total_changes
                conn.executemany(
                    "INSERT INTO message_vectors (resource_id, space, thread_id, message_id, vector) "
                    "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM messages "
                    "WHERE thread_id = ? AND id = ? AND resource_id = ?) "
                    "ON CONFLICT (thread_id, message_id, space) DO NOTHING",
                    [
                        (resource_id, space, item.thread_id, item.message_id, item.vector,
                         item.thread_id, item.message_id, resource_id)
                        for item in checked
                    ],
                )
                return conn.total_changes - before

        return await self._run(run)

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        low = u.check_count(after_pos, "after_pos")
        count = -1 if limit is None else u.check_count(limit, "limit")

        def run(conn: sqlite3.Connection) -> VectorBatch:
            rows = conn.execute(
                "SELECT pos, thread_id, message_id, vector FROM message_vectors "
                "WHERE resource_id = ? AND space = ? AND pos > ? ORDER BY pos LIMIT ?",
                (resource_id, space, low, count),
            ).fetchall()
            return VectorBatch.of(rows)

        return await self._run(run)

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)

        def run(conn: sqlite3.Connection) -> tuple[int, int]:
            row = conn.execute(
                "SELECT (SELECT COALESCE(MAX(deleted), 0) FROM vector_deletions WHERE resource_id = ?), "
                "(SELECT COALESCE(MAX(pos), 0) FROM message_vectors WHERE resource_id = ? AND space = ?)",
                (resource_id, resource_id, space),
            ).fetchone()
            return int(row[0]), int(row[1])

        return await self._run_inline(run)

    # ---- records ------------------------------------------------------------------------

    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> OMRecord | None:
            row = conn.execute(
                "SELECT body FROM records WHERE key = ? AND resource_id = ?", (key, resource_id)
            ).fetchone()
            return u.record_from_json(row[0]) if row is not None else None

        return await self._run(run)

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> RecordStamp | None:
            row = conn.execute(
                "SELECT version, updated_at FROM records WHERE key = ? AND resource_id = ?", (key, resource_id)
            ).fetchone()
            return (int(row[0]), u.from_iso(row[1])) if row is not None else None

        return await self._run_inline(run)

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Compare-and-swap the record and mark messages observed in one ``BEGIN IMMEDIATE`` transaction."""
        record, expected = u.check_record(record, expected_version)
        marks = u.check_mark_observed(mark_observed)
        thread_part = u.record_thread(record)
        key = record_key(record.resource_id, thread_part)

        flush = bool(marks) and self._FULL_SYNC_OBSERVED and self.synchronous == "normal" and not self.in_memory

        def run(conn: sqlite3.Connection) -> OMRecord:
            if not flush:
                return swap(conn)
            conn.execute("PRAGMA synchronous = FULL")  # cannot change inside a transaction
            try:
                return swap(conn)
            finally:
                conn.execute("PRAGMA synchronous = NORMAL")

        def swap(conn: sqlite3.Connection) -> OMRecord:
            with _immediate(conn):
                row = conn.execute("SELECT version FROM records WHERE key = ?", (key,)).fetchone()
                current = int(row[0]) if row is not None else 0
                if current != expected:
                    raise RecordConflictError(f"record {key!r} is at version {current}, expected {expected}")
                now = utcnow()
                stored = record.model_copy(update={"version": expected + 1, "updated_at": now})
                body = u.record_json(stored)
                conn.execute(
                    "INSERT INTO records (key, resource_id, thread_id, scope, version, body, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                    "version = excluded.version, body = excluded.body, updated_at = excluded.updated_at",
                    (key, record.resource_id, thread_part, record.scope, expected + 1, body, u.iso(now)),
                )
                for thread_id, seq in marks.items():
                    conn.execute(MARK_OBSERVED_SQL, (u.iso(now), thread_id, seq, record.resource_id))
                return u.record_from_json(body)

        return await self._run(run)

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the lease ``name`` for ``owner`` unless another owner holds an unexpired one."""

        def run(conn: sqlite3.Connection) -> bool:
            now = time.time()
            with _immediate(conn):
                cursor = conn.execute(
                    "INSERT INTO leases (name, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
                    "SET owner = excluded.owner, expires_at = excluded.expires_at "
                    "WHERE leases.expires_at < ? OR leases.owner = excluded.owner",
                    (name, owner, now + ttl_s, now),
                )
                return cursor.rowcount == 1

        return await self._run(run)

    async def arelease_lease(self, name: str, owner: str) -> None:
        """Give the lease back (a no-op when ``owner`` no longer holds it)."""

        def run(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                conn.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))

        await self._run(run)

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                conn.execute("DELETE FROM records WHERE key = ? AND resource_id = ?", (key, resource_id))

        await self._run(run)

    # ---- values -------------------------------------------------------------------------

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))

        def run(conn: sqlite3.Connection) -> Any | None:
            row = conn.execute(
                "SELECT value FROM kv WHERE resource_id = ? AND namespace = ? AND key = ?", slot
            ).fetchone()
            return json.loads(row[0]) if row is not None else None

        return await self._run(run)

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        text = u.dumps(value, "value")

        def run(conn: sqlite3.Connection) -> None:
            with _immediate(conn):
                conn.execute(
                    "INSERT INTO kv (resource_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = excluded.value, updated_at = excluded.updated_at",
                    (*slot, text, u.iso(utcnow())),
                )

        await self._run(run)


    async def aupdate_value(self, resource_id: str, namespace: str, key: str, update: ValueUpdate) -> Any:
        """Read, apply ``update`` and write in one ``BEGIN IMMEDIATE`` transaction (other
        connections and processes wait for the write lock, so no update is lost)."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        apply = u.check_update(update)

        def run(conn: sqlite3.Connection) -> Any:
            with _immediate(conn):
                row = conn.execute(
                    "SELECT value FROM kv WHERE resource_id = ? AND namespace = ? AND key = ?", slot
                ).fetchone()
                text = u.dumps(apply(json.loads(row[0]) if row is not None else None), "value")
                conn.execute(
                    "INSERT INTO kv (resource_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = excluded.value, updated_at = excluded.updated_at",
                    (*slot, text, u.iso(utcnow())),
                )
                return json.loads(text)

        return await self._run(run)


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the database write lock before its first read."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
            conn.execute("ROLLBACK")
        raise
