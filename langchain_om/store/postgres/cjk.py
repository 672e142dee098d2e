"""The PostgreSQL store's CJK keyword index: a ``tsvector`` table of character bigrams
(``store.cjk``) beside the English ``message_search``, its writes, and its resumable backfill.

Why not ``pg_trgm``: it needs ``CREATE EXTENSION`` (a role that owns the database, or a
superuser, on a server that ships contrib), and its GIN index cannot answer a one- or
two-character word (京都, 上海: fewer than three characters make no trigram), which would fall
back to a scan of the resource's messages. Bigram lexemes with positions need nothing but core
PostgreSQL, so every role gets the same search: phrases (``<->``) for words of two or more
characters, a prefix (``:*``) for one character, both answered by a GIN index. The ``tsvector``
is built from a literal (``store.cjk.tsvector_literal``), not by a text search parser, whose
idea of a word in CJK text depends on the server's locale.

Existing schemas get the table empty in the v7 migration; ``backfill_batch`` then indexes the
stored messages in ``(thread_id, seq)`` order, one committed transaction per batch, with a
bookmark in ``search_backfill``, so a worker killed half-way resumes where the last batch
committed. One worker at a time backfills (a try-lock: the others go on serving). An entry is
unique per message, so the backfill and a concurrent append never index one message twice. The
batch locks the rows it indexes (``postgres/backfill``): an edit (``areplace_message`` updates its
row first) or a thread delete (its messages go first) waits for the batch to commit and then
replaces or deletes the entries it wrote, so no old text stays indexed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import AsyncCursor, sql

from .. import _util as u
from ..cjk import cjk_index_tokens, tsvector_literal
from ..search import search_text
from .backfill import pg_claim

CJK_TABLE = "message_search_cjk"
BACKFILL_BATCH = 2000
"""Messages indexed per committed backfill transaction."""

SCHEMA_V7 = [
    "CREATE TABLE IF NOT EXISTS {s}.message_search_cjk ("
    " pos BIGSERIAL PRIMARY KEY,"
    " resource_id TEXT NOT NULL,"
    " thread_id TEXT NOT NULL,"
    " message_id TEXT NOT NULL,"
    " search tsvector NOT NULL,"
    " UNIQUE (thread_id, message_id))",
    "CREATE INDEX IF NOT EXISTS message_search_cjk_recent ON {s}.message_search_cjk (resource_id, pos)",
    "CREATE INDEX IF NOT EXISTS message_search_cjk_words ON {s}.message_search_cjk USING GIN (search)",
    "CREATE TABLE IF NOT EXISTS {s}.search_backfill ("
    " name TEXT PRIMARY KEY, after_thread TEXT NOT NULL, after_seq BIGINT NOT NULL, done BOOLEAN NOT NULL)",
    "INSERT INTO {s}.search_backfill (name, after_thread, after_seq, done) VALUES ('cjk', '', 0, FALSE) "
    "ON CONFLICT (name) DO NOTHING",
]

INSERT_CJK = (
    "INSERT INTO {s}.message_search_cjk (resource_id, thread_id, message_id, search) "
    "VALUES (%s, %s, %s, %s::tsvector) ON CONFLICT (thread_id, message_id) DO NOTHING"
)


def cjk_entries(rows: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str, str]]:
    """The CJK index rows for ``(resource_id, thread_id, message_id, search_text)`` tuples: only
    messages holding CJK text get one. The one place this table's rows are made."""
    entries: list[tuple[str, str, str, str]] = []
    for resource_id, thread_id, message_id, text in rows:
        if tokens := cjk_index_tokens(text):
            entries.append((resource_id, thread_id, message_id, tsvector_literal(tokens)))
    return entries


async def index_cjk(
    cur: AsyncCursor[dict[str, Any]], q: Callable[[str], sql.Composed], entries: list[tuple[str, str, str, str]]
) -> None:
    """Write the CJK index rows of messages being appended or edited (``entries``: resource,
    thread, message id, search text), in the caller's transaction."""
    if rows := cjk_entries(entries):
        await cur.executemany(q(INSERT_CJK), rows)


async def backfill_batch(cur: AsyncCursor[dict[str, Any]], q: Callable[[str], sql.Composed], schema: str) -> bool:
    """Index the next ``BACKFILL_BATCH`` stored messages and move the bookmark (inside the
    caller's transaction). Returns whether nothing is left (or another worker holds the task)."""
    mark = await pg_claim(cur, q, schema, "cjk")
    if mark is None:  # an older schema version, another worker's task, or done
        return True
    await cur.execute(
        q(
            "SELECT resource_id, thread_id, seq, id, kind, data FROM {s}.messages "
            "WHERE (thread_id, seq) > (%s, %s) ORDER BY thread_id, seq LIMIT %s FOR SHARE"
        ),
        (*mark, BACKFILL_BATCH),
    )
    rows = await cur.fetchall()
    entries = cjk_entries([
        (row["resource_id"], row["thread_id"], row["id"], text)
        for row in rows
        if (text := search_text(u.from_jsonb_safe(row["data"]), row["kind"]))
    ])
    if entries:
        await cur.executemany(q(INSERT_CJK), entries)
    done = len(rows) < BACKFILL_BATCH
    last = (rows[-1]["thread_id"], rows[-1]["seq"]) if rows else mark
    await cur.execute(
        q("UPDATE {s}.search_backfill SET after_thread = %s, after_seq = %s, done = %s WHERE name = 'cjk'"),
        (*last, done),
    )
    return done
