"""The ``recall`` tool: the agent pages back through the raw messages behind its observations.

Observation groups in the agent's context carry ``range="start_id:end_id"``; the agent passes
one of those ids as ``cursor`` to read the messages, lists the user's other conversations
(``mode="threads"``), and searches them (``mode="search"``): by keyword through the store's own
full-text index (no embedder needed), and also by meaning with ``retrieval.vector``, the two
rankings combined by reciprocal rank fusion.

Result shape (documented choice): a JSON-serialisable dict with **snake_case** keys, the
reference page's return fields one to one (``has_next_page``, ``token_offset``, ...), because
the arguments the model passes are snake_case too and one convention per tool is easier for a
model to follow. LangChain serialises the dict to JSON for the ``ToolMessage``.

Isolation: every read goes through the store with the bound ``resource_id``; ids the model
passes are only ever looked up inside that resource, and search hits are re-checked against
the store before they are shown. Bad arguments become a clear tool error (a ``ToolException``
turned into an error ``ToolMessage`` by ``handle_tool_error``), never an exception in the
agent loop and never another user's data.

Paging (documented choice where the reference page is silent): pages are message ranges by
position in the thread. With a cursor, ``page=1`` starts at the cursor and ``page=-1`` ends at
it. Without one, positive pages count from the ``anchor`` (``"end"``: page 1 is the newest) and
negative pages count back from the newest message whatever the anchor. ``has_next_page`` /
``has_prev_page`` say whether newer / older messages exist outside the page. ``detail="high"``
shows a single part per call, the first (filter-matching) part of the first message in the
page's range, with ``next_call`` (the exact arguments for the next part, which may lie past
the page: ``{"cursor": id, "part_index": n}``) and a ``hint``; ``part_index`` calls carry the
same continuation.

Semantic search: ``retrieval={"vector": True, "embeddings": emb}`` keeps the vectors in OM's own
store (``vector_index.StoreVectorIndex``: they survive restarts); ``"vector_store": vs`` uses a
LangChain ``VectorStore`` of the user's instead.

Binding: ``om.recall_tool(thread_id=..., resource_id=...)`` binds a conversation; without
ids the tool reads ``thread_id`` / ``resource_id`` (or ``user_id``) from the run's
``config["configurable"]`` at call time, so one static tool object serves every thread of a
``create_agent`` or graph.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import unicodedata
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Literal, cast

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .messages import TIMESTAMP_KEY
from .run_ids import ids_from_run_config
from .store.base import InvalidStoreInput, OMRecord, OMStore, StoredMessage

if TYPE_CHECKING:
    from .host import MemoryHost
    from .vector_index import StoreVectorIndex

logger = logging.getLogger("langchain_om")

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_PAGE = 100_000
MAX_SEARCH_RESULTS = 50
DEFAULT_TOKEN_BUDGET = 2_000
LOW_DETAIL_CHARS = 200
MAX_ID_CHARS = 512
MAX_QUERY_CHARS = 2_000

PartType = Literal["text", "tool-call", "tool-result", "reasoning", "image", "file"]

_RANGE = re.compile(r"^\s*(?:_?range\s*[:=]\s*)?[`'\"]?([^\s:`'\"]+)\s*:\s*([^\s:`'\"]+)[`'\"]?\s*$", re.IGNORECASE)


class RecallInput(BaseModel):
    """Arguments of the ``recall`` tool (every parameter of the reference page, snake_case)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["messages", "threads", "search"] = Field(
        "messages",
        description='"messages" (default) pages through message history; "threads" lists the user\'s '
        'conversations; "search" finds messages by the words of query (and by meaning when embeddings '
        "are configured).",
    )
    query: str | None = Field(None, description='Search text for mode="search".')
    cursor: str | None = Field(
        None,
        description='A message id to page from. Take the start or end id out of an observation group\'s '
        'range="startId:endId" — pass one id, never the whole range.',
    )
    thread_id: str | None = Field(
        None, description='Read another thread by id (from mode="threads"); "current" is the active thread.'
    )
    anchor: Literal["start", "end"] = Field(
        "start", description="Without a cursor: page from the thread's oldest (start) or newest (end) message."
    )
    page: int | None = Field(
        None,
        description="Messages (default 1; 0 counts as 1): with a cursor, positive pages read forward from it "
        "(page=1 starts at the cursor), negative pages backward (page=-1 ends at the cursor). Without a "
        'cursor, positive pages count from the anchor (anchor="start": page=2 is newer than page=1; '
        'anchor="end": page=1 is the newest messages, page=2 older) and negative pages count back from '
        "the newest messages (page=-1 is the newest page) whatever the anchor. Threads: 0-based page "
        "number (default 0).",
    )
    limit: int = Field(DEFAULT_LIMIT, description=f"Items per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).")
    detail: Literal["low", "high"] = Field(
        "low",
        description='"low": truncated text and tool names with part indexes [p0], [p1]; "high": full content '
        "including tool arguments and results, ONE part per call (the first part on the page) with "
        "next_call naming the cursor and part_index to ask for next.",
    )
    part_type: PartType | None = Field(None, description="Only show parts of this type (messages mode).")
    tool_name: str | None = Field(None, description="Only show tool calls/results of this tool (messages mode).")
    part_index: int | None = Field(
        None, description="With cursor: show just this part ([pN]) of the cursor message at full detail "
        "(next_call names the part after it)."
    )
    before: str | None = Field(None, description='Threads mode: created before this ISO date ("2026-03-15").')
    after: str | None = Field(None, description='Threads mode: created after this ISO date ("2026-03-01").')


