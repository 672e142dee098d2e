"""The Reflector: condenses the observation log when it grows past its threshold.

One target per call: a number of tokens the log must come under, stated after the log with how
far the log is from it. The guidance of the attempt (which part of the log's own span stays
nearly as written) also follows the log, so the system prompt and the log are a prefix every
retry of a cycle shares with the first attempt (provider prompt caches). When the target and
what should be kept conflict, the prompt states the order in which things give way; what the
user stated or decided, newest value, gives way last. An empty, degenerate or non-shrinking
result is never committed; a log still over the hard limit is bounded by the engine when shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from ..foundation.fence import neutralise
from .observer import LOG_CONVENTIONS, _extractor_previous, _extractor_prompt, _extractor_triplet
from .reply_parsing import _clean_value, parse_tagged_output

REFLECTOR_PROMPT_MARKER = "You are the Reflector of langchain-om, the memory consolidator of an AI assistant."
"""First line of every Reflector system prompt; scripted models and tests recognise prompts by it."""

MAX_COMPRESSION_LEVEL = 3
COMPRESSION_LEVEL_LABEL = "Compression level:"
"""Written after the log as ``Compression level: N`` so the level is visible in traces."""
TARGET_LABEL = "Target:"
"""Opens the line after the log that states the target: ``Target: under N tokens.``"""


class ReflectorOutputError(ValueError):
    """The Reflector reply was empty or degenerate; the original observations stay."""


_REFLECTOR_RULES = """\
You receive the observation log an assistant keeps instead of its old conversations. It has
grown past its size limit. Rewrite it shorter, so that the assistant can still answer what it
will be asked weeks from now: facts about the user, what changed and when, how many times
something happened, what the assistant recommended, how long ago something was.

Your target
- After the log, one line gives the target: the number of tokens your log must come under, and
  how far the log is from it now. Reaching it is the task.
- Condense by position in the log, not by calendar: the log's span runs from its first Date to
  its last (for a log of one day, from its first line to its last). The newest part of the span
  is what the assistant needs in detail; the older a part, the shorter it becomes. The note
  after the target says how much of the span stays nearly as written this time.

What to keep
- The newest value of everything the user stated or decided (facts about themselves and the
  people around them, preferences, decisions, plans, commitments), with its names, numbers,
  amounts, dates and times exactly as written. Shorten the words around them, never them.
- A value that changed is kept once, newest, on one line naming the value it replaced: "User's
  budget is now 320 EUR (was 290 EUR)." The older lines of that value go.
- ✅ outcomes: what was done.
- Assertions over questions: something the user only asked about never overrides or erases
  what the user stated. The user is authoritative about themselves.
- The assistant's recommendations and lists, with the details that tell the items apart.
- The log's language: write in the language the log is written in; never translate names.
Never add anything that is not in the log.

How to merge
- Repeats, and lines about the same thing on the same day, become one line.
- One dated event per line: events on different dates stay on separate lines, each ending with
  its own date, so that every date can still be counted from. Occurrences that will be counted
  ("how many times") keep a short line each.
- A date resolved at the end of a line, as in "(meaning 2026-03-13)", stays at the end of its
  line exactly as written.
- Each day keeps its own "Date:" header; a day left with nothing to say goes.

Marks in the log you return
- 🔴 only for what the user stated or decided. Everything else is 🟡 (useful) or 🟢 (detail),
  whatever mark it had before: in a long log most lines are not 🔴.

