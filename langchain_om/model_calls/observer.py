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
from ..foundation.log_dates import weekday_name
from .reply_parsing import BUILTIN_TAGS, PRIORITY_MARKS, ObserverOutputError, ObserverResult, parse_observer_output
from .reply_parsing import DATE_LINE_RE as _DATE_RE
from .transcript import Transcript, format_transcript, thread_label

__all__ = [
    "BUILTIN_TAGS",
    "EXTRA_VALUES_HEADER",
    "LEFT_OUT_MARKER",
    "LOG_CONVENTIONS",
    "OBSERVER_PROMPT_MARKER",
    "PRIORITY_MARKS",
    "ObserverOutputError",
    "ObserverResult",
    "Transcript",
    "build_observer_messages",
    "format_transcript",
    "observer_system_prompt",
    "parse_observer_output",
    "previous_with_marker",
    "thread_label",
    "truncate_previous_observations",
]

OBSERVER_PROMPT_MARKER = "You are the Observer of langchain-om, a memory system for AI assistants."
"""First line of every Observer system prompt; scripted models and tests recognise prompts by it."""

# --------------------------------------------------------------------------- prompt

_OBSERVER_RULES = """\
You read a stretch of conversation between a user and an assistant and write the notes that
will stand in for it. The assistant never sees these messages again: weeks from now it must
still answer "what is my budget now?", "which two hotels did you suggest?", "how many times
did I go running?" or "how long ago did I book it?" from your notes alone. What you leave out
is forgotten; what you get wrong is believed.

What to keep
- Assertions, questions and intentions are different things; keep them apart. "User lives in
  Lyon" is a fact. "User asked whether Lyon has a metro" is a question: never turn it into a
  fact. "User plans to move in May" is an intention. About themselves the user is authoritative.
- A change of state replaces the old value: write the new value and name the one it replaces,
  "User's budget is now 2,500 EUR (was 3,000 EUR)", even when the old value is not in these
  messages (then write what the user said it was, or just "changed to").
- Short user messages (a sentence or two): keep them nearly word for word.
- Things that can be counted get one line each, every time they happen (each run, each
  purchase, each visit), so a later "how many times...?" can be answered by counting lines.
- For people, places, items and events: who, what, where, when, and the attributes that tell
  them apart (names, brands, models, sizes, colours, relations such as "Sam, user's partner").
- The assistant's own recommendations, lists and answers, with the details that identify each
  item (names, prices, times, counts, order), so they can be repeated exactly if asked.
- Tool calls: what was called, why, and what was learned (key results, numbers, ids, errors) in
  one line; group repeated calls of the same kind into one line.
- Numbers with their units, names, spellings, quantities and verbs exactly as said: "booked" is
  not "considered", "around 40" is not "40".

Dates
- Each message carries its date, weekday and time. Resolve every relative expression, past or
  future ("last Tuesday", "tomorrow", "in three weeks", "next spring") against the message it
  appears in, and put the absolute date at the end of the line: "User ran a half marathon two
  weeks ago (meaning 2026-02-15)", "(estimated March 2026)" when only the month is clear. Leave
  vague ones ("some day", "a while ago") undated. One event per line, so every date belongs to
  one event.
- A plan, intention or appointment of the user's (something the user means to do or attend on
  a day) ends with "(planned for <date>)" instead: "User will fly to Osaka next Friday (planned
  for 2026-03-13)", "User sees the dentist on 2026-03-20 (planned for 2026-03-20)". Nothing
  else gets it: a question, an option the user did not take, a deadline, an expiry date, a
  price or an offer keeps "(meaning <date>)" or its plain date.
- Mark what was completed with ✅: "✅ User booked the ryokan in Hakone for 2026-04-08".
- Lines such as "--- 3 hours later ---" or <time-gap> notes show time passing; use them to date events.

Also
- Images and files appear as placeholders such as [Image #1: name.png]; say what matters about
  them if you can see them, else that they were shared.
- A transcript may hold several conversations of the same user, each under a line
  "=== Thread <label> ===". Repeat that line inside <observations> and put that thread's dated
  notes under it.
- How much to write: about one to three lines per exchange, more when it carried many facts,
  none for pure greetings. Never invent; if something is unclear, say it is unclear.
- The previous observations are shown only as context: do not copy them. Add what is new, and
  write a replacement line when something in them changed.
"""

