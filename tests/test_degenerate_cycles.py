"""Issue 20, degenerate output, end to end: a looping Observer or Reflector reply is refused,
asked for once more, and never committed or buffered; the messages stay pending and the failure
event says why. Public APIs only (``aprocess``, ``aobserve``, ``aget_record``, ``astatus``, events)."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from om_fakes import conversation

from langchain_om import ObservationalMemory, OMModelError
from langchain_om.foundation.events import OMEvent
from langchain_om.foundation.tokens import get_token_counter
from langchain_om.model_calls.failures import OMObservationError
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER
from langchain_om.model_calls.reflector import is_compressed
from langchain_om.model_calls.replies import DegenerateReplyError, acall_observer, acall_reflector
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import LOOPING_LINE, ScriptedLoopingModel, ScriptedObserverModel, looping_reply

_LOOP_MARK = "weather in Paris"  # a piece of LOOPING_LINE that no real observation here holds


def make_om(observer: Any, reflector: Any = None, *, observation: dict[str, Any] | None = None,
            reflection: dict[str, Any] | None = None, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"model": observer, "message_tokens": 300, "buffer_tokens": False, **(observation or {})},
        "reflection": {"model": reflector or ScriptedObserverModel(), "observation_tokens": 50_000,
                       **(reflection or {})},
        "token_counter": "estimator",
        "failure_policy": {"backoff": 1, "max_backoff": 5},
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), **options)


def of(events: list[OMEvent], kind: str, operation: str = "observation") -> list[Any]:
    return [e for e in events if e.type == kind and e.data.operation_type == operation]


# ---------------------------------------------------------------- the model-call layer


async def test_a_looping_reply_is_asked_for_once_more_and_the_good_one_is_parsed() -> None:
    model = ScriptedLoopingModel(loop_on=[0])
    prompt = [SystemMessage(OBSERVER_PROMPT_MARKER),
              HumanMessage("<transcript>\n[2026-11-30 09:00] User: my cat Miso hates chicken\n</transcript>")]
    call, parsed = await acall_observer(model, prompt, input_tokens=20)
    assert len(model.calls) == 2
    assert "Miso" in parsed.observations and _LOOP_MARK not in parsed.observations
    assert call.attempts == 2
    assert call.usage is not None and call.usage["output_tokens"] > len(looping_reply()) // 4, \
        "the refused reply's tokens are charged too"
    assert any("repeated 300 times" in str(exc) for _name, _n, exc in call.errors)


async def test_two_looping_replies_raise_a_model_error_that_says_why() -> None:
    model = ScriptedLoopingModel(loop_on=[0, 1, 2])
    with pytest.raises(DegenerateReplyError) as info:
        await acall_reflector(model, [HumanMessage("<observation-log>\n* 🔴 fact\n</observation-log>")],
                              input_tokens=20)
    assert len(model.calls) == 2, "retried exactly once"
    error = info.value
    assert isinstance(error, OMModelError) and error.kind == "transient" and error.refusals == 2
    assert error.reason().startswith("reflector model scripted/scripted-looping: degenerate reply (refused 2 times): ")
    assert "repeated 300 times" in error.reason()


# ---------------------------------------------------------------- the Observer, synchronous


async def test_a_loop_once_then_a_good_reply_is_observed_with_two_calls() -> None:
    observer = ScriptedLoopingModel(loop_on=[0])
    om = make_om(observer)
    for history in conversation(12):
        ctx = await om.aprocess("t1", history)
        if observer.calls:
            break
    assert len(observer.calls) == 2
    assert of(ctx.events, "data-om-observation-end") and not of(ctx.events, "data-om-observation-failed")
    assert ctx.record.observations and _LOOP_MARK not in ctx.record.observations
    assert ctx.status.observation_error is None


async def test_two_loops_commit_nothing_and_the_messages_stay_pending() -> None:
    observer = ScriptedLoopingModel(loop_on=[0, 1])
    om = make_om(observer)
    histories = list(conversation(14))
    index = 0
    while not observer.calls:
        history = histories[index]
        ctx = await om.aprocess("t1", history)
        index += 1
    assert len(observer.calls) == 2, "one retry, then the cycle failed"
    failed = of(ctx.events, "data-om-observation-failed")
    assert failed and "degenerate reply" in failed[0].data.error and "repeated 300 times" in failed[0].data.error
    assert not of(ctx.events, "data-om-observation-end")
    record = await om.aget_record("t1")
    assert record.groups == [] and record.last_observed_seq == {} and record.buffered_chunks == []
    assert [m.id for m in ctx.messages] == [m.id for m in history], "every message stays in the window"
    assert ctx.status.observation_error and "degenerate reply" in ctx.status.observation_error
    status = await om.astatus("t1")
    assert status.windows.active.observations.tokens == 0
    # the next step's Observer answers well: the pending messages are observed then
    ctx = await om.aprocess("t1", histories[index])
    assert len(observer.calls) == 3
    assert ctx.record.observations and _LOOP_MARK not in ctx.record.observations
    assert ctx.record.last_observed_seq.get("t1", 0) > 0


async def test_with_on_failure_raise_two_loops_raise_the_observation_error() -> None:
    om = make_om(ScriptedLoopingModel(loop_on=[0, 1]), failure_policy={"on_failure": "raise", "backoff": 1})
    with pytest.raises(OMObservationError) as info:
        for history in conversation(12):
            await om.aprocess("t1", history)
    assert info.value.kind == "transient" and "degenerate reply" in str(info.value)
    assert (await om.aget_record("t1")).groups == []


async def test_manual_and_resource_scope_observation_refuse_a_loop_too() -> None:
    observer = ScriptedLoopingModel(loop_on=[0, 1])
    om = make_om(observer, observation={"message_tokens": 100_000}, scope="resource")
    for thread in ("alpha", "beta"):
        await om.aprocess(thread, [HumanMessage(f"{thread}: my cat Miso hates chicken", id=f"{thread}-h"),
                                   AIMessage("Noted.", id=f"{thread}-a")], resource_id="u1")
    record = await om.aobserve("beta", resource_id="u1")
    assert len(observer.calls) == 2
    assert record.groups == [] and record.last_observed_seq == {}
    record = await om.aobserve("beta", resource_id="u1")  # the Observer answers well now
    assert record.last_observed_seq == {"alpha": 2, "beta": 2} and _LOOP_MARK not in record.observations


# ---------------------------------------------------------------- the Observer, buffering


async def _buffer_until(
    om: ObservationalMemory, observer: ScriptedLoopingModel, calls: int
) -> tuple[list[OMEvent], list[BaseMessage]]:
    """Steps (each waiting for the background) until the Observer has had ``calls`` calls."""
    events: list[OMEvent] = []
    history: list[BaseMessage] = []
    for history in conversation(20):
        events.extend((await om.aprocess("t1", history)).events)
        await om.await_background()
        if len(observer.calls) >= calls:
            break
    return events, history


async def test_buffering_after_a_loop_once_stages_the_good_chunk() -> None:
    observer = ScriptedLoopingModel(loop_on=[0])
    om = make_om(observer, observation={"message_tokens": 5000, "buffer_tokens": 300})
    await _buffer_until(om, observer, 2)
    assert len(observer.calls) == 2
    record = await om.aget_record("t1")
    assert len(record.buffered_chunks) == 1
    chunk = record.buffered_chunks[0]
    assert "Turn 0" in chunk.observations and _LOOP_MARK not in chunk.observations


async def test_buffering_that_loops_twice_stages_no_chunk_and_says_why() -> None:
    observer = ScriptedLoopingModel(loop_on=[0, 1])
    om = make_om(observer, observation={"message_tokens": 5000, "buffer_tokens": 300})
    events, history = await _buffer_until(om, observer, 2)
    assert len(observer.calls) == 2
    record = await om.aget_record("t1")
    assert record.buffered_chunks == [] and record.groups == []
    # a background cycle's events reach the next step at the latest
    events += (await om.aprocess("t1", history)).events
    failed = of(events, "data-om-buffering-failed")
    assert failed and "degenerate reply" in failed[0].data.error
    assert not of(events, "data-om-buffering-end")


# ---------------------------------------------------------------- the Reflector


async def _reflect_once(reflector: ScriptedLoopingModel) -> tuple[ObservationalMemory, list[OMEvent]]:
    om = make_om(ScriptedObserverModel(), reflector, reflection={"observation_tokens": 1500})
    events: list[OMEvent] = []
    for history in conversation(40):
        events.extend((await om.aprocess("t1", history)).events)
        if reflector.calls:
            break
    return om, events


async def test_a_reflector_loop_once_then_a_good_reply_reflects() -> None:
    reflector = ScriptedLoopingModel(loop_on=[0], loop_text=looping_reply(times=45, closed=True))
    om, events = await _reflect_once(reflector)
    assert len(reflector.calls) == 2
    assert of(events, "data-om-observation-end", "reflection")
    record = await om.aget_record("t1")
    assert record.generation_count == 1 and _LOOP_MARK not in record.observations


async def test_a_reflector_that_loops_twice_leaves_the_log_and_generation_unchanged() -> None:
    loop = looping_reply(times=45, closed=True)
    reflector = ScriptedLoopingModel(loop_on=[0, 1], loop_text=loop)
    om, events = await _reflect_once(reflector)
    failed = of(events, "data-om-observation-failed", "reflection")
    assert failed and "degenerate reply" in failed[0].data.error
    # the loop is smaller than the log: without the check the ladder would have taken it as compressed
    assert is_compressed(failed[0].data.tokens_attempted, get_token_counter("estimator").count_text(loop))
    assert len(reflector.calls) == 2, "one retry; no further compression level is tried"
    record = await om.aget_record("t1")
    assert record.generation_count == 0
    assert [g.source for g in record.groups] == ["observation"] * len(record.groups)
    observed = "\n\n".join(e.data.observations for e in of(events, "data-om-observation-end"))
    assert record.observations.count("User said:") == observed.count("User said:") > 0, "the log is unchanged"
    assert LOOPING_LINE not in record.observations
