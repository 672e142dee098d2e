"""The Observer: transcript formatting, its prompt, and tolerant parsing of its reply.

The Observer turns raw messages into dated, prioritised observation lines. It
only ever sees a plain-text transcript (plus forwarded images), so everything
a model needs to resolve "next Friday" or "yesterday" — the timestamp of each
message — is written into every line.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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

from .fence import neutralise
from .messages import message_timestamp
from .store.base import StoredMessage

OBSERVER_PROMPT_MARKER = "You are the Observer of langchain-om, a memory system for AI assistants."
"""First line of every Observer system prompt; scripted models and tests recognise prompts by it."""

AttachmentPolicy = bool | Literal["auto"] | list[str]
TranscriptInput = StoredMessage | tuple[BaseMessage, datetime]

MAX_TOOL_OUTPUT_CHARS = 2000
MAX_TOOL_ARGS_CHARS = 600
PRIORITY_MARKS = ("🔴", "🟡", "🟢")
BUILTIN_TAGS = ("observations", "current-task", "suggested-response", "thread-title")


class ObserverOutputError(ValueError):
    """The Observer reply held nothing usable; the cycle fails and nothing is committed."""


# --------------------------------------------------------------------------- transcript


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


def _local_moment(message: BaseMessage, stored: datetime) -> datetime:
    """The stored instant on the clock of the message's own timestamp: a message stamped
    ``19:05-05:00`` is shown as 19:05 on its local date, not 00:05 UTC the next day, so the
    Observer dates it (and resolves "tomorrow") as the user lived it."""
    try:
        own = message_timestamp(message)
    except ValueError:
        return stored
    if own is None or own.utcoffset() is None:
        return stored
    if abs((own - stored).total_seconds()) > 1:
        return stored
    return stored.astimezone(own.tzinfo)


def _fmt_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M")


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


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit].rstrip() + f" … [truncated {len(text) - limit} more characters]"


def _tool_args(args: Any) -> str:
    try:
        rendered = json.dumps(args, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        rendered = str(args)
    return _truncate(rendered, MAX_TOOL_ARGS_CHARS)


def _as_pairs(messages: Sequence[TranscriptInput]) -> list[tuple[BaseMessage | None, datetime, str | None]]:
    """(message, time, marker text) per entry; temporal markers have no message."""
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
            pairs.append((message, _local_moment(message, item.created_at), None))
        else:
            message, moment = item
            pairs.append((message, moment, None))
    return pairs


def format_transcript(
    messages: Sequence[TranscriptInput],
    *,
    thread_label: str | None = None,
    observe_attachments: AttachmentPolicy = True,
    model_supports_images: bool = True,
) -> Transcript:
    """Render messages as timestamped transcript lines; collect the image blocks the policy forwards."""
    renderer = _Renderer(observe_attachments, model_supports_images)
    lines: list[str] = []
    if thread_label:
        lines.append(f"=== Thread {thread_label} ===")
    tool_names: dict[str, str] = {}
    previous_time: datetime | None = None
    pairs = _as_pairs(messages)
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
                lines.append(f"{stamp} Assistant called tool {call['name']}({_tool_args(call.get('args', {}))})")
        elif isinstance(message, ToolMessage):
            name = message.name or tool_names.get(message.tool_call_id, "tool")
            text = _truncate(renderer.content_text(message.content).strip(), MAX_TOOL_OUTPUT_CHARS)
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


# --------------------------------------------------------------------------- prompt

_OBSERVER_RULES = """\
Your job: read a transcript of a conversation between a user and an assistant and
write observations — short, dated notes that will replace the transcript in the
assistant's memory. The assistant will NOT see the original messages again, so
anything you leave out is forgotten.

How to write observations:
- Group them by day. Start each day with a header line exactly like
  "Date: 2026-12-01 (Tuesday)" using the dates of the messages.
- Below the header, one bullet per observation: "* <mark> (<time>) <text>".
  The time is the HH:MM of the message the note comes from.
- Priority marks:
  🔴 important: facts about the user, stated preferences, decisions, commitments,
     deadlines, numbers, names, anything the user would expect to be remembered.
  🟡 maybe useful: context, open questions, intermediate results.
  🟢 detail: small talk and minor details, kept only for completeness.
- Keep what the user said separate from what the assistant did. Write user
  statements as "User said ...", "User prefers ...", "User will ..." and the
  assistant's side as "Assistant suggested ...", "Assistant found ...".
- Resolve relative dates and times against the timestamp of the message they
  appear in: "next Friday" said on Tuesday 2026-12-01 becomes "Friday
  2026-12-04"; "tomorrow", "in two weeks" likewise. Keep the user's wording when
  it adds meaning, e.g. "(said 'next Friday')".
- Tool use: record which tool was used and what came of it in one compact line
  (the key result, numbers, identifiers, or the error), not the raw output.
