"""The SQLite store's schema: its tables, the migrations from every earlier version, and the
FTS5 keyword index of recall search.

Its own module because the schema's history (what each version added and how a file is
brought up to date) is a concept apart from running calls on a connection. ``migrate``
runs inside the caller's write transaction, so a crash leaves the file at its old version.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable

from .. import _util as u
from ..base import IMPLICIT_RESOURCE_PREFIX, SCHEMA_VERSION, StoreError, record_key
from ..search import search_text
from .cjk import create_cjk_index, has_cjk_index, search_scope
from .fingerprints import migrate_v9
from .keyword_queue import INSERT_ENTRY, forget_all, migrate_v10

APPLICATION_ID = int.from_bytes(b"LcOM", "big")
"""``PRAGMA application_id`` of every SQLite file the store writes (SQLite's own way for a file
format to say whose it is): the CLI reads it before it opens a ``--db`` file, so another
application's database that happens to have a ``schema_version`` table is never mistaken for OM's."""
CORE_TABLES: dict[str, frozenset[str]] = {
    "schema_version": frozenset({"version"}),
    "threads": frozenset({"thread_id", "resource_id", "title", "created_at", "updated_at", "metadata"}),
    "messages": frozenset({"id", "resource_id", "thread_id", "seq", "kind", "data", "tokens", "created_at",
                           "observed", "observed_at"}),
    "records": frozenset({"key", "resource_id", "thread_id", "scope", "version", "body", "updated_at"}),
    "kv": frozenset({"resource_id", "namespace", "key", "value", "updated_at"}),
}
"""The tables (and their columns, at least) of every schema version: how a file OM wrote before it
set ``APPLICATION_ID`` is recognised."""

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
        moved = u.record_body_for_resource(u.loads(body), private)
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


def has_search_index(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'message_search'"
    ).fetchone() is not None


def create_search_index(conn: sqlite3.Connection) -> None:
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
            INSERT_ENTRY,
            [
                (text, search_scope(row[0], row[1]), row[1], row[2])
                for row in batch
                if (text := search_text(u.loads(row[4]), row[3]))
            ],
        )


def _migrate_v4(conn: sqlite3.Connection) -> None:
    """Recall search: the embeddings table, and the keyword index backfilled from every stored
    message (skipped on a SQLite without FTS5; created on a later open by one that has it)."""
    for statement in split_statements(_SCHEMA_V4_VECTORS):
        conn.execute(statement)
    if fts5_available() and not has_search_index(conn):
        create_search_index(conn)


# v5: leases, so concurrent workers on one record do not pay the Observer twice for one range
_LEASES_V5 = """
CREATE TABLE IF NOT EXISTS leases (
    name       TEXT PRIMARY KEY,
    owner      TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
# v6: nothing on SQLite. PostgreSQL replaces its v3 index with a per-thread observed_through
# (dead index entries outlive an UPDATE there until VACUUM); SQLite removes an entry from a partial
# index in place, so MARK_OBSERVED_SQL already reads only the unobserved rows. The number stays in
# step so both stores share one SCHEMA_VERSION.
_NOTHING_V6 = ""


def _migrate_v7(conn: sqlite3.Connection) -> None:
    """CJK keyword search: the bigram table, empty, and its backfill bookmark; the stored messages
    are indexed after the migration commits, in batches (``sqlite/cjk.backfill_batch``)."""
    if fts5_available() and not has_cjk_index(conn):
        create_cjk_index(conn)


# v8: vector segments (kept in one place, so a later migration merges beside it)
VECTOR_SEGMENTS_V8 = """
CREATE TABLE IF NOT EXISTS vector_segments (
    resource_id TEXT NOT NULL,
    space       TEXT NOT NULL,
    lo          INTEGER NOT NULL,
    hi          INTEGER NOT NULL,
    rows        INTEGER NOT NULL,
    pos_sum     INTEGER NOT NULL,
    body        BLOB NOT NULL,
    PRIMARY KEY (resource_id, space, lo)
);
"""


def _migrate_v8(conn: sqlite3.Connection) -> None:
    """Vector segments: a restart reads a resource's embeddings as a few large blobs
    (``store/vector_segments``); empty, written by the first searches."""
    for statement in split_statements(VECTOR_SEGMENTS_V8):
        conn.execute(statement)


MIGRATIONS: dict[int, str | Callable[[sqlite3.Connection], None]] = {
    1: _SCHEMA_V1,
    2: _move_implicit_resources,
    3: _UNOBSERVED_INDEX_V3,
    4: _migrate_v4,
    5: _LEASES_V5,
    6: _NOTHING_V6,
    7: _migrate_v7,
    8: _migrate_v8,
    9: migrate_v9,  # the fingerprint column, empty; SQLiteConnection backfills it in batches
    10: migrate_v10,  # the keyword-index queue: appends are indexed in batches (sqlite/keyword_queue)
}


def split_statements(script: str) -> list[str]:
    """The statements of a SQL script (no statement of the schema holds a semicolon in a string)."""
    return [part.strip() for part in script.split(";") if part.strip()]


def stored_version(conn: sqlite3.Connection) -> int:
    """The file's schema version (0 for a new file)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'"
    ).fetchone()
    if exists is None:
        return 0
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def check_not_newer(conn: sqlite3.Connection, path: str) -> None:
    """Refuse a file written by a newer langchain-om (and leave it untouched)."""
    version = stored_version(conn)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"{path} has langchain-om schema version {version}, newer than this code's "
            f"{SCHEMA_VERSION}; upgrade langchain-om (the file was left untouched)"
        )


def is_om_database(conn: sqlite3.Connection) -> bool:
    """Whether the file is langchain-om's: stamped with ``APPLICATION_ID``, or (written before the
    stamp) unstamped and holding OM's core tables with their columns. An empty file is not."""
    stamp = int(conn.execute("PRAGMA application_id").fetchone()[0])
    if stamp:
        return stamp == APPLICATION_ID
    for table, columns in CORE_TABLES.items():
        found = {str(row[1]) for row in conn.execute(f"PRAGMA table_info({table})")}
        if not columns <= found:
            return False
    return True


def _stamp(conn: sqlite3.Connection) -> None:
    """Set ``APPLICATION_ID`` on a file that has none (new, or written before the stamp); a file
    stamped by another application keeps its own."""
    if int(conn.execute("PRAGMA application_id").fetchone()[0]) != 0:
        return
    try:
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    except sqlite3.OperationalError as exc:  # a read-only file stays unstamped; its tables still say whose it is
        if "readonly" not in str(exc):
            raise


def migrate(conn: sqlite3.Connection, path: str) -> bool:
    """Bring the file to ``SCHEMA_VERSION`` inside the caller's write transaction; returns whether
    keyword search is available (FTS5 here, and its index present)."""
    check_not_newer(conn, path)  # re-check under the write lock: another process may have migrated
    version = stored_version(conn)
    _stamp(conn)
    if version == SCHEMA_VERSION:
        if fts5_available() and not has_search_index(conn):
            create_search_index(conn)  # migrated by a SQLite without FTS5: index now
            forget_all(conn)  # every stored message is indexed (or backfilled): none is left queued
        if fts5_available() and not has_cjk_index(conn):
            create_cjk_index(conn)
            forget_all(conn)
        return fts5_available()
    fts = fts5_available()
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    for target in range(version + 1, SCHEMA_VERSION + 1):
        migration = MIGRATIONS[target]
        if callable(migration):
            migration(conn)
            continue
        for statement in split_statements(migration):
            conn.execute(statement)
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version (version) VALUES (?)", (SCHEMA_VERSION,))
    return fts
