"""SQLite's thread listing (rules: ``store/thread_summaries.py``)."""

from __future__ import annotations

import sqlite3
from typing import Any, cast

from .. import _util as u
from ..base import BRANCH_MARK, IMPLICIT_RESOURCE_PREFIX
from ..thread_summaries import PREFIX_END, Cursor, ThreadSummary, check_listing, public_resource

_SQLITE = (
    "SELECT t.thread_id, t.resource_id, t.title, t.created_at, t.updated_at, "
    "(SELECT COUNT(*) FROM messages m WHERE m.thread_id = t.thread_id AND m.kind = 'message') "
    "FROM threads t WHERE {where} AND instr(t.thread_id, ?) = 0 {after}"
    "ORDER BY t.updated_at DESC, t.thread_id DESC LIMIT ?"
)


def sqlite_summaries(conn: sqlite3.Connection, resource_id: str | None, cursor: Cursor | None,
                     limit: int) -> list[ThreadSummary]:
    """``SQLiteStore``: one query; timestamps are stored as fixed-width ISO text, so they compare as text."""
    params: list[Any] = []
    if resource_id is not None:
        where = "t.resource_id = ?"
        params.append(resource_id)
    else:
        where = "t.resource_id >= ? AND t.resource_id < ?"
        params += [IMPLICIT_RESOURCE_PREFIX, PREFIX_END]
    params.append(BRANCH_MARK)
    after = ""
    if cursor is not None:
        after = "AND (t.updated_at < ? OR (t.updated_at = ? AND t.thread_id < ?)) "
        params += [u.iso(cursor[0]), u.iso(cursor[0]), cursor[1]]
    params.append(limit)
    query = _SQLITE.format(where=where, after=after)
    return [ThreadSummary(thread_id=row[0], resource_id=public_resource(row[1]), title=row[2],
                          created_at=u.from_iso(row[3]), last_activity=u.from_iso(row[4]), message_count=int(row[5]))
            for row in conn.execute(query, params)]



class SQLiteThreadListing:
    """``SQLiteStore.alist_thread_summaries``."""

    async def alist_thread_summaries(
        self, resource_id: str | None, *, after: Any = None, limit: int = 20,
    ) -> list[ThreadSummary]:
        """See the module docstring."""
        resource, cursor, count = check_listing(resource_id, after, limit)
        found: list[ThreadSummary] = await cast(Any, self)._run(
            lambda conn: sqlite_summaries(conn, resource, cursor, count))
        return found
