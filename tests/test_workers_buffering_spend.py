"""Issue 32, item 5: eight workers on one thread pay the Observer no more per stored message than one.

Eight worker processes replaying one conversation (``python -m benchmarks.workers``, fast steps)
paid the Observer up to 1.26x per stored message: nothing was observed twice, but each worker
started a buffering cycle as soon as the previous one (another worker's) had staged its chunk,
before any new message had come, so the chunks were smaller and each call carried the Observer's
fixed prompt once more. One worker starts its next cycle at its next step, which brings a turn.

Time is scripted here, not measured: a clock ticks once per step, eight steps per turn, and an
Observer call answers a fixed number of ticks after it began (as a real call answers after a
fixed time, whatever the workers do meanwhile). One worker steps once per turn; eight workers
(each its own ``ObservationalMemory`` and store object on one SQLite file, as separate
processes) step every tick: the one whose turn it is stores the new messages, the others repeat
the request they were sent (a retry, a second tab), storing nothing new.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import ConfigDict, Field

from langchain_om import ObservationalMemory
from langchain_om.store.base import implicit_resource, record_key
from langchain_om.store.sqlite import SQLiteStore

TICKS_PER_TURN = 8
OBSERVER_TICKS = 12  # an Observer call lasts one and a half turns


@dataclass
class Clock:
    """Scripted time: Observer calls waiting for their answer tick, and what they were sent."""

    tick: int = 0
    waiting: list[tuple[int, int, asyncio.Event]] = field(default_factory=list)  # (due tick, worker, gate)
    inputs: list[str] = field(default_factory=list)


class TimedObserver(FakeListChatModel):
    """Answers each Observer call ``OBSERVER_TICKS`` ticks after it began."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    responses: list[str] = Field(default_factory=lambda: ["unused"])
    clock: Any = None
    worker: int = 0

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.clock.inputs.append("".join(str(m.content) for m in messages))
        gate = asyncio.Event()
        self.clock.waiting.append((self.clock.tick + OBSERVER_TICKS, self.worker, gate))
        await gate.wait()
        return await super()._agenerate(messages, *args, **kwargs)

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        n = len(self.clock.inputs)
        note = f"* 🟡 (09:{n % 60:02d}) Note {n}: 在庫を確認した。"
        return f"<observations>\nDate: 2026-11-30 (Monday)\n{note}\n</observations>"


def history(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for turn in range(turns):
        words = " ".join(f"w{turn}_{i}" for i in range(20))
        out += [HumanMessage(f"turn {turn}: {words} 在庫の確認 {turn}", id=f"h{turn}"),
                AIMessage(f"reply {turn}: {words} 🙂", id=f"a{turn}")]
    return out


def worker(path: Path, clock: Clock, index: int) -> ObservationalMemory:
    return ObservationalMemory(
        SQLiteStore(path), model=TimedObserver(clock=clock, worker=index), token_counter="estimator",
        # the log is never activated nor reflected here: only the buffering cycles are measured
        observation={"message_tokens": 50_000, "buffer_tokens": 100},
        reflection={"observation_tokens": 1_000_000}, failure_policy={"lease_ttl": 60_000},
    )


async def settle(workers: list[ObservationalMemory], clock: Clock) -> None:
    """Until every buffering cycle is over or waiting for its Observer's answer (a cycle's store
    reads run in a thread: how far one got after a step is not up to the event loop alone)."""
    key = record_key(implicit_resource("t1"), "t1")
    for _ in range(5000):
        gated = {w for _, w, _ in clock.waiting}
        if all(om._tasks.task(key, "observe") is None or i in gated for i, om in enumerate(workers)):
            return
        await asyncio.sleep(0.002)
    raise AssertionError("a buffering cycle neither finished nor reached its Observer")


async def tick(workers: list[ObservationalMemory], clock: Clock) -> None:
    """One tick: answer the Observer calls that are due, and let their cycles stage their chunks."""
    clock.tick += 1
    due = [entry for entry in clock.waiting if entry[0] <= clock.tick]
    for entry in due:
        clock.waiting.remove(entry)
        entry[2].set()
    for index in sorted({w for _, w, _ in due}):
        await asyncio.wait_for(workers[index].await_background(), 30)
    await settle(workers, clock)


async def observer_input_per_message(path: Path, count: int, turns: int) -> tuple[float, int]:
    clock = Clock()
    workers = [worker(path, clock, i) for i in range(count)]
    full = history(turns)
    for turn in range(1, turns + 1):
        for t in range(TICKS_PER_TURN):
            if count > 1 or t == 0:  # one worker steps once per turn
                # the worker whose turn it is brings the new messages; the others repeat this turn's request
                await workers[(turn + t) % count].aprocess("t1", full[: 2 * turn])
                await settle(workers, clock)
            await tick(workers, clock)
    while clock.waiting:
        await tick(workers, clock)
    stored = len(await workers[0].store.aget_messages(implicit_resource("t1"), "t1"))
    assert stored == 2 * turns, "each message stored once"
    for om in workers:
        await om.aclose()
    return sum(len(text) for text in clock.inputs) / 4 / stored, len(clock.inputs)


async def test_eight_workers_pay_the_observer_per_stored_message_within_125_percent_of_one(tmp_path: Path) -> None:
    one, one_calls = await observer_input_per_message(tmp_path / "one.db", 1, 24)
    eight, eight_calls = await observer_input_per_message(tmp_path / "eight.db", 8, 24)
    assert one_calls >= 5, "the conversation buffered several chunks"
    assert eight / one <= 1.25, f"8 workers: {eight_calls} Observer calls, {eight:.0f} tokens per stored " \
                                f"message against one worker's {one_calls} calls, {one:.0f}"
