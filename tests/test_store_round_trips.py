"""Store round trips of a warm turn, pinned (issue 33, item 3).

On PostgreSQL each store call is a pool checkout and each query sent (one execute) a network round trip;
both cost Python CPU in psycopg and the event loop, which made a turn there cost twice SQLite's.
A warm turn through ``create_agent`` + ``ObservationalMemoryMiddleware`` (no observation due)
is counted here: store calls on every backend, SQL statements on SQLite and PostgreSQL. The
figures are exact, so a change that adds a round trip fails here and has to say why. Counts,
not times: speed lives in ``python -m benchmarks.load``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AIMessage, HumanMessage, message_to_dict
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import InvalidStoreInput, NewMessage, OMRecord, OMStore, SupportsThreadHead
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# (store calls, SQL statements of an English turn, of a Japanese turn: it also writes the CJK
# index) of one warm turn; statements are counted where SQL runs
# (first pin: 17 calls stateless, 15 with a checkpointer; SQLite 59/61 and 57/59 statements,
# PostgreSQL 35/37 and 33/35; then 9 and 8 calls: the thread check now rides on each append
# (``SupportsIncarnationAppend``), the step reads the record stamp with the last seq, and a
# stateless step's fork check reads the newest rows and the held ids in one call; PostgreSQL
# 13 -> 11 statements: an append sends BEGIN and its advisory lock as one query; SQLite's keyword
# index is then written in batches, so a Japanese turn queues its rows like an English one;
# SQLite 5 -> 3 calls and 18/17 -> 14/13 statements: an append reads the owner, incarnation and
# last seq in one statement, with the record's stamp (``SupportsHeadAppend``), so neither the
# step nor the position after the turn's final answer reads the thread's head again; with a
# checkpointer 3 -> 2 calls, 13 -> 12 statements: the fork check's read of the last seq rides on
# the step's append, which writes nothing when the branch moved past the checkpoint's position;
# PostgreSQL then the same, 5 -> 3 and 2 calls, 11 -> 3 and 2 round trips: its ``SupportsHeadAppend``
# sends the advisory lock and one statement that checks, appends and reads the head as one simple
# query, where an append took four (BEGIN with the lock, a read, a write, COMMIT); stateless on
# SQLite 3 -> 2 calls, 14 -> 12 statements: when the state holds only messages the step appends,
# the fork probe's two reads give way to an append that writes nothing if the thread holds any of
# them, ``SupportsNewAppend``)
PINNED: dict[tuple[str, bool], tuple[int, int, int]] = {
    ("memory", False): (5, 0, 0),
    ("sqlite", False): (2, 12, 12),
    ("postgres", False): (3, 3, 3),
    ("memory", True): (5, 0, 0),
    ("sqlite", True): (2, 12, 12),
    ("postgres", True): (2, 2, 2),
}


class Trips:
    """What one turn asked of the store: calls by method, statements by text."""

    def __init__(self) -> None:
        self.on = False
        self.calls: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()

    def statement(self, text: Any) -> None:
        if self.on:
            self.statements[" ".join(str(text).split())[:120]] += 1

    def reset(self) -> None:
        self.calls.clear()
        self.statements.clear()


def _count_calls(store: OMStore, trips: Trips) -> None:
    for name in dir(type(store)):
        method = getattr(store, name, None)
        if not name.startswith("a") or name in ("asetup", "aclose") or not inspect.iscoroutinefunction(method):
            continue

        def counted(method: Callable[..., Any] = method, name: str = name) -> Callable[..., Any]:
            async def call(*args: Any, **kwargs: Any) -> Any:
                if trips.on:
                    trips.calls[name] += 1
                return await method(*args, **kwargs)
            return call

        setattr(store, name, counted())


@contextmanager
def _count_statements(store: OMStore, kind: str, trips: Trips, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if kind == "sqlite":
        conn = store._conn  # type: ignore[attr-defined]
        # statements SQLite runs for a trigger or an FTS index start with "--": not the caller's
        conn.set_trace_callback(lambda text: None if text.startswith("--") else trips.statement(text))
        try:
            yield
        finally:
            conn.set_trace_callback(None)
        return
    if kind == "postgres":
        import psycopg
        from psycopg._connection_base import BaseConnection

        execute, executemany, command = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.executemany, \
            BaseConnection._exec_command

        async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(query.as_string(self) if hasattr(query, "as_string") else query)
            return await execute(self, query, *args, **kwargs)

        async def counted_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(query.as_string(self) if hasattr(query, "as_string") else query)
            return await executemany(self, query, *args, **kwargs)

        def counted_command(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(text)  # BEGIN, COMMIT: a round trip each
            return command(self, text, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted_execute)
        monkeypatch.setattr(psycopg.AsyncCursor, "executemany", counted_executemany)
        monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)
    yield


def _ask(user: int, turn: int) -> HumanMessage:
    if turn % 2:
        return HumanMessage(f"京都旅行の相談です、その{turn}。予算は{turn}万円。", id=f"h-{user}-{turn}")
    return HumanMessage(f"Planning the Lisbon trip, part {turn}; trains preferred.", id=f"h-{user}-{turn}")


@pytest.mark.parametrize("checkpointer", [False, True], ids=["stateless", "checkpointer"])
async def test_a_warm_turn_makes_the_pinned_number_of_store_round_trips(
    store: OMStore, store_kind: str, checkpointer: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # thresholds no turn reaches: every warm turn does the same work (store, context, position)
    om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver() if checkpointer else None)
    config: Any = {"configurable": {"thread_id": "trips"}}
    trips = Trips()
    _count_calls(store, trips)
    per_turn: list[tuple[int, int]] = []
    with _count_statements(store, store_kind, trips, monkeypatch):
        for turn in range(6):
            trips.reset()
            trips.on = True
            result = await agent.ainvoke({"messages": [_ask(0, turn)]}, config)
            trips.on = False
            assert result["messages"][-1].content  # the agent answered
            per_turn.append((sum(trips.calls.values()), sum(trips.statements.values())))
    await om.aclose()
    # turns 2..5 are warm (caches filled); English and Japanese turns alternate
    assert per_turn[2] == per_turn[4] and per_turn[3] == per_turn[5], (per_turn, trips.calls)
    assert per_turn[2][0] == per_turn[3][0], per_turn
    figures = (per_turn[2][0], per_turn[2][1], per_turn[3][1])
    detail = f"last turn: calls {dict(trips.calls)}; statements {dict(trips.statements)}"
    assert figures == PINNED[(store_kind, checkpointer)], \
        f"(store calls, statements EN, statements JA) per warm turn {figures}, pinned " \
        f"{PINNED[(store_kind, checkpointer)]}: {detail}"
    stored = await store.aget_messages(om.resolve_resource("trips", None), "trips")
    assert [r.id for r in stored if r.data.get("type") == "human"] == [f"h-0-{t}" for t in range(6)]


async def test_the_thread_head_is_the_last_seq_and_the_record_stamp_in_one_read(store: OMStore) -> None:
    assert isinstance(store, SupportsThreadHead)
    assert await store.aget_thread_head("ユーザー", "スレッド", "スレッド") == (0, None)
    await store.aappend_messages("ユーザー", "スレッド", [
        NewMessage(id=f"m{i}", data=_dumped(f"こんにちは {i}"), tokens=3) for i in range(3)])
    assert await store.aget_thread_head("ユーザー", "スレッド", "スレッド") == (3, None)
    committed = await store.acommit_record(OMRecord(resource_id="ユーザー", thread_id="スレッド"), expected_version=0)
    head = await store.aget_thread_head("ユーザー", "スレッド", "スレッド")
    stamp = await store.aget_record_stamp("ユーザー", "スレッド")
    assert head == (3, (committed.version, committed.updated_at)) == (3, stamp)
    # resource scope: the record without a thread; another resource sees neither
    assert await store.aget_thread_head("ユーザー", "スレッド", None) == (3, None)
    assert await store.aget_thread_head("someone-else", "スレッド", "スレッド") == (0, None)


def _dumped(text: str) -> dict[str, Any]:
    return message_to_dict(HumanMessage(text))


@pytest.mark.parametrize("count", [2, 100], ids=["one-statement", "large-batch"])
async def test_an_append_stores_indexes_and_numbers_every_row(store: OMStore, count: int) -> None:
    """Both ways an append writes (one statement for a step's rows, a pipelined batch for a long
    history): every row numbered in order, skipped when stored, searchable in English and Japanese."""
    rows = [NewMessage(id=f"m{i}", data=_dumped(f"row {i}: tram ticket 路面電車の切符{i}"),
                       tokens=5) for i in range(count)]
    inserted = await store.aappend_messages("r1", "t1", rows)
    assert [r.seq for r in inserted] == list(range(1, count + 1))
    again = await store.aappend_messages("r1", "t1", [*rows[-2:], NewMessage(id="new", data=_dumped("はい"))])
    assert [(r.id, r.seq) for r in again] == [("new", count + 1)]
    stored = await store.aget_messages("r1", "t1")
    assert [r.id for r in stored] == [f"m{i}" for i in range(count)] + ["new"]
    thread = await store.aget_thread("r1", "t1")
    assert thread is not None and thread.updated_at >= thread.created_at
    if store.keyword_search_available:
        for word in ("tram", "路面電車"):
            hits = await store.asearch_messages("r1", word, thread_id="t1", limit=count + 5)
            assert {h.message.id for h in hits} >= {f"m{i}" for i in range(count)}, word
    with pytest.raises(InvalidStoreInput, match="thread_id"):
        await store.aappend_messages("r2", "t1", [NewMessage(id="x", data=_dumped("hi"))])


async def test_a_lease_is_free_exactly_when_another_owner_could_take_it(store: OMStore) -> None:
    """``is_free`` (background buffering asks it before each cycle) reads what ``atry_lease`` would
    find, in one read instead of a take and a release."""
    if not hasattr(store, "alease_free"):
        pytest.skip("in-process leases (the engine's own)")
    name = "observe:レコード\x1fthread"
    lease_store: Any = store
    assert await lease_store.alease_free(name)
    assert await lease_store.atry_lease(name, "worker-a", 30.0)
    assert not await lease_store.alease_free(name)
    assert not await lease_store.atry_lease(name, "worker-b", 30.0)  # agrees with a take
    await lease_store.arelease_lease(name, "worker-a")
    assert await lease_store.alease_free(name)
    assert await lease_store.atry_lease(name, "worker-a", 0.001)
    await asyncio.sleep(0.05)  # expired: free, and another owner takes it
    assert await lease_store.alease_free(name)
    assert await lease_store.atry_lease(name, "worker-b", 30.0)


class _Postscript(AgentMiddleware[Any, Any, Any]):
    """An ``after_model`` that rewrites the reply (same id, new text) and adds a note after it."""

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        reply = state["messages"][-1]
        edited = reply.model_copy(update={"content": f"{reply.content} (確認済み / checked)"})
        return {"messages": [edited, AIMessage("追伸: P.S. bring an umbrella", id=f"ps-{reply.id}")]}


async def test_after_agent_still_stores_what_another_middleware_changed_after_the_model(store: OMStore) -> None:
    """after_agent skips its reads only when the state is exactly what the model node's end of
    turn stored: an ``after_model`` edit and an added message are stored as before."""
    om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    agent = create_agent(ScriptedAgentModel(), [], middleware=[_Postscript(), ObservationalMemoryMiddleware(om)])
    for turn in range(2):
        await agent.ainvoke({"messages": [_ask(1, turn)]}, {"configurable": {"thread_id": "ps"}})
    rows = await store.aget_messages(om.resolve_resource("ps", None), "ps")
    ais = [r.data["data"]["content"] for r in rows if r.data.get("type") == "ai"]
    assert len(ais) == 4, ais
    assert all("checked" in text for text in ais[0::2]), ais  # the edited replies, not the originals
    assert ais[1::2] == ["追伸: P.S. bring an umbrella"] * 2
    await om.aclose()


async def test_a_fork_probe_reads_the_newest_rows_and_the_held_ids_in_one_call(store: OMStore) -> None:
    """``SupportsForkProbe`` answers what the two reads of a stateless step's fork check did:
    the newest rows (id, seq, kind) newest first, and which asked ids the thread holds, never
    another resource's."""
    from langchain_om.store.step_fast_paths import SupportsForkProbe

    assert isinstance(store, SupportsForkProbe)
    assert await store.afork_probe("ユーザー", "スレッド", ["m0"], 2) == ([], [])
    await store.aappend_messages("ユーザー", "スレッド", [
        NewMessage(id=f"m{i}", data=_dumped(f"こんにちは {i}"), tokens=3) for i in range(4)])
    await store.aappend_messages("ユーザー", "スレッド", [
        NewMessage(id="e1", data={"edit_of": "m1"}, tokens=1, kind="edit")])
    top, held = await store.afork_probe("ユーザー", "スレッド", ["m1", "m3", "absent"], 2)
    assert top == [(5, "e1", "edit"), (4, "m3", "message")]
    assert sorted(held) == [("m1", 2, "message"), ("m3", 4, "message")]
    assert await store.afork_probe("someone-else", "スレッド", ["m1"], 2) == ([], [])
