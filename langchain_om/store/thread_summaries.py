"""Listing threads for people: title, message count and last activity, newest first.

``alist_thread_summaries`` is what ``om.alist_threads`` and ``langchain-om threads`` show, so a
user can find a thread whose id they never saw (``langgraph dev`` names threads with UUIDs).
Each backend implements it in its own ``threads`` module (a mixin class, e.g. ``SQLiteThreadListing``)
on the shared rules here:

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

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from . import _util as u
from .base import IMPLICIT_RESOURCE_PREFIX, InvalidStoreInput, check_id, check_thread_id

PREFIX_END = IMPLICIT_RESOURCE_PREFIX[:-1] + chr(ord(IMPLICIT_RESOURCE_PREFIX[-1]) + 1)
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
        cursor = check_cursor(after)
    count = u.check_limit(limit)
    if count is None or count < 1:
        raise InvalidStoreInput("limit", "must be a positive number")
    return resource, cursor, count


def check_cursor(after: ThreadSummary) -> Cursor:
    """The key a summary names, checked as every store needs it: a caller can build or edit a summary,
    and unchecked, a date at the calendar's ends raised a bare ``OverflowError`` and a NUL in the id a
    generic error on PostgreSQL but a normal page elsewhere. Both halves must be what a listing
    returns: an instant within years 1..9999 in UTC and a valid thread id."""
    activity = u.check_datetime(after.last_activity, "after")
    if activity is None:  # model_construct can leave it out
        raise InvalidStoreInput("after", "last_activity: must be a datetime")
    try:
        thread_id = check_thread_id(after.thread_id, "after")
    except InvalidStoreInput as exc:
        raise InvalidStoreInput("after", f"thread_id {str(exc).partition(': ')[2]}") from None
    return activity, thread_id


def public_resource(resource_id: str) -> str | None:
    return None if resource_id.startswith(IMPLICIT_RESOURCE_PREFIX) else resource_id
