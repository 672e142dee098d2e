"""Listing threads for people: title, message count and last activity, newest first.

``alist_thread_summaries`` is what ``om.alist_threads`` and ``langchain-om threads`` show, so a
user can find a thread whose id they never saw (``langgraph dev`` names threads with UUIDs).
All three stores implement it here, one mixin class each (``MemoryThreadListing``, ...):

- Order: last activity (the thread's ``updated_at``, moved by every append) newest first, then
  thread id (code point order, descending) for ties.
- Paging by key: the next page starts after the last summary of the previous one
  (``after=page[-1]``). No thread shows twice and none that stayed quiet is skipped, which
  OFFSET cannot promise; a thread that got a new message meanwhile moved to the top, where a
  fresh listing shows it.
- ``resource_id=None`` lists the threads used without a resource (each has a private resource),
  the usual case under ``langgraph dev``; OM's internal branch threads (time travel) are left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict

from . import _util as u
from .base import BRANCH_MARK, IMPLICIT_RESOURCE_PREFIX, InvalidStoreInput, StoredMessage, ThreadInfo, check_id

if TYPE_CHECKING:
    import sqlite3

    from psycopg import AsyncCursor

_PREFIX_END = IMPLICIT_RESOURCE_PREFIX[:-1] + chr(ord(IMPLICIT_RESOURCE_PREFIX[-1]) + 1)
"""The smallest string above every private resource id (a range scan instead of LIKE)."""


class ThreadSummary(BaseModel):
    """One row of a thread listing."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    resource_id: str | None
    """None for a thread used without a resource (it has a private one)."""
    title: str | None = None
    message_count: int
    """Conversation messages stored (OM's own bookkeeping rows not counted)."""
    created_at: datetime
    last_activity: datetime


Cursor = tuple[datetime, str]


def check_listing(resource_id: Any, after: Any, limit: Any) -> tuple[str | None, Cursor | None, int]:
    """The checked arguments: an explicit resource (or None), the key to start after, the page size."""
    resource = None if resource_id is None else check_id(resource_id, "resource_id")
    cursor: Cursor | None = None
    if after is not None:
        if not isinstance(after, ThreadSummary):
            raise InvalidStoreInput("after", "expected the last ThreadSummary of the previous page")
        cursor = (u.to_utc(after.last_activity), after.thread_id)
    count = u.check_limit(limit)
    if count is None or count < 1:
        raise InvalidStoreInput("limit", "must be a positive number")
    return resource, cursor, count


def _public(resource_id: str) -> str | None:
    return None if resource_id.startswith(IMPLICIT_RESOURCE_PREFIX) else resource_id


def memory_summaries(threads: Iterable[ThreadInfo], messages: Mapping[str, list[StoredMessage]],
                     resource_id: str | None, cursor: Cursor | None, limit: int) -> list[ThreadSummary]:
    """``InMemoryStore``: a scan of its threads (it holds everything in memory anyway)."""
    rows = []
    for thread in threads:
        if BRANCH_MARK in thread.thread_id:
            continue
        mine = (thread.resource_id == resource_id if resource_id is not None
                else thread.resource_id.startswith(IMPLICIT_RESOURCE_PREFIX))
        key = (thread.updated_at, thread.thread_id)
        if mine and (cursor is None or key < cursor):
            rows.append(thread)
    rows.sort(key=lambda t: (t.updated_at, t.thread_id), reverse=True)
    return [ThreadSummary(thread_id=t.thread_id, resource_id=_public(t.resource_id), title=t.title,
                          created_at=t.created_at, last_activity=t.updated_at,
                          message_count=sum(m.kind == "message" for m in messages.get(t.thread_id, [])))
            for t in rows[:limit]]


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
        params += [IMPLICIT_RESOURCE_PREFIX, _PREFIX_END]
    params.append(BRANCH_MARK)
    after = ""
    if cursor is not None:
        after = "AND (t.updated_at < ? OR (t.updated_at = ? AND t.thread_id < ?)) "
        params += [u.iso(cursor[0]), u.iso(cursor[0]), cursor[1]]
    params.append(limit)
    query = _SQLITE.format(where=where, after=after)
    return [ThreadSummary(thread_id=row[0], resource_id=_public(row[1]), title=row[2],
                          created_at=u.from_iso(row[3]), last_activity=u.from_iso(row[4]), message_count=int(row[5]))
            for row in conn.execute(query, params)]


_POSTGRES = (
    "SELECT t.thread_id, t.resource_id, t.title, t.created_at AT TIME ZONE 'UTC' AS created_at, "
    "t.updated_at AT TIME ZONE 'UTC' AS updated_at, "
    "(SELECT COUNT(*) FROM {{s}}.messages m WHERE m.thread_id = t.thread_id AND m.kind = 'message') AS n "
    "FROM {{s}}.threads t WHERE {where} AND strpos(t.thread_id, %s) = 0 {after}"
    'ORDER BY t.updated_at DESC, t.thread_id COLLATE "C" DESC LIMIT %s'
)


def postgres_query(resource_id: str | None, cursor: Cursor | None, limit: int) -> tuple[str, list[Any]]:
    """``PostgresStore``: the query template (``{s}`` = the schema) and its parameters."""
    params: list[Any] = []
    if resource_id is not None:
        where = "t.resource_id = %s"
        params.append(resource_id)
    else:
        where = 't.resource_id COLLATE "C" >= %s AND t.resource_id COLLATE "C" < %s'
        params += [IMPLICIT_RESOURCE_PREFIX, _PREFIX_END]
    params.append(BRANCH_MARK)
    after = ""
    if cursor is not None:
        after = ('AND (t.updated_at < %s OR (t.updated_at = %s AND t.thread_id COLLATE "C" < %s)) ')
        params += [cursor[0], cursor[0], cursor[1]]
    params.append(limit)
    return _POSTGRES.format(where=where, after=after), params


async def postgres_summaries(cur: AsyncCursor[Any], query: Any, params: list[Any]) -> list[ThreadSummary]:
    await cur.execute(query, params)
    rows = await cur.fetchall()
    return [ThreadSummary(thread_id=row["thread_id"], resource_id=_public(row["resource_id"]), title=row["title"],
                          created_at=u.to_utc(row["created_at"]), last_activity=u.to_utc(row["updated_at"]),
                          message_count=int(row["n"]))
            for row in rows]


class MemoryThreadListing:
    """``InMemoryStore.alist_thread_summaries``."""

    async def alist_thread_summaries(
        self, resource_id: str | None, *, after: Any = None, limit: int = 20,
    ) -> list[ThreadSummary]:
        """See the module docstring."""
        resource, cursor, count = check_listing(resource_id, after, limit)
        store = cast(Any, self)
        with store._lock:
            return memory_summaries(list(store._threads.values()), store._messages, resource, cursor, count)


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


class PostgresThreadListing:
    """``PostgresStore.alist_thread_summaries``."""

    async def alist_thread_summaries(
        self, resource_id: str | None, *, after: Any = None, limit: int = 20,
    ) -> list[ThreadSummary]:
        """See the module docstring."""
        resource, cursor, count = check_listing(resource_id, after, limit)
        query, params = postgres_query(resource, cursor, count)
        store = cast(Any, self)
        async with store._tx() as cur:
            return await postgres_summaries(cur, store._q(query), params)
