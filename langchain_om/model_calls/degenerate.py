"""Detect an Observer or Reflector reply that loops instead of answering.

Fast models sometimes fall into a loop: the same line hundreds of times, a short block repeated
until the output limit, or one endless line that says the same words over and over. Such a reply
parses (it holds Date and bullet lines) and, for the Reflector, is often smaller than its input,
so without this check it would be committed as the memory. ``degeneracy(text, baseline=prompt)``
is a pure function: it returns a short reason for a looping reply and ``None`` for a real one.

Repetition the model was given is not a loop: with a ``baseline`` (the prompt), a line counts only
for its occurrences beyond those in the baseline, and a repeated block the baseline already holds
is accepted. A Reflector that keeps the repeated lines of an old log, or an Observer that quotes a
pasted file of identical lines, is copying, not looping (and a log that repeats itself can still
be condensed).

Lines are compared with case and runs of whitespace ignored; the near-repeat rule and the tail
also ignore numbers (every run of digits becomes ``#``: a loop that counts "step 41, step 42,
..." is still a loop). Blank lines never count.

The checks and their thresholds (chosen so that real logs pass with a wide margin; the largest
counts seen in the scripted Observer/Reflector replies of the test suite are in brackets):

The three line rules also need the repeated lines to take ``REPEATED_CHARS_MIN`` (1,000)
characters or more: a template's "- (none)" may well stand 45 times in a reply (360
characters), while a looping bullet of 50 characters reaches 1,000 within 20 repeats. A short
line looped until the output limit is caught by the tail check.

* **one line repeated** — a line that occurs ``LINE_REPEAT_MIN`` (40) times or more and makes up
  at least ``LINE_REPEAT_SHARE`` (a third) of the reply's lines [14 times, in 54 lines]. A real
  log repeats its Date headers and priority prefixes, but whole lines only a few times ("- (none)"
  in an empty template, "Assistant replied: ok" after short turns), and never as a third of a long
  reply. Both conditions are needed: 40 Mondays in a year-long reflected log are a few percent of
  its lines, and a reply of five lines of which two are "- (none)" is not a loop.
* **one line repeated with only its numbers changing** — ``NEAR_REPEAT_MIN`` (100) times or more
  and at least ``NEAR_REPEAT_SHARE`` (half) of the lines [37 times, in 41 lines]. The bar is
  higher because legitimate logs do hold such lines: "User said: Turn 7: I prefer option 7" for
  a scripted conversation, one dated line per daily reminder. Counting loops cut by the output
  limit are caught by the tail check anyway.
* **a block repeated** — lines that repeat earlier lines make up at least ``DUPLICATE_SHARE``
  (60%) of the lines, and there are at least ``DUPLICATE_MIN`` (80) of them [44 of 54]. A k-line
  block looped N times has a share of 1 - 1/N whatever k is; a real log, whose lines differ at
  least in their times and content, stays far below.
* **a periodic tail** — the last ``TAIL_MIN_CHARS`` (2,000) characters or more repeat one block
  of at most ``MAX_PERIOD`` (2,000) characters, at least ``MIN_REPEATS`` (3) times. This is the
  loop cut by the output limit (it never reaches its closing tag); a real reply ends with its
  closing tags and never repeats 2,000 characters, numbers aside.
* **a periodic long line** — the same test inside every line of ``LONG_LINE_CHARS`` (1,500)
  characters or more, numbers included (a long line may list weeks or items by number): at its
  end (trailing punctuation and a closing tag ignored), its middle and its third quarter, over
  1,000 characters or a quarter of the line. This is the loop inside one endless sentence that
  the model eventually stopped. Real bullets are one sentence or two, far below 1,500
  characters, and do not repeat a block over a thousand characters.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "DUPLICATE_MIN",
    "DUPLICATE_SHARE",
    "LINE_REPEAT_MIN",
    "LINE_REPEAT_SHARE",
    "LONG_LINE_CHARS",
    "MAX_PERIOD",
    "MIN_REPEATS",
    "NEAR_REPEAT_MIN",
    "NEAR_REPEAT_SHARE",
    "REPEATED_CHARS_MIN",
    "TAIL_MIN_CHARS",
    "degeneracy",
]

LINE_REPEAT_MIN = 40
LINE_REPEAT_SHARE = 1 / 3
NEAR_REPEAT_MIN = 100
NEAR_REPEAT_SHARE = 1 / 2
REPEATED_CHARS_MIN = 1_000
DUPLICATE_MIN = 80
DUPLICATE_SHARE = 0.6
TAIL_MIN_CHARS = 2_000
MAX_PERIOD = 2_000
MIN_REPEATS = 3
LONG_LINE_CHARS = 1_500

_DIGITS = re.compile(r"\d+")
_LINE_END = re.compile(r"(?:\s|[.,;:!?)\]}\"'*…])*(?:</[A-Za-z][\w-]*>)?(?:\s|[.,;:!?)\]}\"'*…])*$")
_PROBE = 8
"""Characters compared first for a candidate period (most periods fail here, cheaply)."""
_TAIL_WINDOW = 4 * max(TAIL_MIN_CHARS, MIN_REPEATS * MAX_PERIOD)
"""Raw characters normalised for the tail check (whitespace and digits shrink when normalised)."""
_QUOTE = 60
"""How much of a repeated line or block a reason quotes."""


def degeneracy(text: str, *, baseline: str = "") -> str | None:
    """A short reason when ``text`` loops (see the module docstring), else ``None``.

    ``baseline`` is the text the model was given: repetition it already holds does not count."""
    if not text:
        return None
    given = _Baseline(baseline)
    return _repeated_lines(text, given) or _periodic_tail(text, given) or _periodic_long_line(text, given)


class _Baseline:
    """The prompt's lines and text, normalised once (built lazily: most replies need neither)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._exact: Counter[str] | None = None
        self._near: Counter[str] | None = None
        self._flat: str | None = None

    def count_exact(self, line: str) -> int:
        if not self.text:
            return 0
        if self._exact is None:
            self._exact = Counter(key for key in map(_plain, self.text.splitlines()) if key)
        return self._exact[line]

    def count_near(self, line: str) -> int:
        if not self.text:
            return 0
        if self._near is None:
            self._near = Counter(key for key in map(_normal, self.text.splitlines()) if key)
        return self._near[line]

    def holds(self, run: str) -> bool:
        if not self.text:
            return False
        if self._flat is None:
            self._flat = _normal(self.text)
        return run in self._flat


