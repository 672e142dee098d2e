"""A step's thread head taken from its own append (issue 32 item 2, the checkpointed step).

On SQLite and PostgreSQL the append reads the thread's owner, incarnation, last ``seq`` and the record's stamp in
one statement of its transaction (``SupportsHeadAppend``); the step then skips its own head read
and the middleware's position after the final answer skips another. These tests hold what that
shortcut must keep: the head is exactly what a read after the append returns, a record another
worker committed between two turns is seen (not the cached one), the checkpoint's position names
the stored head and record, and the status's spend keys are renamed as before.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage, SystemMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory
from langchain_om.foundation.dispatch import _does_nothing
from langchain_om.foundation.events import StatusData, StatusEvent
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import InvalidStoreInput, NewMessage, OMRecord, record_key
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.store.step_fast_paths import SupportsHeadAppend
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

LANGUAGES = {
    "en": ("user-1", "thread-1", "My sister's name is Ana and she lives in Lisbon", "What is her city?"),
    "ja": ("ユーザー", "スレッド", "妹の名前はアナで、リスボンに住んでいます", "彼女はどの街に住んでいますか？"),
}


def _row(mid: str, text: str) -> NewMessage:
    return NewMessage(id=mid, data=message_to_dict(HumanMessage(text, id=mid)), tokens=4)


HEAD_STORES = [pytest.param("sqlite", id="sqlite"), pytest.param("postgres", id="postgres", marks=pytest.mark.postgres)]


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("kind", HEAD_STORES)
async def test_the_append_head_is_what_a_read_after_it_returns(open_store: Any, kind: str, lang: str) -> None:
    """SQLite and PostgreSQL have ``SupportsHeadAppend``; the in-memory store reads the head apart."""
    store = await open_store(kind)
    assert isinstance(store, SupportsHeadAppend)
    resource, thread, said, _ = LANGUAGES[lang]
    info = await store.aensure_thread(resource, thread)
    inserted, head = await store.aappend_with_head(resource, thread, [_row("m1", said)], info.created_at,
                                                   thread) or ([], None)
    assert [r.seq for r in inserted] == [1]
    assert head == (1, None) == await store.aget_thread_head(resource, thread, thread)
    committed = await store.acommit_record(OMRecord(resource_id=resource, thread_id=thread), expected_version=0)
    # a row another writer stored first is skipped; the head is still the thread's real last seq;
    # text jsonb cannot hold (a NUL, a lone surrogate) comes back as it was sent
    odd = said + " 🙂\x00 \udcff 'quoted' back\\slash"
    again = await store.aappend_with_head(resource, thread, [_row("m1", said), _row("m2", odd), _row("m2", "dup")],
                                          info.created_at, thread)
    assert again is not None
    rows, head = again
    assert [(r.id, r.seq) for r in rows] == [("m2", 2)]
    assert head == (2, (committed.version, committed.updated_at))
    assert head == await store.aget_thread_head(resource, thread, thread)
    stored = await store.aget_messages(resource, thread)
    assert [r.data for r in stored] == [_row("m1", said).data, _row("m2", odd).data]
    assert rows[0].data == _row("m2", odd).data
    # resource scope names the resource's record (none here); nothing to append still answers the head
    assert await store.aappend_with_head(resource, thread, [], info.created_at, None) == ([], (2, None))
    # another incarnation, or another resource's claim on the thread: None, nothing written
    assert await store.aappend_with_head(resource, thread, [_row("m3", said)], committed.updated_at, thread) is None
    assert await store.aappend_with_head("someone-else", thread, [_row("m3", said)], info.created_at, thread) is None
    assert await store.aappend_with_head(resource, "never-made", [_row("m3", said)], info.created_at, thread) is None
    assert [r.id for r in await store.aget_messages(resource, thread)] == ["m1", "m2"]
    assert await store.aget_messages("someone-else", thread) == []
    assert await store.aget_thread(resource, "never-made") is None
    # the rows are searchable like any append's, in both languages
    hits = await store.asearch_messages(resource, "Lisbon" if lang == "en" else "リスボン", thread_id=thread)
    assert {h.message.id for h in hits} >= {"m1"}


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("kind", HEAD_STORES)
async def test_an_append_past_the_checkpoint_position_writes_nothing(open_store: Any, kind: str, lang: str) -> None:
    """``at_most`` (the integrations' deferred fork check): when the thread's last seq is above it,
    the append stores nothing and answers the head that refused it; at or below it, it appends."""
    store = await open_store(kind)
    resource, thread, said, asked = LANGUAGES[lang]
    info = await store.aensure_thread(resource, thread)
    await store.aappend_with_head(resource, thread, [_row("m1", said), _row("m2", asked)], info.created_at, thread)
    refused = await store.aappend_with_head(resource, thread, [_row("m3", "🙂")], info.created_at, thread, at_most=1)
    assert refused == ([], (2, None))
    assert [r.id for r in await store.aget_messages(resource, thread)] == ["m1", "m2"]
    taken = await store.aappend_with_head(resource, thread, [_row("m3", "🙂")], info.created_at, thread, at_most=2)
    assert taken is not None and [(r.id, r.seq) for r in taken[0]] == [("m3", 3)] and taken[1] == (3, None)
    with pytest.raises(InvalidStoreInput, match="at_most"):
        await store.aappend_with_head(resource, thread, [_row("m4", said)], info.created_at, thread, at_most=-1)
    assert await store.alast_seq(resource, thread) == 3


@pytest.mark.parametrize("kind", HEAD_STORES)
async def test_a_long_history_in_one_head_append_is_numbered_indexed_and_skipped(open_store: Any, kind: str) -> None:
    """A cold caller can hand a long history to one append: every row numbered in order, rows the
    thread holds skipped, each found by its words in English and Japanese."""
    store = await open_store(kind)
    info = await store.aensure_thread("r1", "t1")
    rows = [_row(f"m{i}", f"row {i}: tram ticket 路面電車の切符{i}") for i in range(100)]
    first = await store.aappend_with_head("r1", "t1", rows[:30], info.created_at, "t1")
    assert first is not None and first[1] == (30, None)
    inserted, head = await store.aappend_with_head("r1", "t1", rows, info.created_at, "t1") or ([], None)
    assert [(r.id, r.seq) for r in inserted] == [(f"m{i}", i + 1) for i in range(30, 100)]
    assert head == (100, None) == await store.aget_thread_head("r1", "t1", "t1")
    assert [r.id for r in await store.aget_messages("r1", "t1")] == [f"m{i}" for i in range(100)]
    for word in ("tram", "路面電車"):
        hits = await store.asearch_messages("r1", word, thread_id="t1", limit=200)
        assert {h.message.id for h in hits} == {f"m{i}" for i in range(100)}, word


@pytest.mark.parametrize("kind", HEAD_STORES)
async def test_concurrent_head_appends_keep_seq_order_and_the_position_check(open_store: Any, kind: str) -> None:
    """Two workers append to one thread at once (each its own store on the same database): every
    row is stored once with seqs 1..n, each answer's head is its own last row, and an append
    checked against a position some other append already passed writes nothing."""
    first = await open_store(kind)
    second = _twin(first)
    info = await first.aensure_thread("ユーザー", "スレッド")
    try:
        async def worker(store: Any, name: str) -> list[tuple[list[Any], Any]]:
            answers = []
            for turn in range(8):
                rows = [_row(f"{name}-{turn}-{i}", f"{name} 京都 {turn} 🙂") for i in range(2)]
                answer = await store.aappend_with_head("ユーザー", "スレッド", rows, info.created_at, "スレッド")
                assert answer is not None
                answers.append(answer)
            return answers

        answers = [*await worker(first, "warmup")]
        answers = [a for batch in await asyncio.gather(worker(first, "a"), worker(second, "b")) for a in batch]
        stored = await first.aget_messages("ユーザー", "スレッド")
        assert [r.seq for r in stored] == list(range(1, 49))
        assert len({r.id for r in stored}) == 48
        for inserted, head in answers:
            assert [r.seq for r in inserted] == [head[0] - 1, head[0]]
            assert [r.seq for r in stored if r.id in {i.id for i in inserted}] == [r.seq for r in inserted]
        # racing appends checked against the same position: exactly one stores its rows
        racing = await asyncio.gather(*(store.aappend_with_head("ユーザー", "スレッド", [_row(f"race-{n}", "x")],
                                                                 info.created_at, "スレッド", at_most=48)
                                        for n, store in enumerate([first, second, first, second])))
        assert sorted(len(r[0]) for r in racing if r is not None) == [0, 0, 0, 1]
        assert await first.alast_seq("ユーザー", "スレッド") == 49
    finally:
        await second.aclose()


def _twin(store: Any) -> Any:
    """Another worker's store on the same database."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    return PostgresStore(store._dsn, schema=store.schema)


def _om(path: Path | Any) -> ObservationalMemory:
    store = SQLiteStore(path) if isinstance(path, Path) else path
    return ObservationalMemory(store, model=ScriptedObserverModel(),
                               observation={"message_tokens": 30_000, "buffer_tokens": False},
                               reflection={"observation_tokens": 40_000}, token_counter="estimator")


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize("kind", HEAD_STORES)
async def test_a_record_another_worker_committed_between_turns_reaches_the_next_step(
        open_store: Any, kind: str, lang: str) -> None:
    """Worker B observes the thread between two of worker A's turns. A's next step takes the
    record's stamp from its append: the stamp differs from A's cached record, so A reads B's record
    and its model sees B's observations; the checkpoint's position names B's record and the
    thread's stored last seq (nothing read apart from the appends)."""
    resource, thread, said, asked = LANGUAGES[lang]
    shared = await open_store(kind)
    worker_a, worker_b = _om(shared), _om(_twin(shared))
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(worker_a)],
                         checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": thread, "resource_id": resource}}
    try:
        await agent.ainvoke({"messages": [HumanMessage(said, id="h1")]}, config)
        assert "in memory" not in str((await agent.aget_state(config)).values["messages"][-1].content)

        observed = await worker_b.aobserve(thread, resource_id=resource)
        assert observed.groups, "precondition: worker B committed observations"

        result = await agent.ainvoke({"messages": [HumanMessage(asked, id="h2")]}, config)
        system = next(m for m in model.calls[-1] if isinstance(m, SystemMessage))
        assert observed.groups[-1].text.splitlines()[-1] in str(system.content)
        assert "in memory" in str(result["messages"][-1].content)

        stored = await worker_a.store.aget_record(resource, thread)
        assert stored is not None
        position = (await agent.aget_state(config)).values["om_position"]
        last = await worker_a.store.alast_seq(resource, thread)
        assert (position["seq"], position["record"], position["version"]) == (last, stored.id, stored.version)
        assert [r.id for r in await worker_a.store.aget_messages(resource, thread)][-2:] == \
            ["h2", result["messages"][-1].id]
    finally:
        await worker_a.aclose(cancel=True)
        await worker_b.aclose(cancel=True)


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_the_status_spend_reads_wire_keys_and_round_trips(tmp_path: Path, lang: str) -> None:
    """The spend's key renames are cached (``foundation/events.py``): a record whose spend was
    stored under wire keys still reads back in snake_case, and the status round-trips through
    its wire form unchanged."""
    resource, thread, said, _ = LANGUAGES[lang]
    om = _om(tmp_path / "status.db")
    try:
        await om.aprocess(thread, [HumanMessage(said, id="h1")], resource_id=resource)
        record = await om.aload_record(resource, thread)
        spend = {"observer": {"inputTokens": 120, "calls": 2}, "reflector": {"output_tokens": 7}}
        record = record.model_copy(update={"metadata": {**record.metadata, "om_spend": spend}})
        await om.store.acommit_record(record, expected_version=record.version)
        context = await om.aprocess(thread, [HumanMessage(said, id="h1"), HumanMessage("🙂", id="h2")],
                                    resource_id=resource)
        status = context.status
        assert status.spend == {"observer": {"input_tokens": 120, "calls": 2}, "reflector": {"output_tokens": 7}}
        validated = StatusData.model_validate(status.model_dump(mode="json", by_alias=True))
        assert validated == status
        assert StatusEvent(data=validated).to_part() == StatusEvent(data=status).to_part()
        assert status.windows.active.messages.tokens > 0 and status.thread_id == thread
        assert record_key(resource, thread).endswith(status.thread_id)
    finally:
        await om.aclose(cancel=True)


def test_only_a_writer_that_does_nothing_is_skipped() -> None:
    heard: list[Any] = []

    def silent(chunk: Any) -> None:
        pass

    def listening(chunk: Any) -> None:
        heard.append(chunk)

    assert _does_nothing(silent) and _does_nothing(lambda chunk: None)
    assert not _does_nothing(listening) and not _does_nothing(heard.append)
    assert not _does_nothing(lambda chunk: heard.append(chunk)) and not _does_nothing(print)
