"""The synchronous engine: threshold crossings, failures, restarts (issue 2, item 7)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from om_fakes import OBSERVATION, REFLECTION, CallableFake, conversation, is_reflector_prompt
from pydantic import Field

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.config import OMConfigError
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.store.base import OMRecord, OMStore, RecordConflictError, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore


def make_om(store: OMStore, model: Any, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"message_tokens": 400, "buffer_tokens": False},
        "reflection": {"observation_tokens": 10_000},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(store, model=model, **options)


async def test_below_threshold_nothing_is_observed() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(InMemoryStore(), model, observation={"message_tokens": 100_000, "buffer_tokens": False})
    history = list(conversation(3))[-1]
    ctx = await om.aprocess("t1", history)
    assert ctx.system_message is None
    assert [m.id for m in ctx.messages] == [m.id for m in history]
    assert model.prompts == []
    assert [e.type for e in ctx.events] == ["data-om-status"]
    assert ctx.status.windows.active.messages.tokens > 0
    assert ctx.status.windows.active.messages.threshold == 100_000


async def test_crossing_message_threshold_observes_and_bounds_context() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    store = InMemoryStore()
    om = make_om(store, model)
    contexts = []
    for history in conversation(12):
        contexts.append(await om.aprocess("t1", history))
    observed = [c for c in contexts if any(e.type == "data-om-observation-end" for e in c.events)]
    assert observed, "the message threshold was crossed"
    first = observed[0]
    types = [e.type for e in first.events]
    assert types[0] == "data-om-status"
    start = next(e for e in first.events if e.type == "data-om-observation-start")
    end = next(e for e in first.events if e.type == "data-om-observation-end")
    assert start.data.cycle_id == end.data.cycle_id  # type: ignore[attr-defined]
    assert end.data.current_task == "Help the user pick cat food without chicken."  # type: ignore[attr-defined]
    # the context is one system message + unobserved messages, ending with the newest human turn
    assert first.system_message is not None and first.system_message.id == OM_CONTEXT_MESSAGE_ID
    text = str(first.system_message.content)
    assert "Miso" in text and "<current-task>" in text and "<suggested-response>" in text
    assert first.messages[-1].type == "human"
    kept_ids = {m.id for m in first.messages}
    assert first.observed_message_ids and not kept_ids & set(first.observed_message_ids)
    record = await om.aget_record("t1")
    group = record.groups[0]
    assert group.start_id == "h0"
    # raw messages are never deleted, only marked observed
    stored = await store.aget_messages(implicit_resource("t1"), "t1")
    assert len(stored) == 23
    assert [m.id for m in stored if m.observed][-1] == group.end_id or len(record.groups) > 1
    # the observer was shown dated transcript lines
    transcript = str(model.prompts[0][-1].content)
    assert "2026-11-30" in transcript and "Turn 0" in transcript
    # bounded: every context stays under threshold + one turn
    last = contexts[-1]
    assert last.status.windows.active.messages.tokens <= 400 + 200


async def test_crossing_observation_threshold_reflects() -> None:
    def respond(messages: list[BaseMessage]) -> str:
        return REFLECTION if is_reflector_prompt(messages) else OBSERVATION

    model = CallableFake(fn=respond)
    om = make_om(InMemoryStore(), model, reflection={"observation_tokens": 90})
    events = []
    for history in conversation(20):
        ctx = await om.aprocess("t1", history)
        events.extend(ctx.events)
    ends = [e for e in events if e.type == "data-om-observation-end"]
    assert any(e.data.operation_type == "reflection" for e in ends)  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert record.generation_count >= 1
    assert record.groups[0].source == "reflection"
    assert record.groups[0].start_id == "h0"
    status = await om.astatus("t1")
    assert status.generation_count == record.generation_count


@pytest.mark.parametrize(
    "garbage",
    ["", "   ", "I'm sorry, I can't help with that.", "<current-task>only a task</current-task>"],
)
async def test_malformed_observer_output_fails_cleanly_and_loses_nothing(garbage: str) -> None:
    outputs = iter([garbage, garbage, OBSERVATION])  # a reply that is not observations is asked for once more
    model = CallableFake(fn=lambda _m: next(outputs))
    store = InMemoryStore()
    om = make_om(store, model)
    histories = list(conversation(12))
    failed_ctx = None
    for history in histories:
        ctx = await om.aprocess("t1", history)
        if any(e.type == "data-om-observation-failed" for e in ctx.events):
            failed_ctx = ctx
            break
    assert failed_ctx is not None
    failure = next(e for e in failed_ctx.events if e.type == "data-om-observation-failed")
    start = next(e for e in failed_ctx.events if e.type == "data-om-observation-start")
    assert failure.data.cycle_id == start.data.cycle_id  # type: ignore[attr-defined]
    assert failure.data.error  # type: ignore[attr-defined]
    # nothing observed, nothing lost: the whole history is still in the context
    record = await om.aget_record("t1")
    assert record.groups == []
    assert not any(m.observed for m in await store.aget_messages(implicit_resource("t1"), "t1"))
    assert failed_ctx.system_message is None
    assert len(failed_ctx.messages) == len(history)
    # the next step retries and succeeds
    ctx = await om.aprocess("t1", history)
    assert any(e.type == "data-om-observation-end" for e in ctx.events)


async def test_observer_exception_degrades_to_failure_event() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION, fail_on=[0])
    om = make_om(InMemoryStore(), model, failure_policy={"max_retries": 0})  # a retry would cure it in-step
    seen = []
    for history in conversation(12):
        seen.extend(e.type for e in (await om.aprocess("t1", history)).events)
    assert "data-om-observation-failed" in seen
    assert seen.index("data-om-observation-failed") < seen.index("data-om-observation-end")


class HangingFake(CallableFake):
    """Hangs (as a stuck provider would) on the call indexes in ``hang_on``."""

    hang_on: list[int] = Field(default_factory=list)

    async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
        if len(self.prompts) in self.hang_on:
            self.prompts.append(list(messages))
            await asyncio.sleep(3600)
        return await super()._agenerate(messages, *a, **k)


async def test_observer_timeout_degrades_to_failure_and_the_next_step_retries() -> None:
    model = HangingFake(fn=lambda _m: OBSERVATION, hang_on=[0])
    store = InMemoryStore()
    om = make_om(store, model, observation={"message_tokens": 400, "buffer_tokens": False, "model_timeout": "50ms"},
                 failure_policy={"max_retries": 0})  # a timeout is transient: a retry would cure it in-step
    events: list[Any] = []
    for history in conversation(12):
        ctx = await asyncio.wait_for(om.aprocess("t1", history), 5)
        events.extend(ctx.events)
        if any(e.type == "data-om-observation-failed" for e in ctx.events):
            break
    failure = next(e for e in events if e.type == "data-om-observation-failed")
    assert "Timeout" in failure.data.error
    assert len(ctx.messages) == len(history), "the raw history stays in the context"
    assert not any(m.observed for m in await store.aget_messages(implicit_resource("t1"), "t1"))
    ctx = await om.aprocess("t1", history)
    assert any(e.type == "data-om-observation-end" for e in ctx.events)
    assert len(ctx.messages) < len(history)


async def test_reflector_timeout_keeps_the_observations() -> None:
    calls: list[str] = []

    def respond(messages: list[BaseMessage]) -> str:
        calls.append("reflector" if is_reflector_prompt(messages) else "observer")
        return REFLECTION if is_reflector_prompt(messages) else OBSERVATION

    class HangOnReflect(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *a: Any, **k: Any) -> Any:
            if is_reflector_prompt(messages):
                await asyncio.sleep(3600)
            return await super()._agenerate(messages, *a, **k)

    om = make_om(InMemoryStore(), HangOnReflect(fn=respond),
                 reflection={"observation_tokens": 90, "model_timeout": 50})
    events: list[Any] = []
    for history in conversation(12):
        events.extend((await asyncio.wait_for(om.aprocess("t1", history), 10)).events)
    failed = [e for e in events if e.type == "data-om-observation-failed"]
    assert failed and failed[0].data.operation_type == "reflection"
    assert "Timeout" in failed[0].data.error
    record = await om.aget_record("t1")
    assert record.generation_count == 0 and "Miso" in record.observations


@pytest.mark.parametrize("bad", ["auto", 0, -5, "soon"])
def test_model_timeout_validation_names_the_field(bad: Any) -> None:
    with pytest.raises(OMConfigError, match=r"observation\.model_timeout"):
        make_om(InMemoryStore(), "openai:gpt-5-mini", observation={"model_timeout": bad})


def test_model_timeout_false_means_no_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # model strings are checked at construction
    om = make_om(InMemoryStore(), "openai:gpt-5-mini", reflection={"model_timeout": False})
    assert om.config.reflection.model_timeout_s() is None
    assert om.config.observation.model_timeout_s() == 300.0


async def test_reflector_that_does_not_compress_is_retried_then_original_kept() -> None:
    def respond(messages: list[BaseMessage]) -> str:
        if is_reflector_prompt(messages):
            log = str(messages[-1].content).split("<observation-log>\n")[1].split("\n</observation-log>")[0]
            return "<observations>\n" + log + "\n" + log + "\n</observations>"  # bigger than input
        return OBSERVATION

    model = CallableFake(fn=respond)
    om = make_om(InMemoryStore(), model, reflection={"observation_tokens": 90})
    events = []
    for history in conversation(12):
        events.extend((await om.aprocess("t1", history)).events)
    reflector_calls = [p for p in model.prompts if is_reflector_prompt(p)]
    assert len(reflector_calls) >= 3  # levels 0, 1, 2
    # each retry adds stronger compression guidance, after the log (the system prompt stays: issue 43)
    levels = [str(p[-1].content).split("</observation-log>", 1)[1] for p in reflector_calls[:3]]
    assert levels[0] != levels[1] != levels[2], "each retry adds stronger compression guidance"
    assert len({str(p[0].content) for p in reflector_calls}) == 1
    failed = [e for e in events if e.type == "data-om-observation-failed"]
    assert failed and failed[0].data.operation_type == "reflection"  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert record.generation_count == 0
    assert all(g.source != "reflection" for g in record.groups)
    assert "Miso" in record.observations


async def test_tool_exchange_is_never_split() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    om = make_om(InMemoryStore(), model, observation={"message_tokens": 150, "buffer_tokens": False})
    history: list[BaseMessage] = []
    filler = " ".join(f"word{i}" for i in range(40))
    for turn in range(8):
        history.append(HumanMessage(f"question {turn} {filler}", id=f"h{turn}"))
        call = {"name": "search", "args": {"q": filler}, "id": f"tc{turn}"}
        history.append(AIMessage("", id=f"c{turn}", tool_calls=[call]))
        history.append(ToolMessage(f"result {filler}", tool_call_id=f"tc{turn}", id=f"r{turn}"))
        history.append(AIMessage(f"answer {turn}", id=f"a{turn}"))
        ctx = await om.aprocess("t1", history)
        kept = ctx.messages
        for index, message in enumerate(kept):
            if isinstance(message, ToolMessage):
                assert index > 0 and isinstance(kept[index - 1], AIMessage) and kept[index - 1].tool_calls


async def test_crash_between_observation_and_marking_redoes_once(tmp_path: Path) -> None:
    """The observer ran, but the commit never happened (process died): nothing is marked, and
    the next worker observes those messages exactly once."""
    path = tmp_path / "om.db"
    model = CallableFake(fn=lambda _m: OBSERVATION)
    store = SQLiteStore(path)
    om = make_om(store, model)
    original = store.acommit_record
    crashed = {"done": False}

    async def dying_commit(record: Any, *, expected_version: int, mark_observed: Any = None) -> Any:
        if mark_observed and not crashed["done"]:
            crashed["done"] = True
            raise SystemExit("worker killed before commit")
        return await original(record, expected_version=expected_version, mark_observed=mark_observed)

    store.acommit_record = dying_commit  # type: ignore[method-assign]
    histories = list(conversation(12))
    with pytest.raises(SystemExit):
        for history in histories:
            await om.aprocess("t1", history)
    assert crashed["done"]
    await store.aclose()

    fresh_store = SQLiteStore(path)
    fresh = make_om(fresh_store, model)
    before = await fresh_store.aget_messages(implicit_resource("t1"), "t1")
    assert not any(m.observed for m in before)
    record = await fresh.aget_record("t1")
    assert record.groups == []
    for history in histories:
        await fresh.aprocess("t1", history)
    after = await fresh_store.aget_messages(implicit_resource("t1"), "t1")
    ids = [m.id for m in after]
    assert len(ids) == len(set(ids)) == len(histories[-1])
    record = await fresh.aget_record("t1")
    covered: list[str] = []
    for group in record.groups:
        seqs = [m.seq for m in after if m.id in (group.start_id, group.end_id)]
        covered.extend(str(s) for s in range(min(seqs), max(seqs) + 1))
    assert len(covered) == len(set(covered)), "no message is observed twice"
    await fresh_store.aclose()


async def test_lost_race_discards_work_instead_of_double_observing() -> None:
    model = CallableFake(fn=lambda _m: OBSERVATION)
    store = InMemoryStore()
    om = make_om(store, model)
    original = store.acommit_record
    raced = {"n": 0}

    async def racing_commit(record: Any, *, expected_version: int, mark_observed: Any = None) -> Any:
        if mark_observed and raced["n"] == 0:
            raced["n"] += 1
            raise RecordConflictError("another worker won")
        return await original(record, expected_version=expected_version, mark_observed=mark_observed)

    store.acommit_record = racing_commit  # type: ignore[method-assign]
    for history in conversation(12):
        await om.aprocess("t1", history)
    assert raced["n"] == 1
    record = await om.aget_record("t1")
    starts = [g.start_id for g in record.groups]
    assert len(starts) == len(set(starts))


RESTART_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from datetime import datetime, timedelta, timezone
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_om.engine import ObservationalMemory
    from langchain_om.store.sqlite import SQLiteStore

    path, first, last = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    obs = json.loads(sys.argv[4])
    model = FakeListChatModel(responses=[obs])
    om = ObservationalMemory(SQLiteStore(path), model=model, token_counter="estimator",
                             observation={"message_tokens": 400, "buffer_tokens": False})
    start = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)

    async def main():
        history = []
        out = None
        for turn in range(last):
            filler = " ".join(f"detail{turn}_{i}" for i in range(30))
            history.append(HumanMessage(f"Turn {turn}: {filler}", id=f"h{turn}"))
            if turn >= first:
                out = await om.aprocess("t1", history)
            history.append(AIMessage(f"Answer {turn}: {filler}", id=f"a{turn}"))
        await om.aclose()
        print(json.dumps({"system": out.system_message.content if out.system_message else None,
                          "ids": [m.id for m in out.messages]}))

    asyncio.run(main())
    """
)


