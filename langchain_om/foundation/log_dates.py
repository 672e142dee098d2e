"""Dates in the observation log as the agent's model reads them: how old each day and each date
inside a line is, how long the silences between days were, and which plans have passed.

A model cannot answer "how many days ago did I run the half-marathon?" from ``Date: 2026-02-08``
alone: it does not know today's date, and date arithmetic is where models slip. So the rendered
log carries exact ages in whole days counted from the step's date, on every header, after every
ISO date inside a line and inside every resolved-date suffix (a rough month or year count is
added past ``EXACT_DAYS``). Weekdays on headers are computed from the date, never copied from a
model. A plan is known by its suffix, ``(planned for 2026-02-13)``, which the Observer writes in
every language (full-width parentheses too); only such a suffix whose date has passed gets the
"probably happened" mark. A deadline, an expiry or an offer passing proves nothing, so nothing
else is marked.

Everything here depends on the *date* of "now", never its time: within one day every render is
byte-identical, so consecutive prompts share their prefix (provider prompt caches).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

_HEADER = re.compile(
    r"^(\s*(?:#+\s*|\*\*)?Date:\s*)(\d{4})-(\d{2})-(\d{2})(?!\d)[ \t]*(?:\([^()\n]{0,24}\)|（[^（）\n]{0,24}）)?(.*)$",
    re.IGNORECASE)
_SUFFIX = re.compile(r"([(（])[ \t]*(meaning|planned for)[ \t]+(\d{4})-(\d{2})-(\d{2})(?!\d)[ \t]*([)）])",
                     re.IGNORECASE)
_ISO_DATE = re.compile(  # a date standing alone: not part of a file name, an id, a URL or a timestamp
    r"(?<![0-9A-Za-z_\-/.])(\d{4})-(\d{2})-(\d{2})(?![0-9A-Za-z_\-/:]|\.[0-9A-Za-z])")
DONE_MARK = "✅"
PLAN_SUFFIX = "planned for"
"""The words that open the suffix the Observer writes after a plan's date: ``(planned for 2026-02-13)``."""
PAST_PLAN_MARK = "probably happened"
"""Added inside a plan's suffix once its date has passed (the reading rules explain it)."""
EXACT_DAYS = 90
"""Up to this many days an age is a day count only; beyond it a rough month/year count is added."""
_WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def weekday_name(day: date) -> str:
    """The English weekday of ``day``, whatever the process's locale (``%A`` follows the locale): the
    one spelling the transcript, the headers, "Today is" and the Observer's "now" share."""
    return _WEEKDAYS[day.weekday()]


def step_date(moment: datetime) -> date:
    """The calendar date of ``moment`` on its own clock (a naive value is taken as UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).date()


def _date(year: str, month: str, day: str) -> date | None:
    try:
        return date(int(year), int(month), int(day))
    except ValueError:
        return None


def _days(n: int) -> str:
    return f"{n} day{'' if n == 1 else 's'}"


def _rough(n: int) -> str:
    """A rough size for more than ``EXACT_DAYS`` days: "about 4 months", "about 2 years"."""
    if n < 365:
        return f"about {n // 30} months"
    years = n // 365
    return f"about {years} year{'' if years == 1 else 's'}"


def age_label(day: date, today: date) -> str:
    """How far ``day`` is from ``today`` in whole days: "today", "yesterday", "29 days ago",
    "in 4 days"; past ``EXACT_DAYS`` days a rough size follows: "142 days ago, about 4 months"."""
    delta = (today - day).days
    if delta == 0:
        return "today"
    if delta == 1:
        return "yesterday"
    if delta == -1:
        return "tomorrow"
    label = f"{_days(delta)} ago" if delta > 0 else f"in {_days(-delta)}"
    return label if abs(delta) <= EXACT_DAYS else f"{label}, {_rough(abs(delta))}"


def gap_line(previous: date, day: date) -> str | None:
    """``[5 days later]`` between two consecutive dates of the log, or None when they are adjacent."""
    days = (day - previous).days
    if days < 2:
        return None
    return f"[{_days(days)} later]" if days <= EXACT_DAYS else f"[{_days(days)} later, {_rough(days)}]"


def _header(line: str, today: date) -> tuple[str, date] | None:
    """A ``Date:`` header rewritten with the weekday of its date and its age (the model's own
    weekday, right or wrong, is replaced), and its date; None for any other line."""
    match = _HEADER.match(line)
    if match is None:
        return None
    day = _date(match.group(2), match.group(3), match.group(4))
    if day is None:
        return None
    rest = match.group(5).rstrip()
    return f"{match.group(1)}{day.isoformat()} ({weekday_name(day)}){rest} [{age_label(day, today)}]", day


def _annotate_line(line: str, today: date) -> str:
    """Ages inside a note: in each resolved-date suffix ("(meaning 2026-02-08, 29 days ago)"), a
    passed plan's mark ("(planned for 2026-02-13, 24 days ago: probably happened)", not on ✅
    lines), and "[N days ago]" after any other ISO date."""
    done = DONE_MARK in line
    pieces: list[str] = []
    position = 0
    for match in _SUFFIX.finditer(line):
        pieces.append(_annotate_bare(line[position:match.start()], today))
        day = _date(match.group(3), match.group(4), match.group(5))
        if day is None:
            pieces.append(match.group(0))
        else:
            opening, closing = match.group(1), match.group(6)
            kind = match.group(2).lower()
            note = f"{kind} {day.isoformat()}, {age_label(day, today)}"
            if kind == PLAN_SUFFIX and day < today and not done:
                note += f": {PAST_PLAN_MARK}"
            pieces.append(f"{opening}{note}{closing}")
        position = match.end()
    pieces.append(_annotate_bare(line[position:], today))
    return "".join(pieces)


def _annotate_bare(text: str, today: date) -> str:
    def age(match: re.Match[str]) -> str:
        day = _date(match.group(1), match.group(2), match.group(3))
        return match.group(0) if day is None else f"{match.group(0)} [{age_label(day, today)}]"

    return _ISO_DATE.sub(age, text) if "-" in text else text


class LogDating:
    """Annotates one render of the log; carries the previous date across observation groups, so a
    gap between the last day of one group and the first of the next is shown as well."""

    def __init__(self, today: date) -> None:
        self.today = today
        self.previous: date | None = None

    def annotate(self, text: str) -> str:
        """``text`` with computed weekdays and ages on its Date headers, gap lines before them and
        ages (and passed-plan marks) on the dates inside its notes."""
        out: list[str] = []
        for line in text.split("\n"):
            header = _header(line, self.today) if "date:" in line.lower() else None
            if header is not None:
                rendered, day = header
                gap = gap_line(self.previous, day) if self.previous is not None else None
                if gap is not None:
                    out.append(gap)
                self.previous = day
                out.append(rendered)
                continue
            out.append(_annotate_line(line, self.today) if line.strip() else line)
        return "\n".join(out)


def today_line(today: date, *, has_log: bool = True) -> str:
    """The sentence that states the step's date, right before the log (it changes once a day);
    the note on ages only when there is a log to count them in."""
    sentence = f"Today is {weekday_name(today)}, {today.isoformat()}."
    return f"{sentence} Ages in the log count whole days from this date." if has_log else sentence
