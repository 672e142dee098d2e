"""Checks a parsed Observer or Reflector reply before it becomes memory.

Parsing (``reply_parsing``) is tolerant about the envelope: tags, fences, chatter. This module
judges the content: is it observations at all? A small model given OM's prompt may answer with a
refusal, a greeting, the assistant's part played ("Sure, I'd be happy to help ..."), the
transcript copied back with its stamps, the prompt's own instructions or template, or a log
whose header has a shape of its own (``Date: 2026-03-02, Time: 19:27``).

What the repair makes certain is repaired: a header with an ISO date gets the standard shape and
a computed weekday; a bullet without a priority mark that is shaped like a note (opening with its
time, ✅ or its subject) gets 🟡, the neutral mark; a tagged log with no header at all, observing
a transcript of one day, gets that day's header. Everything else raises ``UnusableReply``, which
``replies`` treats like a loop: asked for once more, then refused under the failure policy.
Nothing here guesses: a line that is not certainly an observation is never stored as one.

The continuation hints (current task, suggested response, thread title) are dropped, not
refused, when they are a refusal or the prompt's own instruction copied back: the observations
of the same reply can still be good, and an empty hint only means the agent gets none.

A reflection must keep what the Reflector prompt says must survive: the dates (the newest day's
header at least) and the facts of the 🔴 lines (their numbers and names) in proportion to the
length it kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from datetime import date
from functools import lru_cache

from ..foundation.log_dates import weekday_name

__all__ = [
    "UnusableReply",
    "check_hint",
    "check_observations",
    "check_reflection",
    "describe_unusable",
    "log_dates",
    "transcript_dates",
]

FACTS_KEPT_MIN = 0.5
"""Share of the input's 🔴 facts (numbers, names) a reflection of the input's length must keep:
under half means the model rewrote the log into something else, not a shorter log. A shorter
reflection is held to the same share of what its length could hold (``SHRINK_FLOOR``)."""
SHRINK_FLOOR = 0.25
"""The length ratio below which a reflection is judged as if it were this long: a target can ask
for a log half as long (the Reflector then lets older 🔴 detail go, as its prompt orders), but a
one-line "summary" of a long log never passes for a compliant cut."""
FACTS_CHECKED_FROM = 4
"""Fewer distinct facts than this in the input are too few to judge a share by."""
ECHO_SHARE = 0.5
"""Share of a line's text found word for word in OM's instructions that makes it an echo."""
_SHINGLE = 24
_STEP = 4

MARKS = ("🔴", "🟡", "🟢")
NEUTRAL_MARK = "🟡"

_HEADER = re.compile(r"^\s*(?:#+\s*)?\**\s*Date\s*:", re.IGNORECASE | re.MULTILINE)
"""A ``Date:`` header of any shape a model writes: ``match`` on a line, ``search`` in a whole reply."""
_HEADER_DATE = re.compile(r"(\d{4})\s*[-/.年]\s*(\d{1,2})\s*[-/.月]\s*(\d{1,2})")
_STAMP = re.compile(r"^\s*(?:[*\-•]\s*)?\[\s*(\d{4}-\d{2}-\d{2})(?:[ T]\w+)?[ T]\d{1,2}:\d{2}(?::\d{2})?[^\]]*\]")
"""A transcript line copied back (``[2026-03-02 Monday 19:27] User: ...``; the weekday optional)."""
_TRANSCRIPT_STAMP = re.compile(r"^\[(\d{4}-\d{2}-\d{2})(?: \w+)? \d{2}:\d{2}\]", re.MULTILINE)
"""The transcript's own stamps (``transcript._fmt_time``: date, weekday, time)."""
_THREAD_LINE = re.compile(r"^\s*===\s*Thread\b.*===\s*$")
_MARKUP_ONLY = re.compile(r"^\s*(?:[<‹]\s*/?\s*[\w-]+(?:\s[^<>‹›\n]*)?[>›]\s*)+$")
"""A line of tags only (``fence.neutralise`` may have turned its ``<`` into ``‹``)."""
_BULLET = re.compile(r"^(\s*)(?:[*\-•]|\d+[.)])\s+(.*)$")
_BARE_MARK = re.compile(r"^(\s*)([🔴🟡🟢])\s*(.*)$")
_REFUSAL = re.compile(
    r"\bi(?:'|’)?m sorry\b|\bi am sorry\b|\bi can(?:not|(?:'|’)t) (?:assist|help|do that|comply)|"
    r"\bi(?:'|’)?m (?:not able|unable) to\b|\bas an ai\b|申し訳(?:ありません|ございません)|"
    r"(?:お手伝い|対応|お答え|回答|協力)(?:することは)?できません",
    re.IGNORECASE,
)
_GREETING = re.compile(
    r"^(?:good (?:night|morning|evening|afternoon|bye)|goodbye|bye|hi|hello|hey|thanks|thank you|"
    r"you(?:'|’)re welcome|got it|sure|okay|ok|おやすみ(?:なさい)?|こんにちは|こんばんは|おはよう(?:ございます)?|"
    r"ありがとう(?:ございます)?|了解(?:です|しました)?|さようなら)\b[\s!.。！,、]*",
    re.IGNORECASE,
)
_ROLE_PLAY = re.compile(
    r"^(?:(?:sure|certainly|of course|absolutely|great|got it|happy to|i(?:'|’)d be happy|i would be happy|"
    r"i(?:'|’)ll|let(?:'|’)s|here(?:'|’)s how)\b|もちろん|承知しました|かしこまりました|喜んで)",
    re.IGNORECASE,
)
_NOTE_SHAPE = re.compile(r"^(?:\(\d{1,2}:\d{2}\)|✅|(?:User|Assistant|ユーザー|アシスタント)\b)", re.IGNORECASE)
"""How an unmarked bullet must begin to be certainly a note: the note's time, the done mark or its
subject (a role-play list such as "1. Create a calendar" has none of them)."""
_TEMPLATE = re.compile(r"<(?:YYYY-MM-DD|Weekday|HH:MM|mark|observation)>")
_NUMBER = re.compile(r"\d[\d,.]*\d|\d")
_TIME_PREFIX = re.compile(r"^\s*(?:[*\-•]\s*)?(?:[🔴🟡🟢]\s*)?(?:\(\d{1,2}:\d{2}\)\s*)?")
_NAME = re.compile(r"(?<![\w])[A-Z][\w'’-]+|[\u30a0-\u30ff]{2,}|[\u4e00-\u9fff]{2,}")
_NOT_NAMES = frozenset({"User", "Assistant", "Date", "The", "A", "An", "I", "It", "He", "She", "They", "We"})


