"""Bookmarks of SQLite's resumable backfills (the v7 CJK index, the v9 fingerprint column).

Each backfill keeps one row per task in ``search_backfill`` and moves it past each committed batch,
so a process killed half-way resumes where the last batch committed; what each batch does with
its rows stays in its own module."""

from __future__ import annotations

import sqlite3


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
