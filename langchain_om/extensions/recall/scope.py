"""Who is calling recall and what they may read (isolation).

``RecallContext`` holds the bound resource and current thread; the ids the model passes
(a cursor, a thread id) are only ever looked up inside that resource, and with
``retrieval.scope="thread"`` inside the current thread. An id that is not found gets an
error that says what to pass instead, never another user's data.
"""

from __future__ import annotations

import re
import unicodedata
from typing import TYPE_CHECKING, cast

from langchain_core.tools import ToolException

from ...store.base import InvalidStoreInput, OMStore, StoredMessage, all_thread_ids
from .args import MAX_ID_CHARS, check_text, show_value
from .render import shorten

if TYPE_CHECKING:
    from ..host import MemoryHost


_RANGE = re.compile(r"^\s*(?:_?range\s*[:=]\s*)?[`'\"]?([^\s:`'\"]+)\s*:\s*([^\s:`'\"]+)[`'\"]?\s*$", re.IGNORECASE)


class RecallContext:
    """Who is calling: the bound resource and current thread."""

    def __init__(self, om: MemoryHost, resource_id: str, thread_id: str) -> None:
        self.om = om
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.store: OMStore = om.store
        """The store as seen from this thread: on a branch, its history reads as one thread."""

    async def aprepare(self) -> None:
        from ..branches import alineage_view

        self.store = cast("OMStore", await alineage_view(self.om, self.resource_id, self.thread_id))

    @property
    def thread_only(self) -> bool:
        retrieval = self.om.config.retrieval
        return retrieval is not None and retrieval.scope == "thread"


def _range_hint(cursor: str) -> str | None:
    match = _RANGE.match(cursor)
    if not match:
        return None
    start, end = match.group(1), match.group(2)
    return (
        f"cursor: pass ONE message id, not a range. From range \"{shorten(start, 60)}:{shorten(end, 60)}\" use "
        f"cursor=\"{shorten(start, 60)}\" to read forward from the start (page=1), or "
        f"cursor=\"{shorten(end, 60)}\" with page=-1 to read backward from the end."
    )


async def resolve_thread(ctx: RecallContext, thread_id: str | None) -> str:
    """The thread to read: current, a thread of this resource by id, or by its obscured label."""
    if thread_id is None or thread_id.strip().lower() == "current":
        return ctx.thread_id
    wanted = check_text(thread_id, "thread_id")
    if wanted == ctx.thread_id:
        return wanted
    if ctx.thread_only:
        raise ToolException("thread_id: recall is limited to the current thread here; omit thread_id")
    try:
        info = await ctx.store.aget_thread(ctx.resource_id, wanted)
    except InvalidStoreInput as exc:
        raise ToolException(f"thread_id: {exc}") from None
    if info is not None:
        return info.thread_id
    if ctx.om.config.obscure_ids and wanted.startswith("thread-"):
        for candidate in await all_thread_ids(ctx.om.store, ctx.resource_id):
            if ctx.om.thread_label(candidate) == wanted:
                return candidate
    raise ToolException(
        f"thread_id: no thread {show_value(wanted)} for this user. Use mode=\"threads\" to list thread ids, "
        'or thread_id="current".'
    )


async def resolve_cursor(ctx: RecallContext, cursor: str) -> StoredMessage:
    """The message a cursor names, in this resource (and thread, in thread scope); a pasted range gets a hint."""
    text = cursor.strip()
    if len(text) > MAX_ID_CHARS * 2 + 16:
        raise ToolException(f"cursor: too long ({len(text)} characters); pass one message id")
    hint = None if ":" not in text else _range_hint(text)
    if hint is not None and (not text or len(text) > MAX_ID_CHARS):
        raise ToolException(hint)
    if len(text) <= MAX_ID_CHARS and text and not any(unicodedata.category(ch) in ("Cc", "Cs") for ch in text):
        try:
            found = await ctx.store.aget_message(ctx.resource_id, text)
        except InvalidStoreInput:
            found = None
        if found is not None:
            if ctx.thread_only and found.thread_id != ctx.thread_id:
                raise ToolException(f"cursor: no message {show_value(text)} in this thread")
            return found
    if hint is not None:
        raise ToolException(hint)
    check_text(text, "cursor")
    raise ToolException(
        f"cursor: no message {show_value(text)} for this user. Use a message id from an observation group's "
        "range (start or end id) or from a previous recall result."
    )
