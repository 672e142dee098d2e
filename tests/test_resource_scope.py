"""Resource scope: shared observations, parallel batches, obscured ids, trigger rule, CAS redo."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from recall_helpers import T0, chat, tool_exchange

from langchain_om.engine import ObservationalMemory
from langchain_om.engine.resource_scope import split_by_thread
from langchain_om.foundation.config import OMConfigError
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER
from langchain_om.store import InMemoryStore
from langchain_om.store.base import OMRecord
from langchain_om.testing import ScriptedObserverModel


def observer_prompts(model: ScriptedObserverModel) -> list[str]:
    """The transcript text of every Observer call (reflector calls excluded)."""
    out = []
    for call in model.calls:
        if OBSERVER_PROMPT_MARKER in str(call[0].content):
            content = call[-1].content
            out.append(content if isinstance(content, str) else str(content[0]["text"]))  # type: ignore[index]
    return out


def resource_om(model: ScriptedObserverModel, store: Any = None, **observation: Any) -> ObservationalMemory:
    obs = {"message_tokens": 100_000, "max_tokens_per_batch": 10_000, **observation}
    return ObservationalMemory(store or InMemoryStore(), model=model, scope="resource", observation=obs)


def types(events: list[Any]) -> list[str]:
    return [e.type for e in events]


async def test_observations_shared_across_threads() -> None:
    model = ScriptedObserverModel()
    om = resource_om(model)
    await om.aon_turn_end("alpha", chat("alpha", 3), resource_id="u1")
    await om.aon_turn_end("beta", chat("beta", 3), resource_id="u1")
    record = await om.aobserve("beta", resource_id="u1")
    assert record.thread_id is None and record.scope == "resource"
    assert record.last_observed_seq == {"alpha": 6, "beta": 6}
    assert len(observer_prompts(model)) == 1  # both threads fit one batch
    # the Observer answers per "=== Thread <label> ===" section: one group per thread, each
    # pointing at that thread's own message range and holding only that thread's notes
    spans = sorted((g.thread_id, g.start_id, g.end_id) for g in record.groups)
    assert spans == [("alpha", "alpha-h0", "alpha-a2"), ("beta", "beta-h0", "beta-a2")]
    by_thread = {g.thread_id: g.text for g in record.groups}
    assert "alpha question 0" in by_thread["alpha"] and "beta" not in by_thread["alpha"]
    assert by_thread["beta"].startswith("Date:")
    # a third thread of the same user sees what was learnt in the other two
    ctx = await om.aprocess("gamma", chat("gamma", 1), resource_id="u1", now=T0)
    text = str(ctx.system_message.content if ctx.system_message else "")
    assert "alpha question 0" in text and "beta question 2" in text
    assert [m.id for m in ctx.messages] == ["gamma-h0", "gamma-a0"]
    # another user shares nothing
    other = await om.aprocess("delta", chat("delta", 1), resource_id="u2", now=T0)
    assert other.system_message is None


async def test_a_reply_without_thread_sections_becomes_one_group_for_all_threads() -> None:
    from om_fakes import OBSERVATION, CallableFake

    om = resource_om(CallableFake(fn=lambda _m: OBSERVATION))
    await om.aon_turn_end("alpha", chat("alpha", 3), resource_id="u1")
    await om.aon_turn_end("beta", chat("beta", 3), resource_id="u1")
    record = await om.aobserve("beta", resource_id="u1")
    (group,) = record.groups  # anchored on the current thread's range, listing every thread
    assert (group.thread_id, group.start_id, group.end_id) == ("beta", "beta-h0", "beta-a2")
    assert sorted(group.thread_ids) == ["alpha", "beta"]


async def test_thread_ids_are_obscured_in_the_observer_transcript() -> None:
    model = ScriptedObserverModel()
    om = resource_om(model)
    await om.aon_turn_end("customer-4711-private", chat("p", 2), resource_id="u1")
    await om.aon_turn_end("customer-4712-private", chat("q", 2), resource_id="u1")
    await om.aobserve("customer-4711-private", resource_id="u1")
    prompt = "\n".join(observer_prompts(model))
    assert "customer-4711" not in prompt and "customer-4712" not in prompt
    assert f"=== Thread {om.thread_label('customer-4711-private')} ===" in prompt
    assert f"=== Thread {om.thread_label('customer-4712-private')} ===" in prompt


async def test_batches_split_by_max_tokens_and_run_in_parallel() -> None:
    model = ScriptedObserverModel(delay_s=0.4)
    om = resource_om(model, max_tokens_per_batch=400)
    threads = {f"th{i}": chat(f"th{i}", 2) for i in range(4)}
    per_thread = {}
    for thread_id, messages in threads.items():
        await om.aon_turn_end(thread_id, messages, resource_id="u1")
        stored = await om.store.aget_messages("u1", thread_id)
        per_thread[thread_id] = sum(m.tokens for m in stored)
    assert all(200 < t <= 400 for t in per_thread.values()), per_thread  # one thread fits, two do not
    started = time.perf_counter()
    record = await om.aobserve("th0", resource_id="u1")
    elapsed = time.perf_counter() - started
    prompts = observer_prompts(model)
    assert len(prompts) == 4  # every thread alone in its batch
    assert elapsed < 0.4 * 4 * 0.6, elapsed  # concurrent, not sequential
    for prompt in prompts:
        assert prompt.count("=== Thread ") == 1
    assert len(record.groups) == 4 and all(record.last_observed_seq[t] == 4 for t in threads)
    assert sorted(g.thread_id for g in record.groups) == sorted(threads)


async def test_small_threads_share_a_batch_and_an_oversized_thread_is_split() -> None:
    model = ScriptedObserverModel()
    om = resource_om(model, max_tokens_per_batch=350)
    await om.aon_turn_end("small1", chat("s1", 1), resource_id="u1")
    await om.aon_turn_end("small2", chat("s2", 1), resource_id="u1")
    big = [*chat("big", 6, start=T0 + timedelta(hours=1)), *tool_exchange("bx", T0 + timedelta(hours=2))]
    await om.aon_turn_end("big", big, resource_id="u1")
    record = await om.aobserve("small1", resource_id="u1")
    prompts = observer_prompts(model)
    big_label = om.thread_label("big")
    shared = [p for p in prompts if om.thread_label("small1") in p]
    assert len(shared) == 1 and om.thread_label("small2") in shared[0]
    big_parts = [p for p in prompts if big_label in p]
    assert len(big_parts) >= 2
    big_groups = [g for g in record.groups if g.thread_id == "big"]
    assert len(big_groups) == len(big_parts)
    # the slices tile the thread in order: each starts right after the previous one ends
    stored = {m.id: m.seq for m in await om.store.aget_messages("u1", "big")}
    spans = sorted((stored[g.start_id], stored[g.end_id]) for g in big_groups)
    assert spans[0][0] == 1 and spans[-1][1] == 16
    assert all(b[0] == a[1] + 1 for a, b in itertools.pairwise(spans))
    # the tool exchange at the end of the thread stays inside one slice
    call_seq, result_seq = stored["bx-ai-call"], stored["bx-tool"]
    assert any(a <= call_seq and result_seq <= b for a, b in spans)


async def test_trigger_counts_the_current_threads_tokens() -> None:
    model = ScriptedObserverModel()
    om = resource_om(model, message_tokens=300)
    await om.aon_turn_end("idle", chat("idle", 6), resource_id="u1")  # well over 300 tokens, never stepped
    quiet = await om.aprocess("active", chat("active", 1), resource_id="u1", now=T0)
    assert "data-om-observation-start" not in types(quiet.events)
    history = chat("active", 6, start=T0)
    ctx = None
    for end in range(2, len(history) + 1, 2):
        ctx = await om.aprocess("active", [*history[:end], HumanMessage("one more thing", id=f"q{end}")],
                                resource_id="u1", now=T0 + timedelta(minutes=end))
        if "data-om-observation-end" in types(ctx.events):
            break
    assert ctx is not None and "data-om-observation-end" in types(ctx.events)
    record = ctx.record
    # the sweep also observed the idle thread, all but its current turn (its newest human message
    # and the reply after it stay until that thread steps again)
    assert record.last_observed_seq.get("idle") == 10
    covered = {g.thread_id for g in record.groups} | {t for g in record.groups for t in g.thread_ids}
    assert {"idle", "active"} <= covered
    # the current thread's newest human message stays visible (pinned)
    assert ctx.messages and ctx.messages[-1].content == "one more thing"


async def test_buffering_is_disabled_in_resource_scope() -> None:
    model = ScriptedObserverModel()
    om = ObservationalMemory(InMemoryStore(), model=model, scope="resource",
                             observation={"message_tokens": 400, "buffer_tokens": 0.2})
    assert om.config.observation.buffering_enabled and not om.config.buffering_enabled
    history = chat("b", 12)
    seen: list[str] = []
    for end in range(2, len(history) + 1, 2):
        ctx = await om.aprocess("b", history[:end], resource_id="u1", now=T0 + timedelta(minutes=end))
        seen.extend(types(ctx.events))
    await om.await_background()
    assert not any(t.startswith("data-om-buffering") or t == "data-om-activation" for t in seen)
    assert "data-om-observation-end" in seen
    record = await om.aget_record("b", resource_id="u1")
    assert record.buffered_chunks == []


async def test_resource_id_is_required() -> None:
    om = resource_om(ScriptedObserverModel())
    with pytest.raises(OMConfigError, match="resource_id"):
        await om.aprocess("t", chat("t", 1))


class RacingStore(InMemoryStore):
    """Before the first observation commit, another worker observes one thread and commits."""

    def __init__(self) -> None:
        super().__init__()
        self.raced = False
        self.om: ObservationalMemory | None = None

    async def acommit_record(self, record: OMRecord, *, expected_version: int,
                             mark_observed: Mapping[str, int] | None = None) -> OMRecord:
        if not self.raced and record.groups and self.om is not None:
            self.raced = True
            current = await self.aget_record(record.resource_id, None)
            assert current is not None
            rival = current.model_copy(deep=True)
            rival.groups.append(record.groups[0].model_copy(update={"text": "* 🔴 rival worker's note"}))
            thread = record.groups[0].thread_id
            rival.last_observed_seq[thread] = record.last_observed_seq[thread]
            await super().acommit_record(rival, expected_version=current.version,
                                         mark_observed={thread: record.last_observed_seq[thread]})
        return await super().acommit_record(record, expected_version=expected_version, mark_observed=mark_observed)


async def test_conflict_reloads_and_redoes_only_what_is_unobserved() -> None:
    store = RacingStore()
    model = ScriptedObserverModel()
    om = resource_om(model, store=store, max_tokens_per_batch=350)
    store.om = om
    await om.aon_turn_end("r1", chat("r1", 2), resource_id="u1")
    await om.aon_turn_end("r2", chat("r2", 2, start=T0 + timedelta(hours=1)), resource_id="u1")
    record = await om.aobserve("r1", resource_id="u1")
    assert store.raced
    texts = [g.text for g in record.groups]
    assert sum("rival worker" in t for t in texts) == 1
    rival_thread = next(g.thread_id for g in record.groups if "rival worker" in g.text)
    # the rival's thread was not observed a second time; the other one was observed once
    assert [g.thread_id for g in record.groups].count(rival_thread) == 1
    other = ({"r1", "r2"} - {rival_thread}).pop()
    assert [g.thread_id for g in record.groups].count(other) == 1
    assert record.last_observed_seq == {"r1": 4, "r2": 4}
    prompts = observer_prompts(model)
    assert len(prompts) == 3  # two batches, then only the unobserved thread again


def test_split_by_thread_headers() -> None:
    labels = {"a": "thread-aaa", "b": "thread-bbb"}
    reply = "Date: 2026-12-01 (Tuesday)\n=== Thread thread-aaa ===\n* 🔴 one\n=== Thread thread-bbb ===\n* 🟡 two"
    sections = split_by_thread(reply, labels)
    assert sections == {"a": "Date: 2026-12-01 (Tuesday)\n* 🔴 one", "b": "Date: 2026-12-01 (Tuesday)\n* 🟡 two"}
    assert split_by_thread("* no headers", labels) is None
    assert split_by_thread("=== Thread thread-zzz ===\n* x", labels) is None


async def test_multithread_batch_groups_point_at_each_thread_when_reply_is_split() -> None:
    def reply(messages: list[BaseMessage]) -> str:
        text = str(messages[-1].content)
        import re

        labels = re.findall(r"=== Thread (\S+) ===", text)
        body = "\n".join(f"=== Thread {label} ===\n* 🔴 (09:00) note for {label}" for label in labels)
        return f"<observations>\nDate: 2026-12-01 (Tuesday)\n{body}\n</observations>"

    from langchain_om.testing import ScriptedChatModel

    om = ObservationalMemory(InMemoryStore(), model=ScriptedChatModel(responses=[reply]), scope="resource",
                             observation={"message_tokens": 100_000})
    await om.aon_turn_end("one", chat("one", 1), resource_id="u1")
    await om.aon_turn_end("two", chat("two", 1), resource_id="u1")
    record = await om.aobserve("one", resource_id="u1")
    by_thread = {g.thread_id: g for g in record.groups}
    assert set(by_thread) == {"one", "two"}
    assert by_thread["one"].start_id == "one-h0" and by_thread["one"].end_id == "one-a0"
    assert f"note for {om.thread_label('one')}" in by_thread["one"].text
    assert om.thread_label("two") not in by_thread["one"].text


async def test_a_deleted_thread_used_again_starts_unobserved() -> None:
    """Deleting a thread drops its watermark from the resource record: the re-created thread
    numbers its messages from 1 again, and a stale watermark would hide them."""
    model = ScriptedObserverModel()
    store = InMemoryStore()
    om = resource_om(model, store)
    await om.aon_turn_end("chat", chat("chat", 3), resource_id="u1")
    await om.aon_turn_end("other", chat("other", 2), resource_id="u1")
    record = await om.aobserve("chat", resource_id="u1")
    assert record.last_observed_seq == {"chat": 6, "other": 4}
    await om.adelete_thread("chat", resource_id="u1")
    kept = await store.aget_record("u1", None)
    assert kept is not None and kept.last_observed_seq == {"other": 4}, "the other thread keeps its watermark"
    fresh = [HumanMessage("my flight is AF123 on Friday", id="n1")]
    ctx = await om.aprocess("chat", fresh, resource_id="u1", now=T0)
    assert [m.id for m in ctx.messages] == ["n1"]
    restarted = resource_om(ScriptedObserverModel(), store)
    ctx = await restarted.aprocess("chat", fresh, resource_id="u1", now=T0)
    assert [m.id for m in ctx.messages] == ["n1"]


async def test_a_thread_named_like_the_resource_record_is_refused() -> None:
    store = InMemoryStore()
    om = resource_om(ScriptedObserverModel(), store)
    await om.aon_turn_end("chat", chat("chat", 2), resource_id="u1")
    await om.aobserve("chat", resource_id="u1")
    for call in (
        lambda: om.aprocess("*", [HumanMessage("hi", id="s1")], resource_id="u1"),
        lambda: om.adelete_thread("*", resource_id="u1"),
    ):
        with pytest.raises(ValueError, match="thread_id"):
            await call()
    record = await store.aget_record("u1", None)
    assert record is not None and record.groups
