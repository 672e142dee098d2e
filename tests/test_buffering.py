"""Async buffering, activation, block_after, reflection buffering, idle/provider activation,
shared budget and concurrency (issue 4)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from itertools import pairwise
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import OBSERVATION, START, CallableFake, conversation, is_reflector_prompt, observer_or_reflector

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.events import OMEvent
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore


def make_om(model: Any, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"message_tokens": 600, "buffer_tokens": 0.25, "buffer_activation": 0.8},
        "reflection": {"observation_tokens": 50_000},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), model=model, **options)


async def run(om: ObservationalMemory, turns: int, *, settle: bool = True, **kwargs: Any) -> list[OMEvent]:
    events: list[OMEvent] = []
    for history in conversation(turns, **kwargs):
        ctx = await om.aprocess("t1", history)
        events.extend(ctx.events)
        if settle:
            await om.await_background()
    return events


def of(events: list[OMEvent], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


async def test_buffering_stages_chunks_without_touching_the_context() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 5000, "buffer_tokens": 300})
    events = await run(om, 6)
    record = await om.aget_record("t1")
    assert record.buffered_chunks, "background observation produced chunks"
    assert record.groups == [] and record.last_observed_seq == {}
    chunk = record.buffered_chunks[0]
    assert chunk.start_id == "h0" and chunk.message_tokens > 0 and "Miso" in chunk.observations
    assert chunk.current_task and chunk.suggested_response
    # the active context is unchanged: no system message, all messages present
    ctx = await om.aprocess("t1", list(conversation(6))[-1])
    assert ctx.system_message is None and len(ctx.messages) == 11
    status = ctx.status.windows.buffered.observations
    assert status.chunks == len(record.buffered_chunks)
    assert status.status == "complete"
    assert status.message_tokens == sum(c.message_tokens for c in record.buffered_chunks)
    assert status.observation_tokens == sum(c.observation_tokens for c in record.buffered_chunks)
    starts, ends = of(events, "data-om-buffering-start"), of(events, "data-om-buffering-end")
    assert starts and ends and starts[0].data.cycle_id == ends[0].data.cycle_id
    assert ends[0].data.tokens_buffered == chunk.message_tokens


async def test_activation_at_threshold_is_instant_and_on_chunk_boundaries() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model)
    activation_step = None
    for history in conversation(16):
        calls_before = len(model.prompts)
        ctx = await om.aprocess("t1", history)
        if of(ctx.events, "data-om-activation"):
            activation_step = (ctx, calls_before)
            break
        await om.await_background()
    assert activation_step is not None
    ctx, calls_before = activation_step
    activation = of(ctx.events, "data-om-activation")[0].data
    assert activation.triggered_by == "threshold"
    assert activation.operation_type == "observation"
    assert activation.chunks_activated >= 1 and activation.messages_activated >= 2
    assert not of(ctx.events, "data-om-observation-start"), "activation makes no synchronous model call"
    part = of(ctx.events, "data-om-activation")[0].to_part()["data"]
    for key in ("cycleId", "activatedAt", "chunksActivated", "tokensActivated", "observationTokens",
                "messagesActivated", "generationCount", "observations", "triggeredBy", "recordId", "threadId",
                "config"):
        assert key in part
    record = await om.aget_record("t1")
    # the observed point is exactly a chunk boundary
    assert record.groups[-1].source == "buffered"
    assert record.last_observed_id["t1"] == record.groups[-1].end_id
    # continuation hints survive activation and reach the context
    assert ctx.system_message is not None
    assert "<current-task>" in str(ctx.system_message.content)
    assert record.current_task == "Help the user pick cat food without chicken."


async def test_ratio_activation_leaves_about_the_retention_floor() -> None:
    """buffer_activation r leaves about (1 - r) x message_tokens of the window (here 300): below
    1000 tokens of floor no overshoot is allowed, so the activation takes the largest prefix of
    chunks that keeps at least the floor, and one chunk more would have gone below it."""
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 600, "buffer_tokens": 100, "buffer_activation": 0.5})
    for history in conversation(16):
        ctx = await om.aprocess("t1", history)
        acts = of(ctx.events, "data-om-activation")
        if acts:
            kept = ctx.status.windows.active.messages.tokens
            assert acts[0].data.tokens_activated > 0
            assert kept >= 300, "an activation never leaves less than the retention floor here"
            staged = sorted(ctx.record.buffered_chunks, key=lambda c: c.start_seq)
            if staged:
                assert kept - staged[0].message_tokens < 300, "the next chunk would have crossed the floor"
            return
        await om.await_background()
    raise AssertionError("no activation happened")


async def test_between_threshold_and_block_after_only_buffering_happens() -> None:
    gate = asyncio.Event()

    class SlowFake(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
            await gate.wait()
            return await super()._agenerate(messages, *a, **k)

    model = SlowFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 600, "buffer_tokens": 150, "block_after": 3})
    events = []
    for history in conversation(6):  # ~1470 estimator tokens: above 600, below 1800
        events.extend((await om.aprocess("t1", history)).events)
    assert not of(events, "data-om-observation-start"), "no synchronous observation below block_after"
    status = await om.astatus("t1")
    assert status.windows.active.messages.tokens > 600
    assert status.windows.buffered.observations.status == "running"
    gate.set()
    await om.await_background()


async def test_block_after_forces_a_synchronous_observation() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 600, "buffer_tokens": 550, "block_after": 1.2})
    history: list[BaseMessage] = [HumanMessage("hello", id="h0"), AIMessage("hi", id="a0")]
    big = " ".join(f"token{i}" for i in range(900))
    history.append(HumanMessage(f"Here is my whole file: {big}", id="h1"))
    history.append(AIMessage(f"Summary of it: {big}", id="a1"))
    history.append(HumanMessage("What now?", id="h2"))
    ctx = await om.aprocess("t1", history)
    assert of(ctx.events, "data-om-observation-start"), "past block_after the step blocks on the Observer"
    assert ctx.messages[-1].id == "h2"
    await om.await_background()


async def test_failed_buffering_falls_back_to_sync_at_the_threshold() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION, fail_on=list(range(50)))
    om = make_om(model)
    events = await run(om, 4)
    failed = of(events, "data-om-buffering-failed")
    assert failed and failed[0].data.error and failed[0].data.operation_type == "observation"
    record = await om.aget_record("t1")
    assert record.metadata.get("buffering_failed") is True
    model.fail_on = []
    events = await run(om, 16)
    sync = of(events, "data-om-observation-end")
    assert sync, "after a buffering failure the threshold runs a synchronous cycle"
    stored = await om.store.aget_messages(implicit_resource("t1"), "t1")
    assert len(stored) == 31  # nothing lost


async def test_reflection_buffering_replaces_exactly_what_it_covered() -> None:
    model = CallableFake(fn=observer_or_reflector)
    om = make_om(
        model,
        observation={"message_tokens": 300, "buffer_tokens": 100},
        reflection={"observation_tokens": 160, "buffer_activation": 0.5},
    )
    events = await run(om, 40)
    buffered = [e for e in of(events, "data-om-buffering-end") if e.data.operation_type == "reflection"]
    assert buffered, "background reflection ran"
    activations = [e for e in of(events, "data-om-activation") if e.data.operation_type == "reflection"]
    assert activations and activations[0].data.triggered_by == "threshold"
    record = await om.aget_record("t1")
    assert record.generation_count >= 1
    assert record.groups[0].source == "reflection"
    reflector_calls = [p for p in model.prompts if is_reflector_prompt(p)]
    assert reflector_calls


async def test_buffered_reflection_keeps_observations_added_since() -> None:
    from langchain_om.store.base import BufferedReflection, ObservationGroup

    model = CallableFake(fn=observer_or_reflector)
    om = make_om(model, observation={"message_tokens": 100_000, "buffer_tokens": 0.2},
                 reflection={"observation_tokens": 100, "buffer_activation": 0.5})
    await om.aprocess("t1", [HumanMessage("hi", id="h0")])
    record = await om.aget_record("t1")
    groups = [ObservationGroup(thread_id="t1", start_id=f"x{i}", end_id=f"y{i}", text=f"* 🟡 fact {i} " * 8,
                               tokens=40) for i in range(4)]
    pending = BufferedReflection(covered_group_ids=[g.id for g in groups[:2]], text="* 🔴 facts 0 and 1",
                                 input_tokens=80, output_tokens=8)
    updated = record.model_copy(update={"groups": groups, "buffered_reflection": pending})
    await om.store.acommit_record(updated, expected_version=record.version)
    ctx = await om.aprocess("t1", [HumanMessage("hi", id="h0"), HumanMessage("more", id="h1")])
    act = [e for e in of(ctx.events, "data-om-activation") if e.data.operation_type == "reflection"]
    assert act
    record = await om.aget_record("t1")
    assert [g.text for g in record.groups] == ["* 🔴 facts 0 and 1", groups[2].text, groups[3].text]
    assert record.groups[0].start_id == "x0" and record.groups[0].end_id == "y1"
    assert record.buffered_reflection is None


async def test_activate_after_idle_uses_the_ttl() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 5000, "buffer_tokens": 300}, activate_after_idle="5m")
    histories = list(conversation(6))
    for history in histories:
        await om.aprocess("t1", history)
        await om.await_background()
    assert (await om.aget_record("t1")).buffered_chunks
    last_ai = START + timedelta(minutes=2 * 4, seconds=30)  # the newest AI message in the 6th history
    later = last_ai + timedelta(minutes=6)
    follow = [*histories[-1], AIMessage("ok", id="a5", response_metadata={TIMESTAMP_KEY: last_ai.isoformat()}),
              HumanMessage("back again", id="h6", response_metadata={TIMESTAMP_KEY: later.isoformat()})]
    ctx = await om.aprocess("t1", follow, now=later)
    act = of(ctx.events, "data-om-activation")
    assert act and act[0].data.triggered_by == "ttl"
    assert act[0].data.ttl_expired_ms is not None and 59_000 <= act[0].data.ttl_expired_ms <= 61_000
    assert act[0].data.last_activity_at == int(last_ai.timestamp() * 1000)
    assert ctx.system_message is not None


async def test_no_idle_activation_before_the_ttl() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 5000, "buffer_tokens": 300}, activate_after_idle="1hr")
    events = await run(om, 6)
    assert not of(events, "data-om-activation")


async def test_activate_on_provider_change() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 5000, "buffer_tokens": 300}, activate_on_provider_change=True)
    history: list[BaseMessage] = []
    filler = " ".join(f"w{i}" for i in range(60))
    for turn in range(5):
        history.append(HumanMessage(f"q{turn} {filler}", id=f"h{turn}"))
        await om.aprocess("t1", history, current_model="openai:gpt-4o")
        await om.await_background()
        history.append(AIMessage(f"a{turn} {filler}", id=f"a{turn}",
                                 response_metadata={"model_name": "gpt-4o", "model_provider": "openai"}))
    history.append(HumanMessage("switching models now", id="h9"))
    same = await om.aprocess("t1", history, current_model="openai:gpt-4o")
    assert not of(same.events, "data-om-activation")
    ctx = await om.aprocess("t1", history, current_model="anthropic:claude-sonnet-4-5")
    act = of(ctx.events, "data-om-activation")
    assert act and act[0].data.triggered_by == "provider_change"
    assert act[0].data.previous_model == "openai/gpt-4o"
    assert act[0].data.current_model == "anthropic:claude-sonnet-4-5"


async def test_buffer_on_idle_buffers_below_the_interval() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 5000, "buffer_tokens": 4000, "buffer_on_idle": True})
    history = list(conversation(2))[-1]
    await om.aprocess("t1", history)
    await om.await_background()
    assert not (await om.aget_record("t1")).buffered_chunks
    await om.aon_turn_end("t1", [*history, AIMessage("done", id="a1")])
    await om.await_background()
    assert (await om.aget_record("t1")).buffered_chunks


async def test_shared_budget_lets_messages_use_unused_observation_room() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, share_token_budget=True,
                 observation={"message_tokens": 300, "buffer_tokens": False},
                 reflection={"observation_tokens": 600})
    events = await run(om, 6, words=10)  # ~590 tokens: over 300 but under the shared 900
    assert not of(events, "data-om-observation-start")
    status = await om.astatus("t1")
    assert status.windows.active.messages.threshold == 900
    events = await run(om, 12, words=10)  # ~1220 tokens: past the shared budget
    assert of(events, "data-om-observation-end")
    status = await om.astatus("t1")
    record = await om.aget_record("t1")
    assert status.windows.active.messages.threshold == 900 - record.observation_tokens


async def test_concurrent_steps_never_double_observe() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 400, "buffer_tokens": 100})
    histories = list(conversation(20))
    for index in range(0, len(histories), 2):
        batch = histories[index:index + 2]
        await asyncio.gather(*(om.aprocess("t1", h) for h in batch), om.aprocess("t1", batch[-1]))
    await om.aclose()
    store = om.store
    record = await store.aget_record(implicit_resource("t1"), "t1")
    assert record is not None
    stored = await store.aget_messages(implicit_resource("t1"), "t1")
    seq_of = {m.id: m.seq for m in stored}
    spans = sorted((seq_of[g.start_id], seq_of[g.end_id]) for g in record.groups)
    for (_, end), (start, _) in pairwise(spans):
        assert start > end, f"overlapping observation groups: {spans}"
    assert len(stored) == len({m.id for m in stored}) == 39


async def test_aclose_cancel_leaves_a_consistent_record() -> None:
    gate = asyncio.Event()

    class NeverFake(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
            await gate.wait()
            return await super()._agenerate(messages, *a, **k)

    om = make_om(NeverFake(fn=lambda _m: OBSERVATION), observation={"message_tokens": 5000, "buffer_tokens": 200})
    for history in conversation(4):
        await om.aprocess("t1", history)
    status = await om.astatus("t1")
    assert status.windows.buffered.observations.status == "running"
    record_before = await om.aget_record("t1")
    await om.aclose(cancel=True)
    record_after = await om.store.aget_record(implicit_resource("t1"), "t1")
    assert record_after is not None and record_after.version == record_before.version
    assert record_after.buffered_chunks == []


@pytest.mark.parametrize(
    ("reported", "current", "same"),
    [
        ("openai/gpt-4o-mini-2024-07-18", "openai/gpt-4o-mini", True),
        ("gpt-4o-mini-2024-07-18", "openai/gpt-4o-mini", True),
        ("anthropic/claude-3-5-sonnet-20241022", "anthropic:claude-3-5-sonnet-latest", True),
        ("google_genai/models/gemini-2.5-flash", "google_genai/gemini-2.5-flash", True),
        ("OpenAI/GPT-5-mini", "openai:gpt-5-mini", True),
        ("openai/gpt-4o", "openai/gpt-4o-mini", False),
        ("openai/gpt-4o-mini", "anthropic/gpt-4o-mini", False),
        ("google_genai/gemini-2.5-flash", "google_genai/gemini-2.5-pro", False),
    ],
)
def test_provider_change_ignores_snapshot_dates_and_a_missing_provider(reported: str, current: str, same: bool) -> None:
    """Responses report the dated snapshot and sometimes no provider; read as a change, every
    step with buffered chunks would activate them ("provider_change") and defeat buffering."""
    from langchain_om.foundation.messages import same_model

    assert same_model(reported, current) is same
    assert same_model(current, reported) is same