def test_restart_persistence_in_a_new_process(tmp_path: Path) -> None:
    path = str(tmp_path / "om.db")

    def run(first: int, last: int) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", RESTART_SCRIPT, path, str(first), str(last), json.dumps(OBSERVATION)],
            capture_output=True, text=True, timeout=120, check=False,
        )
        assert done.returncode == 0, done.stderr
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    one = run(0, 10)
    assert one["system"] and "Miso" in one["system"]
    two = run(10, 11)  # a new process replays the same history plus one turn
    assert two["system"] and two["system"].startswith(one["system"][:200])
    assert two["ids"][-1] == "h10"
    assert "h0" not in two["ids"]


async def test_turn_end_for_another_resources_thread_is_refused_and_stores_nothing(store: OMStore) -> None:
    """The ownership check runs once per thread and resource, so skipping it for a known thread
    can never let a second resource write into the first one's thread."""
    from langchain_om.store.base import InvalidStoreInput

    om = make_om(store, CallableFake(fn=lambda _m: OBSERVATION), observation={"message_tokens": 100_000})
    history = next(iter(conversation(2)))
    await om.aprocess("t1", history, resource_id="u1")
    await om.aon_turn_end("t1", history, resource_id="u1")  # the owner: fine, nothing new
    intruder = [HumanMessage("let me in", id="x1")]
    with pytest.raises(InvalidStoreInput, match="thread_id"):
        await om.aon_turn_end("t1", intruder, resource_id="u2")
    with pytest.raises(InvalidStoreInput, match="thread_id"):
        await om.aon_turn_end("t1", intruder, resource_id="u2")  # and again, now that u2 was seen
    with pytest.raises(InvalidStoreInput, match="thread_id"):
        await om.aprocess("t1", intruder, resource_id="u2")
    stored = await store.aget_messages("u1", "t1")
    assert [m.id for m in stored] == [m.id for m in history], "nothing of u2's reached u1's thread"
    assert await store.aget_messages("u2", "t1") == []
    await om.aclose()