DESCRIPTION = (
    "Recall raw conversation history behind your observations. Observation groups show "
    'range="startId:endId": pass ONE of those ids as cursor to read the original messages '
    "(page=1 reads forward from it, page=-1 backward). mode=\"threads\" lists the user's "
    "conversations; thread_id reads one of them. detail=\"high\" or part_index shows full content, one "
    "part per call (next_call gives the arguments for the next part)."
)


# ----------------------------------------------------------------------------- parts


@dataclass
class Part:
    """One part of a message as recall shows it."""

    kind: str
    text: str
    tool_name: str | None = None
    label: str = ""


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


def _block_name(block: Mapping[str, Any], fallback: str) -> str:
    for key in ("filename", "name", "file_name", "title"):
        value = block.get(key)
        if isinstance(value, str) and value:
            return value
    meta = block.get("metadata") or block.get("extras")
    if isinstance(meta, Mapping):
        for key in ("filename", "name"):
            value = meta.get(key)
            if isinstance(value, str) and value:
                return value
    url = block.get("url") or block.get("image_url")
    if isinstance(url, Mapping):
        url = url.get("url")
    if isinstance(url, str) and not url.startswith("data:"):
        tail = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if tail:
            return tail
    return fallback


def _content_parts(content: str | list[Any], *, as_kind: str = "text") -> list[Part]:
    if isinstance(content, str):
        return [Part(as_kind, content)] if content.strip() else []
    parts: list[Part] = []
    for block in content:
        if isinstance(block, str):
            if block.strip():
                parts.append(Part(as_kind, block))
            continue
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind in ("text", "output_text", "input_text"):
            text = str(block.get("text") or "")
            if text.strip():
                parts.append(Part(as_kind, text))
        elif kind in ("reasoning", "thinking"):
            text = str(block.get("reasoning") or block.get("thinking") or block.get("text") or "")
            if text.strip():
                parts.append(Part("reasoning", text))
        elif kind in ("image", "image_url", "input_image") or (
            kind in ("file", "document") and str(block.get("mime_type", "")).startswith("image/")
        ):
            name = _block_name(block, "image")
            parts.append(Part("image", f"[image: {name}]", label=name))
        elif kind in ("file", "document", "input_file", "audio", "video"):
            name = _block_name(block, "file")
            mime = block.get("mime_type") or block.get("media_type") or "application/octet-stream"
            parts.append(Part("file", f"[file: {name} ({mime})]", label=name))
        # tool_use / function-call echoes duplicate message.tool_calls and are skipped
    return parts


def message_parts(message: BaseMessage) -> list[Part]:
    """The parts of a message in a stable order; ``[pN]`` indexes refer to this list."""
    if isinstance(message, ToolMessage):
        name = message.name or "tool"
        inner = _content_parts(message.content, as_kind="tool-result")
        parts = [Part("tool-result", p.text, tool_name=name) if p.kind == "tool-result" else p for p in inner]
        if not any(p.kind == "tool-result" for p in parts):
            parts.insert(0, Part("tool-result", "(empty)", tool_name=name))
        return parts
    parts = []
    if isinstance(message, AIMessage):
        reasoning = message.additional_kwargs.get("reasoning_content")
        if isinstance(reasoning, str) and reasoning.strip():
            parts.append(Part("reasoning", reasoning))
    parts.extend(_content_parts(message.content))
    if isinstance(message, AIMessage):
        for call in message.tool_calls:
            parts.append(Part("tool-call", f"{call['name']}({_json(call.get('args', {}))})", tool_name=call["name"]))
    return parts


def _role(stored: StoredMessage) -> str:
    if stored.kind == "temporal-marker":
        return "time-gap"
    return {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}.get(
        str(stored.data.get("type")), str(stored.data.get("type"))
    )


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _low(part: Part, index: int) -> str:
    if part.kind == "tool-call":
        return f"[p{index}] tool-call {part.tool_name}"
    if part.kind == "tool-result":
        return f"[p{index}] tool-result {part.tool_name}: {_short(part.text, LOW_DETAIL_CHARS // 2)}"
    if part.kind == "reasoning":
        return f"[p{index}] reasoning ({len(part.text)} chars)"
    if part.kind in ("image", "file"):
        return f"[p{index}] {part.text}"
    return f"[p{index}] {_short(part.text, LOW_DETAIL_CHARS)}"


