"""live_runs.LiveRuns: which run a background cycle's events go to, and what comes back later."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.runtime import RunControl, Runtime

from langchain_om.engine.live_runs import LiveRuns, closed_at_turn_end, run_token
from langchain_om.foundation.events import BufferingStartData, BufferingStartEvent, OMEvent


class FakeRun:
    """A LangGraph-like run: a config whose runtime carries a control and a custom-stream writer."""

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []
        self.threads: list[int] = []
        runtime = Runtime(stream_writer=self.write, control=RunControl())
        self.config: RunnableConfig = {"configurable": {"__pregel_runtime": runtime}}

    def write(self, part: Any) -> None:
        self.parts.append(part)
        self.threads.append(threading.get_ident())

    def cycle_ids(self) -> list[str]:
        return [p["id"] for p in self.parts]


async def delivered(run: FakeRun, count: int) -> None:
    """Let the loop run until the run's writer got ``count`` parts (the delivery is a task on this loop)."""
    for _ in range(100):
        if len(run.parts) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"only {len(run.parts)} of {count} parts delivered")


def event(cycle: str) -> OMEvent:
    return BufferingStartEvent(data=BufferingStartData(
        cycle_id=cycle, operation_type="observation", started_at="2026-12-04T00:00:00+00:00", tokens_to_buffer=10,
        record_id="r", thread_id="t", config={"messageTokens": 1, "observationTokens": 1, "scope": "thread"}))


def test_run_token_is_the_run_control_and_none_outside_langgraph() -> None:
    run = FakeRun()
    runtime = run.config["configurable"]["__pregel_runtime"]
    assert run_token(run.config) is runtime.control
    assert run_token({"configurable": {}}) is None and run_token(None) is None


async def test_a_run_is_registered_only_when_its_integration_closes_it() -> None:
    runs, run = LiveRuns(), FakeRun()
    assert runs.refresh("k", run.config) == []
    assert not runs.deliver("k", event("c1")), "a bare aprocess call: events wait for the next step"
    with closed_at_turn_end():
        runs.refresh("k", run.config)
    assert runs.deliver("k", event("c1"))
    await runs.aclose(run.config)  # waits for the delivery under way
    assert run.cycle_ids() == ["c1"]


async def test_after_the_close_events_wait_and_nothing_is_sent_twice() -> None:
    runs, first, second = LiveRuns(), FakeRun(), FakeRun()
    with closed_at_turn_end():
        runs.refresh("k", first.config)
    assert runs.deliver("k", event("c1"))
    await runs.aclose(first.config)
    assert not runs.is_open("k")
    assert not runs.deliver("k", event("c2")), "the run closed: the engine keeps c2 for the next step"
    with closed_at_turn_end():
        assert runs.refresh("k", second.config) == [], "c1 was delivered into a run that reached its end"
    assert first.cycle_ids() == ["c1"] and second.cycle_ids() == []


async def test_a_run_that_never_closed_gives_its_unconfirmed_events_back() -> None:
    """An interrupt or an error ends a run without its end of turn: what went into it after its
    last step may never have been read, so the next run's first step carries it again."""
    runs, first, second = LiveRuns(), FakeRun(), FakeRun()
    with closed_at_turn_end():
        runs.refresh("k", first.config)
        assert runs.deliver("k", event("c1"))
        await delivered(first, 1)
        runs.refresh("k", first.config)  # the same run steps again: it was alive, c1 was seen
        assert runs.deliver("k", event("c2"))
        await delivered(first, 2)
        resend = runs.refresh("k", second.config)  # another run, and the first never closed
    assert [e.data.cycle_id for e in resend] == ["c2"]  # type: ignore[attr-defined]
    assert runs.is_open("k") and runs.deliver("k", event("c3"))
    await runs.aclose(second.config)
    assert second.cycle_ids() == ["c3"]


async def test_events_pushed_from_another_thread_are_dispatched_on_the_runs_loop() -> None:
    runs, run = LiveRuns(), FakeRun()
    with closed_at_turn_end():
        runs.refresh("k", run.config)
    loop_thread = threading.get_ident()
    delivered: list[bool] = []
    worker = threading.Thread(target=lambda: delivered.extend(runs.deliver("k", event(f"c{i}")) for i in range(5)))
    worker.start()
    await asyncio.to_thread(worker.join)
    await runs.aclose(run.config)
    assert delivered == [True] * 5
    assert run.cycle_ids() == [f"c{i}" for i in range(5)], "in the order they were pushed"
    assert set(run.threads) == {loop_thread}


async def test_the_steps_own_events_and_live_ones_do_not_interleave() -> None:
    runs, run = LiveRuns(), FakeRun()
    with closed_at_turn_end():
        runs.refresh("k", run.config)
    assert runs.deliver("k", event("live1")) and runs.deliver("k", event("live2"))
    await runs.dispatch([event("step1"), event("step2")], run.config)
    await runs.aclose(run.config)
    ids = run.cycle_ids()
    assert sorted(ids) == ["live1", "live2", "step1", "step2"]
    assert ids.index("live2") == ids.index("live1") + 1 and ids.index("step2") == ids.index("step1") + 1


def test_a_closed_loop_means_the_run_is_over() -> None:
    runs, run = LiveRuns(), FakeRun()

    async def step() -> None:
        with closed_at_turn_end():
            runs.refresh("k", run.config)

    asyncio.run(step())  # asyncio.run closes its loop: that run cannot stream anymore
    assert not runs.deliver("k", event("c1"))
