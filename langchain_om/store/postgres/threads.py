"""PostgreSQL's thread listing (rules: ``store/thread_summaries.py``)."""

from __future__ import annotations

from typing import Any, cast

from psycopg import AsyncCursor

from .. import _util as u
from ..base import BRANCH_MARK, IMPLICIT_RESOURCE_PREFIX
from ..thread_summaries import PREFIX_END, Cursor, ThreadSummary, check_listing, public_resource

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
        params += [IMPLICIT_RESOURCE_PREFIX, PREFIX_END]
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
    return [ThreadSummary(thread_id=row["thread_id"], resource_id=public_resource(row["resource_id"]),
                          title=row["title"], created_at=u.to_utc(row["created_at"]),
                          last_activity=u.to_utc(row["updated_at"]), message_count=int(row["n"]))
            for row in rows]



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