class UnusableReply(ValueError):
    """The reply is not observations (``str`` says what it is); retried like a looping reply."""


def _plain(text: str) -> str:
    return " ".join(text.casefold().split())


def describe_unusable(text: str) -> str | None:
    """What a reply with no observation lines is, in a few words (``None`` if nothing specific)."""
    flat = " ".join(re.sub(r"</?\s*[\w-]+\s*>", " ", text).split())
    quote = flat if len(flat) <= 80 else flat[:79] + "…"
    if _TEMPLATE.search(flat):
        return f"the reply template copied back, not observations ({quote!r})"
    if _REFUSAL.search(flat) and len(flat) <= 400:
        return f"a refusal, not observations ({quote!r})"
    if flat and _GREETING.fullmatch(flat):
        return f"a greeting, not observations ({quote!r})"
    if _ROLE_PLAY.match(flat) and not _HEADER.search(text):
        return f"the assistant's part played, not observations ({quote!r})"
    return None


def transcript_dates(prompt_text: str) -> set[str]:
    """The dates of the transcript's stamped messages (``[YYYY-MM-DD HH:MM] ...`` lines)."""
    return set(_TRANSCRIPT_STAMP.findall(prompt_text))


def _header(day: date) -> str:
    return f"Date: {day.isoformat()} ({weekday_name(day)})"


