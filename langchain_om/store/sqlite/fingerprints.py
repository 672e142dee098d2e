"""The SQLite store's ``fingerprint`` column (schema version 9) and its resumable backfill.

A cold step (a fresh process handed a thread's whole history) compares every handed message's
fingerprint with the stored one. Extracting it from each row's JSON cost a few microseconds a
message more than reading a column; at 50k handed messages that was a sizeable share of the
step. The column is written with every appended or rewritten row (``known.stored_fingerprint``).

Existing files get the column empty in the v9 migration, with a bookmark in ``search_backfill``
(the table of the CJK backfill) holding the highest message rowid at that moment; then
``backfill_batch`` fills it in rowid ranges, one committed batch at a time, so a process killed
half-way resumes where the last batch committed. Until a row is reached, lookups read its JSON
(``FINGERPRINT_SQL``), so the backfill never holds up a step and never changes an answer.
"""

from __future__ import annotations

import sqlite3

from ..known import FINGERPRINT_PATH, json_path
from .backfill import sqlite_bookmark, sqlite_pending

BACKFILL_BATCH = 5000
"""Message rowids filled per committed backfill transaction."""
_PATH = json_path(FINGERPRINT_PATH)
_FROM_JSON = f"CASE json_type(data, '{_PATH}') WHEN 'text' THEN json_extract(data, '{_PATH}') END"
FINGERPRINT_SQL = f"COALESCE(fingerprint, {_FROM_JSON})"
"""A row's fingerprint: the column, else (a row the backfill has not reached) its JSON's."""
BACKFILL_TABLE = (
    "CREATE TABLE IF NOT EXISTS search_backfill (name TEXT PRIMARY KEY, after_rowid INTEGER NOT NULL, "
    "high_rowid INTEGER NOT NULL)"
)


def migrate_v9(conn: sqlite3.Connection) -> None:
    """The empty column and its backfill bookmark (inside the migration's transaction)."""
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(messages)")}
    if "fingerprint" not in columns:
        conn.execute("ALTER TABLE messages ADD COLUMN fingerprint TEXT")  # no rewrite: existing rows read NULL
    conn.execute(BACKFILL_TABLE)
    conn.execute(
        "INSERT OR REPLACE INTO search_backfill (name, after_rowid, high_rowid) "
        "SELECT 'fingerprint', 0, COALESCE(MAX(rowid), 0) FROM messages"
    )


def backfill_pending(conn: sqlite3.Connection) -> bool:
    return sqlite_pending(conn, "fingerprint")


def backfill_batch(conn: sqlite3.Connection) -> bool:
    """Fill the column of the next ``BACKFILL_BATCH`` rowids and move the bookmark past them
    (inside the caller's write transaction). Returns whether the backfill is complete."""
    bookmark = sqlite_bookmark(conn, "fingerprint")
    if bookmark is None:
        return True
    after, high = bookmark
    upto = min(after + BACKFILL_BATCH, high)
    conn.execute(
        f"UPDATE messages SET fingerprint = {_FROM_JSON} WHERE rowid > ? AND rowid <= ? AND fingerprint IS NULL",
        (after, upto),
    )
    conn.execute("UPDATE search_backfill SET after_rowid = ? WHERE name = 'fingerprint'", (upto,))
    return upto >= high
