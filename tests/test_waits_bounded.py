"""Every wait OM does ends and says what it waits for (issue 33, item 2).

A background cycle that never ends is cancelled at its bound and ``await_background()``
returns; a lease heartbeat whose cancellation a store call swallows still stops; a step that
waits for another step's record lock names that wait in a ``data-om-wait`` debug event.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.engine.leases import try_lease
from langchain_om.foundation.events import OMEvent, WaitEvent, parse_event
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedObserverModel


def turns(count: int, start: int = 0) -> list[Any]:
    out: list[Any] = []
    for i in range(start, start + count):
        out += [HumanMessage(f"turn {i}: 京都の予算は{i}万円です " + "words " * 30, id=f"h{i}"),
                AIMessage(f"noted {i} " + "ok " * 30, id=f"a{i}")]
    return out


async def test_a_background_cycle_that_never_ends_is_cut_at_its_bound(caplog: pytest.LogCaptureFixture) -> None:
    never = asyncio.Event()

    async def stuck(_context: Any) -> None:
        await never.wait()  # a hook (or a library call) that nobody wakes

    seen: list[OMEvent] = []
    om = ObservationalMemory(
        InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator",
        observation={"message_tokens": 400}, hooks={"on_observation_start": stuck},
        failure_policy={"turn_budget": 100, "lease_ttl": 100}, on_debug_event=seen.append,
    )
    bound = om.config.failure_policy.background_bound_s()
    assert bound == pytest.approx(0.4)
    history: list[Any] = []
    for i in range(4):  # crosses the buffering interval: a cycle starts and hangs in the hook
        history += turns(1, i)
        await om.aprocess("t", history)
    assert om._tasks._tasks, "a buffering cycle is running, stuck in the hook"
    with caplog.at_level(logging.ERROR, logger="langchain_om"):
        await asyncio.wait_for(om.await_background(), 10)  # returns: the cycle was cut at its bound
    assert not om._tasks._tasks
    waits = [e for e in seen if isinstance(e, WaitEvent)]
    cut = [e for e in waits if e.data.waits_for.startswith("background-bound:observe")]
    assert cut and cut[-1].data.bound_s == pytest.approx(bound)
    assert any("past its bound" in r.getMessage() or (r.exc_info and "past its bound" in str(r.exc_info[1]))
               for r in caplog.records)
    # the wire shape round-trips and stays out of the streams (transient, camelCase)
    part = cut[0].to_part()
    assert part["transient"] is True and "waitsFor" in part["data"] and parse_event(part) == cut[0]


class SwallowingStore(InMemoryStore):
    """Leases whose renewal swallows a cancellation that lands in it, as a pool wait built on
    Python 3.11's ``asyncio.wait_for`` can when the connection arrives at the same moment."""

    def __init__(self) -> None:
        super().__init__()
        self.owners: dict[str, str] = {}
        self.renewals = 0

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        if self.owners.get(name, owner) != owner:
            return False
        if name in self.owners:
            self.renewals += 1
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                pass  # lost
        self.owners[name] = owner
        return True

    async def arelease_lease(self, name: str, owner: str) -> None:
        if self.owners.get(name) == owner:
            del self.owners[name]


async def test_a_heartbeat_that_loses_its_cancel_still_stops() -> None:
    store = SwallowingStore()
    for _ in range(5):
        async def hold() -> None:
            async with try_lease(store, "buffer:k", 0.03) as held:
                assert held
                await asyncio.sleep(0.03)  # lands the release while a renewal is in flight
        await asyncio.wait_for(hold(), 5)
    assert store.renewals > 0 and not store.owners
    await asyncio.sleep(0.05)
    before = store.renewals
    await asyncio.sleep(0.1)
    assert store.renewals == before, "no heartbeat left renewing a released lease"


async def test_a_step_waiting_for_the_record_lock_says_so() -> None:
    seen: list[OMEvent] = []
    observer = ScriptedObserverModel(delay_s=0.05)
    om = ObservationalMemory(InMemoryStore(), model=observer, token_counter="estimator",
                             observation={"message_tokens": 300, "buffer_tokens": False},
                             on_debug_event=seen.append)
    history = turns(6)
    # two steps of one thread at once: the second waits while the first observes synchronously
    await asyncio.gather(om.aprocess("t", history), om.aprocess("t", history + turns(1, 6)))
    waits = [e for e in seen if isinstance(e, WaitEvent) and e.data.waits_for == "record-lock"]
    assert [e.data.phase for e in waits] == ["start", "end"]
    start, end = waits
    assert end.data.wait_id == start.data.wait_id and end.data.outcome == "done"
    assert end.data.waited_ms is not None and end.data.waited_ms > 0