async def test_window_cache_sees_other_workers_messages_and_observations(tmp_path: Path) -> None:
    """Two OM instances (two workers) on one SQLite file: each step's window includes what the
    other stored, and an observation committed by one shrinks the other's window."""
    path = tmp_path / "shared.db"
    one = make_om(SQLiteStore(path), CallableFake(fn=lambda _m: OBSERVATION))
    two = make_om(SQLiteStore(path), CallableFake(fn=lambda _m: OBSERVATION))
    histories = list(conversation(12))
    ctx = await one.aprocess("t1", histories[0])
    assert [m.id for m in ctx.messages] == ["h0"]
    ctx = await two.aprocess("t1", histories[1])  # two stores a0 and h1
    ctx = await one.aprocess("t1", histories[1])
    assert [m.id for m in ctx.messages] == ["h0", "a0", "h1"], "one's cached window picked up two's rows"
    for history in histories[2:]:
        ctx = await two.aprocess("t1", history)
    assert any(g for g in (await two.aget_record("t1")).groups), "two observed"
    ctx = await one.aprocess("t1", histories[-1])
    assert ctx.system_message is not None
    assert [m.id for m in ctx.messages] == [m.id for m in (await two.aprocess("t1", histories[-1])).messages]
    await one.adelete_thread("t1")
    ctx = await one.aprocess("t1", [HumanMessage("fresh start", id="n0")])
    assert [m.id for m in ctx.messages] == ["n0"]
    await one.aclose()
    await two.aclose()


