"""Resolving a relative date expression against the day it was said.

The Observer prompt asks a model to put the absolute date of "tomorrow", "next Friday" or "three
days ago" at the end of a note; the scripted Observer (``langchain_om.testing``) does the same with
these few rules, in English and Japanese, so the offline pipeline writes the dates a real
Observer would and tests can check how the agent's context reads them.
"""

from __future__ import annotations

import re
from datetime import date, datetime, timedelta

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WEEKDAYS_JA = ("月曜", "火曜", "水曜", "木曜", "金曜", "土曜", "日曜")
_IN_N = re.compile(r"\bin (\d{1,3}|a|one|two|three|four|five|six) (day|week)s?\b", re.IGNORECASE)
_N_AGO = re.compile(r"\b(\d{1,3}|a|one|two|three|four|five|six) (day|week)s? ago\b", re.IGNORECASE)
_NUMBER_WORDS = {"a": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}


def resolve_relative_date(text: str, said_on: date) -> date | None:
    """The absolute date a relative expression in ``text`` points at, said on ``said_on`` (the
    scripted Observer's small rule set: today/tomorrow/yesterday, next or plain weekdays, "in N
    days/weeks", "N days/weeks ago", and their Japanese forms); None when there is none."""
    lowered = text.lower()
    if "day after tomorrow" in lowered or "明後日" in text or "あさって" in text:
        return said_on + timedelta(days=2)
    if re.search(r"\btomorrow\b", lowered) or "明日" in text:
        return said_on + timedelta(days=1)
    if re.search(r"\byesterday\b", lowered) or "昨日" in text:
        return said_on - timedelta(days=1)
    for pattern, sign in ((_IN_N, 1), (_N_AGO, -1)):
        match = pattern.search(text)
        if match:
            raw = match.group(1).lower()
            count = int(raw) if raw.isdigit() else _NUMBER_WORDS[raw]
            days = count * (7 if match.group(2).lower() == "week" else 1)
            return said_on + timedelta(days=sign * days)
    for index, (name, japanese) in enumerate(zip(_WEEKDAYS, _WEEKDAYS_JA, strict=True)):
        english = re.search(rf"\b(next|this|on|last)?\s*{name}\b", lowered)
        if english or japanese in text:
            ahead = (index - said_on.weekday()) % 7
            if english and english.group(1) == "last":
                return said_on - timedelta(days=(said_on.weekday() - index) % 7 or 7)
            if english and english.group(1) == "next" and ahead == 0:
                ahead = 7
            return said_on + timedelta(days=ahead) if ahead else None  # "it's Thursday" on a Thursday: today
    return None


_NOT_A_PLAN = re.compile(
    r"[?？]|\b(?:expire[sd]?|expiry|expiration|deadline|due|price[sd]?|costs?|offers?|sale|valid|until|"
    r"whether|maybe|might|or|by (?:next |this |the end of )?(?:\w+day|tomorrow|tonight))\b|"
    r"期限|締め切り|締切|切れ|値段|料金|価格|セール|かな|かも|まで",
    re.IGNORECASE)


def is_plan(text: str) -> bool:
    """Whether a statement dated ahead of when it was said is a plan of the user's, as the Observer
    prompt defines it: not a question, an option weighed, a deadline ("by Friday", "までに"), an
    expiry, a price or an offer."""
    return _NOT_A_PLAN.search(text) is None


def with_absolute_date(text: str, day: str) -> str:
    """``text`` (said on ``day``, ISO) with the date its relative expression means at the end, as
    the Observer prompt asks: "... tomorrow. (planned for 2026-03-03)" for a plan of the user's,
    "(meaning 2026-02-27)" for anything else; unchanged when there is none."""
    try:
        said_on = datetime.strptime(day, "%Y-%m-%d").date()
    except ValueError:
        return text
    resolved = resolve_relative_date(text, said_on)
    if resolved is None:
        return text
    kind = "planned for" if resolved > said_on and is_plan(text) else "meaning"
    return f"{text} ({kind} {resolved.isoformat()})"
