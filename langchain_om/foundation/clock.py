"""One clock per conversation: the time zone in which OM shows every date and time.

A frontend often stamps the user's messages with the user's offset (``19:05-05:00``) while the
server stamps the assistant's replies in UTC. Shown each on its own clock, one evening has two
calendars: the question is dated the 8th, the answer a minute later the 9th, the Observer files
the answer under ``Date: ...-09`` and the next step (dated by the user's clock, the 8th) reads
that header as "tomorrow". So a conversation has one zone, the user's: the offset of the newest
user message that states one (else of the newest message that does, else UTC). Transcript
stamps, time-gap markers, ``Date:`` headers and "Today is" are all shown in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date, datetime, timezone, tzinfo

from langchain_core.messages import BaseMessage

from .messages import TIMESTAMP_KEY, message_timestamp


def stamp_zone(message: BaseMessage) -> tzinfo | None:
    """The zone the message's own timestamp states, or None when it states none (no timestamp,
    an epoch number, a naive ISO string: those are instants, not a clock)."""
    raw = message.response_metadata.get(TIMESTAMP_KEY) if message.response_metadata else None
    if isinstance(raw, datetime):
        return raw.tzinfo if raw.utcoffset() is not None else None
    if not isinstance(raw, str):
        return None
    try:
        stamp = message_timestamp(message)
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.tzinfo if stamp is not None and parsed.tzinfo is not None else None


def conversation_zone(messages: Sequence[BaseMessage]) -> tzinfo | None:
    """The conversation's zone: the newest user message's stated zone, else the newest message's
    (None when no message states one; callers then use UTC or the instant's own clock)."""
    return newest_zone(reversed(messages))


def newest_zone(newest_first: Iterable[BaseMessage]) -> tzinfo | None:
    """``conversation_zone`` over messages given newest first, read lazily: it stops at the newest
    user message that states a zone (a caller loading stored rows loads no more than that)."""
    fallback: tzinfo | None = None
    for message in newest_first:
        if not message.response_metadata:
            continue
        zone = stamp_zone(message)
        if zone is not None and message.type == "human":
            return zone
        fallback = fallback or zone
    return fallback


def stamp_agrees(message: BaseMessage, stored: datetime) -> bool:
    """Whether the message's own timestamp is the instant it was stored (within a second): only
    such a message says anything about the conversation's clock (an imported message whose stamp
    disagrees with when it was stored, or a time-gap marker, does not)."""
    try:
        own = message_timestamp(message)
    except ValueError:
        return False
    return own is not None and abs((own - stored).total_seconds()) <= 1


def step_time(messages: Sequence[BaseMessage], clock: datetime) -> datetime:
    """The step's time: the timestamp of the newest message that carries one, else the clock
    (wall-clock time never overrides the conversation's own timeline)."""
    for message in reversed(messages):
        try:
            stamp = message_timestamp(message)
        except ValueError:
            continue
        if stamp is not None:
            return stamp
    return clock


def conversation_today(messages: Sequence[BaseMessage], clock: datetime) -> date:
    """Today's date as the agent's context states it: the step's time on the conversation's clock
    (the context's "Today is" and the ages of the log; the inspector shows the same)."""
    return on_clock(step_time(messages, clock), conversation_zone(messages)).date()


def on_clock(moment: datetime, zone: tzinfo | None) -> datetime:
    """``moment`` shown in ``zone`` (a naive moment is taken as UTC; no zone keeps its own)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)
    return aware.astimezone(zone) if zone is not None else aware


def zone_label(moment: datetime) -> str:
    """``UTC`` or ``UTC-05:00`` / ``UTC+09:00`` for an aware moment (how markers name their clock)."""
    offset = moment.utcoffset()
    if not offset:
        return "UTC"
    minutes = int(offset.total_seconds()) // 60
    sign = "+" if minutes >= 0 else "-"
    hours, rest = divmod(abs(minutes), 60)
    return f"UTC{sign}{hours:02d}:{rest:02d}"
