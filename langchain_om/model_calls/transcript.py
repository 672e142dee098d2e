"""The transcript the Observer reads: each message as a dated, plain-text line (tool calls and
results capped in tokens, attachments forwarded or named), grouped by thread when several
threads go to one call. Everything a model needs to resolve "next Friday" or "last Tuesday", the
date, weekday and time of each message, is written into every line, all on one clock: the
conversation's zone (``foundation.clock``), so a reply stamped in UTC is dated on the user's
calendar like the question before it."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, tzinfo
from typing import Any, Literal

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_from_dict,
)

from ..foundation.clock import conversation_zone, on_clock, stamp_agrees
from ..foundation.log_dates import weekday_name
from ..store.base import StoredMessage

AttachmentPolicy = bool | Literal["auto"] | list[str]
TranscriptInput = StoredMessage | tuple[BaseMessage, datetime]

MAX_TOOL_OUTPUT_TOKENS = 5000
"""A tool result reaches the Observer cut to this many tokens (a page of search hits fits)."""
MAX_TOOL_ARGS_TOKENS = 2000
"""A tool call's arguments reach the Observer cut to this many tokens."""
_CHARS_PER_TOKEN_BOUND = 16  # a prefix this many characters per token is always enough to hold the cap


@dataclass
class Transcript:
    """The text the Observer reads, plus the image blocks forwarded alongside it."""

    text: str
    attachments: list[dict[str, Any]] = field(default_factory=list)
    image_count: int = 0
    file_count: int = 0


def thread_label(thread_id: str, obscure: bool) -> str:
    """Label of a thread in a multi-thread transcript; obscured ids never leak into prompts."""
    if not obscure:
        return thread_id
    return "thread-" + hashlib.sha256(thread_id.encode("utf-8")).hexdigest()[:10]


def _fmt_time(moment: datetime) -> str:
    """``2026-03-09 Monday 14:05``: the weekday is written out, so "last Tuesday" said on an earlier
    day is resolved from the line itself."""
    return moment.strftime("%Y-%m-%d ") + weekday_name(moment.date()) + moment.strftime(" %H:%M")




def _human_gap(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    for unit, size in (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''} later"
    return "moments later"


def _mime_allowed(mime: str, policy: AttachmentPolicy, model_supports_images: bool) -> bool:
    if policy is True:
        return True
    if policy is False:
        return False
    if policy == "auto":
        return model_supports_images
    mime = mime.lower()
    major = mime.split("/", 1)[0]
    for allowed in policy:
        allowed = allowed.lower().strip()
        if allowed == "*" or allowed == mime or (allowed.endswith("/*") and allowed[:-2] == major):
            return True
    return False


_EXT_MIME = {
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "bmp": "image/bmp",
    "svg": "image/svg+xml",
    "heic": "image/heic",
    "pdf": "application/pdf",
    "txt": "text/plain",
    "csv": "text/csv",
    "json": "application/json",
    "md": "text/markdown",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}


def _url_of(block: dict[str, Any]) -> str | None:
    image_url = block.get("image_url")
    if isinstance(image_url, dict):
        url = image_url.get("url")
        return str(url) if url else None
    if isinstance(image_url, str):
        return image_url
    for key in ("url", "file_url"):
        if isinstance(block.get(key), str):
            return str(block[key])
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("url"), str):
        return str(source["url"])
    return None


def _block_mime(block: dict[str, Any], default: str) -> str:
    for key in ("mime_type", "mimeType", "media_type"):
        if isinstance(block.get(key), str):
            return str(block[key]).lower()
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("media_type"), str):
        return str(source["media_type"]).lower()
    url = _url_of(block) or ""
    if url.startswith("data:"):
        return url[5:].split(";", 1)[0].split(",", 1)[0].lower() or default
    name = _block_name(block, "")
    ext = (name or url.split("?", 1)[0]).rsplit(".", 1)[-1].lower() if "." in (name or url) else ""
    return _EXT_MIME.get(ext, default)


