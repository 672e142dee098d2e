"""The in-memory store's thread listing (rules: ``store/thread_summaries.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, cast

from ..base import BRANCH_MARK, IMPLICIT_RESOURCE_PREFIX, StoredMessage, ThreadInfo
from ..thread_summaries import Cursor, ThreadSummary, check_listing, public_resource


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
    return [ThreadSummary(thread_id=t.thread_id, resource_id=public_resource(t.resource_id), title=t.title,
                          created_at=t.created_at, last_activity=t.updated_at,
                          message_count=sum(m.kind == "message" for m in messages.get(t.thread_id, [])))
            for t in rows[:limit]]



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