def _high(part: Part, index: int) -> str:
    if part.kind == "tool-call":
        return f"[p{index}] tool-call {part.text}"
    if part.kind == "tool-result":
        return f"[p{index}] tool-result {part.tool_name}:\n{part.text}"
    if part.kind == "reasoning":
        return f"[p{index}] reasoning:\n{part.text}"
    return f"[p{index}] {part.kind}:\n{part.text}" if part.kind == "text" else f"[p{index}] {part.text}"


def _stamp(moment: datetime) -> str:
    utc = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return utc.strftime("%Y-%m-%d %H:%M UTC")


# ----------------------------------------------------------------------------- helpers


class _Ctx:
    """Who is calling: the bound resource and current thread."""

    def __init__(self, om: MemoryHost, resource_id: str, thread_id: str) -> None:
        self.om = om
        self.resource_id = resource_id
        self.thread_id = thread_id
        self.store: OMStore = om.store
        """The store as seen from this thread: on a branch, its history reads as one thread."""

    async def aprepare(self) -> None:
        from .branches import alineage_view

        self.store = cast("OMStore", await alineage_view(self.om, self.resource_id, self.thread_id))

    @property
    def thread_only(self) -> bool:
        retrieval = self.om.config.retrieval
        return retrieval is not None and retrieval.scope == "thread"


def _show(value: str, limit: int = 80) -> str:
    """A model-supplied value, made safe to echo (bounded, control characters escaped)."""
    clean = "".join(ch if unicodedata.category(ch)[0] != "C" else repr(ch)[1:-1] for ch in value[:limit])
    return repr(clean + ("…" if len(value) > limit else ""))


def _check_text(value: str, field: str, max_len: int = MAX_ID_CHARS) -> str:
    stripped = value.strip()
    if not stripped:
        raise ToolException(f"{field}: must not be empty")
    if len(stripped) > max_len:
        raise ToolException(f"{field}: too long ({len(stripped)} characters, at most {max_len})")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in stripped):
        raise ToolException(f"{field}: contains control characters; pass the id exactly as shown")
    return stripped


