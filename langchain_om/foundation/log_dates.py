"""Dates in the observation log as the agent's model reads them: how old each day is, how long
the silences between days were, and which planned dates have already passed.

A model cannot answer "how many days ago did I book the ryokan?" from ``Date: 2026-03-02``
alone: it does not know today's date, and date arithmetic is where models slip. So the
rendered log carries each day's age relative to the step's date ("3 days ago"), a line such as
``[5 days later]`` between days far apart, and a mark on lines whose resolved date (the
Observer writes it at the end of the line) lay ahead when written and is past now.

Everything here depends on the *date* of "now", never its time: within one day every render is
byte-identical, so consecutive prompts share their prefix (provider prompt caches).
"""

from __future__ import annotations

import re
from datetime import date, datetime, timezone

_HEADER_DATE = re.compile(r"^\s*(?:#+\s*|\*\*)?Date:\s*(\d{4})-(\d{2})-(\d{2})\b", re.IGNORECASE)
_ISO_DATE = re.compile(r"(?<!\d)(\d{4})-(\d{2})-(\d{2})(?!\d)")
DONE_MARK = "✅"
PAST_PLAN_NOTE = "[date passed: probably done]"
"""Appended to a line whose planned date has passed (the reading rules explain it)."""


def step_date(moment: datetime) -> date:
    """The calendar date of ``moment`` on its own clock (a naive value is taken as UTC)."""
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).date()


def _date_of(match: re.Match[str]) -> date | None:
    try:
        return date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    except ValueError:
        return None


def _count(n: int, unit: str) -> str:
    return f"{n} {unit}{'' if n == 1 else 's'}"


def _span(days: int) -> str:
    """A rounded-down span for a positive number of days: "5 days", "2 weeks", "3 months", "1 year"."""
    if days < 14:
        return _count(days, "day")
    if days < 60:
        return _count(days // 7, "week")
    if days < 730:
        return _count(days // 30, "month")
    return _count(days // 365, "year")


def age_label(day: date, today: date) -> str:
    """How far ``day`` is from ``today``: "today", "yesterday", "3 days ago", "in 2 weeks"."""
    delta = (today - day).days
    if delta == 0:
        return "today"
    if delta == 1:
        return "yesterday"
    if delta == -1:
        return "tomorrow"
    return f"{_span(delta)} ago" if delta > 0 else f"in {_span(-delta)}"


def gap_line(previous: date, day: date) -> str | None:
    """``[5 days later]`` between two consecutive dates of the log, or None when they are adjacent."""
    days = (day - previous).days
    return f"[{_span(days)} later]" if days >= 2 else None


def _planned_date(line: str, written: date) -> date | None:
    """The last date on the line when it lay ahead of the day it was written on (a plan or deadline)."""
    matches = list(_ISO_DATE.finditer(line))
    for match in reversed(matches):
        planned = _date_of(match)
        if planned is not None:
            return planned if planned > written else None
    return None


class LogDating:
    """Annotates one render of the log; carries the previous date across observation groups, so a
    gap between the last day of one group and the first of the next is shown as well."""

    def __init__(self, today: date) -> None:
        self.today = today
        self.previous: date | None = None

    def annotate(self, text: str) -> str:
        """``text`` with ages on its Date headers, gap lines before them and past-plan marks."""
        out: list[str] = []
        written: date | None = None
        for line in text.split("\n"):
            header = _HEADER_DATE.match(line)
            if header is not None:
                day = _date_of(header)
                if day is not None:
                    gap = gap_line(self.previous, day) if self.previous is not None else None
                    if gap is not None:
                        out.append(gap)
                    self.previous = written = day
                    out.append(f"{line.rstrip()} [{age_label(day, self.today)}]")
                    continue
            if written is not None and DONE_MARK not in line and line.strip():
                planned = _planned_date(line, written)
                if planned is not None and planned < self.today:
                    line = f"{line.rstrip()} {PAST_PLAN_NOTE}"
            out.append(line)
        return "\n".join(out)


def today_line(today: date) -> str:
    """The sentence that states the step's date, right before the log (it changes once a day)."""
    return f"Today is {today:%A}, {today.isoformat()}. Ages in the log count from this date."