async def test_record_is_parsed_again_only_when_another_commit_changed_it(store: OMStore) -> None:
    """Steps that change nothing reuse the parsed record (one stamp read instead of a full
    read); another worker's commit, and a deleted and recreated thread, are seen at once."""
    quiet = {"message_tokens": 100_000, "buffer_tokens": False}
    one = make_om(store, CallableFake(fn=lambda _m: OBSERVATION), observation=quiet)
    two = make_om(store, CallableFake(fn=lambda _m: OBSERVATION), observation=quiet)
    histories = list(conversation(6))
    full_reads = 0
    read = store.aget_record

    async def counting(resource_id: str, thread_id: str | None) -> OMRecord | None:
        nonlocal full_reads
        full_reads += 1
        return await read(resource_id, thread_id)

    store.aget_record = counting  # type: ignore[method-assign]
    for history in histories[:2]:
        await one.aprocess("t1", history)
    before = full_reads
    for history in histories[2:4]:
        ctx = await one.aprocess("t1", history)
    assert full_reads == before, "an unchanged record is not read in full again"
    assert ctx.system_message is None

    await two.aobserve("t1")
    ctx = await one.aprocess("t1", histories[4])
    assert full_reads > before, "another worker's commit changed the stamp"
    assert ctx.system_message is not None and "Miso" in str(ctx.system_message.content)
    observed = len(ctx.record.groups)
    assert observed > 0

    ctx.record.groups.clear()
    (await one.aget_record("t1")).metadata["injected"] = True
    ctx = await one.aprocess("t1", histories[5])
    assert ctx.system_message is not None and "Miso" in str(ctx.system_message.content)
    assert len(ctx.record.groups) == observed and "injected" not in ctx.record.metadata, (
        "changing a handed-out record changes nothing OM keeps")

    cached_version = ctx.record.version
    await two.adelete_thread("t1")
    fresh = [HumanMessage("fresh start", id="n0"), AIMessage("Hello again.", id="n1")]
    await two.aprocess("t1", fresh)
    await two.aobserve("t1")
    ctx = await one.aprocess("t1", [*fresh, HumanMessage("go on", id="n2")])
    assert ctx.record.version == cached_version, "the recreated record reached the cached version number"
    assert [g.start_id for g in ctx.record.groups] == ["n0"], "the recreated record is read, not the cached one"
    assert ctx.system_message is not None and 'range="n0:' in str(ctx.system_message.content), (
        "the context is rendered from the recreated record, not the cached text")
    await one.aclose()
    await two.aclose()