def _block_name(block: dict[str, Any], default: str) -> str:
    for key in ("filename", "name", "file_name", "title"):
        if isinstance(block.get(key), str) and block[key]:
            return str(block[key])
    for meta_key in ("metadata", "extras"):
        meta = block.get(meta_key)
        if isinstance(meta, dict):
            for key in ("filename", "name", "title"):
                if isinstance(meta.get(key), str) and meta[key]:
                    return str(meta[key])
    url = _url_of(block)
    if url and not url.startswith("data:"):
        tail = url.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
        if tail and "." in tail:
            return tail
    return default


def _is_image_block(block: dict[str, Any]) -> bool:
    kind = block.get("type")
    if kind in ("image", "image_url", "input_image"):
        return True
    if kind == "file" or kind == "document":
        return _block_mime(block, "").startswith("image/")
    return False


def _is_file_block(block: dict[str, Any]) -> bool:
    return block.get("type") in ("file", "document", "input_file", "audio", "video", "input_audio")


class _Renderer:
    """Numbers attachments across one transcript and applies the forwarding policy."""

    def __init__(self, policy: AttachmentPolicy, model_supports_images: bool) -> None:
        self.policy = policy
        self.model_supports_images = model_supports_images
        self.images = 0
        self.files = 0
        self.attachments: list[dict[str, Any]] = []

    def content_text(self, content: str | list[Any]) -> str:
        if isinstance(content, str):
            return content
        pieces: list[str] = []
        for block in content:
            if isinstance(block, str):
                pieces.append(block)
                continue
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind in ("text", "output_text", "input_text") and block.get("text"):
                pieces.append(str(block["text"]))
            elif _is_image_block(block):
                self.images += 1
                mime = _block_mime(block, "image/unknown")
                name = _block_name(block, f"image.{mime.split('/', 1)[-1]}" if "/" in mime else "image")
                pieces.append(f"[Image #{self.images}: {name}]")
                if _mime_allowed(mime, self.policy, self.model_supports_images):
                    self.attachments.append(dict(block))
            elif _is_file_block(block):
                self.files += 1
                mime = _block_mime(block, "application/octet-stream")
                name = _block_name(block, "file")
                pieces.append(f"[File #{self.files}: {name} ({mime})]")
            # reasoning, tool_use echoes and unknown blocks carry nothing the Observer needs
        return "\n".join(piece for piece in pieces if piece)


def _indent_continuation(text: str) -> str:
    lines = text.strip().splitlines()
    return "\n".join([lines[0], *("  " + line for line in lines[1:])]) if lines else ""


def _estimate_tokens(text: str) -> int:
    """A cheap upper-leaning estimate when no counter is given (about four bytes a token)."""
    return (len(text.encode("utf-8", "surrogatepass")) + 3) // 4


def _cap_tokens(text: str, limit: int, count: Callable[[str], int]) -> str:
    """``text`` cut to at most ``limit`` tokens (the longest prefix that fits, found by halving),
    with a note saying how much was left out; unchanged when it fits. A character is at most four
    UTF-8 bytes and a token at least one byte, so a short text is never counted."""
    if len(text) * 4 <= limit or (len(text) <= limit * _CHARS_PER_TOKEN_BOUND and count(text) <= limit):
        return text
    low, high = 0, min(len(text), limit * _CHARS_PER_TOKEN_BOUND)
    while low < high:  # the longest prefix of at most ``limit`` tokens
        middle = (low + high + 1) // 2
        if count(text[:middle]) <= limit:
            low = middle
        else:
            high = middle - 1
    kept = text[:low].rstrip()
    return kept + f" … [cut at {limit} tokens; {len(text) - len(kept)} more characters not shown]"


def _tool_args(args: Any, count: Callable[[str], int]) -> str:
    try:
        rendered = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = str(args)
    return _cap_tokens(rendered, MAX_TOOL_ARGS_TOKENS, count)