def _plain(text: str) -> str:
    """A line for exact comparison: case and runs of whitespace do not count."""
    return " ".join(text.casefold().split())


def _normal(text: str) -> str:
    """A line or text for comparison up to its numbers (a counting loop is still a loop)."""
    return _DIGITS.sub("#", _plain(text))


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _QUOTE else flat[: _QUOTE - 1] + "…"


class _Repeats(NamedTuple):
    line: str
    """The line repeated most often beyond what the baseline holds (as the reply wrote it first)."""
    occurrences: int
    """Its occurrences beyond the baseline's (the first one included)."""
    line_chars: int
    """Characters those occurrences take."""
    repeats: int
    """Lines (of any kind) that repeat an earlier line beyond what the baseline holds."""
    repeat_chars: int
    """Characters those repeats take."""


def _repeated_lines(text: str, given: _Baseline) -> str | None:
    raws = [raw for raw in text.splitlines() if raw.strip()]
    if len(raws) < LINE_REPEAT_MIN:
        return None
    exact = [_plain(raw) for raw in raws]
    # a baseline only lowers the counts: look at it only when the reply alone breaks a rule
    reason = _line_rules(raws, exact, _Baseline(""))
    return reason if reason is None or not given.text else _line_rules(raws, exact, given)


def _line_rules(raws: list[str], exact: list[str], given: _Baseline) -> str | None:
    found = _most_repeated(raws, exact, given.count_exact)
    if _enough(found.occurrences, found.line_chars, LINE_REPEAT_MIN, LINE_REPEAT_SHARE, len(raws)):
        return f"line {_quote(found.line)!r} repeated {found.occurrences:,} times (of {len(raws):,} lines)"
    near = _most_repeated(raws, _DIGITS.sub("#", "\n".join(exact)).split("\n"), given.count_near)
    if _enough(near.occurrences, near.line_chars, NEAR_REPEAT_MIN, NEAR_REPEAT_SHARE, len(raws)):
        return (f"line {_quote(near.line)!r} repeated {near.occurrences:,} times with only its numbers "
                f"changing (of {len(raws):,} lines)")
    if _enough(found.repeats, found.repeat_chars, DUPLICATE_MIN, DUPLICATE_SHARE, len(raws)):
        return (f"{found.repeats:,} of {len(raws):,} lines repeat earlier lines "
                f"(most often {_quote(found.line)!r}, {found.occurrences:,} times)")
    return None