def _header_day(line: str) -> date | None:
    match = _HEADER_DATE.search(line)
    if match is None:
        return None
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


class _Echo:
    """OM's instructions (the system prompt), for telling a copied instruction from a note. Its
    shingles are every ``_SHINGLE``-character piece of the instructions, built once per prompt
    (``_shingles``): a line's pieces are then set lookups, not scans of the whole prompt."""

    def __init__(self, instructions: str) -> None:
        self.text, self.shingles = _shingles(instructions)

    def __call__(self, line: str) -> bool:
        if not self.text:
            return False
        value = _plain(line)
        if len(value) < _SHINGLE:
            return len(value) >= 12 and value in self.text
        starts = range(0, len(value) - _SHINGLE + 1, _STEP)
        found = sum(1 for i in starts if value[i:i + _SHINGLE] in self.shingles)
        return found >= ECHO_SHARE * len(starts)


@lru_cache(maxsize=16)
def _shingles(instructions: str) -> tuple[str, frozenset[str]]:
    """The instructions as compared (``_plain``) and their pieces of ``_SHINGLE`` characters: a few
    prompts per process (each Observer and Reflector variant), so a small cache holds them."""
    text = _plain(instructions)
    return text, frozenset(text[i:i + _SHINGLE] for i in range(len(text) - _SHINGLE + 1))


def check_hint(value: str | None, instructions: str) -> str | None:
    """``value`` unless it is a refusal, a greeting or OM's own instruction copied back."""
    if value is None:
        return None
    if describe_unusable(value) is not None or _Echo(instructions)(value):
        return None
    return value


def check_observations(
    observations: str, *, instructions: str = "", dates: Iterable[str] = (), tagged: bool = True,
    dated: bool = True,
) -> tuple[str, list[str]]:
    """The observations with their certain repairs and a warning per kind of repair.

    ``instructions``: the system prompt (lines copied from it are dropped); ``dates``: the
    transcript's dates (a headerless log of a one-day transcript gets that day's header);
    ``tagged``: the reply had its ``<observations>`` tag (without it, nothing is inferred);
    ``dated``: notes need a header (a Reflector condensing a log that has none keeps none).
    Raises ``UnusableReply`` when a line is not certainly an observation."""
    echo = _Echo(instructions)
    days = sorted(set(dates))
    kept: list[str] = []
    warnings: list[str] = []
    reshaped = marked = dropped = 0
    stamped: list[str] = []
    headerless: list[str] = []
    prose: list[str] = []
    resolved = False
    after_note = False
    for raw in observations.splitlines():
        line = raw.rstrip()
        if not line.strip():
            kept.append("")
            after_note = False
            continue
        if _MARKUP_ONLY.match(line):
            continue  # a stray tag of the reply's envelope, not a note
        if _THREAD_LINE.match(line):
            kept.append(line.strip())
            after_note = False
            continue
        if _HEADER.match(line):
            day = _header_day(line)
            resolved, after_note = day is not None, False
            if day is None:
                headerless.append(line)
                continue
            header = _header(day)
            reshaped += header != line.strip()
            kept.append(header)
            continue
        if _STAMP.match(line):
            stamped.append(line)
            continue
        if echo(line):
            dropped += 1
            continue
        bullet = _BULLET.match(line)
        bare = _BARE_MARK.match(line)
        if bare is None and bullet is not None and not bullet.group(2).lstrip().startswith(MARKS) \
                and not _NOTE_SHAPE.match(bullet.group(2).lstrip()):
            bullet = None  # not a note for certain: a list item of the model's own
        if bullet is None and bare is None:
            if after_note:
                kept.append(line)  # the continuation of a note
            else:
                prose.append(line)
            continue
        if not resolved and dated:
            if tagged and len(days) == 1 and not any(_HEADER.match(k) for k in kept):
                kept.insert(0, _header(date.fromisoformat(days[0])))
                reshaped += 1
                resolved = True
            else:
                headerless.append(line)
                continue
        if bullet is not None:
            indent, text = bullet.group(1), bullet.group(2)
        else:
            assert bare is not None
            indent, text = bare.group(1), bare.group(0).strip()
        if not text.lstrip().startswith(MARKS):
            text = f"{NEUTRAL_MARK} {text.lstrip()}"
            marked += 1
        kept.append(f"{indent}* {text}")
        after_note = True
    if stamped:
        raise UnusableReply(f"the transcript echoed back, not observations ({len(stamped)} stamped lines such as "
                            f"{_quote(stamped[0])!r})")
    if headerless:
        raise UnusableReply(f"{len(headerless)} lines without a resolved 'Date:' header (such as "
                            f"{_quote(headerless[0])!r})")
    if prose:
        raise UnusableReply(f"{len(prose)} lines that are not observation lines, without a priority mark "
                            f"(such as {_quote(prose[0])!r})")
    text = _tidy(kept)
    if not any(_BULLET.match(line) for line in text.splitlines()):
        raise UnusableReply("no observation lines" + (" (only OM's own instructions copied back)" if dropped else ""))
    if reshaped:
        warnings.append(f"repaired {reshaped} 'Date:' headers to 'Date: YYYY-MM-DD (Weekday)'")
    if marked:
        warnings.append(f"gave {marked} lines without a priority mark the mark {NEUTRAL_MARK}")
    if dropped:
        warnings.append(f"dropped {dropped} lines copied from OM's instructions")
    return text, warnings


