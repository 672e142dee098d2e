"""Many users over more threads than ``cache_limit`` (issue 33, items 1 and 5).

8 users step 12 threads round-robin with ``cache_limit=3`` (the issue's 24 users over 40
threads with 8, scaled down) while background buffering and reflection run, through
``create_agent`` + ``ObservationalMemoryMiddleware`` and through ``aprocess``, on every store.
Another task's step evicts a thread's cache entries while this one awaits the store; before
the fix that raised ``KeyError`` from the record LRU in turns and in background cycles, and
messages reached the Observer twice. No timing is asserted: speed lives in
``python -m benchmarks.load``.
"""

from __future__ import annotations

import gc

import pytest

from benchmarks.load_harness import LoadPlan, run_load
from langchain_om import ObservationalMemory
from langchain_om.store.base import OMStore
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedObserverModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("via", ["middleware", "aprocess"])
async def test_more_threads_than_the_cache_no_failed_turn(store: OMStore, via: str) -> None:
    plan = LoadPlan(users=8, threads=12, turns=8, cache_limit=3, via=via,  # type: ignore[arg-type]
                    observer_latency_s=0.005, message_tokens=200, observation_tokens=150, background_bound_s=60)
    result = await run_load(store, plan)
    assert not result.errors, result.errors
    assert not result.background_failures, result.background_failures
    assert result.turns == plan.users * plan.turns
    assert result.background_done, "await_background() returned"
    assert result.problems == []
    # the load exercised what it claims to: buffering, activation and reflection all ran
    assert result.events["data-om-buffering-end:observation"] > 0, result.events
    assert result.events["data-om-activation:observation"] > 0, result.events
    reflections = ("data-om-observation-end:reflection", "data-om-buffering-end:reflection",
                   "data-om-activation:reflection")
    assert sum(result.events[kind] for kind in reflections) > 0, result.events


async def test_a_lock_a_task_is_about_to_take_survives_eviction() -> None:
    """Two tasks must never hold two different locks for one record: a lock someone refers to
    (taken, awaited, or about to be taken, as a buffering cycle's loan does from a new task)
    outlives its record's eviction; one nobody refers to is gone, so locks stay bounded."""
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator")
    om.cache_limit = 1
    om.touch_record("k")
    lock = om._lock("k")  # not yet acquired
    for i in range(3):
        om.touch_record(f"other-{i}")  # evicts "k" and its per-record state
    assert "k" not in om._recent_records
    assert om._lock("k") is lock
    del lock
    gc.collect()
    assert len(om._locks) == 0
