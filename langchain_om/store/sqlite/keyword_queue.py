"""The SQLite store's keyword-index writes, batched: appended messages wait in a small queue
(``keyword_pending``, schema version 10) and are indexed in one go.

Why: writing one message's entries in the English FTS5 table and the CJK bigram table cost
~0.36-0.6 ms per transaction (FTS5 flushes a segment at every commit), the largest fixed cost of
an agent step's append; indexed ``INDEX_BATCH`` at a time it costs ~0.1 ms a row.

Nothing is ever missing from a search: the queue row is written in the append's transaction,
an append indexes the queue once it holds ``INDEX_BATCH`` rows, and every search first indexes
whatever is queued (in a write transaction, so another store or process on the same file sees
it too). A crash between an append and a batch leaves the rows queued; the next append or search
indexes them. A queued message edited in place needs nothing (the batch reads its current text);
a deleted thread's queued rows are dropped with it.

Why a queue and not a rowid watermark: ``messages`` has no ``INTEGER PRIMARY KEY``, so SQLite
reuses the top rowid after a thread is deleted and ``VACUUM`` may renumber rows; a message below
a watermark would then never be indexed. The queue names messages by ``(thread_id, id)``, which
neither changes, and holds at most ``INDEX_BATCH`` rows, so reading it is a few page reads.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from .. import _util as u
from ..search import scope_token, search_text
from .cjk import index_cjk_message, replace_cjk_message, search_scope

INDEX_BATCH = 32
"""Queued messages an append indexes at once (small, so a first search never has much to do)."""

QUEUE_V10 = (
    "CREATE TABLE IF NOT EXISTS keyword_pending (pos INTEGER PRIMARY KEY, thread_id TEXT NOT NULL, "
    "message_id TEXT NOT NULL)"
)
"""Migration 10: the queue (``pos`` keeps the append order, so index rowids keep recency)."""


INSERT_ENTRY = "INSERT INTO message_search (body, scope, thread_id, message_id) VALUES (?, ?, ?, ?)"
"""One message's entry in the English index (``body`` is its ``search_text``)."""


def migrate_v10(conn: sqlite3.Connection) -> None:
    """The empty queue: a file below version 10 indexed every message with its append (and the
    migrations before this one rebuild or backfill the index from every stored row)."""
    conn.execute(QUEUE_V10)
    forget_all(conn)


def queue(conn: sqlite3.Connection, thread_id: str, message_ids: Sequence[str]) -> None:
    """Queue freshly appended messages (in the append's transaction) and index the queue once it
    holds ``INDEX_BATCH`` rows."""
    last = 0
    for message_id in message_ids:  # one statement a message: a step appends one or two
        last = int(conn.execute("INSERT INTO keyword_pending (thread_id, message_id) VALUES (?, ?) RETURNING pos",
                                (thread_id, message_id)).fetchone()[0])
    # pos is the highest queued + 1 (the emptied queue starts again at 1): at least the queue's length
    if last >= INDEX_BATCH:
        index_queued(conn)


def has_queued(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM keyword_pending LIMIT 1").fetchone() is not None


def index_queued(conn: sqlite3.Connection) -> None:
    """Index every queued message's current text in both tables, in append order, and empty the
    queue (inside the caller's write transaction)."""
    rows = conn.execute(
        "SELECT m.resource_id, m.thread_id, m.id, m.kind, m.data FROM keyword_pending AS q "
        "JOIN messages AS m ON m.thread_id = q.thread_id AND m.id = q.message_id ORDER BY q.pos"
    ).fetchall()
    entries: list[tuple[str, str, str, str]] = []
    for resource_id, thread_id, message_id, kind, data in rows:
        if text := search_text(u.loads(data), kind):
            entries.append((text, search_scope(resource_id, thread_id), thread_id, message_id))
    _index(conn, entries)
    conn.execute("DELETE FROM keyword_pending")


def _index(conn: sqlite3.Connection, entries: Sequence[tuple[str, str, str, str]]) -> None:
    """Write messages' entries, ``(text, scope, thread_id, message_id)`` each, in both tables."""
    conn.executemany(INSERT_ENTRY, entries)
    for text, scope, thread_id, message_id in entries:
        index_cjk_message(conn, scope, thread_id, message_id, text)


def forget_thread(conn: sqlite3.Connection, thread_id: str) -> None:
    """A deleted thread's queued rows go with it (the queue is small: no index needed)."""
    conn.execute("DELETE FROM keyword_pending WHERE thread_id = ?", (thread_id,))


def forget_all(conn: sqlite3.Connection) -> None:
    """Empty the queue without indexing: the index is being (re)built from every stored message."""
    conn.execute("DELETE FROM keyword_pending")


def reindex_edited(
    conn: sqlite3.Connection, scope: str, thread_id: str, message_id: str, data: dict[str, Any], kind: str
) -> None:
    """An edited message's entries, rewritten in place (same rowid, so its recency stays); a queued
    message needs nothing, its batch reads the new text."""
    if conn.execute(
        "SELECT 1 FROM keyword_pending WHERE thread_id = ? AND message_id = ?", (thread_id, message_id)
    ).fetchone() is not None:
        return
    text = search_text(data, kind)
    row = conn.execute(
        "SELECT rowid FROM message_search WHERE message_search MATCH ? AND message_id = ? LIMIT 1",
        (f'scope : "{scope_token("t", thread_id)}"', message_id),
    ).fetchone()
    if row is not None:
        if text:
            conn.execute("UPDATE message_search SET body = ? WHERE rowid = ?", (text, row[0]))
        else:
            conn.execute("DELETE FROM message_search WHERE rowid = ?", (row[0],))
        replace_cjk_message(conn, scope, thread_id, message_id, text)
    elif text:  # stored before it had text worth indexing: indexed now, as an append would
        _index(conn, [(text, scope, thread_id, message_id)])
