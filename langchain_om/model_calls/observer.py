"""The Observer: its prompt and how much of the previous log it reads.

The Observer turns raw messages into dated, prioritised observation lines. Its transcript is
built in ``transcript``, its reply parsed in ``reply_parsing``; both are re-exported here, the
Observer's public face.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Literal

from langchain_core.messages import (
    BaseMessage,
    HumanMessage,
    SystemMessage,
)

from ..foundation.fence import neutralise
from .reply_parsing import BUILTIN_TAGS, PRIORITY_MARKS, ObserverOutputError, ObserverResult, parse_observer_output
from .reply_parsing import DATE_LINE_RE as _DATE_RE
from .transcript import Transcript, format_transcript, thread_label

__all__ = [
    "BUILTIN_TAGS", "EXTRA_VALUES_HEADER", "OBSERVER_PROMPT_MARKER", "PRIORITY_MARKS", "ObserverOutputError",
    "ObserverResult", "Transcript", "build_observer_messages", "format_transcript", "observer_system_prompt",
    "parse_observer_output", "thread_label", "truncate_previous_observations",
]

OBSERVER_PROMPT_MARKER = "You are the Observer of langchain-om, a memory system for AI assistants."
"""First line of every Observer system prompt; scripted models and tests recognise prompts by it."""

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
