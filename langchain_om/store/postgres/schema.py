"""The PostgreSQL store's schema: its tables, the migrations from every earlier version, and the
``tsvector`` keyword index of recall search.

Its own module because the schema's history (what each version added and how a database is
brought up to date) is a concept apart from running calls on a pool. ``migrate`` runs in the
caller's transaction under an advisory lock, so workers starting together are safe and a crash
leaves the schema at its old version. Statements are templates whose ``{s}`` the store binds
to its quoted schema name (``PostgresConnection._q``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import AsyncCursor, sql
from psycopg.types.json import Jsonb

from .. import _util as u
from ..base import IMPLICIT_RESOURCE_PREFIX, SCHEMA_VERSION, StoreError, record_key
from ..search import search_text
from .cjk import SCHEMA_V7 as _CJK_INDEX_V7
from .fingerprints import SCHEMA_V9 as _FINGERPRINT_COLUMN_V9

Cursor = AsyncCursor[dict[str, Any]]
Query = Callable[[str], sql.Composed]
"""Binds a template's ``{s}`` to the quoted schema name (``PostgresConnection._q``)."""


def jsonb(value: Any, field: str) -> Jsonb:
    """``value`` as a jsonb parameter, encoded once (``to_jsonb_safe`` encodes it to check it; psycopg
    encoding it again cost a second ``json.dumps`` of every message and record written)."""
    return jsonb_text(u.dumps(value, field), wrapped=u.is_wrapped(value))


def jsonb_text(text: str, *, wrapped: bool = False) -> Jsonb:
    """A jsonb parameter from JSON text made by ``_util.dumps``, sent as it is (base64-wrapped when
    jsonb would reject it, as ``to_jsonb_safe`` does)."""
    if wrapped or u.jsonb_unsafe(text):
        return Jsonb(u.wrap_json_text(text))
    return Jsonb(text, dumps=_verbatim)


def stored_json_text(text: str, value: Any) -> str:
    """The JSON text ``jsonb_text`` would send for ``value`` dumped as ``text``, as text (for a
    statement that casts it to jsonb itself: an array of rows goes as ``text[]``)."""
    if u.is_wrapped(value) or u.jsonb_unsafe(text):
        return u.dumps(u.wrap_json_text(text), "data")
    return text


def _verbatim(text: str) -> str:
    return text


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


async def _move_implicit_resources(q: Query, cur: Cursor) -> None:
    """Migration 2: threads used without a resource move to their private resource
    (``u.V1_IMPLICIT_THREADS_SQL`` says which). Runs inside the migration's transaction, so a
    crash leaves version 1 untouched and the next open redoes it; on version 2 nothing matches."""
    query = u.V1_IMPLICIT_THREADS_SQL.format(threads="{s}.threads", records="{s}.records")
    await cur.execute(q(f"CREATE TEMP TABLE om_implicit ON COMMIT DROP AS {query}"))
    await cur.execute(q(
        "SELECT key, resource_id, thread_id, body FROM {s}.records "
        "WHERE resource_id IN (SELECT thread_id FROM om_implicit)"
    ))
    for record in await cur.fetchall():  # bodies name their resource too
        private = IMPLICIT_RESOURCE_PREFIX + record["resource_id"]
        moved = u.record_body_for_resource(u.from_jsonb_safe(record["body"]), private)
        await cur.execute(
            q("UPDATE {s}.records SET key = %s, resource_id = %s, body = %s WHERE key = %s"),
            (record_key(private, record["thread_id"]), private, jsonb(moved, "record"), record["key"]),
        )
    for table in ("threads", "messages", "kv"):
        await cur.execute(
            q(f"UPDATE {{s}}.{table} SET resource_id = %s::text || resource_id "
              "WHERE resource_id IN (SELECT thread_id FROM om_implicit)"),
            (IMPLICIT_RESOURCE_PREFIX,),
        )


