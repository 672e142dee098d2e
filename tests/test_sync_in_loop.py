"""Sync wrappers called from inside a running event loop never hang (issue 15, item 8).

The async methods start OM's background buffering on the caller's loop. A sync twin called
from that same loop blocks it; if the twin then waited for that background work (delete,
close, history.clear) it waited forever. Each twin must either work there or raise at once
with a message naming its async twin. Every scenario runs in a thread with a deadline, so a
regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import asyncio
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import drop_pg_schema, require_pg_dsn, unique_schema
from langchain_core.messages import BaseMessage, HumanMessage
from om_fakes import conversation

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.history import ObservationalChatMessageHistory
from langchain_om.store import InMemoryStore, PostgresStore, SQLiteStore
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel

DEADLINE_S = 15.0
OBSERVER_DELAY_S = 1.5  # background buffering is still running when the sync call is made


def run_with_deadline(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """``asyncio.run(scenario())`` in a daemon thread; fails (instead of hanging) past the deadline."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["value"] = asyncio.run(scenario())  # type: ignore[arg-type]
        except BaseException as exc:  # reported to the test below
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    assert not thread.is_alive(), f"the sync call hung for {DEADLINE_S}s"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def open_store(store_kind: str, tmp_path: Path) -> Callable[[], Any]:
    """Opens a fresh store of the parametrized kind inside the scenario's own event loop."""
    dsn = require_pg_dsn() if store_kind == "postgres" else ""

    @asynccontextmanager
    async def opened() -> AsyncIterator[OMStore]:
        store: OMStore
        schema = unique_schema()
        if store_kind == "memory":
            store = InMemoryStore()
        elif store_kind == "sqlite":
            store = SQLiteStore(tmp_path / f"om-{uuid.uuid4().hex[:8]}.db")
        else:
            store = PostgresStore(dsn, schema=schema)
        await store.asetup()
        try:
            yield store
        finally:
            await store.aclose()
            if store_kind == "postgres":
                await drop_pg_schema(dsn, schema)

    return opened


def history_of(turns: int) -> list[BaseMessage]:
    return list(conversation(turns))[-1]


async def busy_om(store: OMStore) -> ObservationalMemory:
    """An OM whose background buffering (slow Observer) is running on the calling loop."""
    om = ObservationalMemory(store, model=ScriptedObserverModel(delay_s=OBSERVER_DELAY_S), token_counter="estimator",
                             observation={"message_tokens": 2000, "buffer_tokens": 100},
                             reflection={"observation_tokens": 40_000}, retrieval=True,
                             working_memory={"scope": "thread"})
    await om.aprocess("t", history_of(6))
    here = asyncio.get_running_loop()
    assert any(not task.done() and task.get_loop() is here for task in om._tasks._tasks.values()), \
        "background work runs on this loop"
    return om


SyncCall = Callable[[ObservationalMemory], Any]

# twins that can run on OM's own loop while the caller's loop is blocked: they must work there,
# except on a store whose connections belong to the caller's loop (PostgreSQL's async pool),
# where they must refuse at once, naming the twin
WORKING: dict[str, tuple[SyncCall, str]] = {
    "process": (lambda om: om.process("t", history_of(7)), "om.aprocess"),
    "observe": (lambda om: om.observe("t"), "om.aobserve"),
    "reflect": (lambda om: om.reflect("t"), "om.areflect"),
    "get_record": (lambda om: om.get_record("t"), "om.aget_record"),
    "status": (lambda om: om.status("t"), "om.astatus"),
    "on_turn_end": (lambda om: om.on_turn_end("t", history_of(7)), "om.aon_turn_end"),
    "history.messages": (lambda om: ObservationalChatMessageHistory(om, "t").messages, "history.aget_messages"),
    "history.add_messages": (lambda om: ObservationalChatMessageHistory(om, "t").add_messages(
        [HumanMessage("one more", id="extra-1")]), "history.aadd_messages"),
    "recall tool": (lambda om: om.recall_tool(thread_id="t").invoke({"page": 1}), "recall_tool.ainvoke"),
    "working_memory.set": (lambda om: om.working_memory.set("t", "# Notes\n- likes tea"), "om.working_memory.aset"),
    "working_memory.get": (lambda om: om.working_memory.get("t"), "om.working_memory.aget"),
}

# twins that wait for the caller's background work: they must refuse at once, naming the twin
REFUSING: dict[str, tuple[SyncCall, str]] = {
    "delete_thread": (lambda om: om.delete_thread("t"), "om.adelete_thread"),
    "close": (lambda om: om.close(), "om.aclose"),
    "history.clear": (lambda om: ObservationalChatMessageHistory(om, "t").clear(), "history.aclear"),
}