LOG_CONVENTIONS = """\
How the log is written (the Observer's conventions, shared by every line of it)
- Notes are grouped by day: a header "Date: YYYY-MM-DD (Weekday)" from the messages' dates, then
  one line per note: "* <mark> (HH:MM) <text>", with the time of the message the note comes from.
- Marks: 🔴 what the user would expect remembered (facts about the user and the people around
  them, preferences, decisions, commitments, deadlines, numbers, names, the assistant's
  recommendations); 🟡 useful context, open questions, intermediate results; 🟢 small detail.
- ✅ at the start of the text marks something completed; a plan stays a plan until it happened.
- "User ..." for the user's side, "Assistant ..." for the assistant's.
- Relative dates are resolved at the end of the line: "(meaning 2026-03-13)", "(estimated March
  2026)"; a plan or appointment of the user's ends "(planned for 2026-03-13)"; a changed value
  names the one it replaced: "(was 3,000 EUR)".
- Written in the conversation's own language: a conversation held in Japanese is observed in
  Japanese, one in English in English. In every language the header word "Date:", the marks,
  dates written as YYYY-MM-DD and the suffixes "(meaning YYYY-MM-DD)" and "(planned for
  YYYY-MM-DD)" stay exactly as shown; the rest of the line is in the conversation's language.
  Names, places and titles are never translated; they are copied as written.
"""

_OBSERVER_FORMAT = """\
Reply with these tags and nothing else:
<observations>
Date: <YYYY-MM-DD> (<Weekday>)
* <mark> (<HH:MM>) <observation>
</observations>
<current-task>What the user is doing or asked for last, in one or two sentences: update the
previous one rather than starting over, and say when it was finished or dropped.</current-task>
<suggested-response>How the assistant should go on in its next reply, in one or two sentences.</suggested-response>"""

_TITLE_REQUEST = """\
<thread-title>A short title (at most 8 words) for the whole conversation, in its language.
Keep the current title unless the topic has clearly changed.</thread-title>"""

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
    parts = [OBSERVER_PROMPT_MARKER, _OBSERVER_RULES, LOG_CONVENTIONS, _OBSERVER_FORMAT]
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
    previous_task: str | None = None,
    previous_suggestion: str | None = None,
) -> list[BaseMessage]:
    """System prompt + one human message (text, then forwarded image blocks).

    The previous cycle's current task, suggested response and the thread's title are shown so
    the Observer updates them instead of starting over."""
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    system = observer_system_prompt(
        instruction=instruction, want_thread_title=want_thread_title, inline_extractors=extractors
    )
    sections: list[str] = []
    if now is not None:
        sections.append(f"Current date and time: {now.strftime('%Y-%m-%d %H:%M')} ({weekday_name(now.date())})")
    if previous_observations.strip():
        sections.append(
            "Previous observations (context only; do not copy them):\n"
            f"<previous-observations>\n{neutralise(previous_observations.strip())}\n</previous-observations>"
        )
    else:
        sections.append("There are no previous observations yet.")
    hints: list[str] = []
    if previous_task and previous_task.strip():
        hints.append(f"<current-task>\n{neutralise(previous_task.strip())}\n</current-task>")
    if previous_suggestion and previous_suggestion.strip():
        hints.append(f"<suggested-response>\n{neutralise(previous_suggestion.strip())}\n</suggested-response>")
    if hints:
        sections.append("Where the last cycle left the conversation (update these; do not restart them):\n"
                        + "\n".join(hints))
    if want_thread_title and current_title:
        sections.append(f"Current thread title: {neutralise(current_title)}")
    previous_values = _extractor_previous(extractors)
    if previous_values:
        sections.append("Previous extra values:\n" + previous_values)
    from .language import language_line  # its script patterns compile on first use, not on import

    language = language_line(transcript.text, what="the observations")
    if language:
        sections.append(language)
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


LEFT_OUT_MARKER = "[Older observations left out here:"
"""First words of the line that says how much of the previous log was cut for the Observer."""


def previous_with_marker(text: str, budget: int | Literal[False] | None, count_tokens: Callable[[str], int]) -> str:
    """``truncate_previous_observations`` plus, when lines were cut, a first line saying how many
    and about how many tokens, so the Observer knows the log it sees is partial.

    Each distinct text is counted once per call: the whole log was counted twice (to decide
    whether to cut, then for the note), a few milliseconds of a 20k-token log each time."""
    counted: dict[str, int] = {}
    count_each = count_tokens

    def count_once(piece: str) -> int:
        known = counted.get(piece)
        if known is None:
            known = counted[piece] = count_each(piece)
        return known

    count_tokens = count_once
    kept = truncate_previous_observations(text, budget, count_tokens)
    if kept == text or not kept.strip():
        return kept

    def notes(log: str) -> list[str]:
        return [line for line in log.splitlines() if line.strip() and not _DATE_RE.match(line)]

    cut = len(notes(text)) - len(notes(kept))
    if cut <= 0:
        return kept
    tokens = max(0, count_tokens(text) - count_tokens(kept))
    return (f"{LEFT_OUT_MARKER} {cut} lines, about {tokens} tokens; they are still in memory, "
            "so do not write them again.]\n" + kept)


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
