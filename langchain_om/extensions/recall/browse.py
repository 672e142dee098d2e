"""Browsing: ``mode="messages"`` pages through a thread and ``mode="threads"`` lists the user's threads.

Pages are message ranges by position in the thread, counted from the cursor or the anchor
(the paging rules are in the package docstring). ``detail="high"`` and ``part_index`` show
one part per call with ``next_call``, the exact arguments for the next part.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.tools import ToolException

from ...store.base import StoredMessage
from .args import RecallInput, parse_date, show_value
from .render import (
    OutputBudget,
    Part,
    add_truncation,
    high_detail,
    low_detail,
    message_parts,
    message_stamp,
    role_of,
    shorten,
    utc_stamp,
)
from .scope import RecallContext, resolve_cursor, resolve_thread


def _matching(parts: Sequence[Part], args: RecallInput) -> list[int]:
    """Indexes of the parts that pass the ``part_type`` / ``tool_name`` filters."""
    return [
        i for i, p in enumerate(parts)
        if (args.part_type is None or p.kind == args.part_type)
        and (args.tool_name is None or (p.kind in ("tool-call", "tool-result") and p.tool_name == args.tool_name))
    ]


def _header(stored: StoredMessage) -> str:
    return f"--- message {stored.id} · {role_of(stored)} · {message_stamp(stored)}"


def _render_message(ctx: RecallContext, stored: StoredMessage, args: RecallInput) -> str | None:
    """Low-detail text block for one message under the filters (None when no part matches)."""
    parts = message_parts(ctx.om.message_of(ctx.resource_id, stored))
    chosen = _matching(parts, args)
    if not chosen and (args.part_type or args.tool_name):
        return None
    if not chosen:
        return f"{_header(stored)}\n(no content)"
    return f"{_header(stored)}\n" + "\n".join(low_detail(parts[i], i) for i in chosen)


# High detail reads one part per call; ``next_call`` is the exact arguments for the next one.
NEXT_SCAN = 20  # messages looked at past the shown one for the next matching part


def _call(args: RecallInput, cursor: str, part_index: int | None) -> dict[str, Any]:
    call: dict[str, Any] = {"cursor": cursor}
    if part_index is None:
        call["detail"] = "high"
    else:
        call["part_index"] = part_index
    if args.part_type is not None:
        call["part_type"] = args.part_type
    if args.tool_name is not None:
        call["tool_name"] = args.tool_name
    return call


async def _next_part(
    ctx: RecallContext, args: RecallInput, stored: StoredMessage, parts: Sequence[Part], index: int
) -> dict[str, Any] | None:
    """The call that shows the part after ``[p{index}]`` of ``stored`` in reading order (None at the end)."""
    later = [i for i in _matching(parts, args) if i > index]
    if later:
        return _call(args, stored.id, later[0])
    rows = await ctx.store.aget_messages(ctx.resource_id, stored.thread_id, after_seq=stored.seq,
                                            limit=NEXT_SCAN + 1)
    for row in rows[:NEXT_SCAN]:
        chosen = _matching(message_parts(ctx.om.message_of(ctx.resource_id, row)), args)
        if chosen:
            return _call(args, row.id, chosen[0])
    if len(rows) > NEXT_SCAN:  # nothing matched nearby: page on (high detail shows the first match)
        return _call(args, rows[NEXT_SCAN].id, None)
    return None


def _describe_next(next_call: dict[str, Any] | None, parts: Sequence[Part], args: RecallInput, index: int) -> str:
    if next_call is None:
        which = " matching the filters" if args.part_type or args.tool_name else ""
        return f'detail="high" shows one part per call; this is the last part{which} in this thread.'
    rendered = ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in next_call.items())
    rest = [i for i in _matching(parts, args) if i > index]
    where = (f"{len(rest)} more part{'s' if len(rest) != 1 else ''} in this message: "
             + ", ".join(f"[p{i}]" for i in rest)) if rest else "next message"
    return f'detail="high" shows one part per call. Next: call recall with {rendered} ({where}).'


async def _show_part(
    ctx: RecallContext, args: RecallInput, budget: OutputBudget, stored: StoredMessage, parts: Sequence[Part],
    index: int,
) -> dict[str, Any]:
    """The fields shared by high detail and ``part_index``: one part in full and the continuation."""
    text = "\n".join(budget.fit([f"{_header(stored)}\n{high_detail(parts[index], index)}"]))
    next_call = await _next_part(ctx, args, stored, parts, index)
    hint = _describe_next(next_call, parts, args, index)
    if budget.truncated:
        hint += " The part was cut to fit the output budget (token_offset tokens not shown)."
    return {"messages": text, "count": 1, "message_id": stored.id, "part_index": index,
            "part_count": len(parts), "next_call": next_call, "hint": hint}


async def _part_mode(ctx: RecallContext, args: RecallInput, budget: OutputBudget) -> dict[str, Any]:
    if args.cursor is None:
        raise ToolException("part_index: needs cursor=<message id> (the message whose [pN] you want)")
    stored = await resolve_cursor(ctx, args.cursor)
    parts = message_parts(ctx.om.message_of(ctx.resource_id, stored))
    index = args.part_index if args.part_index is not None else 0
    if index < 0 or index >= len(parts):
        raise ToolException(
            f"part_index: message {stored.id} has {len(parts)} part(s) ([p0]..[p{max(len(parts) - 1, 0)}]); "
            f"got {index}"
        )
    shown = await _show_part(ctx, args, budget, stored, parts, index)
    older = index > 0 or (stored.seq > 1 and bool(await ctx.store.aget_messages(
        ctx.resource_id, stored.thread_id, before_seq=stored.seq, limit=1, descending=True)))
    result = _page_result(shown.pop("messages"), 1, cursor=stored.id, page=1, limit=1, detail="high",
                          thread=stored.thread_id, has_next=shown["next_call"] is not None, has_prev=older)
    result.update(shown)
    add_truncation(result, budget)
    return result


def _page_result(
    text: str, count: int, *, cursor: str | None, page: int, limit: int, detail: str, thread: str,
    has_next: bool, has_prev: bool,
) -> dict[str, Any]:
    """The reference page's messages-mode return fields, in its order (plus ``thread_id``)."""
    return {"messages": text, "count": count, "cursor": cursor, "page": page, "limit": limit, "detail": detail,
            "thread_id": thread, "has_next_page": has_next, "has_prev_page": has_prev}


