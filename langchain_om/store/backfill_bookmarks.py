"""The bookmarks of the resumable backfills (the v7 CJK index, the v9 fingerprint column).

Both backfills keep one row per task in ``search_backfill`` and move it past each committed
batch, so a process killed half-way resumes where the last batch committed. What they share is
how a batch finds its bookmark (and, on PostgreSQL, claims the task so that one worker at a time
backfills while the others go on serving); what each batch does with its rows stays in its own
module. psycopg is imported for type hints only: SQLite users never load it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from psycopg import AsyncCursor, sql


def sqlite_pending(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the SQLite backfill ``name`` has rows left (False on a file without the table)."""
    exists = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'search_backfill'"
    ).fetchone()
    return exists is not None and conn.execute(
        "SELECT 1 FROM search_backfill WHERE name = ? AND after_rowid < high_rowid", (name,)
    ).fetchone() is not None


def sqlite_bookmark(conn: sqlite3.Connection, name: str) -> tuple[int, int] | None:
    """The rowid range ``(after, high]`` the SQLite backfill ``name`` has left, or None when done."""
    row = conn.execute("SELECT after_rowid, high_rowid FROM search_backfill WHERE name = ?", (name,)).fetchone()
    if row is None or row[0] >= row[1]:
        return None
    return int(row[0]), int(row[1])


async def pg_claim(
    cur: AsyncCursor[dict[str, Any]], q: Callable[[str], sql.Composed], schema: str, name: str
) -> tuple[str, int] | None:
    """Claim the PostgreSQL backfill ``name`` for this transaction and return its bookmark
    ``(after_thread, after_seq)``; None when there is nothing to do: an older schema without the
    table, another worker holding the task (a try-lock, released at commit), or the task done."""
    await cur.execute(
        "SELECT to_regclass(format('%%I.search_backfill', %s::text)) IS NOT NULL AS exists, "
        "pg_try_advisory_xact_lock(hashtext(%s)) AS got",
        (schema, f"langchain_om.{name}:{schema}"),
    )
    got = await cur.fetchone()
    if got is None or not got["exists"] or not got["got"]:
        return None
    await cur.execute(q("SELECT after_thread, after_seq, done FROM {s}.search_backfill WHERE name = %s"), (name,))
    mark = await cur.fetchone()
    if mark is None or mark["done"]:
        return None
    return str(mark["after_thread"]), int(mark["after_seq"])
