"""Temporal markers: a persisted "time passed" note before a user message that comes late.

With ``temporal_markers=True``, a human message arriving ``GAP_THRESHOLD`` (10 minutes) or
more after the previous message of its thread is preceded by a marker row
(``kind="temporal-marker"``). The marker is stored like any message, so it is part of the
agent's context, the Observer's transcript (rendered as a ``--- ... ---`` line, which ties
observations to when things happened) and recall.

Representation: a ``HumanMessage`` whose whole content is
``<time-gap>3 hours later: Tue 2 Dec 2026 09:05 UTC-05:00</time-gap>``, on the clock of the
message it announces (the conversation's zone, as every other date OM shows; UTC when that
message states no zone). A ``SystemMessage`` in the
middle of a conversation is rejected by several providers (Anthropic, Gemini) and an
``AIMessage`` would put words in the assistant's mouth; a user-side note is accepted
everywhere (consecutive user turns are merged by providers that require alternation).
The marker's id is derived from the thread and the message it precedes, so persisting the
same message twice (two workers, a retry) can never produce two markers.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from typing import TYPE_CHECKING

from langchain_core.messages import BaseMessage, HumanMessage

from ..foundation.clock import on_clock, stamp_zone, zone_label
from ..foundation.events import TemporalMarkerData, TemporalMarkerEvent
from ..foundation.internal_calls import as_notification
from ..foundation.messages import TIMESTAMP_KEY, dump_message, load_message
from ..store.base import NewMessage, record_key

if TYPE_CHECKING:
    from .host import MemoryHost

GAP_THRESHOLD = timedelta(minutes=10)
MARKER_TAG = "time-gap"
MARKER_KIND = "temporal-marker"
KIND_KEY = "langchain_om_kind"  # in a marker's additional_kwargs


def describe_gap(gap: timedelta) -> str:
    """A short human phrase for a gap: "12 minutes", "3 hours", "2 days", "5 weeks"."""
    seconds = max(0, int(gap.total_seconds()))
    for unit, size in (("week", 604_800), ("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if seconds >= size:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} seconds"


def format_moment(moment: datetime, zone: tzinfo | None = None) -> str:
    """``Tue 2 Dec 2026 09:05 UTC-05:00``: ``moment`` on the conversation's clock (``zone``; UTC
    without one), naming that clock."""
    local = on_clock(moment, zone or timezone.utc)
    return f"{local:%a} {local.day} {local:%b %Y %H:%M} {zone_label(local)}"


def marker_text(gap: timedelta, moment: datetime, zone: tzinfo | None = None) -> str:
    return f"<{MARKER_TAG}>{describe_gap(gap)} later: {format_moment(moment, zone)}</{MARKER_TAG}>"


def marker_id(thread_id: str, message_id: str) -> str:
    digest = hashlib.sha256(f"{thread_id}\x1f{message_id}".encode()).hexdigest()[:32]
    return f"tm_{digest}"


def is_marker_message_data(data: dict[str, object]) -> bool:
    """True for the ``message_to_dict`` form of a marker (recall uses this to label it)."""
    inner = data.get("data")
    if not isinstance(inner, dict):
        return False
    extra = inner.get("additional_kwargs")
    return isinstance(extra, dict) and extra.get(KIND_KEY) == MARKER_KIND


def is_marker_message(message: BaseMessage) -> bool:
    """True for a marker as a LangChain message (a cut keeps it with the message it announces)."""
    return message.additional_kwargs.get(KIND_KEY) == MARKER_KIND


def _marker_row(thread_id: str, before: NewMessage, gap: timedelta) -> NewMessage:
    zone = stamp_zone(load_message(before.data))  # the clock of the message the marker announces
    text = marker_text(gap, before.created_at, zone)
    mid = marker_id(thread_id, before.id)
    message = as_notification(HumanMessage(  # added by OM, not typed by the user: LangChain's notification keys
        content=text,
        id=mid,
        additional_kwargs={KIND_KEY: MARKER_KIND},
        response_metadata={TIMESTAMP_KEY: on_clock(before.created_at, zone).isoformat()},
    ), "time-gap")
    return NewMessage(id=mid, data=dump_message(message), tokens=0, created_at=before.created_at, kind=MARKER_KIND)


async def insert_temporal_markers(
    om: MemoryHost, resource_id: str, thread_id: str, rows: Sequence[NewMessage]
) -> list[NewMessage]:
    """Rows to store: ``rows`` with a marker before every human message that follows a 10+ minute gap.

    The gap is measured from the previous message of the thread (the newest stored one for the
    first new row). Each marker is also queued as a ``data-om-temporal-marker`` event; the next
    ``aprocess`` step of the thread returns and dispatches it.
    """
    out: list[NewMessage] = []
    if not rows:
        return out
    newest = await om.store.aget_messages(resource_id, thread_id, limit=1, descending=True)
    previous: datetime | None = newest[0].created_at if newest else None
    events: list[TemporalMarkerEvent] = []
    for row in rows:
        is_human = row.kind == "message" and row.data.get("type") == "human"
        if is_human and previous is not None and row.created_at - previous >= GAP_THRESHOLD:
            marker = _marker_row(thread_id, row, row.created_at - previous)
            marker.tokens = om.counter.count_text(str(marker.data["data"]["content"]))
            out.append(marker)
            events.append(TemporalMarkerEvent(data=TemporalMarkerData(
                message_id=marker.id,
                thread_id=thread_id,
                gap_ms=(row.created_at - previous).total_seconds() * 1000,
                previous_at=previous.isoformat(),
                current_at=row.created_at.isoformat(),
                text=str(marker.data["data"]["content"]),
            )))
        out.append(row)
        previous = row.created_at
    if events:
        om.queue_events(record_key(resource_id, om.record_thread(thread_id)), events)
    return out