async def messages_mode(ctx: RecallContext, args: RecallInput, budget: OutputBudget) -> dict[str, Any]:
    """``mode="messages"``: one page of a thread (or one part, with ``part_index`` or high detail)."""
    if args.part_index is not None:
        return await _part_mode(ctx, args, budget)
    page = 1 if not args.page else args.page
    limit = args.limit
    store = ctx.store
    cursor_row: StoredMessage | None = None
    if args.cursor is not None:
        cursor_row = await resolve_cursor(ctx, args.cursor)
        thread = cursor_row.thread_id
        if args.thread_id is not None and args.thread_id.strip().lower() != "current":
            explicit = await resolve_thread(ctx, args.thread_id)
            if explicit != thread:
                raise ToolException(
                    f"cursor: message {cursor_row.id} is not in thread {show_value(explicit)}; "
                    "drop thread_id or the cursor"
                )
    else:
        thread = await resolve_thread(ctx, args.thread_id)
    if cursor_row is not None:
        s = cursor_row.seq
        if page > 0:
            lo, hi = s + (page - 1) * limit, s + page * limit - 1
        else:
            k = -page
            lo, hi = s - k * limit + 1, s - (k - 1) * limit
    elif args.anchor == "start" and page > 0:
        lo, hi = 1 + (page - 1) * limit, page * limit
    else:  # anchor="end" (either sign), or a negative page: counted back from the newest message
        last = await store.alast_seq(ctx.resource_id, thread)
        k = abs(page)
        lo, hi = last - k * limit + 1, last - (k - 1) * limit
    rows: list[StoredMessage] = []
    if hi >= 1 and hi >= lo:
        rows = await store.aget_messages(ctx.resource_id, thread, after_seq=max(lo, 1) - 1, before_seq=hi + 1)
    older = await store.aget_messages(ctx.resource_id, thread, before_seq=max(lo, 1), limit=1, descending=True) \
        if lo > 1 else []
    newer = await store.aget_messages(ctx.resource_id, thread, after_seq=max(hi, 0), limit=1)
    if args.detail == "high":
        return await _high_page(ctx, args, budget, rows, thread=thread, cursor_row=cursor_row, page=page,
                                has_next=bool(newer), has_prev=bool(older))
    blocks: list[str] = []
    for row in rows:
        block = _render_message(ctx, row, args)
        if block is not None:
            blocks.append(block)
    kept = budget.fit(blocks)
    text = "\n\n".join(kept)
    if not rows:
        text = "(no messages on this page)" if (older or newer) else "(no messages in this thread yet)"
    elif not blocks:
        text = "(no parts on this page match the filters; try another page)"
    result = _page_result(text, len(kept), cursor=cursor_row.id if cursor_row is not None else None, page=page,
                          limit=limit, detail=args.detail, thread=thread, has_next=bool(newer),
                          has_prev=bool(older))
    if budget.truncated and len(kept) < len(blocks):
        resume = rows[min(len(kept), len(rows) - 1)].id if kept else rows[0].id
        result["hint"] = (f"Output was cut to fit the token budget; continue with cursor=\"{resume}\" "
                          "and a smaller limit, or part_index for one part.")
    add_truncation(result, budget)
    return result