@pytest.mark.parametrize("name", sorted(WORKING))
def test_sync_twin_works_or_refuses_at_once_inside_a_busy_loop(open_store: Any, store_kind: str, name: str) -> None:
    call, twin = WORKING[name]
    loop_bound = store_kind == "postgres"  # the pool and its workers live on the caller's loop

    async def scenario() -> float:
        async with open_store() as store:
            om = await busy_om(store)
            started = time.perf_counter()
            if loop_bound:
                with pytest.raises(RuntimeError, match=re.escape(f"await {twin}")):
                    call(om)
            else:
                call(om)
            elapsed = time.perf_counter() - started
            await om.aclose(cancel=True)
            return elapsed

    elapsed = run_with_deadline(scenario)
    assert elapsed < (1.0 if loop_bound else DEADLINE_S)


def test_postgres_sync_twin_never_waits_for_a_connection_its_loop_holds(pg_dsn: str) -> None:
    """The deadlock the loop-bound rule prevents: a connection held by a task of the blocked loop,
    so the pool must open another, which only its workers on that same loop can do."""

    async def scenario() -> None:
        schema = unique_schema()
        store = PostgresStore(pg_dsn, schema=schema, max_size=4)
        om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator")
        try:
            await om.aprocess("t", [HumanMessage("hi", id="m1")])
            held = asyncio.Event()

            async def hold_a_connection() -> None:
                async with store._tx() as cur:
                    await cur.execute("SELECT 1")
                    held.set()
                    await asyncio.sleep(1.0)

            task = asyncio.create_task(hold_a_connection())
            await held.wait()
            with pytest.raises(RuntimeError, match=r"await om\.aget_record"):
                om.get_record("t")
            await task
            assert (await om.aget_record("t")).resource_id
        finally:
            await om.aclose()
            await drop_pg_schema(pg_dsn, schema)

    run_with_deadline(scenario)


@pytest.mark.parametrize("name", sorted(REFUSING))
def test_waiting_sync_twin_refuses_at_once_inside_the_busy_loop(open_store: Any, name: str) -> None:
    call, twin = REFUSING[name]

    async def scenario() -> None:
        async with open_store() as store:
            om = await busy_om(store)
            resource = om._resource_for("t", None)
            before = len(await store.aget_messages(resource, "t"))
            started = time.perf_counter()
            with pytest.raises(RuntimeError) as info:
                call(om)
            assert time.perf_counter() - started < 1.0, "refused at once, not after a wait"
            assert f"await {twin}" in str(info.value)
            assert len(await store.aget_messages(resource, "t")) == before, "nothing was deleted"
            # the async twin, awaited on the same loop, does the job
            if name == "close":
                await om.aclose()
            else:
                await om.adelete_thread("t")
                assert await store.aget_messages(resource, "t") == []
                await om.aclose(cancel=True)

    run_with_deadline(scenario)


@pytest.mark.parametrize("name", ["delete_thread", "history.clear"])
def test_deleting_works_inside_a_loop_with_no_background_work_there(open_store: Any, store_kind: str,
                                                                    name: str) -> None:
    call, twin = REFUSING[name]

    async def scenario() -> None:
        async with open_store() as store:
            om = await busy_om(store)
            await om.await_background()  # the loop is idle now: nothing to wait for on it
            if store_kind == "postgres":  # but the pool still belongs to it
                with pytest.raises(RuntimeError, match=re.escape(f"await {twin}")):
                    call(om)
                await om.adelete_thread("t")
            else:
                call(om)
            assert await store.aget_messages(om._resource_for("t", None), "t") == []
            await om.aclose(cancel=True)

    run_with_deadline(scenario)


def test_close_refuses_inside_any_running_loop_and_works_outside(open_store: Any) -> None:
    async def scenario() -> ObservationalMemory:
        async with open_store() as store:
            om = await busy_om(store)
            await om.await_background()
            with pytest.raises(RuntimeError, match=r"await om\.aclose\(\)"):
                om.close()  # the store's pool may belong to this loop even with no background work
            await om.aclose()
        return om

    om = run_with_deadline(scenario)
    om.close()  # outside any loop: closes (again) without complaint


def test_sync_call_from_oms_own_loop_names_the_twin() -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator")

    async def inside() -> None:
        om.get_record("t")

    with pytest.raises(RuntimeError, match=r"await om\.aget_record"):
        om._loop.run(inside())
    om.close()
