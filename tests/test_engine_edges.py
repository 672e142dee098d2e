"""Engine edge cases: OM switched off, the tokenizer named in status, degenerate Reflector output."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from om_fakes import OBSERVATION, CallableFake, conversation, is_reflector_prompt

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.tokens import EstimatorCounter, TiktokenCounter, load_o200k_encoding
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore


def make_om(model: Any, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"message_tokens": 400, "buffer_tokens": False},
        "reflection": {"observation_tokens": 10_000},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), model=model, **options)


async def test_disabled_memory_stores_but_never_observes() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(model, enabled=False)
    history: list[BaseMessage] = []
    for history in conversation(12):
        ctx = await om.aprocess("t1", history)
    assert model.prompts == [], "no OM model call while disabled"
    assert ctx.system_message is None
    assert [m.id for m in ctx.messages] == [m.id for m in history], "the history passes through unchanged"
    stored = await om.store.aget_messages(implicit_resource("t1"), "t1")
    assert len(stored) == len(history), "messages are still stored, so turning OM on later loses nothing"


@pytest.mark.parametrize("kind", ["estimator", "tiktoken"])
async def test_status_names_the_tokenizer_in_use(kind: str) -> None:
    if kind == "tiktoken" and load_o200k_encoding() is None:
        pytest.skip("no o200k_base encoding on this machine")
    om = make_om(CallableFake(fn=lambda _m: OBSERVATION), token_counter=kind)
    expected = EstimatorCounter if kind == "estimator" else TiktokenCounter
    assert isinstance(om.counter, expected)
    ctx = await om.aprocess("t1", list(conversation(1))[-1])
    assert ctx.status.tokenizer == om.counter.source
    assert (kind == "estimator") == ("estimat" in str(ctx.status.tokenizer).lower())


@pytest.mark.parametrize("garbage", ["", "Sorry, I cannot summarise that.", "<observations>\n</observations>"])
async def test_degenerate_reflector_output_keeps_the_log(garbage: str) -> None:
    def respond(messages: list[BaseMessage]) -> str:
        return garbage if is_reflector_prompt(messages) else OBSERVATION

    om = make_om(CallableFake(fn=respond), reflection={"observation_tokens": 90})
    events = []
    for history in conversation(12):
        events.extend((await om.aprocess("t1", history)).events)
    failed = [e for e in events if e.type == "data-om-observation-failed"]
    assert failed and all(e.data.operation_type == "reflection" for e in failed)
    record = await om.aget_record("t1")
    assert record.generation_count == 0, "nothing degenerate was committed"
    assert record.groups and all(g.source == "observation" for g in record.groups)
    assert "Miso" in record.observations


async def test_a_failed_reflection_is_not_retried_on_every_step() -> None:
    """A Reflector that cannot compress costs its retry ladder once, then again only after the
    log has grown by a tenth of observation_tokens, not on every following step."""

    def respond(messages: list[BaseMessage]) -> str:
        if is_reflector_prompt(messages):
            body = str(messages[-1].content)
            return "<observations>\n" + body + "\n" + body + "\n</observations>"  # bigger than its input
        return OBSERVATION

    model = CallableFake(fn=respond)
    om = make_om(model, reflection={"observation_tokens": 90})
    ladders: list[int] = []  # observation tokens at each reflection attempt
    for history in conversation(30, words=8):
        before = sum(is_reflector_prompt(p) for p in model.prompts)
        await om.aprocess("t1", history)
        if sum(is_reflector_prompt(p) for p in model.prompts) > before:
            ladders.append((await om.aget_record("t1")).observation_tokens)
    steps_over = 29  # every step after the first observation is over the 90-token threshold
    assert 1 <= len(ladders) < steps_over // 2, f"reflection retried on {len(ladders)} steps"
    assert all(later >= earlier + 9 for earlier, later in pairwise(ladders)), ladders


async def test_async_callers_can_wait_for_work_the_sync_twins_started() -> None:
    """``process`` runs on OM's private loop, so its background buffering lives there; an async
    caller's ``await_background`` / ``aclose`` must wait for it rather than fail on the loop."""
    import asyncio

    class SlowFake(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
            await asyncio.sleep(0.3)
            return await super()._agenerate(messages, *a, **k)

    om = make_om(SlowFake(fn=lambda _m: OBSERVATION), observation={"message_tokens": 5000, "buffer_tokens": 300})
    for history in conversation(4):
        om.process("t1", history)  # sync twin: the buffering task starts on OM's loop
    await om.await_background()  # from this test's own loop
    record = await om.aget_record("t1")
    assert record.buffered_chunks, "the background chunk was committed before await_background returned"
    om.process("t1", list(conversation(5))[-1])
    await om.aclose()  # waits for the private loop's task too
    stored_record = await om.store.aget_record(implicit_resource("t1"), "t1")
    assert len(stored_record.buffered_chunks) > len(record.buffered_chunks)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_a_tool_artifact_json_cannot_hold_does_not_stall_the_thread(store_kind: str, tmp_path: Any) -> None:
    """``content_and_artifact`` tools often return bytes or objects as the artifact; the model
    never sees it, so OM stores the message without it instead of refusing it every step."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from langchain_om.store.sqlite import SQLiteStore

    store = InMemoryStore() if store_kind == "memory" else SQLiteStore(str(tmp_path / "om.db"))
    om = ObservationalMemory(store, model=CallableFake(fn=lambda _m: OBSERVATION))
    call = {"name": "fetch", "args": {}, "id": "c1"}
    history: list[BaseMessage] = [
        HumanMessage("fetch the report", id="h1"),
        AIMessage("", tool_calls=[call], id="a1"),
        ToolMessage("report fetched", tool_call_id="c1", artifact=b"%PDF-1.7 raw bytes", id="t1"),
        ToolMessage("second", tool_call_id="c1", artifact={"pages": 3}, id="t2"),
    ]
    ctx = await om.aprocess("th", history)
    assert [m.id for m in ctx.messages] == ["h1", "a1", "t1", "t2"]
    assert history[2].artifact == b"%PDF-1.7 raw bytes", "the caller's message is untouched"  # type: ignore[attr-defined]
    stored = {m.id: m.data["data"] for m in await store.aget_messages(implicit_resource("th"), "th")}
    assert stored["t1"]["artifact"] is None and stored["t1"]["content"] == "report fetched"
    assert stored["t2"]["artifact"] == {"pages": 3}
    ctx = await om.aprocess("th", [*history, AIMessage("done", id="a2")])
    assert [m.id for m in ctx.messages][-1] == "a2"
    await om.aclose()


async def test_a_failed_reflection_does_not_hold_back_the_next_conversation_on_the_thread() -> None:
    """After a failed synchronous reflection OM waits for the log to grow a tenth before trying
    again; that wait belongs to the old log, not to a new conversation after a delete."""
    condensed = (
        "<observations>\nDate: 2026-11-30 (Monday)\n"
        + "\n".join(f"* 🔴 condensed {i}" for i in range(8))
        + "\n</observations>"
    )
    long_log = (
        "<observations>\nDate: 2026-11-30 (Monday)\n"
        + "\n".join(f"* 🟡 fact {i} about cat food" for i in range(20))
        + "\n</observations>"
    )
    state = {"fail": True, "reflector_calls": 0}

    def respond(messages: list[BaseMessage]) -> str:
        if is_reflector_prompt(messages):
            state["reflector_calls"] += 1
            if state["fail"]:
                raise RuntimeError("reflector down")
            return condensed
        return long_log

    om = ObservationalMemory(
        InMemoryStore(),
        model=CallableFake(fn=respond),
        token_counter="estimator",
        observation={"message_tokens": 400, "buffer_tokens": False},
        reflection={"observation_tokens": 1000},
    )

    async def grow(until: int) -> Any:
        for history in conversation(200):
            await om.aprocess("t", history)
            record = await om.aget_record("t")
            if record.generation_count or record.observation_tokens >= until:
                return record
        return record

    failed = await grow(2500)
    assert failed.generation_count == 0 and state["reflector_calls"] > 0
    await om.adelete_thread("t")
    state.update(fail=False, reflector_calls=0)
    healthy = await grow(2400)
    assert state["reflector_calls"] > 0 and healthy.generation_count >= 1