def parse_date(value: str, field: str) -> datetime:
    """ISO 8601 date or datetime; naive values are UTC."""
    text = _check_text(value, field, 64)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ToolException(
            f"{field}: {_show(text)} is not an ISO 8601 date (e.g. \"2026-03-15\" or \"2026-03-10T00:00:00Z\")"
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    try:
        moment.astimezone(timezone.utc)
    except OverflowError:
        raise ToolException(
            f"{field}: {_show(text)} is outside the calendar (years 1 to 9999 in UTC); pass a date inside it"
        ) from None
    return moment


def _range_hint(cursor: str) -> str | None:
    match = _RANGE.match(cursor)
    if not match:
        return None
    start, end = match.group(1), match.group(2)
    return (
        f"cursor: pass ONE message id, not a range. From range \"{_short(start, 60)}:{_short(end, 60)}\" use "
        f"cursor=\"{_short(start, 60)}\" to read forward from the start (page=1), or "
        f"cursor=\"{_short(end, 60)}\" with page=-1 to read backward from the end."
    )


async def _resolve_thread(ctx: _Ctx, thread_id: str | None) -> str:
    """The thread to read: current, a thread of this resource by id, or by its obscured label."""
    if thread_id is None or thread_id.strip().lower() == "current":
        return ctx.thread_id
    wanted = _check_text(thread_id, "thread_id")
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
        from .store.base import all_thread_ids

        for candidate in await all_thread_ids(ctx.om.store, ctx.resource_id):
            if ctx.om.thread_label(candidate) == wanted:
                return candidate
    raise ToolException(
        f"thread_id: no thread {_show(wanted)} for this user. Use mode=\"threads\" to list thread ids, "
        'or thread_id="current".'
    )


async def _resolve_cursor(ctx: _Ctx, cursor: str) -> StoredMessage:
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
                raise ToolException(f"cursor: no message {_show(text)} in this thread")
            return found
    if hint is not None:
        raise ToolException(hint)
    _check_text(text, "cursor")
    raise ToolException(
        f"cursor: no message {_show(text)} for this user. Use a message id from an observation group's "
        "range (start or end id) or from a previous recall result."
    )


# ----------------------------------------------------------------------------- budget


@dataclass
class _Budget:
    counter: Any
    limit: int
    used: int = 0
    dropped: int = 0
    truncated: bool = False

    def fit(self, blocks: Sequence[str]) -> list[str]:
        """Keep whole blocks while they fit; cut the first one that does not (if nothing fits yet)."""
        kept: list[str] = []
        for index, block in enumerate(blocks):
            tokens = int(self.counter.count_text(block))
            if self.used + tokens <= self.limit:
                kept.append(block)
                self.used += tokens
                continue
            self.truncated = True
            room = self.limit - self.used
            if not kept and room > 0:
                chars = max(1, int(len(block) * room / max(tokens, 1)))
                cut = block[:chars]
                while chars > 1 and int(self.counter.count_text(cut)) > room:
                    chars = int(chars * 0.9)
                    cut = block[:chars]
                kept.append(cut + " …[truncated]")
                self.used += int(self.counter.count_text(cut))
                self.dropped += tokens - int(self.counter.count_text(cut))
            else:
                self.dropped += tokens
            self.dropped += sum(int(self.counter.count_text(rest)) for rest in blocks[index + 1:])
            break
        return kept


# ----------------------------------------------------------------------------- modes


def _matching(parts: Sequence[Part], args: RecallInput) -> list[int]:
    """Indexes of the parts that pass the ``part_type`` / ``tool_name`` filters."""
    return [
        i for i, p in enumerate(parts)
        if (args.part_type is None or p.kind == args.part_type)
        and (args.tool_name is None or (p.kind in ("tool-call", "tool-result") and p.tool_name == args.tool_name))
    ]


def _header(stored: StoredMessage) -> str:
    return f"--- message {stored.id} · {_role(stored)} · {message_stamp(stored)}"


def message_stamp(stored: StoredMessage) -> str:
    """When a message was written, on the clock of its own timestamp: the Observer dates it the
    same way, so a message stamped 19:05-05:00 is ``2026-03-02 19:05 UTC-05:00`` both in the
    observation log (``Date: 2026-03-02``, ``(19:05)``) and here. Messages without an offset: UTC."""
    moment = stored.created_at if stored.created_at.tzinfo else stored.created_at.replace(tzinfo=timezone.utc)
    data = stored.data.get("data") if isinstance(stored.data, dict) else None
    metadata = data.get("response_metadata") if isinstance(data, dict) else None
    raw = metadata.get(TIMESTAMP_KEY) if isinstance(metadata, dict) else None
    if isinstance(raw, str):
        try:
            own: datetime | None = datetime.fromisoformat(raw.strip().replace("Z", "+00:00"))
        except ValueError:
            own = None
        if own is not None and own.utcoffset() and abs((own - moment).total_seconds()) <= 1:
            local = moment.astimezone(own.tzinfo)
            offset = local.strftime("%z")
            return f"{local.strftime('%Y-%m-%d %H:%M')} UTC{offset[:3]}:{offset[3:5]}"
    return _stamp(moment)


def _render_message(ctx: _Ctx, stored: StoredMessage, args: RecallInput) -> str | None:
    """Low-detail text block for one message under the filters (None when no part matches)."""
    parts = message_parts(ctx.om.message_of(ctx.resource_id, stored))
    chosen = _matching(parts, args)
    if not chosen and (args.part_type or args.tool_name):
        return None
    if not chosen:
        return f"{_header(stored)}\n(no content)"
    return f"{_header(stored)}\n" + "\n".join(_low(parts[i], i) for i in chosen)


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
    ctx: _Ctx, args: RecallInput, stored: StoredMessage, parts: Sequence[Part], index: int
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
    rendered = ", ".join(f"{key}={json.dumps(value)}" for key, value in next_call.items())
    rest = [i for i in _matching(parts, args) if i > index]
    where = (f"{len(rest)} more part{'s' if len(rest) != 1 else ''} in this message: "
             + ", ".join(f"[p{i}]" for i in rest)) if rest else "next message"
    return f'detail="high" shows one part per call. Next: call recall with {rendered} ({where}).'


async def _show_part(
    ctx: _Ctx, args: RecallInput, budget: _Budget, stored: StoredMessage, parts: Sequence[Part], index: int
) -> dict[str, Any]:
    """The fields shared by high detail and ``part_index``: one part in full and the continuation."""
    text = "\n".join(budget.fit([f"{_header(stored)}\n{_high(parts[index], index)}"]))
    next_call = await _next_part(ctx, args, stored, parts, index)
    hint = _describe_next(next_call, parts, args, index)
    if budget.truncated:
        hint += " The part was cut to fit the output budget (token_offset tokens not shown)."
    return {"messages": text, "count": 1, "message_id": stored.id, "part_index": index,
            "part_count": len(parts), "next_call": next_call, "hint": hint}


async def _part_mode(ctx: _Ctx, args: RecallInput, budget: _Budget) -> dict[str, Any]:
    if args.cursor is None:
        raise ToolException("part_index: needs cursor=<message id> (the message whose [pN] you want)")
    stored = await _resolve_cursor(ctx, args.cursor)
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
    _add_truncation(result, budget)
    return result


def _page_result(
    text: str, count: int, *, cursor: str | None, page: int, limit: int, detail: str, thread: str,
    has_next: bool, has_prev: bool,
) -> dict[str, Any]:
    """The reference page's messages-mode return fields, in its order (plus ``thread_id``)."""
    return {"messages": text, "count": count, "cursor": cursor, "page": page, "limit": limit, "detail": detail,
            "thread_id": thread, "has_next_page": has_next, "has_prev_page": has_prev}


def _add_truncation(result: dict[str, Any], budget: _Budget) -> None:
    if budget.truncated:
        result["truncated"] = True
        result["token_offset"] = budget.dropped


async def _messages_mode(ctx: _Ctx, args: RecallInput, budget: _Budget) -> dict[str, Any]:
    if args.part_index is not None:
        return await _part_mode(ctx, args, budget)
    page = 1 if not args.page else args.page
    limit = args.limit
    store = ctx.store
    cursor_row: StoredMessage | None = None
    if args.cursor is not None:
        cursor_row = await _resolve_cursor(ctx, args.cursor)
        thread = cursor_row.thread_id
        if args.thread_id is not None and args.thread_id.strip().lower() != "current":
            explicit = await _resolve_thread(ctx, args.thread_id)
            if explicit != thread:
                raise ToolException(
                    f"cursor: message {cursor_row.id} is not in thread {_show(explicit)}; drop thread_id or the cursor"
                )
    else:
        thread = await _resolve_thread(ctx, args.thread_id)
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
    _add_truncation(result, budget)
    return result


async def _high_page(
    ctx: _Ctx, args: RecallInput, budget: _Budget, rows: Sequence[StoredMessage], *, thread: str,
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
            _add_truncation(out, budget)
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
        f"{key}={json.dumps(value)}" for key, value in next_call.items())
        if next_call is not None else "No part after this page matches the filters either.")
    return out


