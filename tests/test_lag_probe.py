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