When the target and what to keep conflict
The target comes first. Let things go in this order until the log fits: 🟢 lines; 🟡 lines,
oldest first; the words around the facts you keep; older lines that a newer line repeats or
replaces; then whole 🔴 lines of the oldest part, oldest first. The newest day goes last. Nothing
is lost for good: the assistant can still look up the original messages behind what you leave
out.
"""

_REFLECTOR_FORMAT = """\
Reply with these tags and nothing else:
<observations>
the consolidated log
</observations>
<current-task>Optional: what the user is working on now, if the log shows it.</current-task>
<suggested-response>Optional: how the assistant should continue, if the log shows it.</suggested-response>"""

_LEVEL_GUIDANCE = {
    0: (
        "Keep the newest quarter of the log's span nearly as written. Before it, merge each day's "
        "related lines and let 🟢 lines go."
    ),
    1: (
        "Keep the newest tenth of the log's span nearly as written. Before it, each day keeps its "
        "🔴 and ✅ lines and only the 🟡 lines that still matter, merged and in fewer words."
    ),
    2: (
        "Keep only the newest day nearly as written. Every earlier day keeps its 🔴 and ✅ content "
        "alone, in as few words as one dated event per line allows."
    ),
    3: (
        "Keep only the newest day nearly as written. Every earlier day keeps only the newest value "
        "of what the user stated or decided, in the fewest words; let the rest go in the order "
        "given above."
    ),
}
"""What each attempt keeps nearly as written, relative to the log's own span (item 7 of issue 43:
fixed day counts left a log whose days all fall within a week nothing it could condense)."""


def reflector_system_prompt(*, instruction: str | None, inline_extractors: Sequence[Any] = ()) -> str:
    """The Reflector system prompt: the same for every attempt of a cycle (the level and the
    target follow the log in the human message)."""
    parts = [REFLECTOR_PROMPT_MARKER, _REFLECTOR_RULES, LOG_CONVENTIONS, _REFLECTOR_FORMAT]
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    if extractors:
        parts.append(_extractor_prompt(extractors))
    if instruction and instruction.strip():
        parts.append("Additional instructions from the application:\n" + instruction.strip())
    return "\n\n".join(parts)


def target_line(target_tokens: int, log_tokens: int | None = None, previous_tokens: int | None = None) -> str:
    """The one target of an attempt, and how far the log (and the previous attempt) is from it."""
    line = f"{TARGET_LABEL} under {target_tokens:,} tokens."
    if log_tokens is not None and log_tokens > target_tokens:
        cut = log_tokens - target_tokens
        line += (f" The log above is {log_tokens:,} tokens: cut at least {cut:,} "
                 f"({round(100 * cut / log_tokens)}% of it).")
    if previous_tokens is not None and previous_tokens > target_tokens:
        line += (f" A previous attempt came to {previous_tokens:,} tokens, {previous_tokens - target_tokens:,} "
                 "over: condense harder this time.")
    return line


def build_reflector_messages(
    observations: str,
    *,
    instruction: str | None = None,
    level: int = 0,
    target_tokens: int | None = None,
    log_tokens: int | None = None,
    previous_tokens: int | None = None,
    inline_extractors: Sequence[Any] = (),
) -> list[BaseMessage]:
    """System prompt (the same for every attempt) + the log, then this attempt's target and level.

    ``log_tokens``: the log's size, so the target line says how far it is; ``previous_tokens``: the
    smallest result of an earlier attempt of this cycle that was still over the limit."""
    if not 0 <= level <= MAX_COMPRESSION_LEVEL:
        raise ValueError(f"level must be between 0 and {MAX_COMPRESSION_LEVEL}, got {level}")
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    system = reflector_system_prompt(instruction=instruction, inline_extractors=extractors)
    sections: list[str] = []
    previous = _extractor_previous(extractors)
    if previous:
        sections.append("Previous extra values:\n" + previous)
    from .language import language_line  # its script patterns compile on first use, not on import

    language = language_line(observations, what="the consolidated log")
    if language:
        sections.append(language)
    log = neutralise(observations.strip())
    sections.append(f"Observation log to condense:\n<observation-log>\n{log}\n</observation-log>")
    attempt = [f"{COMPRESSION_LEVEL_LABEL} {level}"]
    if target_tokens:
        attempt.append(target_line(target_tokens, log_tokens, previous_tokens))
    attempt.append(_LEVEL_GUIDANCE[level])
    sections.append("\n".join(attempt))
    return [SystemMessage(content=system), HumanMessage(content="\n\n".join(sections))]


@dataclass
class ReflectorResult:
    """The condensed log and the optional hints the Reflector wrote."""

    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    extracted: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def parse_reflector_output(text: str, *, inline_slugs: Sequence[str] = ()) -> ReflectorResult:
    """Read a Reflector reply with the Observer's tolerance; raise when it holds no observations."""
    parsed = parse_tagged_output(text, inline_slugs=inline_slugs, error=ReflectorOutputError, who="Reflector")
    extracted: dict[str, str] = {}
    warnings = list(parsed.warnings)
    for slug in inline_slugs:
        value = _clean_value(parsed.tags.get(slug))
        if value is None:
            warnings.append(f"no value for <{slug}>")
        else:
            extracted[slug] = value
    return ReflectorResult(
        observations=parsed.observations,
        current_task=_clean_value(parsed.tags.get("current-task")),
        suggested_response=_clean_value(parsed.tags.get("suggested-response")),
        extracted=extracted,
        warnings=warnings,
    )


LARGE_INPUT_TOKENS = 200
MIN_OUTPUT_TOKENS = 10
MIN_OUTPUT_RATIO = 0.02


def is_compressed(input_tokens: int, output_tokens: int) -> bool:
    """Accept a reflection only if it is strictly smaller and not degenerate.

    Degenerate: nothing at all, or (for inputs of ``LARGE_INPUT_TOKENS`` or more)
    fewer than ``MIN_OUTPUT_TOKENS`` tokens or under 2% of the input — a log that
    small has lost the memory rather than condensed it.
    """
    if output_tokens <= 0 or output_tokens >= input_tokens:
        return False
    if input_tokens >= LARGE_INPUT_TOKENS:
        if output_tokens < MIN_OUTPUT_TOKENS or output_tokens < input_tokens * MIN_OUTPUT_RATIO:
            return False
    return True
