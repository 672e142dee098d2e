"""Shortening an observation note so that what is left still reads as the note said it.

The scripted Reflector (``langchain_om.testing``) shortens a note only by cutting its tail: the
words it keeps are the note's own first words, in order, followed by "…". A cut never falls inside
a word (English) and, in text written without spaces (Japanese), falls after 、or 。 when one is
near the limit, else at a character. An absolute date the Observer put at the line's end
("(meaning 2026-03-03)", "(planned for 2026-03-13)") is kept after the cut, since it is what
questions about time ask for.
"""

from __future__ import annotations

import re

Note = tuple[str, str, str]
"""``(mark, time, text)`` of one bullet: ``("🔴", "09:00", "User said: ...")``."""

_MEANING = re.compile(r"\s*[(（](?:meaning|planned for) \d{4}-\d{2}-\d{2}[)）]$")
_CJK_STOPS = "、。，．！？!?）」』"
_TRIM = " ,;:、，"


def cut_text(text: str, limit: int) -> str:
    """``text`` on one line, at most about ``limit`` characters, cut at a word or clause boundary.

    Returns ``text`` (whitespace flattened) when it already fits; otherwise its first words
    followed by "…". A trailing "(meaning YYYY-MM-DD)" or "(planned for YYYY-MM-DD)" stays after the "…" (and
    does not count)."""
    flat = " ".join(text.split())
    meaning = _MEANING.search(flat)
    body = flat[: meaning.start()] if meaning else flat
    if len(body) <= limit:
        return flat
    cut = _cut_body(body, max(limit - 1, 1))
    if not cut.endswith("…"):  # a note cut once before keeps its one mark
        cut += " …" if cut.endswith((".", "!", "?")) else "…"  # "too. …": the note goes on, not the word
    return f"{cut} {meaning.group(0).strip()}" if meaning else cut


def _cut_body(body: str, room: int) -> str:
    head = body[:room]
    if body[room: room + 1] in ("", " "):
        return head.rstrip(_TRIM)  # the limit falls between two words
    space = head.rfind(" ")
    stop = max(head.rfind(c) for c in _CJK_STOPS)
    if stop > space and stop >= room // 2:
        return head[: stop + 1]  # Japanese: end on the nearest clause mark
    if _is_cjk(body[room - 1]) or _is_cjk(body[room]):
        return head.rstrip(_TRIM)  # text without spaces: a character boundary is a boundary
    if space > 0:
        return head[:space].rstrip(_TRIM)  # never cut a word in two
    return head  # a single token longer than the limit


def _is_cjk(char: str) -> bool:
    return "\u3000" <= char <= "\u9fff" or "\uf900" <= char <= "\ufaff" or "\uff00" <= char <= "\uffef"


def cut_note(note: Note, limit: int | None) -> Note:
    """``note`` with its text cut to about ``limit`` characters (unchanged when ``limit`` is None)."""
    return note if limit is None else (note[0], note[1], cut_text(note[2], limit))
