"""Temporal markers: persisted time-gap notes before late user messages, as events and for the Observer."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from recall_helpers import T0, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.temporal import describe_gap, format_moment, marker_text
from langchain_om.foundation.events import TemporalMarkerEvent
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER
from langchain_om.store import InMemoryStore
from langchain_om.store.base import implicit_resource
from langchain_om.testing import ScriptedObserverModel


def om_with(**kwargs: Any) -> ObservationalMemory:
    options: dict[str, Any] = {"model": ScriptedObserverModel(), "temporal_markers": True,
                               "observation": {"message_tokens": 100_000, "buffer_tokens": False}}
    options.update(kwargs)
    return ObservationalMemory(InMemoryStore(), **options)


def human(text: str, mid: str, at: datetime) -> BaseMessage:
    return stamped(HumanMessage(text, id=mid), at)


def ai(text: str, mid: str, at: datetime) -> BaseMessage:
    return stamped(AIMessage(text, id=mid), at)


def markers(events: list[Any]) -> list[TemporalMarkerEvent]:
    return [e for e in events if isinstance(e, TemporalMarkerEvent)]


def test_text_format() -> None:
    moment = datetime.fromisoformat("2026-12-02T14:05:00+00:00")
    assert format_moment(moment) == "Wed 2 Dec 2026 14:05 UTC"
    expected = "<time-gap>3 hours later: Wed 2 Dec 2026 14:05 UTC</time-gap>"
    assert marker_text(timedelta(hours=3, minutes=4), moment) == expected
    assert describe_gap(timedelta(minutes=1)) == "1 minute"
    assert describe_gap(timedelta(days=15)) == "2 weeks"


async def test_late_user_message_gets_a_persisted_marker_and_event() -> None:
    om = om_with()
    history = [human("hi", "h1", T0), ai("hello", "a1", T0 + timedelta(seconds=10))]
    first = await om.aprocess("t", history, now=T0 + timedelta(seconds=10))
    assert markers(first.events) == []
    late = T0 + timedelta(hours=3, seconds=10)
    history.append(human("I'm back", "h2", late))
    ctx = await om.aprocess("t", history, now=late)
    stored = await om.store.aget_messages(implicit_resource("t"), "t")
    assert [m.kind for m in stored] == ["message", "message", "temporal-marker", "message"]
    marker = stored[2]
    assert marker.data["type"] == "human"
    assert marker.data["data"]["content"] == "<time-gap>3 hours later: Tue 1 Dec 2026 12:00 UTC</time-gap>"
    (event,) = markers(ctx.events)
    assert event.data.message_id == marker.id and event.data.thread_id == "t"
    assert event.data.gap_ms == 3 * 3600 * 1000
    part = event.to_part()
    assert part["type"] == "data-om-temporal-marker" and part["data"]["messageId"] == marker.id
    # the agent's model reads the marker right before the late message, as a user-side note
    assert [m.id for m in ctx.messages][-2:] == [marker.id, "h2"]
    assert isinstance(ctx.messages[-2], HumanMessage) and "time-gap" in str(ctx.messages[-2].content)


async def test_threshold_is_ten_minutes_and_only_for_user_messages() -> None:
    om = om_with()
    msgs = [
        human("a", "m1", T0),
        ai("b", "m2", T0 + timedelta(minutes=30)),           # AI after a gap: no marker
        human("c", "m3", T0 + timedelta(minutes=39, seconds=59)),  # 9m59s after m2: no marker
        human("d", "m4", T0 + timedelta(minutes=49, seconds=59)),  # exactly 10 minutes: marker
    ]
    ctx = await om.aprocess("t", msgs, now=T0 + timedelta(hours=1))
    stored = await om.store.aget_messages(implicit_resource("t"), "t")
    assert [m.id if m.kind == "message" else "MARKER" for m in stored] == ["m1", "m2", "m3", "MARKER", "m4"]
    assert len(markers(ctx.events)) == 1


async def test_off_by_default_and_idempotent() -> None:
    plain = om_with(temporal_markers=False)
    msgs = [human("a", "m1", T0), human("b", "m2", T0 + timedelta(days=2))]
    await plain.aprocess("t", msgs, now=T0 + timedelta(days=2))
    assert all(m.kind == "message" for m in await plain.store.aget_messages(implicit_resource("t"), "t"))
    om = om_with()
    await om.aprocess("t", msgs, now=T0 + timedelta(days=2))
    again = ObservationalMemory(om.store, model=ScriptedObserverModel(), temporal_markers=True)
    await again.aprocess("t", msgs, now=T0 + timedelta(days=2))  # a second worker, fresh caches
    kinds = [m.kind for m in await om.store.aget_messages(implicit_resource("t"), "t")]
    assert kinds.count("temporal-marker") == 1


async def test_observer_sees_the_marker() -> None:
    model = ScriptedObserverModel()
    om = om_with(model=model)
    late = T0 + timedelta(days=1, hours=2)
    msgs = [human("book the flight", "m1", T0), ai("done", "m2", T0 + timedelta(seconds=5)),
            human("now the hotel", "m3", late), ai("booked", "m4", late + timedelta(seconds=5))]
    await om.aprocess("t", msgs, now=late + timedelta(seconds=5))
    await om.aobserve("t")
    prompts = [str(c[-1].content) for c in model.calls if OBSERVER_PROMPT_MARKER in str(c[0].content)]
    assert prompts
    transcript = prompts[0]
    gap_line = "--- <time-gap>1 day later: Wed 2 Dec 2026 11:00 UTC</time-gap> ---"
    assert gap_line in transcript
    assert transcript.index("book the flight") < transcript.index(gap_line) < transcript.index("now the hotel")


async def test_recall_labels_markers() -> None:
    om = om_with(retrieval=True)
    msgs = [human("a", "m1", T0), human("b", "m2", T0 + timedelta(hours=5))]
    await om.aprocess("t", msgs, now=T0 + timedelta(hours=5))
    result = await om.recall_tool(thread_id="t").ainvoke({})
    assert isinstance(result, dict)
    assert "· time-gap ·" in result["messages"] and "5 hours later" in result["messages"]


async def test_a_synchronous_cut_keeps_the_marker_with_its_message() -> None:
    om = om_with(observation={"message_tokens": 200, "buffer_tokens": False}, token_counter="estimator")
    filler = " ".join(f"word{i}" for i in range(80))
    late = T0 + timedelta(hours=3)
    msgs = [human(f"plan the trip {filler}", "m1", T0), ai(f"sure {filler}", "m2", T0 + timedelta(seconds=5)),
            human("and the return leg?", "m3", late)]
    ctx = await om.aprocess("t", msgs, now=late)
    assert any(e.type == "data-om-observation-end" for e in ctx.events)
    kept = list(ctx.messages)
    assert kept[-1].id == "m3"
    assert len(kept) == 2 and "<time-gap>" in str(kept[0].content), "the marker stays in front of m3"
    stored = await om.store.aget_messages(implicit_resource("t"), "t")  # no resource id given: the thread's own
    assert [m.id for m in stored if m.observed] == ["m1", "m2"]