async def test_context_is_rendered_again_when_a_section_changes_under_an_unchanged_record(
    store: OMStore,
) -> None:
    """The rendered text is reused while the record and every section are unchanged; a section
    that changes (a provider's output) changes the very next context."""
    om = make_om(store, CallableFake(fn=lambda _m: OBSERVATION), observation={"message_tokens": 100_000,
                                                                              "buffer_tokens": False})
    notes = ["<notes>\nfirst\n</notes>"]

    async def provider(_om: Any, _record: OMRecord, _resource: str, _thread: str) -> str | None:
        return notes[-1]

    om.section_providers.append(provider)
    histories = list(conversation(3))
    first = await om.aprocess("t1", histories[0])
    again = await om.aprocess("t1", histories[1])
    assert first.system_message is not None and again.system_message is not None
    assert first.system_message.content == again.system_message.content
    assert first.system_message is not again.system_message, "each step hands out its own message object"
    notes.append("<notes>\nsecond\n</notes>")
    changed = await om.aprocess("t1", histories[2])
    assert changed.system_message is not None
    assert "second" in str(changed.system_message.content) and "first" not in str(changed.system_message.content)
    await om.aclose()


async def test_window_keeps_store_order_when_another_worker_stored_rows_in_between(tmp_path: Path) -> None:
    """A step's own rows join the cached window only when they follow it directly; rows another
    worker stored in between are read first, so the window is the thread in seq order."""
    path = tmp_path / "shared.db"
    one = make_om(SQLiteStore(path), CallableFake(fn=lambda _m: OBSERVATION),
                  observation={"message_tokens": 100_000, "buffer_tokens": False})
    other = SQLiteStore(path)
    ctx = await one.aprocess("t1", [HumanMessage("first", id="h0")])
    assert [m.id for m in ctx.messages] == ["h0"]
    from langchain_om.store.base import NewMessage

    await other.aappend_messages(implicit_resource("t1"), "t1", [
        NewMessage(id="x1", data={"type": "ai", "data": {"content": "from another worker"}}, tokens=5),
        NewMessage(id="x2", data={"type": "human", "data": {"content": "also theirs"}}, tokens=5),
    ])
    ctx = await one.aprocess("t1", [HumanMessage("first", id="h0"), HumanMessage("mine", id="h1")])
    assert [m.id for m in ctx.messages] == ["h0", "x1", "x2", "h1"]
    ctx = await one.aprocess("t1", [HumanMessage("first", id="h0"), HumanMessage("mine", id="h1"),
                                    AIMessage("reply", id="a1"), HumanMessage("next", id="h2")])
    assert [m.id for m in ctx.messages] == ["h0", "x1", "x2", "h1", "a1", "h2"]
    assert [m.seq for m in await other.aget_messages(implicit_resource("t1"), "t1")] == [1, 2, 3, 4, 5, 6]
    await other.aclose()
    await one.aclose()
