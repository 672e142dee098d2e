"""Saying an observation note in fewer words without losing what questions ask about.

The Reflector may shorten a 🔴 note but never drop its names, numbers, dates or ✅ outcome. These
rules do that deterministically for the scripted Reflector (``langchain_om.testing``): filler words
go, then only a note's first words and every word carrying a number, a date or a name stay, and
a day's notes may share one line. Notes are ``(mark, time, text)`` triples.
"""

from __future__ import annotations

Note = tuple[str, str, str]

_FILLER = frozenset(
    "a an the and or but so that this these those to of on in at by with about just really very "
    "also some any it it's is are was were be been am please said: said".split())


def terse_note(item: Note) -> Note:
    """A 🔴 note in fewer words: filler words go, every word with a digit, a capital or a mark stays
    (names, numbers, dates, ✅), and so does all text without spaces (Japanese)."""
    words = item[2].split()
    kept = [w for i, w in enumerate(words) if i == 0 or w.lower() not in _FILLER or any(c.isdigit() for c in w)]
    return item[0], item[1], " ".join(kept)


def note_gist(item: Note, head: int = 10) -> Note:
    """A 🔴 note cut to its gist: its first ``head`` words, then only the words that carry a number
    or a date (a digit) or a name (a capital not at a sentence's start), so none of those is lost."""
    words = terse_note(item)[2].split()
    if len(words) <= head:
        return item[0], item[1], " ".join(words)
    rest = [w for i, w in enumerate(words) if i >= head and (
        any(c.isdigit() or c == "✅" for c in w) or w == "(meaning"
        or (w[:1].isupper() and not words[i - 1].endswith((".", "!", "?")) and w.rstrip(".,!?;:") not in _PRONOUNS))]
    return item[0], item[1], " ".join([*words[:head], "…", *rest]) if rest else " ".join(words[:head]) + " …"


_PRONOUNS = frozenset({"I", "I'm", "I'll", "I've", "I'd"})


def joined_notes(reds: list[Note]) -> Note:
    """A day's 🔴 lines as one line, each kept whole (with its time), so nothing of them is lost."""
    first = reds[0]
    rest = "; ".join(f"({time_}) {text}" if time_ else text for _, time_, text in reds[1:])
    return "🔴", first[1], f"{first[2]}; {rest}"
