"""The SQLite store's CJK keyword index: an FTS5 table of character bigrams (``store.cjk``)
beside the English ``message_search``, its writes, and its resumable backfill.

Why this shape (measured in ``benchmarks/search.py`` and docs/search.md): FTS5's ``trigram``
tokenizer cannot find a one- or two-character word (京都, 上海) from its index and would need a
scan for them; bigrams plus each run's last character, with a one-character prefix index,
answer every length from the index. The ``ascii`` tokenizer splits the normaliser's output at
spaces only (every non-ASCII character is a word character to it), so what is indexed is exactly
what ``store.cjk`` produced.

Existing files get the table empty in the schema migration, with a ``search_backfill`` row
recording the highest message rowid at that moment; ``backfill_batch`` then indexes the stored
messages in rowid order, one committed batch at a time, so a process killed half-way resumes
where the last batch committed. Messages appended meanwhile go through the keyword queue
(``sqlite/keyword_queue``), which indexes them in both tables.
"""

from __future__ import annotations

import sqlite3

from .. import _util as u
from ..cjk import cjk_index_text
from ..search import scope_token, search_text
from .backfill import sqlite_bookmark, sqlite_pending

CJK_TABLE = "message_search_cjk"
BACKFILL_BATCH = 2000
"""Messages indexed per committed backfill transaction."""

_CREATE = (
    f"CREATE VIRTUAL TABLE {CJK_TABLE} USING fts5(body, scope, thread_id UNINDEXED, "
    "message_id UNINDEXED, tokenize = 'ascii', prefix = '1')",
    f"INSERT INTO {CJK_TABLE} ({CJK_TABLE}, rank) VALUES ('rank', 'bm25(1.0, 0.0)')",
    "CREATE TABLE IF NOT EXISTS search_backfill (name TEXT PRIMARY KEY, after_rowid INTEGER NOT NULL, "
    "high_rowid INTEGER NOT NULL)",
)


def search_scope(resource_id: str, thread_id: str) -> str:
    """The ``scope`` column of a message's index entry (both tables): its resource and thread tokens."""
    return f"{scope_token('r', resource_id)} {scope_token('t', thread_id)}"


def has_cjk_index(conn: sqlite3.Connection) -> bool:
    return conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (CJK_TABLE,)
    ).fetchone() is not None


def create_cjk_index(conn: sqlite3.Connection) -> None:
    """The empty CJK table and its backfill bookmark (inside the migration's transaction)."""
    for statement in _CREATE:
        conn.execute(statement)
    conn.execute(
        "INSERT OR REPLACE INTO search_backfill (name, after_rowid, high_rowid) "
        "SELECT 'cjk', 0, COALESCE(MAX(rowid), 0) FROM messages"
    )


def index_cjk_message(conn: sqlite3.Connection, scope: str, thread_id: str, message_id: str, text: str) -> None:
    """Write one message's CJK index entry (``text`` is its ``search_text``); a message without a
    CJK character gets none. The one place this table is written for a message."""
    if body := cjk_index_text(text):
        conn.execute(
            f"INSERT INTO {CJK_TABLE} (body, scope, thread_id, message_id) VALUES (?, ?, ?, ?)",
            (body, scope, thread_id, message_id),
        )


def replace_cjk_message(conn: sqlite3.Connection, scope: str, thread_id: str, message_id: str, text: str) -> None:
    """Rewrite an edited message's CJK entry: the old one goes (found through its thread's scope
    token), the new text is indexed as an append would index it."""
    conn.execute(
        f"DELETE FROM {CJK_TABLE} WHERE rowid IN (SELECT rowid FROM {CJK_TABLE} WHERE {CJK_TABLE} MATCH ? "
        "AND message_id = ?)",
        (f'scope : "{scope_token("t", thread_id)}"', message_id),
    )
    if text:
        index_cjk_message(conn, scope, thread_id, message_id, text)


def delete_cjk_thread(conn: sqlite3.Connection, thread_token: str) -> None:
    """Drop a thread's entries (``thread_token``: its ``scope_token("t", ...)``)."""
    conn.execute(f"DELETE FROM {CJK_TABLE} WHERE {CJK_TABLE} MATCH ?", (f'scope : "{thread_token}"',))


def backfill_pending(conn: sqlite3.Connection) -> bool:
    return sqlite_pending(conn, "cjk")


def backfill_batch(conn: sqlite3.Connection) -> bool:
    """Index the next ``BACKFILL_BATCH`` stored messages and move the bookmark past them (inside
    the caller's write transaction). Returns whether the backfill is complete."""
    bookmark = sqlite_bookmark(conn, "cjk")
    if bookmark is None:
        return True
    after, high = bookmark
    rows = conn.execute(
        "SELECT rowid, resource_id, thread_id, id, kind, data FROM messages WHERE rowid > ? AND rowid <= ? "
        "ORDER BY rowid LIMIT ?",
        (after, high, BACKFILL_BATCH),
    ).fetchall()
    for _rowid, resource_id, thread_id, message_id, kind, data in rows:
        if text := search_text(u.loads(data), kind):
            index_cjk_message(conn, search_scope(resource_id, thread_id), thread_id, message_id, text)
    done = len(rows) < BACKFILL_BATCH
    conn.execute(
        "UPDATE search_backfill SET after_rowid = ? WHERE name = 'cjk'", (high if done else int(rows[-1][0]),)
    )
    return done
