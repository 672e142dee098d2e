"""Issue 16, item 4: concurrent workers on one record pay the Observer once per range.

Leases live in the store (SQLite / PostgreSQL rows with an expiry, in-process for the memory
store); a dead worker's lease expires and the work is redone once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from om_fakes import CallableFake, conversation, observer_or_reflector

from langchain_om import ObservationalMemory
from langchain_om.engine.leases import _release, _try, lease_name
from langchain_om.store.base import OMStore, record_key


async def test_a_lease_is_exclusive_renewable_and_expires(store: OMStore) -> None:
    name = lease_name(record_key("r1", "t1"), "observe")
    assert await _try(store, name, "worker-a", 30)
    assert not await _try(store, name, "worker-b", 30), "held by a"
    assert await _try(store, name, "worker-a", 30), "the holder renews"
    await _release(store, name, "worker-b")  # not the holder: nothing happens
    assert not await _try(store, name, "worker-b", 30)
    await _release(store, name, "worker-a")
    assert await _try(store, name, "worker-b", 0.2), "free once released"
    assert not await _try(store, name, "worker-a", 30)
    await asyncio.sleep(0.4)
    assert await _try(store, name, "worker-a", 30), "a dead holder's lease expires"
    other = lease_name(record_key("r1", "t2"), "observe")
    assert await _try(store, other, "worker-b", 30), "leases are per record"


class SlowObserver(CallableFake):
    delay: float = 0.3

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(self.delay)
        return await super()._agenerate(messages, *args, **kwargs)


def _om(store: OMStore, model: Any, **policy: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=model, token_counter="estimator",
                               observation={"message_tokens": 300, "buffer_tokens": False},
                               reflection={"observation_tokens": 1_000_000}, failure_policy=policy or None)


@pytest.mark.parametrize("store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
async def test_two_workers_crossing_the_threshold_together_pay_once(store: OMStore) -> None:
    model = SlowObserver(fn=observer_or_reflector)
    first, second = _om(store, model), _om(store, model)
    histories = list(conversation(12))
    crossing = None
    for history in histories:
        ctx = await first.aprocess("t1", history, phases=("activate",))  # store only, observe nothing
        if ctx.status.windows.active.messages.tokens > 300:
            crossing = history
            break
    assert crossing is not None
    a, b = await asyncio.gather(first.aprocess("t1", crossing), second.aprocess("t1", crossing))
    assert len(model.prompts) == 1, "the second worker waited, saw the range observed, and did not pay again"
    assert a.record.groups and b.record.groups
    assert a.record.groups[0].id == b.record.groups[0].id


async def test_a_dead_workers_lease_expires_and_the_work_is_done_once(tmp_path: Any) -> None:
    from langchain_om.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "om.db")
    model = CallableFake(fn=observer_or_reflector)
    om = _om(store, model, lease_ttl="600ms")
    histories = list(conversation(12))
    for history in histories:
        ctx = await om.aprocess("t1", history, phases=("activate",))
        if ctx.status.windows.active.messages.tokens > 300:
            break
    # a worker took the lease and died before releasing it
    key = record_key(om._resource_for("t1", None), "t1")
    assert await _try(store, lease_name(key, "observe"), "dead-worker", 0.6)
    started = time.monotonic()
    ctx = await om.aprocess("t1", history)
    assert time.monotonic() - started >= 0.3, "it waited for the dead worker's lease"
    assert len(model.prompts) == 1 and ctx.record.groups, "then observed, once"
    await store.aclose()


def test_the_spend_benchmark_runs_and_two_processes_send_each_turn_once(tmp_path: Any) -> None:
    from benchmarks.observer_spend import measure

    row = measure(f"sqlite:{tmp_path / 'spend.db'}", workers=2, turns=10, delay=0.0, buffering=False)
    assert row["stored_messages"] == 20
    assert row["observer_calls"] >= 1 and row["observer_input_tokens"] > 0
    assert row["max_sends_of_one_turn"] == 1, "two worker processes never paid twice for one message"
    assert row["input_tokens_per_1k_conversation_tokens"] > 0


async def test_a_live_holder_keeps_its_lease_past_the_ttl(tmp_path: Any) -> None:
    from langchain_om.engine.leases import wait_for_lease
    from langchain_om.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "om.db")
    await store.asetup()
    name = lease_name("r1:t1", "observe")
    async with wait_for_lease(store, name, 0.3):
        await asyncio.sleep(0.9)  # three ttls: the heartbeat renewed it
        assert not await _try(store, name, "other", 0.3)
    assert await _try(store, name, "other", 0.3), "released on exit"
    await store.aclose()


class _SlowRenewals:
    """Leases whose renewal takes a while (a store under load) and a moment to wind down once
    cancelled: a holder leaving its block while one is in flight waits for it to stop."""

    def __init__(self) -> None:
        self.owners: dict[str, str] = {}
        self.renewing = asyncio.Event()

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        if self.owners.get(name, owner) != owner:
            return False
        if name in self.owners:
            self.renewing.set()
            try:
                await asyncio.sleep(5.0)
            except asyncio.CancelledError:
                await asyncio.sleep(0.05)  # a client call takes a moment to wind down
                raise
        self.owners[name] = owner
        return True

    async def arelease_lease(self, name: str, owner: str) -> None:
        if self.owners.get(name) == owner:
            del self.owners[name]


@pytest.mark.parametrize("how", ["try_lease", "wait_for_lease"])
async def test_a_cancel_that_lands_while_a_lease_stops_its_heartbeat_is_not_swallowed(how: str) -> None:
    """The root cause of ``aclose(cancel=True)`` hanging on a buffering cycle: leaving a lease
    block stops the heartbeat and waits for a renewal in flight; a cancel of the holder landing
    in that wait was delivered through the renewal and swallowed as if it were the renewal's
    own, so the holder went on into an Observer call that never answered."""
    from langchain_om.engine.leases import try_lease, wait_for_lease

    store = _SlowRenewals()
    name = lease_name(f"r1:{how}", "buffer")
    never = asyncio.Event()
    reached_the_call = False
    left_the_block = asyncio.Event()

    async def holder() -> None:
        nonlocal reached_the_call
        lease = try_lease(store, name, 0.06) if how == "try_lease" else wait_for_lease(store, name, 0.06)
        async with lease:
            await store.renewing.wait()  # the heartbeat is renewing (slowly) when the block ends
            left_the_block.set()
        reached_the_call = True
        await never.wait()  # an Observer that never answers

    task = asyncio.create_task(holder())
    await asyncio.wait_for(left_the_block.wait(), 2.0)
    await asyncio.sleep(0)  # the holder now waits for the renewal to stop
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2.0)
    assert task in done and task.cancelled(), "the cancel was swallowed: the holder went on"
    assert not reached_the_call
    assert name not in store.owners, "the lease was given back"


async def test_a_short_hold_starts_no_task_and_a_long_one_is_renewed() -> None:
    """The heartbeat is a timer: a hold shorter than a third of the ttl (most buffering cycles)
    creates no task at all, and one that lasts renews the lease until it ends, then never again."""
    from langchain_om.engine.leases import try_lease

    class Counting:
        def __init__(self) -> None:
            self.takes = 0
            self.owner: str | None = None

        async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
            if self.owner not in (None, owner):
                return False
            self.owner, self.takes = owner, self.takes + 1
            return True

        async def arelease_lease(self, name: str, owner: str) -> None:
            if self.owner == owner:
                self.owner = None

    store = Counting()
    before = len(asyncio.all_tasks())
    async with try_lease(store, "buffer:short", 30.0) as held:
        assert held and len(asyncio.all_tasks()) == before, "no heartbeat task for a short hold"
    assert store.takes == 1 and store.owner is None
    async with try_lease(store, "buffer:long", 0.09) as held:
        assert held
        await asyncio.sleep(0.2)  # more than two renewal periods
        assert store.takes >= 3, "renewed while held"
    after = store.takes
    await asyncio.sleep(0.1)
    assert store.takes == after and store.owner is None, "no renewal once released"



@pytest.mark.parametrize("store_kind", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True)
@pytest.mark.parametrize(("holder_skew", "taker_skew"), [(0.0, 60.0), (-60.0, 0.0)],
                         ids=["taker-ahead", "holder-behind"])
async def test_postgres_leases_run_on_the_servers_clock(store: OMStore, monkeypatch: pytest.MonkeyPatch,
                                                        holder_skew: float, taker_skew: float) -> None:
    """Issue 30, item 9: a worker whose clock is a minute ahead does not take a live lease, and
    one whose clock is a minute behind does not take one that is already expired for the
    others: acquisition and expiry are the server's time, not each worker's."""
    name = lease_name(record_key("r1", "skew"), "observe")
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + holder_skew)
    assert await _try(store, name, "holder", 30)
    monkeypatch.setattr(time, "time", lambda: real() + taker_skew)
    assert not await _try(store, name, "taker", 30), "a live lease was taken"
    monkeypatch.setattr(time, "time", lambda: real() + holder_skew)
    assert await _try(store, name, "holder", 0.2), "the holder renews it"
    monkeypatch.setattr(time, "time", lambda: real() + taker_skew)
    assert not await _try(store, name, "taker", 30)
    await asyncio.sleep(0.4)
    assert await _try(store, name, "taker", 30), "it still expires after its ttl"
