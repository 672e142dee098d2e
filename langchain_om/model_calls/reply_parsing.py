"""Tolerant parsing of the Observer's and the Reflector's replies: tags may be missing, fenced,
repeated or wrapped in chatter; what counts is a usable observation log, else the reply is
refused (and the cycle fails without committing anything)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from ..foundation.fence import neutralise

PRIORITY_MARKS = ("🔴", "🟡", "🟢")
BUILTIN_TAGS = ("observations", "current-task", "suggested-response", "thread-title")


class ObserverOutputError(ValueError):
    """The Observer reply held nothing usable; the cycle fails and nothing is committed."""


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
_TAG_LINE_RE = re.compile(r"</?\s*[\w-]+\s*>")
_SURROGATE_RE = re.compile("[\ud800-\udfff]")
DATE_LINE_RE = re.compile(r"^\s*(?:#+\s*|\*\*)?Date:\s*\S", re.IGNORECASE)
_BULLET_RE = re.compile(r"^\s*(?:[*\-•]|\d+[.)])\s+\S|^\s*[🔴🟡🟢]")
_PLACEHOLDER_RE = re.compile(r"<(?:YYYY-MM-DD|Weekday|HH:MM|mark|observation|time|text)>|YYYY-MM-DD|\bHH:MM\b",
                             re.IGNORECASE)
_JUNK_PREFIXES = (
    "here are", "here is", "here's", "sure", "certainly", "of course", "below are", "i have", "i've",
    "okay", "ok,", "as requested", "these observations", "the following", "note:", "reply with",
    "output:", "observations:",
)


def _tag_pattern(name: str, all_names: Sequence[str]) -> re.Pattern[str]:
    return _tag_pattern_of(name, tuple(all_names))


@lru_cache(maxsize=256)
def _tag_pattern_of(name: str, all_names: tuple[str, ...]) -> re.Pattern[str]:
    """Built once per tag set (every reply is parsed with the same few): escaping and joining the
    names, then the ``re`` cache lookup, came back on every tag of every reply."""
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
        if not _closing_pattern(name).search(match.group(0)):
            warnings.append(f"<{name}> was not closed")
        found[name] = match.group(1)
    return found, warnings


@lru_cache(maxsize=256)
def _closing_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"<\s*/\s*{re.escape(name)}\s*>", re.IGNORECASE)


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
        if _TAG_LINE_RE.fullmatch(stripped) or _FENCE_RE.fullmatch(stripped):
            continue
        if _PLACEHOLDER_RE.search(stripped):
            continue
        lowered = stripped.lower().lstrip("*# ")
        if not DATE_LINE_RE.match(stripped) and not _BULLET_RE.match(stripped) and lowered.startswith(_JUNK_PREFIXES):
            continue
        if DATE_LINE_RE.match(stripped):
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
        line.strip() and not DATE_LINE_RE.match(line) and re.search(r"\w", line) for line in text.splitlines()
    )


def _structured_lines(text: str) -> str:
    """Fallback when the <observations> tag is missing: the Date headers and bullets in the reply."""
    lines = [line for line in text.splitlines() if DATE_LINE_RE.match(line) or _BULLET_RE.match(line)]
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
