"""The load benchmark's lag probe (issue 33, item 4): it sees a blocked loop, and an idle loop
costs it no wake-up (its samples are taken from a thread, its CPU counted apart)."""

from __future__ import annotations

import asyncio
import time

from benchmarks.load_harness import LagProbe


async def test_a_blocked_loop_shows_its_lag_and_an_idle_one_is_not_woken() -> None:
    loop = asyncio.get_running_loop()
    lags: list[float] = []
    selects = 0
    original = loop._selector.select  # type: ignore[attr-defined]
    probe = LagProbe(loop, lags, tick_s=0.005)
    probe.start()
    watched = loop._selector.select  # type: ignore[attr-defined]

    def counting(timeout: float | None = None) -> object:
        nonlocal selects
        selects += 1
        return watched(timeout)

    loop._selector.select = counting  # type: ignore[attr-defined]
    try:
        await asyncio.sleep(0.15)  # idle: one long wait in the selector, not one per sample
        idle_selects, idle_samples = selects, len(lags)
        time.sleep(0.12)  # noqa: ASYNC251 -- the point: the loop is blocked, samples sent now wait for it
        await asyncio.sleep(0.03)
    finally:
        loop._selector.select = watched  # type: ignore[attr-defined]
        probe.stop()
    assert idle_samples >= 5 and idle_selects <= 3  # sampled, yet the idle loop was not woken per sample
    assert max(lags) >= 50  # the blocked stretch shows as lag
    assert probe.cpu_s > 0
    assert loop._selector.select == original  # type: ignore[attr-defined]  # the loop is as it was


async def test_the_progress_bars_redraws_are_excluded_from_a_runs_cpu() -> None:
    """The bar redraws from a thread of its own (``BarRedraws``), its CPU counted; ``run_load``
    excludes what that thread used during the run, as it excludes the probe's."""
    from benchmarks.load import BarRedraws
    from benchmarks.load_harness import LoadPlan, run_load
    from langchain_om.store.memory import InMemoryStore

    class BusyBar:
        redraws = 0

        def refresh(self) -> None:  # a costly redraw: ~2 ms of CPU
            self.redraws += 1
            until = time.thread_time() + 0.002
            while time.thread_time() < until:
                pass

    bar = BusyBar()
    read: list[tuple[float, int]] = []  # (the redraws' CPU, redraws so far) each time run_load asks
    with BarRedraws(bar, every_s=0.005) as redraws:
        def harness_cpu() -> float:
            read.append((redraws.cpu_s(), bar.redraws))
            return read[-1][0]

        result = await run_load(InMemoryStore(), LoadPlan(users=1, turns=3, observer_latency_s=0.05,
                                                          message_tokens=40), harness_cpu=harness_cpu)
    assert result.turns == 3 and not result.errors
    assert len(read) == 2  # at the run's start and end
    (before, drawn_before), (after, drawn_after) = read
    assert drawn_after - drawn_before >= 3  # redrawn during the run, by the bar's own thread
    assert after - before >= 0.002 * (drawn_after - drawn_before - 1)  # each redraw's CPU counted
    assert result.harness_cpu_s >= after - before  # and excluded, beside the probe's own