# MIGRATIONS[n] takes a schema at version n - 1 to version n (all run in one transaction):
# SQL statements, or a coroutine function of the store's ``Query`` and the migration's cursor.
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
INSERT_SEARCH = (
    "INSERT INTO {s}.message_search (resource_id, thread_id, message_id, search) "
    f"VALUES (%s, %s, %s, to_tsvector('{SEARCH_CONFIG}', %s))"
)


async def _migrate_v4(q: Query, cur: Cursor) -> None:
    """Recall search: the ``tsvector`` index table, backfilled from every stored message (paged
    by key, oldest first, in the migration's transaction), and the embeddings tables."""
    for statement in _SCHEMA_V4:
        await cur.execute(q(statement))
    last: tuple[str, int] = ("", 0)
    while True:
        await cur.execute(
            q(
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
            await cur.executemany(q(INSERT_SEARCH), entries)


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
# v8: vector segments (``store/vector_segments``): a restart reads a resource's embeddings as a few
# large blobs; EXTERNAL storage, as float32 bytes do not compress (kept in one place for merges)
_VECTOR_SEGMENTS_V8 = [
    "CREATE TABLE IF NOT EXISTS {s}.vector_segments ("
    " resource_id TEXT NOT NULL,"
    " space TEXT NOT NULL,"
    " lo BIGINT NOT NULL,"
    " hi BIGINT NOT NULL,"
    " rows BIGINT NOT NULL,"
    " pos_sum BIGINT NOT NULL,"
    " body BYTEA NOT NULL,"
    " PRIMARY KEY (resource_id, space, lo))",
    "ALTER TABLE {s}.vector_segments ALTER COLUMN body SET STORAGE EXTERNAL",
]
MIGRATIONS: dict[int, list[str] | Callable[[Query, Cursor], Awaitable[None]]] = {
    1: _SCHEMA_V1,
    2: _move_implicit_resources,
    3: _UNOBSERVED_INDEX_V3,
    4: _migrate_v4,
    5: _LEASES_V5,
    6: _OBSERVED_THROUGH_V6,
    7: _CJK_INDEX_V7,  # empty; PostgresConnection backfills it in batches after the migration commits
    8: _VECTOR_SEGMENTS_V8,
    9: _FINGERPRINT_COLUMN_V9,  # empty; PostgresConnection backfills it in batches after the migration commits
    10: [],  # nothing: SQLite's keyword-index queue (the number stays in step, see base.SCHEMA_VERSION)
}


async def stored_version(cur: Cursor, schema: str, q: Query) -> int:
    await cur.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'schema_version'",
        (schema,),
    )
    if await cur.fetchone() is None:
        return 0
    await cur.execute(q("SELECT COALESCE(MAX(version), 0) AS v FROM {s}.schema_version"))
    row = await cur.fetchone()
    return int(row["v"]) if row is not None else 0


async def migrate(cur: Cursor, schema: str, q: Query) -> None:
    """Bring ``schema`` to ``SCHEMA_VERSION`` in the caller's transaction (refusing a newer one)."""
    await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"langchain_om.migrate:{schema}",))
    version = await stored_version(cur, schema, q)
    if version > SCHEMA_VERSION:
        raise StoreError(
            f"schema {schema!r} has langchain-om schema version {version}, newer than this code's "
            f"{SCHEMA_VERSION}; upgrade langchain-om (nothing was changed)"
        )
    if version == SCHEMA_VERSION:
        return
    await cur.execute(q("CREATE SCHEMA IF NOT EXISTS {s}"))
    await cur.execute(q("CREATE TABLE IF NOT EXISTS {s}.schema_version (version INTEGER NOT NULL)"))
    for target in range(version + 1, SCHEMA_VERSION + 1):
        migration = MIGRATIONS[target]
        if callable(migration):
            await migration(q, cur)
            continue
        for statement in migration:
            await cur.execute(q(statement))
    await cur.execute(q("DELETE FROM {s}.schema_version"))
    await cur.execute(q("INSERT INTO {s}.schema_version (version) VALUES (%s)"), (SCHEMA_VERSION,))
