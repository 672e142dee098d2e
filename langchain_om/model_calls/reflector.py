"""The Reflector: condenses the observation log when it grows past its threshold.

The engine calls it at compression level 0 first and, when the result is not
smaller than the input, again with stronger guidance (levels 1 and 2). An
empty, degenerate or non-shrinking result is never committed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage

from ..foundation.fence import neutralise
from .observer import _extractor_previous, _extractor_prompt, _extractor_triplet
from .reply_parsing import _clean_value, parse_tagged_output

REFLECTOR_PROMPT_MARKER = "You are the Reflector of langchain-om, the memory consolidator of an AI assistant."
"""First line of every Reflector system prompt; scripted models and tests recognise prompts by it."""

MAX_COMPRESSION_LEVEL = 2
COMPRESSION_LEVEL_LABEL = "Compression level:"
"""Written into the human message as ``Compression level: N`` so the level is visible in traces."""


class ReflectorOutputError(ValueError):
    """The Reflector reply was empty or degenerate; the original observations stay."""


_REFLECTOR_RULES = """\
You receive the observation log that an assistant keeps instead of its old
conversation history. It has grown too long. Rewrite it into a shorter,
consolidated log that keeps everything the assistant still needs.

Rules:
- Keep the format: "Date: YYYY-MM-DD (Weekday)" headers, then bullets
  "* <mark> (HH:MM) <text>" with the priority marks 🔴 important, 🟡 maybe useful,
  🟢 detail. Days stay in chronological order.
- Merge duplicates and repeated statements of the same fact into one bullet
  (keep the earliest date and time the fact was stated, and add the latest if
  it matters).
- Keep every 🔴 item unless a later observation supersedes it. When a fact
  changed, keep only the current state and, if useful, a short note of the change
  ("User moved the trip to 2026-12-11; was 2026-12-04").
- Drop superseded facts, finished intermediate steps, and 🟢 details that no
  longer matter.
- Keep dates, times, names, numbers and the user's own commitments exactly.
- Keep the difference between what the user said and what the assistant did.
- Never add information that is not in the log.
"""

_REFLECTOR_FORMAT = """\
Reply with these tags and nothing else:
<observations>
the consolidated log
</observations>
<current-task>Optional: what the user is working on now, if the log shows it.</current-task>
<suggested-response>Optional: how the assistant should continue, if the log shows it.</suggested-response>"""

_LEVEL_GUIDANCE = {
    0: "Compression: consolidate and remove redundancy; keep all details that may still matter.",
    1: (
        "Compression: a previous attempt was not short enough. Compress harder: aim for about half of "
        "the input length. Merge related bullets of the same day into one, drop 🟢 lines and "
        "🟡 lines that are no longer relevant."
    ),
    2: (
        "Compression: previous attempts were still too long. Compress aggressively: keep only 🔴 items "
        "and the latest state of each topic, one short bullet each, and aim for about a third of the "
        "input length. Drop every 🟢 line and all but the most recent 🟡 lines."
    ),
}


def reflector_system_prompt(*, instruction: str | None, level: int, inline_extractors: Sequence[Any] = ()) -> str:
    """The Reflector system prompt for one compression level."""
    level = max(0, min(MAX_COMPRESSION_LEVEL, level))
    parts = [REFLECTOR_PROMPT_MARKER, _REFLECTOR_RULES, _REFLECTOR_FORMAT]
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