- Images and files appear as placeholders like [Image #1: name.png]; describe
  what matters about them if you can see them, otherwise note that they were
  shared.
- Lines like "--- 3 hours later ---" mark time gaps; use them to place events.
- A transcript may hold several conversations (threads) of the same user, each
  under a header line "=== Thread <label> ===". Then write each thread's notes
  under the same header line, inside <observations>, with its own Date lines,
  so every note can be traced back to its thread.
- Never invent anything. If something is unclear, note it as unclear.
- Be concise: one fact per bullet; merge repeated statements of the same fact.
- Do not repeat observations that are already in the previous observations; only
  add what is new, or note explicitly when a fact changed ("User now prefers ...;
  earlier said ...").
"""

_OBSERVER_FORMAT = """\
Reply with these tags and nothing else:
<observations>
Date: <YYYY-MM-DD> (<Weekday>)
* <mark> (<HH:MM>) <observation>
</observations>
<current-task>What the user is working on right now or asked for last, in one or two sentences.</current-task>
<suggested-response>How the assistant should continue its next reply, in one or two sentences.</suggested-response>"""

_TITLE_REQUEST = """\
<thread-title>A short title (at most 8 words) for the whole conversation. Keep the
current title unless the topic has clearly changed.</thread-title>"""

EXTRA_VALUES_HEADER = "Extra values (one tag each, plain text, keep it short):"


def _extractor_triplet(item: Any) -> tuple[str, str, str | None]:
    """Inline extractors arrive as ``(slug, instructions, previous)`` or objects with those attributes."""
    if isinstance(item, (tuple, list)):
        slug, instructions = str(item[0]), str(item[1])
        previous = item[2] if len(item) > 2 else None
    else:
        slug = str(item.slug)
        instructions = str(getattr(item, "instructions", "") or "")
        previous = getattr(item, "previous", getattr(item, "previous_value", None))
    if previous is not None and not isinstance(previous, str):
        previous = json.dumps(previous, ensure_ascii=False, default=str)
    return slug, instructions, previous


def _extractor_prompt(extractors: Sequence[tuple[str, str, str | None]]) -> str:
    lines = [EXTRA_VALUES_HEADER]
    for slug, instructions, _ in extractors:
        lines.append(f"- <{slug}>...</{slug}>: {instructions.strip()}")
    lines.append("Write each value even if unchanged; repeat the previous value when nothing new was learned.")
    return "\n".join(lines)


def _extractor_previous(extractors: Sequence[tuple[str, str, str | None]]) -> str:
    blocks = [f"<previous-{slug}>\n{neutralise(prev)}\n</previous-{slug}>" for slug, _, prev in extractors if prev]
    return "\n".join(blocks)


def observer_system_prompt(
    *, instruction: str | None = None, want_thread_title: bool = False,
    inline_extractors: Sequence[Any] = (), current_title: str | None = None,
) -> str:
    """The Observer system prompt (stable between calls, so providers can cache it)."""
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    parts = [OBSERVER_PROMPT_MARKER, _OBSERVER_RULES, _OBSERVER_FORMAT]
    if want_thread_title:
        parts.append(_TITLE_REQUEST)
    if extractors:
        parts.append(_extractor_prompt(extractors))
    if instruction and instruction.strip():
        parts.append("Additional instructions from the application:\n" + instruction.strip())
    return "\n\n".join(parts)


def build_observer_messages(
    transcript: Transcript,
    *,
    previous_observations: str = "",
    instruction: str | None = None,
    now: datetime | None = None,
    want_thread_title: bool = False,
    inline_extractors: Sequence[Any] = (),
    current_title: str | None = None,
) -> list[BaseMessage]:
    """System prompt + one human message (text, then forwarded image blocks)."""
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    system = observer_system_prompt(
        instruction=instruction, want_thread_title=want_thread_title, inline_extractors=extractors
    )
    sections: list[str] = []
    if now is not None:
        sections.append(f"Current date and time: {now.strftime('%Y-%m-%d %H:%M (%A)')}")
    if previous_observations.strip():
        sections.append(
            "Previous observations (context only; do not repeat these):\n"
            f"<previous-observations>\n{neutralise(previous_observations.strip())}\n</previous-observations>"
        )
    else:
        sections.append("There are no previous observations yet.")
    if want_thread_title and current_title:
        sections.append(f"Current thread title: {current_title}")
    previous_values = _extractor_previous(extractors)
    if previous_values:
        sections.append("Previous extra values:\n" + previous_values)
    # user and tool text can hold OM's tags too: a "</transcript>" typed by the user must not end the transcript
    sections.append(f"New messages to observe:\n<transcript>\n{neutralise(transcript.text)}\n</transcript>")
    text = "\n\n".join(sections)
    content: str | list[str | dict[str, Any]]
    if transcript.attachments:
        content = [{"type": "text", "text": text}, *transcript.attachments]
    else:
        content = text
    return [SystemMessage(content=system), HumanMessage(content=content)]


# --------------------------------------------------------------------------- parsing


@dataclass
class ObserverResult:
    """What the Observer said, cleaned; ``warnings`` lists what had to be repaired."""

    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    extracted: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


_FENCE_RE = re.compile(r"^\s*```[\w-]*\s*$", re.MULTILINE)
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
_DATE_RE = re.compile(r"^\s*(?:#+\s*|\*\*)?Date:\s*\S", re.IGNORECASE)
_BULLET_RE = re.compile(r"^\s*(?:[*\-•]|\d+[.)])\s+\S|^\s*[🔴🟡🟢]")
_PLACEHOLDER_RE = re.compile(r"<(?:YYYY-MM-DD|Weekday|HH:MM|mark|observation|time|text)>|YYYY-MM-DD|\bHH:MM\b",
                             re.IGNORECASE)
_JUNK_PREFIXES = (
    "here are", "here is", "here's", "sure", "certainly", "of course", "below are", "i have", "i've",
    "okay", "ok,", "as requested", "these observations", "the following", "note:", "reply with",
    "output:", "observations:",
)


def _tag_pattern(name: str, all_names: Sequence[str]) -> re.Pattern[str]:
    others = "|".join(re.escape(n) for n in all_names if n != name)
    stop = rf"(?=<\s*/?\s*(?:{others})\s*>)|" if others else ""
    return re.compile(
        rf"<\s*{re.escape(name)}\s*>(.*?)(?:<\s*/\s*{re.escape(name)}\s*>|{stop}\Z)",
        re.IGNORECASE | re.DOTALL,
    )


def extract_tags(text: str, names: Sequence[str]) -> tuple[dict[str, str], list[str]]:
    """Content of each tag (last occurrence wins); an unclosed tag runs to the next known tag or the end."""
    found: dict[str, str] = {}
    warnings: list[str] = []
    for name in names:
        matches = list(_tag_pattern(name, names).finditer(text))
        if not matches:
            continue
        match = matches[-1]
        if not re.search(rf"<\s*/\s*{re.escape(name)}\s*>", match.group(0), re.IGNORECASE):
            warnings.append(f"<{name}> was not closed")
        found[name] = match.group(1)
    return found, warnings


def _strip_known_tags(text: str, names: Sequence[str]) -> str:
    for name in names:
        text = _tag_pattern(name, names).sub("", text)
    return text


def clean_observation_lines(text: str) -> str:
    """Drop prompt echoes, chatter and stray tags; keep Date headers, bullets and their continuations."""
    kept: list[str] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped:
            if kept and kept[-1] != "":
                kept.append("")
            continue
        if re.fullmatch(r"</?\s*[\w-]+\s*>", stripped) or _FENCE_RE.fullmatch(stripped):
            continue
        if _PLACEHOLDER_RE.search(stripped):
            continue
        lowered = stripped.lower().lstrip("*# ")
        if not _DATE_RE.match(stripped) and not _BULLET_RE.match(stripped) and lowered.startswith(_JUNK_PREFIXES):
            continue
        if _DATE_RE.match(stripped):
            stripped = stripped.lstrip("#").strip().strip("*").strip()
            if kept and kept[-1] != "":
                kept.append("")
            kept.append(stripped)
            continue
        kept.append(line)
    while kept and kept[-1] == "":
        kept.pop()
    while kept and kept[0] == "":
        kept.pop(0)
    return "\n".join(kept)


def has_observation_content(text: str) -> bool:
    """True if at least one line carries an observation (not only Date headers)."""
    return any(
        line.strip() and not _DATE_RE.match(line) and re.search(r"\w", line) for line in text.splitlines()
    )


def _structured_lines(text: str) -> str:
    """Fallback when the <observations> tag is missing: the Date headers and bullets in the reply."""
    lines = [line for line in text.splitlines() if _DATE_RE.match(line) or _BULLET_RE.match(line)]
    return "\n".join(lines)


def _clean_value(value: str | None, *, single_line: bool = False) -> str | None:
    if value is None:
        return None
    cleaned = _FENCE_RE.sub("", value).strip()
    if single_line:
        cleaned = " ".join(cleaned.split()).strip("\"'`*# ")
    if not cleaned or cleaned.lower() in {"none", "n/a", "na", "null", "-", "unknown", "(none)"}:
        return None
    if _PLACEHOLDER_RE.search(cleaned):
        return None
    return neutralise(cleaned)


@dataclass
class _Parsed:
    observations: str
    tags: dict[str, str]
    warnings: list[str]


def parse_tagged_output(text: str, *, inline_slugs: Sequence[str], error: type[ValueError], who: str) -> _Parsed:
    """Shared tolerant parser of Observer and Reflector replies."""
    if not text or not text.strip():
        raise error(f"{who} returned an empty reply")
    # a lone surrogate (a provider's JSON may decode to one) is not text JSON can store: left in,
    # it would fail the commit of every cycle that carries it
    text = _SURROGATE_RE.sub("\ufffd", text)
    names = [*BUILTIN_TAGS, *(s for s in inline_slugs if s not in BUILTIN_TAGS)]
    body = _FENCE_RE.sub("", text)
    tags, warnings = extract_tags(body, names)
    raw_obs = tags.get("observations")
    if raw_obs is None:
        fallback = _structured_lines(_strip_known_tags(body, names))
        if fallback:
            warnings.append("no <observations> tag; used the Date/bullet lines of the reply")
        raw_obs = fallback
    observations = neutralise(clean_observation_lines(raw_obs))
    if not has_observation_content(observations):
        preview = " ".join(text.split())[:120]
        raise error(f"{who} reply has no usable observations (got: {preview!r})")
    return _Parsed(observations, tags, warnings)


def parse_observer_output(text: str, *, inline_slugs: Sequence[str] = ()) -> ObserverResult:
    """Read an Observer reply, repairing missing tags, fences and prose; raise if nothing is usable."""
    parsed = parse_tagged_output(text, inline_slugs=inline_slugs, error=ObserverOutputError, who="Observer")
    tags, warnings = parsed.tags, parsed.warnings
    title = _clean_value(tags.get("thread-title"), single_line=True)
    if title and len(title) > 120:
        title = title[:117].rstrip() + "..."
    extracted: dict[str, str] = {}
    for slug in inline_slugs:
        value = _clean_value(tags.get(slug))
        if value is None:
            warnings.append(f"no value for <{slug}>")
        else:
            extracted[slug] = value
    return ObserverResult(
        observations=parsed.observations,
        current_task=_clean_value(tags.get("current-task")),
        suggested_response=_clean_value(tags.get("suggested-response")),
        thread_title=title,
        extracted=extracted,
        warnings=warnings,
    )


# --------------------------------------------------------------------------- previous observations


def _is_red(line: str) -> bool:
    return "🔴" in line


def truncate_previous_observations(
    text: str, budget: int | Literal[False] | None, count_tokens: Callable[[str], int]
) -> str:
    """Fit the previous observations into ``budget`` tokens for the Observer's context.

    Newest lines win; older 🔴 lines are kept where room allows (up to a third of
    the budget), each under its Date header. ``0`` omits everything, ``False``
    (or ``None``) disables truncation.
    """
    if budget is False or budget is None:
        return text
    if budget <= 0 or not text.strip():
        return ""
    if count_tokens(text) <= budget:
        return text
    # (header index or -1, line) for every non-header line
    items: list[tuple[int, str]] = []
    headers: list[str] = []
    current = -1
    for line in text.splitlines():
        if not line.strip():
            continue
        if _DATE_RE.match(line):
            headers.append(line.strip())
            current = len(headers) - 1
            continue
        items.append((current, line))
    costs = [count_tokens(line) + 1 for _, line in items]
    header_costs = [count_tokens(h) + 2 for h in headers]

    selected: set[int] = set()
    seen_headers: set[int] = set()
    used = 0

    def cost(index: int) -> int:
        header = items[index][0]
        return costs[index] + (header_costs[header] if header >= 0 and header not in seen_headers else 0)

    def take(index: int) -> None:
        nonlocal used
        used += cost(index)
        selected.add(index)
        seen_headers.add(items[index][0])

    has_red = any(_is_red(line) for _, line in items)
    # 1. the newest lines, leaving a third of the budget for older 🔴 lines when there are any
    tail_limit = budget - budget // 3 if has_red else budget
    cut = len(items)
    while cut > 0 and used + cost(cut - 1) <= tail_limit:
        cut -= 1
        take(cut)
    # 2. older 🔴 lines, newest first
    for index in range(cut - 1, -1, -1):
        if _is_red(items[index][1]) and used + cost(index) <= budget:
            take(index)
    # 3. whatever room is left goes to the lines just before the tail
    while cut > 0:
        cut -= 1
        if cut in selected:
            continue
        if used + cost(cut) > budget:
            break
        take(cut)

    def render(indexes: set[int]) -> str:
        out: list[str] = []
        last_header: int | None = None
        for index in sorted(indexes):
            header, line = items[index]
            if header != last_header:
                if header >= 0:
                    if out:
                        out.append("")
                    out.append(headers[header])
                last_header = header
            out.append(line)
        return "\n".join(out)

    result = render(selected)
    while selected and count_tokens(result) > budget:
        selected.discard(min(selected))
        result = render(selected)
    return result