def _quote(line: str) -> str:
    flat = " ".join(line.split())
    return flat if len(flat) <= 60 else flat[:59] + "…"


def _tidy(lines: list[str]) -> str:
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] == ""):
            continue
        if _HEADER.match(line) and out and out[-1] != "":
            out.append("")
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return "\n".join(out)


def _red_facts(log: str) -> set[str]:
    """The numbers and names on the 🔴 lines of a log (times of day left out: a condensed day
    may drop them)."""
    facts: set[str] = set()
    for line in log.splitlines():
        if "🔴" not in line:
            continue
        text = _TIME_PREFIX.sub("", line)
        facts.update(n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text))
        facts.update(name for name in _NAME.findall(text) if name not in _NOT_NAMES)
    return facts


def log_dates(log: str) -> set[str]:
    """The ISO dates of a log's ``Date:`` headers."""
    return {d.isoformat() for d in map(_header_day, filter(_HEADER.match, log.splitlines())) if d is not None}


def check_reflection(source: str, reflection: str) -> None:
    """Refuse (``UnusableReply``) a reflection that lost the log's dates, or its 🔴 facts out of
    proportion to the length it kept."""
    before = {d for d in map(_header_day, filter(_HEADER.match, source.splitlines())) if d is not None}
    after = {d for d in map(_header_day, filter(_HEADER.match, reflection.splitlines())) if d is not None}
    if before and not after:
        raise UnusableReply("the reflection lost the log's dates (no 'Date:' header left)")
    if before and max(before) not in after:
        raise UnusableReply(f"the reflection lost the newest day of the log ({max(before).isoformat()})")
    facts = _red_facts(source)
    if len(facts) < FACTS_CHECKED_FROM:
        return
    notes = "\n".join(line for line in reflection.splitlines() if not _HEADER.match(line))
    kept = sum(1 for fact in facts if fact in notes.replace(",", ""))
    # facts are judged against the length kept: a cut to the target keeps them in proportion,
    # a rewrite into generalities does not (its facts per character fall far below the log's);
    # headers count in neither (their dates would match a log's small numbers)
    source_notes = "\n".join(line for line in source.splitlines() if not _HEADER.match(line))
    shrink = max(SHRINK_FLOOR, min(1.0, len(notes) / max(1, len(source_notes))))
    if kept < FACTS_KEPT_MIN * shrink * len(facts):
        raise UnusableReply(f"the reflection lost most of the user's facts (kept {kept} of the {len(facts)} "
                            "numbers and names of the log's 🔴 lines)")