async def _high_page(
    ctx: RecallContext, args: RecallInput, budget: OutputBudget, rows: Sequence[StoredMessage], *, thread: str,
    cursor_row: StoredMessage | None, page: int, has_next: bool, has_prev: bool,
) -> dict[str, Any]:
    """``detail="high"``: the first (matching) part of the first message in the page range, in full.

    ``has_next_page`` / ``has_prev_page`` still describe the page's range; ``next_call`` and
    ``hint`` name the next part to read (which may lie past the page)."""
    def result(text: str, count: int) -> dict[str, Any]:
        return _page_result(text, count, cursor=cursor_row.id if cursor_row is not None else None, page=page,
                            limit=args.limit, detail="high", thread=thread, has_next=has_next, has_prev=has_prev)

    for row in rows:
        parts = message_parts(ctx.om.message_of(ctx.resource_id, row))
        chosen = _matching(parts, args)
        if chosen:
            shown = await _show_part(ctx, args, budget, row, parts, chosen[0])
            out = result(shown.pop("messages"), 1)
            out.update(shown)
            add_truncation(out, budget)
            return out
    if not rows:
        text = "(no messages on this page)" if (has_next or has_prev) else "(no messages in this thread yet)"
        out = result(text, 0)
        out.update({"next_call": None, "hint": "No messages here; try another page."})
        return out
    next_call = await _next_part(ctx, args, rows[-1], [], 0)
    out = result("(no parts on this page match the filters)", 0)
    out["next_call"] = next_call
    out["hint"] = ("Next matching part: call recall with " + ", ".join(
        f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in next_call.items())
        if next_call is not None else "No part after this page matches the filters either.")
    return out


async def threads_mode(ctx: RecallContext, args: RecallInput, budget: OutputBudget) -> dict[str, Any]:
    """``mode="threads"``: one page of the user's threads, newest first, filtered by creation date."""
    if ctx.thread_only:
        raise ToolException('mode: "threads" is not available here (recall is limited to the current thread)')
    page = args.page or 0
    if page < 0:
        raise ToolException(f"page: threads pages are 0-based and cannot be negative (got {page})")
    before = parse_date(args.before, "before") if args.before is not None else None
    after = parse_date(args.after, "after") if args.after is not None else None
    if before is not None and after is not None and after >= before:
        raise ToolException("after: must be earlier than before")
    threads = await ctx.store.alist_threads(
        ctx.resource_id, before=before, after=after, offset=page * args.limit, limit=args.limit + 1
    )
    has_more = len(threads) > args.limit
    threads = threads[: args.limit]
    from ..branches import branch_root, is_branch

    lines = []
    for info in threads:
        title = shorten(info.title, 120) if info.title else "(untitled)"
        line = (f"- {title} (id: {info.thread_id}) created {utc_stamp(info.created_at)}, "
                f"updated {utc_stamp(info.updated_at)}")
        if is_branch(info.thread_id):  # a fork made by running the thread from an earlier checkpoint
            line += f", another branch of thread {branch_root(info.thread_id)}"
        if info.thread_id == ctx.thread_id:
            line += " ← current"
        lines.append(line)
    kept = budget.fit(lines)
    result: dict[str, Any] = {
        "threads": "\n".join(kept) if kept else "(no threads on this page)",
        "count": len(kept),
        "page": page,
        "has_more": has_more or len(kept) < len(lines),
    }
    add_truncation(result, budget)
    return result