async def _threads_mode(ctx: _Ctx, args: RecallInput, budget: _Budget) -> dict[str, Any]:
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
    from .branches import branch_root, is_branch

    lines = []
    for info in threads:
        title = _short(info.title, 120) if info.title else "(untitled)"
        line = (f"- {title} (id: {info.thread_id}) created {_stamp(info.created_at)}, "
                f"updated {_stamp(info.updated_at)}")
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
    _add_truncation(result, budget)
    return result


def _vector_filter(store: Any, resource_id: str) -> Any:
    from langchain_core.vectorstores import InMemoryVectorStore

    if isinstance(store, InMemoryVectorStore):
        return lambda doc: doc.metadata.get("resource_id") == resource_id
    return {"resource_id": resource_id}


RRF_K = 60
"""Reciprocal rank fusion constant: a message ranked r-th in a list adds 1 / (RRF_K + r)."""


def keyword_search_available(om: MemoryHost) -> bool:
    """Whether the store has its own keyword index (every bundled store does; SQLite needs FTS5)."""
    return bool(getattr(om.store, "keyword_search_available", False))


def semantic_search_available(om: MemoryHost) -> bool:
    retrieval = om.config.retrieval
    return retrieval is not None and retrieval.vector and (
        retrieval.vector_store is not None or _INDEXES.get(om) is not None
    )


HitKey = tuple[str, str]
"""``(thread_id, message_id)`` of a search hit."""


async def _keyword_ranking(
    ctx: _Ctx, query: str, k: int, found: dict[HitKey, StoredMessage]
) -> list[tuple[HitKey, float]]:
    """Messages by the store's full-text rank (best first) with their scores; the rows go to ``found``."""
    if not keyword_search_available(ctx.om):
        return []
    thread = ctx.thread_id if ctx.thread_only else None
    hits = await ctx.om.store.asearch_messages(ctx.resource_id, query, thread_id=thread, limit=k)
    for hit in hits:
        found[(hit.message.thread_id, hit.message.id)] = hit.message
    return [((hit.message.thread_id, hit.message.id), hit.score) for hit in hits]


async def _semantic_ranking(ctx: _Ctx, query: str, k: int) -> list[tuple[HitKey, float]]:
    """Message ids by embedding similarity (best first): OM's stored index, or the user's vector store."""
    retrieval = ctx.om.config.retrieval
    if retrieval is None or not retrieval.vector:
        return []
    index = _INDEXES.get(ctx.om)
    if index is not None:
        thread = ctx.thread_id if ctx.thread_only else None
        hits = await index.asearch(ctx.resource_id, query, k=k, thread_id=thread)
        return [((hit.thread_id, hit.message_id), hit.score) for hit in hits]
    vs = retrieval.vector_store
    if vs is None:
        return []
    try:
        hits = await vs.asimilarity_search_with_score(query, k=k * 3, filter=_vector_filter(vs, ctx.resource_id))
    except (TypeError, NotImplementedError, ValueError):
        hits = await vs.asimilarity_search_with_score(query, k=k * 10)
    ranking: list[tuple[HitKey, float]] = []
    for doc, score in hits:
        meta = doc.metadata or {}
        message_id, thread_id = meta.get("message_id"), meta.get("thread_id")
        if meta.get("resource_id") == ctx.resource_id and isinstance(message_id, str) and isinstance(thread_id, str):
            ranking.append(((thread_id, message_id), float(score)))  # re-checked against the store before shown
    return ranking


