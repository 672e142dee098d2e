"""How a stored message reads in a recall result, and how much of a result fits.

A message is shown as its parts (``[p0]``, ``[p1]``: text, tool calls and results,
reasoning, images, files) at low detail (truncated, tool names only) or high detail (in
full), under a header with its role and time stamp. ``OutputBudget`` keeps whole blocks
while they fit the tool's token budget and reports what it cut (``token_offset``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ...foundation.messages import TIMESTAMP_KEY
from ...store.base import StoredMessage
from .args import LOW_DETAIL_CHARS


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


def role_of(stored: StoredMessage) -> str:
    """The role a reader knows (user, assistant, tool, system; time-gap for a temporal marker)."""
    if stored.kind == "temporal-marker":
        return "time-gap"
    return {"human": "user", "ai": "assistant", "tool": "tool", "system": "system"}.get(
        str(stored.data.get("type")), str(stored.data.get("type"))
    )


def shorten(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def low_detail(part: Part, index: int) -> str:
    """One line for a part: truncated text, tool names without arguments, sizes of reasoning."""
    if part.kind == "tool-call":
        return f"[p{index}] tool-call {part.tool_name}"
    if part.kind == "tool-result":
        return f"[p{index}] tool-result {part.tool_name}: {shorten(part.text, LOW_DETAIL_CHARS // 2)}"
    if part.kind == "reasoning":
        return f"[p{index}] reasoning ({len(part.text)} chars)"
    if part.kind in ("image", "file"):
        return f"[p{index}] {part.text}"
    return f"[p{index}] {shorten(part.text, LOW_DETAIL_CHARS)}"


def high_detail(part: Part, index: int) -> str:
    """A part in full: tool arguments and results, reasoning text."""
    if part.kind == "tool-call":
        return f"[p{index}] tool-call {part.text}"
    if part.kind == "tool-result":
        return f"[p{index}] tool-result {part.tool_name}:\n{part.text}"
    if part.kind == "reasoning":
        return f"[p{index}] reasoning:\n{part.text}"
    return f"[p{index}] {part.kind}:\n{part.text}" if part.kind == "text" else f"[p{index}] {part.text}"


def utc_stamp(moment: datetime) -> str:
    """Minutes in UTC (naive values are UTC)."""
    utc = moment.astimezone(timezone.utc) if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return utc.strftime("%Y-%m-%d %H:%M UTC")


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
    return utc_stamp(moment)


@dataclass
class OutputBudget:
    """The tool's output token budget for one call, and what was cut to keep to it."""

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


def add_truncation(result: dict[str, Any], budget: OutputBudget) -> None:
    """Mark a result the budget cut (``truncated``, ``token_offset``: the tokens not shown)."""
    if budget.truncated:
        result["truncated"] = True
        result["token_offset"] = budget.dropped
