"""Many users over more threads than ``cache_limit`` (issue 33, items 1 and 5).

24 users step 40 threads round-robin with ``cache_limit=8`` while background buffering and
reflection run, through ``create_agent`` + ``ObservationalMemoryMiddleware`` and through
``aprocess``, on every store. Another task's step evicts a thread's cache entries while this
one awaits the store; before the fix that raised ``KeyError`` from the record LRU in ~30% of
turns and in background cycles, and messages reached the Observer twice. No timing is asserted:
speed lives in ``python -m benchmarks.load``.
"""

from __future__ import annotations

import pytest

from benchmarks.load_harness import LoadPlan, run_load
from langchain_om.store.base import OMStore

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("via", ["middleware", "aprocess"])
async def test_more_threads_than_the_cache_no_failed_turn(store: OMStore, via: str) -> None:
    plan = LoadPlan(users=12, threads=16, turns=12, cache_limit=4, via=via,  # type: ignore[arg-type]
                    observer_latency_s=0.005, message_tokens=200, observation_tokens=250, background_bound_s=60)
    result = await run_load(store, plan)
    assert not result.errors, result.errors
    assert not result.background_failures, result.background_failures
    assert result.turns == plan.users * plan.turns
    assert result.background_done, "await_background() returned"
    assert result.problems == []
    # the load exercised what it claims to: buffering, activation and reflection all ran
    assert result.events["data-om-buffering-end:observation"] > 0, result.events
    assert result.events["data-om-activation:observation"] > 0, result.events
    assert result.events["data-om-observation-end:reflection"] + result.events["data-om-activation:reflection"] > 0, \
        result.events