def fuse_rankings(rankings: Sequence[Sequence[tuple[HitKey, float]]]) -> list[tuple[HitKey, float]]:
    """One ranking from several: a list's own scores when it is the only one that found
    anything, else reciprocal rank fusion (scores of different methods are not comparable)."""
    found = [ranking for ranking in rankings if ranking]
    if len(found) == 1:
        return list({key: score for key, score in reversed(found[0])}.items())[::-1]  # first of duplicates
    fused: dict[HitKey, float] = {}
    for ranking in found:
        seen: set[HitKey] = set()
        for rank, (key, _) in enumerate(ranking, start=1):
            if key not in seen:
                seen.add(key)
                fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)


async def _search_mode(ctx: _Ctx, args: RecallInput, budget: _Budget) -> dict[str, Any]:
    keyword, semantic = keyword_search_available(ctx.om), semantic_search_available(ctx.om)
    if not keyword and not semantic:
        raise ToolException(
            'mode: "search" is not available here (no keyword index in this store and no embeddings); '
            'use mode="threads" and mode="messages" instead'
        )
    if args.query is None:
        raise ToolException('query: required for mode="search"')
    query = _check_text(args.query, "query", MAX_QUERY_CHARS)
    retrieval = ctx.om.config.retrieval
    default = retrieval.search_limit if retrieval is not None else DEFAULT_LIMIT
    k = min(args.limit if args.limit != DEFAULT_LIMIT else default, MAX_SEARCH_RESULTS)
    found: dict[HitKey, StoredMessage] = {}
    keyword_hits, semantic_hits = await asyncio.gather(_keyword_ranking(ctx, query, k * 2, found),
                                                       _semantic_ranking(ctx, query, k * 2),
                                                       return_exceptions=True)
    if isinstance(keyword_hits, BaseException):
        raise keyword_hits
    if isinstance(semantic_hits, BaseException):
        if not keyword or not isinstance(semantic_hits, Exception):
            raise semantic_hits
        # the embedder (often a remote API) failed: the keyword ranking still answers
        logger.warning("langchain-om recall: semantic search failed, keyword results only: %s", semantic_hits)
        semantic_hits = []
    grouped: dict[str, list[tuple[float, StoredMessage]]] = {}
    total = 0
    for key, score in fuse_rankings([keyword_hits, semantic_hits]):
        stored = found.get(key) or await ctx.store.aget_message(ctx.resource_id, key[1])
        if stored is None or stored.thread_id != key[0] or stored.kind != "message":
            continue  # deleted, or not this resource's: never shown
        if ctx.thread_only and stored.thread_id != ctx.thread_id:
            continue
        grouped.setdefault(stored.thread_id, []).append((score, stored))
        total += 1
        if total >= k:
            break
    blocks: list[str] = []
    for thread_id, items in grouped.items():
        info = await ctx.store.aget_thread(ctx.resource_id, thread_id)
        title = _short(info.title, 120) if info is not None and info.title else "(untitled)"
        head = f"Thread {title} (id: {thread_id})" + (" ← current" if thread_id == ctx.thread_id else "")
        lines = [head]
        for score, stored in items:
            parts = message_parts(ctx.om.message_of(ctx.resource_id, stored))
            preview = _short(" ".join(p.text for p in parts if p.kind in ("text", "tool-result")), 160)
            lines.append(f"  [score {score:.3f}] {_role(stored)} · {message_stamp(stored)}: {preview}\n"
                         f"    cursor: {stored.id}")
        blocks.append("\n".join(lines))
    kept = budget.fit(blocks)
    result: dict[str, Any] = {"results": "\n\n".join(kept) if kept else "(no matching messages)", "count": total}
    _add_truncation(result, budget)
    return result


# ----------------------------------------------------------------------------- the tool


def _tool_error(error: ToolException) -> str:
    return f"recall error: {error}"


def _validation_error(error: Any) -> str:
    problems: list[str] = []
    errors = error.errors() if hasattr(error, "errors") else []
    for item in errors[:5]:
        loc = ".".join(str(part) for part in item.get("loc", ())) or "arguments"
        problems.append(f"{loc}: {item.get('msg', 'invalid value')}")
    return "recall error: invalid arguments — " + ("; ".join(problems) or "could not read the arguments")


