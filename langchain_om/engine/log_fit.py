"""The context is bounded by construction: the observation log the agent is shown never exceeds
``reflection.block_after`` (``observation_tokens x block_after``), whatever the Observer and the
Reflector returned.

When the log as rendered (its notes with their dates annotated, and the omission line; not the
group tags, which are framing like the reading rules) is over that limit, the oldest notes are
left out of the context: the fewest leading note lines whose removal makes the rest fit (a day cut
in two keeps its newer notes under its header). Nothing leaves the store (the groups, the raw
messages and the full record stay; recall reaches them). One line at the top of the log says
which dates were left out and how to read them back. The rule is deterministic: the same log,
date and limit leave out the same notes, so a day's prompts keep a byte-identical prefix.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ..store.base import ObservationGroup

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_FRAME = re.compile(r"^</?observation(?:s|-group)\b")


def shown_notes(block: str) -> str:
    """The text of a rendered ``<observations>`` block without its framing tags: what the hard limit
    measures (model text inside it is fenced, so no note line can start with such a tag)."""
    return "\n".join(line for line in block.splitlines() if not _FRAME.match(line))


@dataclass(frozen=True)
class Omission:
    """What of the log was left out of the context (never out of the store)."""

    first_date: str | None
    """The oldest date left out (None when the notes left out carry no Date header)."""
    last_date: str | None
    """The newest date left out, whole or in part."""
    partial: bool
    """Only the earlier notes of ``last_date`` were left out; its later ones are shown."""
    notes: int
    """How many note lines were left out."""
    tokens: int
    """The log's stored tokens minus those of what is shown."""
    cursor: str
    """A message id to read the left-out part from (the oldest group's first message)."""
    shown_tokens: int = 0
    """Tokens of the log as shown: its notes, dates annotated, and the omission line (at most the limit)."""


@dataclass(frozen=True)
class _Line:
    group: int
    header: str | None
    text: str


def _lines(groups: Sequence[ObservationGroup]) -> list[_Line]:
    """Every note line of the log, oldest first, with the Date header it sits under."""
    out: list[_Line] = []
    for index, group in enumerate(groups):
        header: str | None = None
        for raw in group.text.strip().splitlines():
            line = raw.rstrip()
            if not line.strip():
                continue
            if line.strip().lower().startswith("date:"):
                header = line.strip()
                continue
            out.append(_Line(index, header, line))
    return out


def _kept_groups(groups: Sequence[ObservationGroup], lines: Sequence[_Line], cut: int) -> list[ObservationGroup]:
    """The groups with the first ``cut`` note lines taken out (a group left empty goes)."""
    if cut <= 0:
        return list(groups)
    kept = lines[cut:]
    out: list[ObservationGroup] = []
    for index, group in enumerate(groups):
        mine = [line for line in kept if line.group == index]
        if not mine:
            continue
        if len(mine) == sum(1 for line in lines if line.group == index):
            out.append(group)
            continue
        text: list[str] = []
        header: str | None = None
        for line in mine:
            if line.header != header and line.header is not None:
                if text:
                    text.append("")
                text.append(line.header)
            header = line.header
            text.append(line.text)
        out.append(group.model_copy(update={"text": "\n".join(text)}))
    return out


def _date(header: str | None) -> str | None:
    match = _DATE.search(header or "")
    return match.group(0) if match else None


def _omission(groups: Sequence[ObservationGroup], lines: Sequence[_Line], cut: int, tokens: int) -> Omission:
    gone = lines[:cut]
    dates = [d for d in (_date(line.header) for line in gone) if d]
    last = gone[-1]
    partial = cut < len(lines) and lines[cut].header == last.header
    return Omission(first_date=dates[0] if dates else None, last_date=dates[-1] if dates else None,
                    partial=partial, notes=cut, tokens=tokens, cursor=groups[0].start_id)


def omission_line(omission: Omission, *, recall: bool) -> str:
    """The one line of the context that says what was left out and how to get it back."""
    first, last = omission.first_date, omission.last_date
    if first and last and first != last:
        which = f"Notes from {first} to {last}" + (f" (the earlier ones of {last})" if omission.partial else "")
    elif last:
        which = f"The earlier notes of {last}" if omission.partial else f"Notes of {last}"
    else:
        which = "The oldest notes"
    if recall:
        back = (f'They are stored: to read the messages behind them, call recall with cursor "{omission.cursor}" '
                "and page=1.")
    else:
        back = ("The messages behind them are stored but cannot be read from here: if a question needs them, say "
                "that those details are not at hand rather than guessing.")
    return f"[{which} are not shown here, to keep this context within its size. {back}]"


Measure = Callable[[Sequence[ObservationGroup], str | None], int]
"""Tokens of the log as shown (``shown_notes``) for these groups and this omission line."""


def fit_log(groups: Sequence[ObservationGroup], limit: int, measure: Measure, line_for: Callable[[Omission], str],
            stored_tokens: Callable[[Sequence[ObservationGroup]], int]
            ) -> tuple[list[ObservationGroup], str | None, Omission | None]:
    """The groups to show, the omission line (None when all fits) and what it describes.

    ``measure(groups, line)`` is the tokens of the log as shown. The cut is
    the smallest number of leading note lines that makes the rest fit (a binary search: what is
    shown only shrinks as more is left out): the oldest notes go first, and a day cut in two keeps
    its newer notes under its header."""
    if not groups or measure(groups, None) <= limit:
        return list(groups), None, None
    lines = _lines(groups)
    total = stored_tokens(groups)

    shown: dict[int, tuple[list[ObservationGroup], str, Omission]] = {}

    def attempt(cut: int) -> tuple[list[ObservationGroup], str, Omission]:
        """The log with its first ``cut`` note lines left out, measured once per cut."""
        if cut not in shown:
            kept = _kept_groups(groups, lines, cut)
            omission = _omission(groups, lines, cut, max(0, total - stored_tokens(kept)))
            line = line_for(omission)
            shown[cut] = kept, line, replace(omission, shown_tokens=measure(kept, line))
        return shown[cut]

    def fits(cut: int) -> bool:
        return attempt(cut)[2].shown_tokens <= limit

    if not lines:
        return list(groups), None, None
    low, high = 1, len(lines)
    if not fits(high):
        return attempt(high)  # not even the line alone fits a limit this small: show the line only
    while low < high:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle + 1
    return attempt(low)
