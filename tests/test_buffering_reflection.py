"""Reflection buffering: idle / provider-change activation, failure fallback, block_after and the
start share; engine-level absolute buffer_activation; aclose waiting; status numbers (issue 4)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import OBSERVATION, REFLECTION, START, CallableFake, conversation, is_reflector_prompt
from test_buffering import make_om, of

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.events import OMEvent
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.model_calls.reflector import parse_reflector_output
from langchain_om.store.base import BufferedReflection, ObservationGroup, OMRecord, implicit_resource

GPT = {"model_name": "gpt-4o", "model_provider": "openai"}


def stamped(message: BaseMessage, moment: datetime, **meta: Any) -> BaseMessage:
    message.response_metadata = {TIMESTAMP_KEY: moment.isoformat(), **meta}
    return message


def groups_of(count: int, tokens: int, *, prefix: str = "g") -> list[ObservationGroup]:
    return [ObservationGroup(thread_id="t1", start_id=f"{prefix}s{i}", end_id=f"{prefix}e{i}",
                             text=f"* 🟡 {prefix} fact {i} " * 6, tokens=tokens) for i in range(count)]


async def put_log(om: ObservationalMemory, groups: list[ObservationGroup], *,
                  pending: BufferedReflection | None = None, append: bool = False) -> OMRecord:
    """Write observation groups (and optionally a buffered reflection) straight into the record."""
    record = await om.aget_record("t1")
    new_groups = [*record.groups, *groups] if append else groups
    update: dict[str, Any] = {"groups": new_groups}
    if pending is not None:
        update["buffered_reflection"] = pending
    return await om.store.acommit_record(record.model_copy(update=update), expected_version=record.version)


def reflection_events(events: list[OMEvent], kind: str) -> list[Any]:
    return [e for e in of(events, kind) if e.data.operation_type == "reflection"]


async def om_with_pending_reflection(**overrides: Any) -> tuple[ObservationalMemory, list[ObservationGroup]]:
    """An OM whose record holds four groups (160 tokens, below observation_tokens) and a buffered
    reflection over the first two, with one human/AI exchange stored."""
    model = CallableFake(fn=lambda _m: OBSERVATION)
    options: dict[str, Any] = {"observation": {"message_tokens": 100_000, "buffer_tokens": 0.2}}
    options.update(overrides)
    options.setdefault("reflection", {})
    options["reflection"] = {"observation_tokens": 50_000, **options["reflection"]}
    om = make_om(model, **options)
    await om.aprocess("t1", [stamped(HumanMessage("hi", id="h0"), START)])
    groups = groups_of(4, 40)
    pending = BufferedReflection(covered_group_ids=[g.id for g in groups[:2]], text="* 🔴 facts 0 and 1",
                                 input_tokens=80, output_tokens=8)
    await put_log(om, groups, pending=pending)
    return om, groups


def exchange(reply_at: datetime, arrival: datetime, *, ai_meta: dict[str, Any] | None = None) -> list[BaseMessage]:
    return [stamped(HumanMessage("hi", id="h0"), START),
            stamped(AIMessage("hello there", id="a0"), reply_at, **(ai_meta or {})),
            stamped(HumanMessage("back again", id="h1"), arrival)]


# ---------------------------------------------------------------- idle / provider change


async def test_reflection_activate_after_idle_activates_below_the_threshold() -> None:
    om, groups = await om_with_pending_reflection(reflection={"activate_after_idle": "5m"})
    reply = START + timedelta(seconds=30)
    arrival = reply + timedelta(minutes=5, seconds=30)
    ctx = await om.aprocess("t1", exchange(reply, arrival), now=arrival)
    act = reflection_events(ctx.events, "data-om-activation")
    assert act, "an expired idle TTL activates the buffered reflection below observation_tokens"
    data = act[0].data
    assert data.triggered_by == "ttl"
    assert data.ttl_expired_ms is not None and 29_000 <= data.ttl_expired_ms <= 31_000
    assert data.last_activity_at == int(reply.timestamp() * 1000)
    assert data.tokens_activated == 8 and data.generation_count == 1
    record = await om.aget_record("t1")
    assert record.buffered_reflection is None and record.generation_count == 1
    assert [g.text for g in record.groups] == ["* 🔴 facts 0 and 1", groups[2].text, groups[3].text]
    assert data.observation_tokens == record.observation_tokens


async def test_idle_activates_both_when_the_observation_activation_takes_the_last_reply() -> None:
    """The reflection's idle gap is measured on the window the step found, not the one left after
    the observation activation removed the last AI message."""
    om = make_om(CallableFake(fn=lambda _m: OBSERVATION),
                 observation={"message_tokens": 5000, "buffer_tokens": 300, "buffer_on_idle": True},
                 activate_after_idle="5m", reflection={"activate_after_idle": "5m"})
    histories = list(conversation(4))
    for history in histories:
        await om.aprocess("t1", history)
        await om.await_background()
    reply = START + timedelta(minutes=6, seconds=30)
    full = [*histories[-1], stamped(AIMessage("ok", id="a3"), reply)]
    await om.aon_turn_end("t1", full)  # buffers the reply too
    await om.await_background()
    assert (await om.aget_record("t1")).buffered_chunks[-1].end_id == "a3"
    groups = groups_of(2, 40)
    await put_log(om, groups, pending=BufferedReflection(covered_group_ids=[g.id for g in groups], text="* 🔴 r",
                                                         input_tokens=80, output_tokens=3))
    arrival = reply + timedelta(minutes=6)
    ctx = await om.aprocess("t1", [*full, stamped(HumanMessage("back", id="h9"), arrival)], now=arrival)
    acts = [(e.data.operation_type, e.data.triggered_by) for e in of(ctx.events, "data-om-activation")]
    assert acts == [("observation", "ttl"), ("reflection", "ttl")]
    assert [m.id for m in ctx.messages] == ["h9"]
    record = await om.aget_record("t1")
    assert record.generation_count == 1 and record.groups[0].text == "* 🔴 r"


async def test_reflection_idle_activation_waits_for_the_ttl() -> None:
    om, _groups = await om_with_pending_reflection(reflection={"activate_after_idle": "5m"})
    reply = START + timedelta(seconds=30)
    arrival = reply + timedelta(minutes=4)
    ctx = await om.aprocess("t1", exchange(reply, arrival), now=arrival)
    assert not of(ctx.events, "data-om-activation")
    record = await om.aget_record("t1")
    assert record.buffered_reflection is not None and record.generation_count == 0


async def test_reflection_does_not_inherit_the_top_level_idle_or_provider_options() -> None:
    om, _groups = await om_with_pending_reflection(activate_after_idle="1m", activate_on_provider_change=True)
    reply = START + timedelta(seconds=30)
    arrival = reply + timedelta(hours=2)
    ctx = await om.aprocess("t1", exchange(reply, arrival, ai_meta=GPT), now=arrival,
                            current_model="anthropic:claude-sonnet-4-5")
    assert not reflection_events(ctx.events, "data-om-activation")
    assert (await om.aget_record("t1")).buffered_reflection is not None


async def test_reflection_activate_on_provider_change() -> None:
    om, _groups = await om_with_pending_reflection(reflection={"activate_on_provider_change": True})
    reply = START + timedelta(seconds=30)
    arrival = reply + timedelta(seconds=20)
    history = exchange(reply, arrival, ai_meta=GPT)
    same = await om.aprocess("t1", history, now=arrival, current_model="openai:gpt-4o")
    assert not of(same.events, "data-om-activation"), "same model: nothing activates"
    ctx = await om.aprocess("t1", history, now=arrival, current_model="anthropic:claude-sonnet-4-5")
    act = reflection_events(ctx.events, "data-om-activation")
    assert act and act[0].data.triggered_by == "provider_change"
    assert act[0].data.previous_model == "openai/gpt-4o"
    assert act[0].data.current_model == "anthropic:claude-sonnet-4-5"
    record = await om.aget_record("t1")
    assert record.buffered_reflection is None and record.generation_count == 1


# ---------------------------------------------------------------- failure fallback


async def test_failed_background_reflection_falls_back_to_sync_at_the_threshold() -> None:
    state = {"fail": True}

    def answer(messages: list[BaseMessage]) -> str:
        if is_reflector_prompt(messages):
            if state["fail"]:
                raise RuntimeError("reflector exploded")
            return REFLECTION
        return OBSERVATION

    seen: list[OMEvent] = []
    om = make_om(CallableFake(fn=answer), observation={"message_tokens": 100_000, "buffer_tokens": 0.2},
                 reflection={"observation_tokens": 200, "buffer_activation": 0.5, "block_after": 10},
                 on_debug_event=seen.append)
    history: list[BaseMessage] = [HumanMessage("hi", id="h0")]
    await om.aprocess("t1", history)
    groups = groups_of(3, 40)  # 120 tokens: above the 100-token start, below 200
    await put_log(om, groups)
    history.append(HumanMessage("more", id="h1"))
    await om.aprocess("t1", history)  # starts the background reflection, which fails
    await om.await_background()
    failed = reflection_events(seen, "data-om-buffering-failed")
    assert failed and "reflector exploded" in failed[0].data.error
    record = await om.aget_record("t1")
    assert record.metadata.get("reflection_buffering_failed") is True
    assert record.buffered_reflection is None and record.generation_count == 0
    assert [g.id for g in record.groups] == [g.id for g in groups], "observations intact"
    history.append(HumanMessage("again", id="h2"))
    ctx = await om.aprocess("t1", history)
    assert reflection_events(ctx.events, "data-om-buffering-failed"), "the failure reaches the next step's stream"
    await om.await_background()  # this step's retry fails too
    assert (await om.aget_record("t1")).metadata.get("reflection_buffering_failed") is True
    state["fail"] = False
    extra = groups_of(3, 40, prefix="n")  # 240 tokens: crosses observation_tokens, far below block_after (2000)
    await put_log(om, extra, append=True)
    history.append(HumanMessage("and now", id="h3"))
    ctx = await om.aprocess("t1", history)
    sync = reflection_events(ctx.events, "data-om-observation-end")
    assert sync, "after a failed background reflection the threshold runs a synchronous reflection"
    record = await om.aget_record("t1")
    assert record.generation_count == 1 and record.groups[0].source == "reflection"
    assert "reflection_buffering_failed" not in record.metadata
    assert len(await om.store.aget_messages(implicit_resource("t1"), "t1")) == 4


# ---------------------------------------------------------------- block_after and start share


async def test_reflection_block_after_only_buffers_below_and_blocks_past_it() -> None:
    model = CallableFake(fn=lambda m: REFLECTION if is_reflector_prompt(m) else OBSERVATION)
    om = make_om(model, observation={"message_tokens": 100_000, "buffer_tokens": 0.2},
                 reflection={"observation_tokens": 200, "buffer_activation": 1.0, "block_after": 2})
    history: list[BaseMessage] = [HumanMessage("hi", id="h0")]
    await om.aprocess("t1", history)
    await put_log(om, groups_of(6, 40))  # 240: past observation_tokens (200), below block_after (400)
    history.append(HumanMessage("more", id="h1"))
    ctx = await om.aprocess("t1", history)
    assert not reflection_events(ctx.events, "data-om-observation-start"), "no synchronous reflection"
    assert (await om.aget_record("t1")).generation_count == 0
    await om.await_background()
    record = await om.aget_record("t1")
    assert record.buffered_reflection is not None, "only background reflection ran"
    assert sum(1 for p in model.prompts if is_reflector_prompt(p)) == 1

    blocking = make_om(model, observation={"message_tokens": 100_000, "buffer_tokens": 0.2},
                       reflection={"observation_tokens": 200, "buffer_activation": 1.0, "block_after": 2})
    await blocking.aprocess("t1", history[:1])
    await put_log(blocking, groups_of(11, 40))  # 440: past block_after
    ctx = await blocking.aprocess("t1", history)
    assert reflection_events(ctx.events, "data-om-observation-start"), "past block_after the step reflects"
    record = await blocking.aget_record("t1")
    assert record.generation_count == 1 and len(record.groups) == 1


async def test_background_reflection_starts_at_the_buffer_activation_share() -> None:
    model = CallableFake(fn=lambda m: REFLECTION if is_reflector_prompt(m) else OBSERVATION)
    om = make_om(model, observation={"message_tokens": 100_000, "buffer_tokens": 0.2},
                 reflection={"observation_tokens": 1000, "buffer_activation": 0.5})
    history: list[BaseMessage] = [HumanMessage("hi", id="h0")]
    await om.aprocess("t1", history)
    await put_log(om, groups_of(12, 40))  # 480 < 500
    history.append(HumanMessage("more", id="h1"))
    await om.aprocess("t1", history)
    await om.await_background()
    assert not any(is_reflector_prompt(p) for p in model.prompts), "below the share nothing starts"
    assert (await om.aget_record("t1")).buffered_reflection is None
    await put_log(om, groups_of(1, 40, prefix="n"), append=True)  # 520 >= 500
    history.append(HumanMessage("again", id="h2"))
    await om.aprocess("t1", history)
    assert (await om.astatus("t1")).windows.buffered.reflection.status == "running"
    await om.await_background()
    record = await om.aget_record("t1")
    pending = record.buffered_reflection
    assert pending is not None and len(pending.covered_group_ids) == 13
    assert record.generation_count == 0 and len(record.groups) == 13, "nothing activates below the threshold"
    # data-om-status reports the engine's numbers for the buffered reflection
    history.append(HumanMessage("status?", id="h3"))
    ctx = await om.aprocess("t1", history)
    reflection = ctx.status.windows.buffered.reflection
    expected_out = om.counter.count_text(parse_reflector_output(REFLECTION).observations)
    assert reflection.input_observation_tokens == pending.input_tokens == 520
    assert reflection.observation_tokens == pending.output_tokens == expected_out > 0
    assert reflection.status == "complete"
    part = ctx.events[0].to_part()["data"]["windows"]["buffered"]["reflection"]
    assert part["inputObservationTokens"] == 520 and part["observationTokens"] == expected_out


# ---------------------------------------------------------------- observation side


def _retention_rule(sizes: list[int], window: int, floor: int) -> int:
    """The reference's retention rule, written out independently of the planner: the tokens an
    activation removes from a ``window``-token window with chunks of ``sizes`` (oldest first).
    A window within the floor has nothing to remove (issue 30 item 11)."""
    target = window - floor
    if target <= 0:
        return 0
    removed, below = 0, 0
    for size in sizes:
        if removed + size >= target:
            reach = removed + size
            if reach - target <= 0.95 * floor and window - reach >= min(1000, floor):
                return reach
            break
        removed += size
        below = removed
    return below if below else (sizes[0] if sizes else 0)


async def test_projected_message_removal_matches_the_next_activation() -> None:
    """``projectedMessageRemoval`` is the retention rule applied to the current window, and the
    activation that follows removes what the same rule says for the window it found."""
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 600, "buffer_tokens": 100, "buffer_activation": 0.5})
    histories = list(conversation(16))
    for index, history in enumerate(histories):
        await om.aprocess("t1", history)
        await om.await_background()
        status = await om.astatus("t1")
        record = await om.aget_record("t1")
        sizes = [c.message_tokens for c in sorted(record.buffered_chunks, key=lambda c: c.start_seq)]
        projected = status.windows.buffered.observations.projected_message_removal
        assert projected == _retention_rule(sizes, status.windows.active.messages.tokens, 300)
        assert status.windows.buffered.observations.message_tokens == sum(sizes)
        if sizes and index + 1 < len(histories):
            nxt = await om.aprocess("t1", histories[index + 1])
            act = of(nxt.events, "data-om-activation")
            if act:
                removed = act[0].data.tokens_activated
                found = removed + nxt.status.windows.active.messages.tokens
                assert removed == _retention_rule(sizes[: act[0].data.chunks_activated + 1], found, 300) or \
                    removed == _retention_rule(sizes, found, 300)
                return
            await om.await_background()
    raise AssertionError("no activation happened")


async def test_absolute_buffer_activation_keeps_at_least_that_many_tokens() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 3000, "buffer_tokens": 300, "buffer_activation": 1000})
    for history in conversation(30):
        before = await om.aget_record("t1")
        chunk_sizes = [c.message_tokens for c in before.buffered_chunks]
        ctx = await om.aprocess("t1", history)
        acts = of(ctx.events, "data-om-activation")
        if acts:
            kept = ctx.status.windows.active.messages.tokens
            assert kept >= 1000, f"activation kept {kept} tokens, fewer than the 1000 asked for"
            assert kept < 1000 + max(chunk_sizes), "the cut is the last chunk boundary that keeps 1000"
            record = await om.aget_record("t1")
            assert record.last_observed_id["t1"] == record.groups[-1].end_id  # on a chunk boundary
            assert ctx.messages[-1].id == history[-1].id
            return
        await om.await_background()
    raise AssertionError("no activation happened")


async def test_aclose_waits_for_running_buffering_and_commits_its_chunk() -> None:
    gate = asyncio.Event()

    class SlowFake(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
            await gate.wait()
            return await super()._agenerate(messages, *a, **k)

    om = make_om(SlowFake(fn=lambda _m: OBSERVATION), observation={"message_tokens": 5000, "buffer_tokens": 200})
    for history in conversation(3):
        await om.aprocess("t1", history)
    assert (await om.astatus("t1")).windows.buffered.observations.status == "running"
    before = await om.aget_record("t1")
    assert before.buffered_chunks == []
    asyncio.get_running_loop().call_later(0.2, gate.set)
    await om.aclose()
    record = await om.store.aget_record(implicit_resource("t1"), "t1")
    assert record is not None and len(record.buffered_chunks) == 1
    assert record.version == before.version + 1
    assert record.groups == [] and record.last_observed_seq == {}
    chunk = record.buffered_chunks[0]
    stored = await om.store.aget_messages(implicit_resource("t1"), "t1")
    covered = [m for m in stored if chunk.start_seq <= m.seq <= chunk.end_seq]
    assert covered[0].id == chunk.start_id == "h0" and covered[-1].id == chunk.end_id
    assert chunk.message_count == len(covered) and chunk.message_tokens == sum(m.tokens for m in covered)
    assert "Miso" in chunk.observations


async def test_projected_removal_is_zero_while_the_window_is_within_the_retention_floor() -> None:
    """Issue 30 item 11: with the window (about 5k) under the floor an activation keeps (9k), an
    activation would remove nothing, yet ``projectedMessageRemoval`` reported the first chunk."""
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, observation={"message_tokens": 12_000, "buffer_tokens": 1_000, "buffer_activation": 9_000})
    seen_chunks = False
    for history in conversation(40, words=60):
        await om.aprocess("t1", history)
        await om.await_background()
        status = await om.astatus("t1")
        window = status.windows.active.messages.tokens
        if window > 9_000:
            break
        buffered = status.windows.buffered.observations
        seen_chunks = seen_chunks or buffered.chunks > 0
        assert buffered.projected_message_removal == 0, (window, buffered)
    assert seen_chunks, "chunks were buffered while the window stayed within the floor"
