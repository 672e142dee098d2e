"""When a search query says *when* ("two weeks ago", "last Saturday", "先週"): the time it points
at, and the query without those words.

Words of time say nothing about what was said: as keywords they find every message that also
happens to say "weeks" or "ago" (a breathing exercise done "for a couple of days" outranked the
dinner a user cooked "a couple of days ago"). So search drops them from the keywords and, when
it knows today's date, ranks the messages of that time first among the keyword hits.

Relative expressions only (an absolute date is a keyword the index finds by itself). The window
around the point grows with the distance, because people round: "a month ago" is 3-6 weeks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "a couple of": 2, "a couple": 2, "couple of": 2,
    "a few": 3, "few": 3, "several": 4,
}
_UNIT_DAYS = {"day": 1, "week": 7, "month": 30, "year": 365}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")

_AMOUNT = r"(\d{1,3}|" + "|".join(sorted((re.escape(k) for k in _NUMBERS), key=len, reverse=True)) + r")"
_AGO = re.compile(rf"\b{_AMOUNT}\s+(day|week|month|year)s?\s+(?:ago|back|earlier|before)\b", re.IGNORECASE)
_LAST = re.compile(r"\b(?:last|past|previous)\s+(week|month|year|weekend|" + "|".join(_WEEKDAYS) + r")\b",
                   re.IGNORECASE)
_SINGLE = re.compile(r"\b(yesterday|today|earlier today|the day before yesterday)\b", re.IGNORECASE)
_JA_AGO = re.compile(r"(\d{1,3}|[一二三四五六七八九十]+)\s*(日|週間|週|か月|ヶ月|カ月|ケ月|年)前")
_JA_WORDS = {"一昨日": 2, "おととい": 2, "昨日": 1, "きのう": 1, "先週": 7, "先月": 30, "去年": 365, "昨年": 365,
             "今日": 0}
_JA_DIGITS = {"一": 1, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9, "十": 10}
_JA_UNITS = {"日": 1, "週間": 7, "週": 7, "か月": 30, "ヶ月": 30, "カ月": 30, "ケ月": 30, "年": 365}
_LEFTOVER = re.compile(r"\b(?:ago|back)\b", re.IGNORECASE)


@dataclass(frozen=True)
class TimeHint:
    """The query without its words of time, and the span of days it points at (None: no time)."""

    text: str
    start: datetime | None = None
    end: datetime | None = None

    def contains(self, moment: datetime) -> bool:
        return self.start is not None and self.end is not None and self.start <= moment <= self.end


def _ja_number(text: str) -> int:
    if text.isdigit():
        return int(text)
    if text == "十":
        return 10
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_JA_DIGITS.get(tens, 1)) * 10 + _JA_DIGITS.get(ones, 0)
    return _JA_DIGITS.get(text, 1)


def _window(days_back: float) -> timedelta:
    """Half the window around a point ``days_back`` days ago: a day near, about a third of the distance further."""
    return timedelta(days=max(1.0, days_back / 3))


def time_hint(query: str, now: datetime | None) -> TimeHint:
    """The query's relative time words taken out, and where they point when ``now`` is known."""
    points: list[tuple[float, timedelta | None]] = []  # days back, half-window (None: the default)

    def ago(match: re.Match[str]) -> str:
        amount = match.group(1).lower()
        count = int(amount) if amount.isdigit() else _NUMBERS.get(amount, 1)
        points.append((count * _UNIT_DAYS[match.group(2).lower()], None))
        return " "

    def last(match: re.Match[str]) -> str:
        word = match.group(1).lower()
        if word in _WEEKDAYS and now is not None:
            back = (now.weekday() - _WEEKDAYS.index(word)) % 7 or 7
            points.append((back, timedelta(days=1)))
        elif word == "weekend" and now is not None:
            back = (now.weekday() - 5) % 7 or 7
            points.append((back - 0.5, timedelta(days=1.5)))
        elif word in _UNIT_DAYS:
            span = _UNIT_DAYS[word]
            points.append((span, timedelta(days=span * 0.6)))
        return " "

    def single(match: re.Match[str]) -> str:
        word = match.group(1).lower()
        points.append((2 if "before" in word else 1 if word == "yesterday" else 0, timedelta(days=1)))
        return " "

    def ja_ago(match: re.Match[str]) -> str:
        points.append((_ja_number(match.group(1)) * _JA_UNITS[match.group(2)], None))
        return " "

    text = _AGO.sub(ago, query)
    text = _LAST.sub(last, text)
    text = _SINGLE.sub(single, text)
    text = _JA_AGO.sub(ja_ago, text)
    for word, back in _JA_WORDS.items():
        if word in text:
            text = text.replace(word, " ")
            points.append((back, timedelta(days=max(1, back * 0.6 if back >= 7 else 1))))
    if not points:
        return TimeHint(query)
    text = _LEFTOVER.sub(" ", text)
    text = " ".join(text.split()) or query
    if now is None:
        return TimeHint(text)
    days_back, half_window = points[0]
    centre = now - timedelta(days=days_back)
    half = half_window or _window(days_back)
    return TimeHint(text, centre - half, min(now, centre + half) if days_back else now)
