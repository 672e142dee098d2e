"""The Reflector: condenses the observation log when it grows past its threshold.

Its prompt is a ladder by age: the newest days of the log stay close to what the Observer
wrote, older days are condensed harder, the oldest hardest. The engine calls it at compression
level 0 first and, while the result is still over the threshold, again at levels 1, 2 and 3,
each shifting the ladder towards shorter. At no level may it drop 🔴 names, numbers and dates
or ✅ outcomes. An empty, degenerate or non-shrinking result is never committed.
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
"""Written into the human message as ``Compression level: N`` so the level is visible in traces."""


class ReflectorOutputError(ValueError):
    """The Reflector reply was empty or degenerate; the original observations stay."""


_REFLECTOR_RULES = """\
You receive the observation log an assistant keeps instead of its old conversations. It has
grown too long. Rewrite it shorter, so that the assistant can still answer what it will be
asked weeks from now: facts about the user, what changed and when, how many times something
happened, what the assistant recommended, how long ago something was.

What must survive at every level
- Every 🔴 name, number, amount, date and time, and every ✅ outcome. Shorten the words around
  them, never them.
- The current value of everything that changed, with the value it replaced when that still
  matters ("budget now 2,500 EUR, was 3,000"). Drop the superseded line itself.
- Assertions over questions: something the user only asked about never overrides or erases
  what the user stated. The user is authoritative about themselves.
- Countable events: when you merge them, keep their number and dates ("User ran 3 times:
  2026-02-02, 2026-02-05, 2026-02-09").
- The assistant's recommendations and lists with the details that tell the items apart.
- Dates resolved at the end of a line, "(meaning 2026-03-13)", stay as they are.
- The log's language: write in the language the log is written in; never translate names.
Never add anything that is not in the log.

The age ladder (count back from the newest Date in the log)
- Recent days (the last 7): keep nearly as written; merge only repeats.
- Older days (8 to 30 days back): merge related lines of a day into one; drop 🟢 lines and
  🟡 lines that no longer matter.
- Old days (31 to 90 days back): two to four lines per day, 🔴 and ✅ content only.
- The oldest days (over 90 days back): one line per day, or one line for a run of quiet days,
  keeping their 🔴 facts.
"""

_REFLECTOR_FORMAT = """\
Reply with these tags and nothing else:
<observations>
the consolidated log
</observations>
<current-task>Optional: what the user is working on now, if the log shows it.</current-task>
<suggested-response>Optional: how the assistant should continue, if the log shows it.</suggested-response>"""

_LEVEL_GUIDANCE = {
    0: "Compression level 0: follow the age ladder as written; remove repeats and superseded lines.",
    1: (
        "Compression level 1: a first attempt was still too long (aim for about two thirds of the input). "
        "Move every band one step down the ladder: treat recent days as older days, older as old, old as "
        "oldest."
    ),
    2: (
        "Compression level 2: earlier attempts were still too long (aim for about half of the input). "
        "Keep only the last 3 days nearly as written; everything before them gets at most two lines per day, "
        "🔴 and ✅ content only."
    ),
    3: (
        "Compression level 3: the log must shrink hard (aim for about a third of the input). Keep only the "
        "latest day in detail; every earlier day becomes one line of its 🔴 and ✅ content, and runs of days "
        "on one topic share a line. The must-survive list above still holds in full."
    ),
}


def reflector_system_prompt(*, instruction: str | None, level: int, inline_extractors: Sequence[Any] = ()) -> str:
    """The Reflector system prompt for one compression level."""
    level = max(0, min(MAX_COMPRESSION_LEVEL, level))
    parts = [REFLECTOR_PROMPT_MARKER, _REFLECTOR_RULES, LOG_CONVENTIONS, _REFLECTOR_FORMAT]
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    if extractors:
        parts.append(_extractor_prompt(extractors))
    if instruction and instruction.strip():
        parts.append("Additional instructions from the application:\n" + instruction.strip())
    parts.append(_LEVEL_GUIDANCE[level])
    return "\n\n".join(parts)


def build_reflector_messages(
    observations: str,
    *,
    instruction: str | None = None,
    level: int = 0,
    target_tokens: int | None = None,
    inline_extractors: Sequence[Any] = (),
) -> list[BaseMessage]:
    """System prompt (rules, level guidance) + the log to condense."""
    if not 0 <= level <= MAX_COMPRESSION_LEVEL:
        raise ValueError(f"level must be between 0 and {MAX_COMPRESSION_LEVEL}, got {level}")
    extractors = [_extractor_triplet(item) for item in inline_extractors]
    system = reflector_system_prompt(instruction=instruction, level=level, inline_extractors=extractors)
    sections = [f"{COMPRESSION_LEVEL_LABEL} {level}"]
    if target_tokens:
        sections.append(f"Target length: at most about {target_tokens} tokens.")
    previous = _extractor_previous(extractors)
    if previous:
        sections.append("Previous extra values:\n" + previous)
    from .language import language_line  # its script patterns compile on first use, not on import

    language = language_line(observations, what="the consolidated log")
    if language:
        sections.append(language)
    log = neutralise(observations.strip())
    sections.append(f"Observation log to condense:\n<observation-log>\n{log}\n</observation-log>")
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