def _as_pairs(messages: Sequence[TranscriptInput], zone: tzinfo | Literal["auto"] | None
              ) -> list[tuple[BaseMessage | None, datetime, str | None]]:
    """(message, time, marker text) per entry, every time on the conversation's clock (``zone``,
    or with "auto" the zone the transcript's own messages state); temporal markers have no message."""
    pairs: list[tuple[BaseMessage | None, datetime, str | None]] = []
    for item in messages:
        if isinstance(item, StoredMessage):
            if item.kind == "temporal-marker":
                text = ""
                try:
                    content = item.data.get("data", {}).get("content", "")
                    text = content if isinstance(content, str) else ""
                except AttributeError:
                    text = ""
                pairs.append((None, item.created_at, text.strip()))
                continue
            message = messages_from_dict([item.data])[0]
            pairs.append((message, item.created_at, None))
        else:
            message, moment = item
            pairs.append((message, moment, None))
    if zone == "auto":
        zone = conversation_zone([m for m, moment, _ in pairs if m is not None and stamp_agrees(m, moment)])
    return [(message, on_clock(moment, zone), marker) for message, moment, marker in pairs]


def format_transcript(
    messages: Sequence[TranscriptInput],
    *,
    thread_label: str | None = None,
    observe_attachments: AttachmentPolicy = True,
    model_supports_images: bool = True,
    zone: tzinfo | Literal["auto"] | None = "auto",
    count_tokens: Callable[[str], int] | None = None,
) -> Transcript:
    """Render messages as timestamped transcript lines; collect the image blocks the policy forwards.

    ``zone`` is the conversation's clock (the engine passes the one the thread's messages state);
    ``count_tokens`` measures the caps on tool results and arguments (a byte estimate without it)."""
    count = count_tokens or _estimate_tokens
    renderer = _Renderer(observe_attachments, model_supports_images)
    lines: list[str] = []
    if thread_label:
        lines.append(f"=== Thread {thread_label} ===")
    tool_names: dict[str, str] = {}
    previous_time: datetime | None = None
    pairs = _as_pairs(messages, zone)
    for index, (message, moment, marker) in enumerate(pairs):
        if message is None:
            following = next((m for msg, m, _ in pairs[index + 1:] if msg is not None), moment)
            if marker:
                body = marker.strip().strip("-").strip()
            elif previous_time is not None:
                body = _human_gap(following - previous_time)
            else:
                continue
            lines.append(f"--- {body} ---")
            continue
        stamp = f"[{_fmt_time(moment)}]"
        previous_time = moment
        if isinstance(message, AIMessage):
            text = renderer.content_text(message.content)
            if text.strip():
                lines.append(f"{stamp} Assistant: {_indent_continuation(text)}")
            for call in message.tool_calls:
                if call.get("id"):
                    tool_names[str(call["id"])] = call["name"]
                lines.append(f"{stamp} Assistant called tool {call['name']}({_tool_args(call.get('args', {}), count)})")
        elif isinstance(message, ToolMessage):
            name = message.name or tool_names.get(message.tool_call_id, "tool")
            text = _cap_tokens(renderer.content_text(message.content).strip(), MAX_TOOL_OUTPUT_TOKENS, count)
            verb = "failed" if getattr(message, "status", "success") == "error" else "returned"
            lines.append(f"{stamp} Tool {name} {verb}: {_indent_continuation(text) or '(empty)'}")
        elif isinstance(message, HumanMessage):
            text = renderer.content_text(message.content)
            lines.append(f"{stamp} User: {_indent_continuation(text) or '(empty message)'}")
        elif isinstance(message, ChatMessage) and message.role == "edit":
            text = renderer.content_text(message.content)
            kind = {"ai": "Assistant", "human": "User", "tool": "Tool"}.get(
                str(message.additional_kwargs.get("om_edit_type")), "Earlier")
            lines.append(f"{stamp} {kind} message edited (a correction of what was said earlier; "
                         f"edited: {_indent_continuation(text) or '(empty)'})")
        elif isinstance(message, SystemMessage):
            text = renderer.content_text(message.content)
            if text.strip():
                lines.append(f"{stamp} System: {_indent_continuation(text)}")
        else:
            text = renderer.content_text(message.content)
            if text.strip():
                lines.append(f"{stamp} {message.type.capitalize()}: {_indent_continuation(text)}")
    return Transcript(
        text="\n".join(lines),
        attachments=renderer.attachments,
        image_count=renderer.images,
        file_count=renderer.files,
    )