def _enough(count: int, chars: int, least: int, share: float, lines: int) -> bool:
    return count >= least and count >= share * lines and chars >= REPEATED_CHARS_MIN


def _most_repeated(raws: list[str], keys: list[str], given: Callable[[str], int]) -> _Repeats:
    counts = Counter(keys)
    first = dict(zip(reversed(keys), reversed(raws), strict=True))
    excess = {key: count - max(1, given(key)) for key, count in counts.items()}
    line = max(excess, key=lambda key: excess[key])
    return _Repeats(
        line=first[line],
        occurrences=excess[line] + 1,
        line_chars=(excess[line] + 1) * len(line),
        repeats=sum(max(0, extra) for extra in excess.values()),
        repeat_chars=sum(max(0, extra) * len(key) for key, extra in excess.items()),
    )


def _period(text: str, *, min_chars: int) -> tuple[int, int] | None:
    """``(period, length)`` of the shortest period with which the end of ``text`` repeats a block
    over at least ``min_chars`` characters and ``MIN_REPEATS`` times, ``length`` the whole run."""
    n = len(text)
    for p in range(1, min(MAX_PERIOD, n // MIN_REPEATS) + 1):
        cover = max(min_chars, MIN_REPEATS * p)
        if cover > n:
            break
        probe = min(_PROBE, cover - p)
        if text[n - probe:] != text[n - probe - p: n - p]:
            continue
        if text[n - cover + p:] != text[n - cover: n - p]:
            continue
        return p, _run_length(text, p, cover)
    return None


def _run_length(text: str, p: int, known: int) -> int:
    """The longest suffix of ``text`` with period ``p``, given that ``known`` characters have it."""
    n = len(text)

    def periodic(cover: int) -> bool:
        return text[n - cover + p:] == text[n - cover: n - p]

    low, high = known, known
    while high < n:  # gallop, then bisect between the last good and the first bad length
        high = min(n, high * 2)
        if not periodic(high):
            break
        low = high
    else:
        return n
    while high - low > 1:
        middle = (low + high) // 2
        if periodic(middle):
            low = middle
        else:
            high = middle
    return low


def _describe_period(text: str, found: tuple[int, int], where: str) -> str:
    p, length = found
    block = text[len(text) - p:]
    return (f"{where} {length:,} characters repeat a {p:,}-character block {_quote(block)!r} "
            f"{length // p:,} times")


def _copied(text: str, found: tuple[int, int], given: _Baseline) -> bool:
    """Whether the repeated run (capped at a few blocks) is already in the baseline."""
    p, length = found
    return given.holds(text[len(text) - min(length, max(TAIL_MIN_CHARS, MIN_REPEATS * p)):])


def _periodic_tail(text: str, given: _Baseline) -> str | None:
    # the check needs at most MIN_REPEATS x MAX_PERIOD normalised characters: normalise only a
    # window that surely holds them, and the whole text only to measure a run found in it
    tail = _normal(text[-_TAIL_WINDOW:])
    found = _period(tail, min_chars=TAIL_MIN_CHARS)
    if found is not None and found[1] == len(tail) and len(text) > _TAIL_WINDOW:
        tail = _normal(text)
        found = (found[0], _run_length(tail, found[0], max(TAIL_MIN_CHARS, MIN_REPEATS * found[0])))
    if found is None or _copied(tail, found, given):
        return None
    return _describe_period(tail, found, "the last")


def _periodic_long_line(text: str, given: _Baseline) -> str | None:
    for raw in text.splitlines():
        if len(raw) < LONG_LINE_CHARS:
            continue
        line = _plain(raw)  # numbers count here: a long line may list weeks or items by number
        end = _LINE_END.search(line)
        line = line[: end.start()] if end else line
        # a loop that covers most of the line holds the line's middle (or reaches its end) with
        # at least a quarter of the line before that point, whatever closes the sentence
        need = max(LONG_LINE_CHARS * 2 // 3, len(line) // 4)
        for cut in (len(line), len(line) * 3 // 4, len(line) // 2):
            head = line[:cut]
            found = _period(head, min_chars=min(TAIL_MIN_CHARS, need))
            if found and not _copied(head, found, given):
                return _describe_period(head, found, "within one line,")
    return None
