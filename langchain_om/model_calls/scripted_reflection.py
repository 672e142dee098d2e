"""The scripted Reflector's rules (``langchain_om.testing.ScriptedObserverModel``), by rule, as a
model following the Reflector prompt's contract writes a condensed log: repeats merged, a value
stated again kept once, newest, naming the value it replaced, events on different dates kept one
per line, 🔴 only on what the user stated, older 🟡/🟢 detail let go level by level, and whole
older lines let go in the prompt's order when the target still is not met.

Deterministic and offline: tests, the demo and the quickstart notebook run on it.
"""

from __future__ import annotations

import re

from .note_wording import Note, cut_note

_BULLET_TIME_RE = re.compile(r"^\s*[*\-•]\s*(🔴|🟡|🟢)?\s*(?:\((\d{2}:\d{2})\))?\s*(.*)$")


def _estimate(text: str) -> int:
    """Tokens as the scripted models count them (characters / 4)."""
    return max(1, len(text) // 4) if text else 0


_LEVEL_LIMITS: dict[int, tuple[int | None, int | None]] = {0: (None, None), 1: (None, None), 2: (100, None),
                                                           3: (60, 140), 4: (48, 48)}
"""Per level, how many characters a 🔴 note keeps on older days and on the newest day (None: whole).
Level 4 is the scripted Reflector's own last resort when level 3 cannot shrink the log."""


def condense_log(log: str, level: int = 0) -> str:
    """The scripted Reflector's rules, usable on their own (deterministic).

    Repeated notes go (the newest copy stays) and a day's notes gather under one ``Date:`` header.
    A value stated again with other numbers is kept once, newest, naming the value it replaced
    ("... 255 dollars (was 225) (meaning ...)"); lines that differ only in their dates are separate
    events and stay. 🔴 stays only on what the user stated (an "Assistant" line becomes 🟡). Level
    0 drops 🟢 and keeps each day's newest 🟡; level 1 keeps a 🟡 only on the newest day; levels
    2-3 also shorten older days' 🔴 notes by cutting their tail at a word boundary ("…"). Every
    🔴 note survives at every level. A level that cannot shrink the log hands it to the next; the
    result is never longer than ``log`` (unchanged when nothing can go)."""
    days = _merged_days(log)
    older, newest = _LEVEL_LIMITS[level]
    blocks: list[str] = []
    for index, (header, items) in enumerate(days.items()):
        last = index == len(days) - 1
        yellows = [i for i in items if i[0] == "🟡"]
        keep_yellow = yellows[-1] if yellows and (level == 0 or (last and level < 4)) else None
        limit = newest if last else older
        kept = [cut_note(i, limit) if i[0] == "🔴" else cut_note(i, (None, 120, 100, 80, 80)[level])
                for i in items if i[0] == "🔴" or i is keep_yellow]
        if kept:
            blocks.append(header + "\n" + "\n".join(_bullet(*item) for item in kept))
    text = "\n\n".join(blocks)
    if text and len(text) < len(log.strip()):
        return text
    return condense_log(log, level + 1) if level < 4 else log.strip()


_NUMBER = re.compile(r"\d{4}-\d{2}-\d{2}|\d+(?:[.,]\d+)*")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_WAS = re.compile(r"\s*\(was [^()]*\)")
_DATED_TAIL = re.compile(r"\s*[(（][^()（）]*\d{4}-\d{2}-\d{2}[^()（）]*[)）]\s*$")
_ASSISTANT_LINE = re.compile(r"^(?:✅\s*)?(?:Assistant|アシスタント)")


def _value_words(text: str) -> list[str]:
    """What a note says with its numbers, its "(was ...)" and its resolved date taken out, as words;
    a word cut short ("detail…") ends the list: the Observer may cut one note sooner than another."""
    body = _DATED_TAIL.sub("", _WAS.sub("", text))
    words = re.sub(r"[^\w…]+", " ", _NUMBER.sub("#", body).lower()).split()
    for index, word in enumerate(words):
        if "…" in word:
            return words[:index]
    return words


def _same_statement(a: list[str], b: list[str]) -> bool:
    """Two notes state the same thing (with the same or other values): their words agree as far as
    the shorter goes, and that is more than a few words (CJK text is one word per clause)."""
    shorter = min(len(a), len(b))
    long_enough = shorter >= 4 or (shorter >= 1 and sum(map(len, a[:shorter])) >= 8)
    return long_enough and a[:shorter] == b[:shorter]


def _values(text: str) -> list[str]:
    return _NUMBER.findall(_DATED_TAIL.sub("", _WAS.sub("", text)))


def _with_was(newest: str, older: str) -> str:
    """``newest`` naming the value of ``older`` it replaced (the last number that differs), before
    its resolved-date suffix, which stays at the end of the line."""
    new_values, old_values = _values(newest), _values(older)
    changed = [old for new, old in zip(new_values, old_values, strict=False)
               if new != old and not _ISO_DATE.match(old)]
    body = _WAS.sub("", newest)
    if not changed:
        return body
    tail = _DATED_TAIL.search(body)
    cut = tail.start() if tail else len(body)
    return f"{body[:cut]} (was {changed[-1]}){body[cut:]}"


def _merged_days(log: str) -> dict[str, list[Note]]:
    """The log's notes by day: repeats and superseded values merged into their newest copy."""
    notes: list[tuple[str, Note]] = []
    header = "Date: unknown"
    headers: list[str] = []
    for raw in log.splitlines():
        line = raw.strip()
        if line.lower().startswith("date:"):
            header = line
            if header not in headers:
                headers.append(header)
            continue
        match = _BULLET_TIME_RE.match(line) if line else None
        if not match:
            continue
        mark, time_, text = match.group(1) or "🟡", match.group(2) or "", match.group(3).strip()
        if mark == "🔴" and _ASSISTANT_LINE.match(text):
            mark = "🟡"  # 🔴 is for what the user stated or decided
        notes.append((header, (mark, time_, text)))
    words = [_value_words(note[2]) for _header, note in notes]
    for index, (_header, note) in enumerate(notes):
        previous = next((i for i in range(index - 1, -1, -1)
                         if notes[i][1][2] and _same_statement(words[i], words[index])), None)
        if previous is None:
            continue
        old = notes[previous][1]
        old_values = [v for v in _values(old[2]) if not _ISO_DATE.match(v)]
        new_values = [v for v in _values(note[2]) if not _ISO_DATE.match(v)]
        same_text = _WAS.sub("", old[2]) == _WAS.sub("", note[2])
        if old_values == new_values and not same_text:
            continue  # only the dates differ: another dated event, kept on its own line
        if same_text and notes[previous][0] == notes[index][0]:
            notes[index] = (notes[index][0], ("", "", ""))  # a repeat within its day: the first stays
            continue
        mark = "🔴" if "🔴" in (old[0], note[0]) else note[0]
        text = note[2] if old_values == new_values else _with_was(note[2], old[2])
        notes[index] = (notes[index][0], (mark, note[1], text))
        notes[previous] = (notes[previous][0], ("", "", ""))  # superseded: dropped
    days: dict[str, list[Note]] = {h: [] for h in headers}
    for header_of, note in notes:
        if note[2]:
            days.setdefault(header_of, []).append(note)
    return {h: items for h, items in days.items() if items}


def drop_oldest_lines(log: str, target: int) -> str:
    """``log`` with whole lines of its older part let go until it is about ``target`` tokens: 🟡 and
    🟢 lines first, then 🔴 lines, oldest first (the Reflector prompt's order when the target and
    what to keep conflict). The newest day stays whole; a log of one day keeps its newest quarter."""
    blocks = [b.splitlines() for b in log.split("\n\n") if b.strip()]
    if not blocks:
        return log
    candidates: list[tuple[int, str]] = []  # (block index, line), oldest first
    for index, block in enumerate(blocks[:-1] if len(blocks) > 1 else blocks):
        lines = block[1:]
        if len(blocks) == 1:
            lines = lines[: len(lines) - max(1, len(lines) // 4)]
        candidates.extend((index, line) for line in lines)

    def text() -> str:
        return "\n\n".join("\n".join(b) for b in blocks if len(b) > 1)

    for marks in (("🟡", "🟢"), ("🔴", "")):
        for index, line in candidates:
            if _estimate(text()) <= target:
                return text()
            match = _BULLET_TIME_RE.match(line)
            if match and (match.group(1) or "") in marks and line in blocks[index]:
                blocks[index].remove(line)
    return text()


def _bullet(mark: str, time_: str, text: str) -> str:
    return f"* {mark} ({time_}) {text}" if time_ else f"* {mark} {text}"