class RecallTool(BaseTool):
    """The ``recall`` tool bound to one ``ObservationalMemory`` (and optionally one conversation)."""

    name: str = "recall"
    description: str = DESCRIPTION
    args_schema: type[BaseModel] = RecallInput
    memory: Any = Field(exclude=True)
    """The ``MemoryHost`` whose store is read."""
    bound_thread_id: str | None = None
    bound_resource_id: str | None = None
    max_output_tokens: int = DEFAULT_TOKEN_BUDGET
    handle_tool_error: Any = _tool_error
    handle_validation_error: Any = _validation_error

    def _context(self, config: RunnableConfig | None) -> _Ctx:
        from .host import MemoryHost

        om = self.memory
        if not isinstance(om, MemoryHost):
            raise ToolException("recall is not connected to an ObservationalMemory")
        config_thread, config_resource = ids_from_run_config(config)
        thread = self.bound_thread_id or config_thread
        resource = self.bound_resource_id or (config_resource if self.bound_thread_id is None else None)
        if not thread:
            raise ToolException(
                "recall needs the current thread: bind it with om.recall_tool(thread_id=...) or run with "
                'config={"configurable": {"thread_id": ...}}'
            )
        if self.bound_thread_id is None:
            from .branches import active_branch

            # the run's branch of the thread (a run from an earlier checkpoint reads that branch)
            thread, resource = active_branch(om, thread, resource)
        try:
            resolved = om.resolve_resource(thread, resource)
        except ValueError as exc:
            raise ToolException(str(exc)) from None
        return _Ctx(om, resolved, thread)

    async def arecall(self, args: RecallInput, config: RunnableConfig | None = None) -> dict[str, Any]:
        """Run one recall (already-validated arguments). Raises ``ToolException`` on bad input."""
        ctx = self._context(config)
        await ctx.om.aensure_setup()
        await ctx.aprepare()
        if args.limit < 1:
            raise ToolException(f"limit: must be a positive number (got {args.limit})")
        if args.page is not None and abs(args.page) > MAX_PAGE:
            raise ToolException(f"page: must be between -{MAX_PAGE} and {MAX_PAGE} (got {args.page})")
        if args.part_index is not None and not 0 <= args.part_index <= 10_000:
            raise ToolException(f"part_index: must be between 0 and 10000 (got {args.part_index})")
        if args.tool_name is not None:
            _check_text(args.tool_name, "tool_name", 256)
        capped = args.model_copy(update={"limit": min(args.limit, MAX_LIMIT)})
        budget = _Budget(ctx.om.counter, self.max_output_tokens)
        try:
            if capped.mode == "threads":
                return await _threads_mode(ctx, capped, budget)
            if capped.mode == "search":
                return await _search_mode(ctx, capped, budget)
            return await _messages_mode(ctx, capped, budget)
        except ToolException:
            raise
        except InvalidStoreInput as exc:
            raise ToolException(str(exc)) from None
        except Exception as exc:  # a storage or vector-store failure: report, never crash the agent loop
            logger.warning("langchain-om recall failed: %s", exc, exc_info=True)
            raise ToolException(f"recall failed ({type(exc).__name__}); try again or with other arguments") from None

    async def _arun(
        self,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        try:
            args = RecallInput(**kwargs)
        except ValidationError as exc:
            raise ToolException(_validation_error(exc).removeprefix("recall error: ")) from None
        return await self.arecall(args, config)

    def _run(
        self,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        try:
            args = RecallInput(**kwargs)
        except ValidationError as exc:
            raise ToolException(_validation_error(exc).removeprefix("recall error: ")) from None
        result: dict[str, Any] = self.memory.run_sync(self.arecall(args, config), twin="recall_tool.ainvoke(...)")
        return result


def make_recall_tool(
    om: MemoryHost, *, thread_id: str | None = None, resource_id: str | None = None,
    max_output_tokens: int = DEFAULT_TOKEN_BUDGET,
) -> RecallTool:
    """Build the tool (``om.recall_tool`` calls this)."""
    if om.config.retrieval is None:
        raise ValueError("retrieval: the recall tool needs retrieval=True (or a RetrievalConfig)")
    if max_output_tokens < 100:
        raise ValueError("max_output_tokens: must be at least 100")
    return RecallTool(memory=om, bound_thread_id=thread_id, bound_resource_id=resource_id,
                      max_output_tokens=max_output_tokens)


# ----------------------------------------------------------------------------- instructions


def _search_instruction(om: MemoryHost) -> str:
    """The sentence on mode="search", matching what this engine can actually search with."""
    keyword, semantic = keyword_search_available(om), semantic_search_available(om)
    where = ("this conversation" if om.config.retrieval is not None and om.config.retrieval.scope == "thread"
             else "all of the user's conversations")
    if keyword and semantic:
        how = "finds messages that contain its words or mean something similar"
    elif keyword:
        how = "finds messages containing its words (exact words and their variants, not synonyms)"
    elif semantic:
        how = "finds messages with a similar meaning"
    else:
        return ""
    fallback = ('fall back to mode="threads" and browse with mode="messages"' if where.startswith("all")
                else 'browse with mode="messages"')
    return (f'mode="search" with query="..." {how} in {where} and returns a cursor per hit; open a hit '
            f"with cursor=<id>. If the results look unrelated, try other words or {fallback}.")


def retrieval_instructions(om: MemoryHost) -> str:
    """Scope-aware usage guidance for the agent (search is only mentioned when it exists)."""
    retrieval = om.config.retrieval
    if retrieval is None:
        return ""
    lines = [
        "<recall-instructions>",
        "You have a `recall` tool for the raw messages behind your memory. Each observation group "
        'shows range="startId:endId". To check exact wording, numbers or details, call recall with '
        'cursor set to ONE id of that range: the start id with page=1 reads forward, the end id with '
        "page=-1 reads backward. Results list parts as [p0], [p1]; use detail=\"high\" or "
        "part_index=N with the same cursor to see a part in full (tool arguments and results), one "
        "part per call: the result's next_call holds the arguments for the next part.",
    ]
    if retrieval.scope == "thread":
        lines.append("Recall reads this conversation only. Without a cursor it pages from the start "
                     '(anchor="start") or the newest messages (anchor="end").')
    else:
        lines.append('mode="threads" lists the user\'s other conversations (title, id, dates; filter with '
                     'before/after ISO dates); read one with thread_id=<id> (thread_id="current" is this '
                     "one). Use this to answer questions about earlier conversations.")
    search = _search_instruction(om)
    if search:
        lines.append(search)
    lines.append("Recall only when your observations are not enough; do not mention the tool to the user.")
    if retrieval.instructions:
        lines.append(retrieval.instructions.strip())
    lines.append("</recall-instructions>")
    return "\n".join(lines)


async def retrieval_section(
    om: MemoryHost, record: OMRecord, resource_id: str, thread_id: str
) -> str | None:
    """Section provider: always in resource scope (other threads exist from the first message);
    in thread scope only once something was observed (before that, everything is in context)."""
    retrieval = om.config.retrieval
    if retrieval is None:
        return None
    if retrieval.scope == "thread" and not record.groups:
        return None
    return retrieval_instructions(om)


# ----------------------------------------------------------------------------- vector indexing


def _index_text(om: MemoryHost, resource_id: str, stored: StoredMessage) -> str:
    parts = message_parts(om.message_of(resource_id, stored))
    return "\n".join(p.text for p in parts if p.kind in ("text", "tool-result")).strip()


def vector_document_id(resource_id: str, thread_id: str, message_id: str) -> str:
    return "om_" + hashlib.sha256(f"{resource_id}\x1f{thread_id}\x1f{message_id}".encode()).hexdigest()[:40]


async def index_messages(
    om: MemoryHost, resource_id: str, thread_id: str, rows: Sequence[StoredMessage]
) -> None:
    """Embed newly stored messages into OM's stored index or the user's vector store (failures
    are logged, never raised: the messages are stored and keyword search finds them anyway)."""
    retrieval = om.config.retrieval
    if retrieval is None or not retrieval.vector:
        return
    index = _INDEXES.get(om)
    if index is not None:
        texts = [(row.id, text) for row in rows
                 if row.kind == "message" and (text := _index_text(om, resource_id, row))]
        try:
            await index.aadd(resource_id, thread_id, texts)
        except Exception as exc:
            logger.warning("langchain-om: embedding %d message(s) for recall search failed: %s", len(texts), exc)
        return
    if retrieval.vector_store is None:
        return
    from langchain_core.documents import Document

    docs: list[Document] = []
    ids: list[str] = []
    for row in rows:
        if row.kind != "message":
            continue
        text = _index_text(om, resource_id, row)
        if not text:
            continue
        ids.append(vector_document_id(resource_id, thread_id, row.id))
        docs.append(Document(page_content=text, metadata={
            "resource_id": resource_id, "thread_id": thread_id, "message_id": row.id,
            "role": _role(row), "created_at": row.created_at.isoformat(),
        }))
    if not docs:
        return
    try:
        await retrieval.vector_store.aadd_documents(docs, ids=ids)
    except Exception as exc:
        logger.warning("langchain-om: indexing %d message(s) for recall search failed: %s", len(docs), exc)


_INDEXES: weakref.WeakKeyDictionary[MemoryHost, StoreVectorIndex] = weakref.WeakKeyDictionary()
"""The stored-embeddings index of each engine built with ``embeddings`` and no ``vector_store``."""


def install_retrieval(om: MemoryHost) -> None:
    """Wire retrieval into an engine: the instructions section and vector indexing on store.

    With ``vector=True`` and ``embeddings`` but no ``vector_store``, the vectors are kept in
    OM's own store (``StoreVectorIndex``): they survive restarts and are shared by every worker
    on the database. A ``vector_store`` of the user's is used as given instead.
    """
    retrieval = om.config.retrieval
    if retrieval is None:
        return
    if retrieval.vector and retrieval.vector_store is None and retrieval.embeddings is not None:
        from langchain_core.embeddings import Embeddings

        from .config import OMConfigError
        from .vector_index import StoreVectorIndex

        if not isinstance(retrieval.embeddings, Embeddings):
            raise OMConfigError(
                "retrieval.embeddings",
                f"expected a LangChain Embeddings instance, got {type(retrieval.embeddings).__name__}",
            )
        _INDEXES[om] = StoreVectorIndex(om.store, retrieval.embeddings)
    if retrieval_section not in om.section_providers:
        om.section_providers.append(retrieval_section)
    listeners = getattr(om, "message_listeners", None)
    if isinstance(listeners, list) and retrieval.vector and index_messages not in listeners:
        listeners.append(index_messages)
