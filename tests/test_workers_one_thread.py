"""Issue 32, item 5: several workers on one thread share one reflection and never pay twice.

Eight worker processes on one thread waited for each other's Reflector call on most steps
(step p95 13.4 s against 6.2 ms for one worker), and paid the Reflector several times per
stored message. Here each worker is its own ``ObservationalMemory`` with its own store object
on one SQLite file (the leases live in the file, as between processes). Integrity, not timing:

* a step whose log is within ``reflection.block_after`` never waits for a reflection another
  worker is running (it would hang here: that Reflector answers only after the step is back);
  over ``block_after`` it does wait, and gets the reflected log;
* a reflection whose commit races with another worker's observation is applied, not paid again;
* a buffered reflection whose commit races with another worker's step is staged, not lost;
* with several workers at once, every Observer input holds a stored message at most once and
  every note of the log reaches the Reflector at most once.

Step latency at 1 and 8 worker processes: ``python -m benchmarks.workers``.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import is_reflector_prompt
from pydantic import ConfigDict, Field

from langchain_om import ObservationalMemory
from langchain_om.engine.leases import _release, _try, lease_name
from langchain_om.store import OMStore
from langchain_om.store.base import record_key
from langchain_om.store.sqlite import SQLiteStore

_NOTE = re.compile(r"(?:inventory|在庫) (\d+)")
_TURN = re.compile(r"turn (\d+):")


def observation(call: int) -> str:
    """Each Observer call writes notes no other call writes, so a Reflector input names them."""
    lines = "".join(f"* 🟡 (09:{i:02d}) User listed item {i} of inventory {call} with its count.\n" for i in range(8))
    return f"<observations>\nDate: 2026-11-30 (Monday)\n{lines}</observations>"


def reflection(call: int) -> str:
    return f"<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 ユーザーは在庫 {call} を管理している。\n</observations>"


class GatedModel(FakeListChatModel):
    """Observer and Reflector in one. The Reflector may be held at a gate (``hold_reflector``);
    ``reflecting`` is set once a Reflector call is waiting there. Every input is kept."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    responses: list[str] = Field(default_factory=lambda: ["unused"])
    observer_inputs: list[str] = Field(default_factory=list)
    reflector_inputs: list[str] = Field(default_factory=list)
    calls: int = 0
    hold_reflector: bool = False
    hold_observer: bool = False
    observing: asyncio.Event = Field(default_factory=asyncio.Event)
    observer_gate: asyncio.Event = Field(default_factory=asyncio.Event)
    gate: asyncio.Event = Field(default_factory=asyncio.Event)
    reflecting: asyncio.Event = Field(default_factory=asyncio.Event)
    delay: float = 0.0

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        if is_reflector_prompt(messages):
            self.reflector_inputs.append(str(messages[-1].content))
            if self.hold_reflector:
                self.reflecting.set()
                await self.gate.wait()
        else:
            self.observer_inputs.append(str(messages[-1].content).split("<transcript>", 1)[-1])
            if self.hold_observer:
                self.observing.set()
                await self.observer_gate.wait()
        await asyncio.sleep(self.delay)
        return await super()._agenerate(messages, *args, **kwargs)

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.calls += 1
        return reflection(self.calls) if is_reflector_prompt(messages) else observation(self.calls)


def history(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for turn in range(turns):
        words = " ".join(f"w{turn}_{i}" for i in range(25))
        out += [HumanMessage(f"turn {turn}: {words} 在庫の確認 {turn}", id=f"h{turn}"),
                AIMessage(f"reply {turn}: {words}", id=f"a{turn}")]
    return out


def _worker(path: Path, model: GatedModel, *, block_after: float, buffered: bool = False,
            waits: list[str] | None = None) -> ObservationalMemory:
    def debug(event: Any) -> None:
        if waits is not None and event.type == "data-om-wait":
            waits.append(f"{event.data.waits_for} {event.data.phase}")

    return ObservationalMemory(
        SQLiteStore(path), model=model, token_counter="estimator",
        observation={"message_tokens": 300, "buffer_tokens": 100 if buffered else False},
        reflection={"observation_tokens": 400, "block_after": block_after},
        failure_policy={"lease_ttl": 60_000}, on_debug_event=debug,
    )


async def _step_until_reflecting(om: ObservationalMemory, model: GatedModel, full: list[BaseMessage],
                                 ) -> tuple[asyncio.Task[Any], int]:
    """Step ``om`` turn by turn until one of its steps is inside a (held) Reflector call."""
    for end in range(2, len(full) + 1, 2):
        task = asyncio.ensure_future(om.aprocess("t1", full[:end], resource_id="alice"))
        reflecting = asyncio.ensure_future(model.reflecting.wait())
        await asyncio.wait({task, reflecting}, return_when=asyncio.FIRST_COMPLETED)
        if model.reflecting.is_set():
            return task, end
        reflecting.cancel()
        await task
    raise AssertionError("the conversation never reached the reflection threshold")


async def test_a_step_within_block_after_goes_on_while_another_worker_reflects(tmp_path: Path) -> None:
    model = GatedModel(hold_reflector=True)
    waits: list[str] = []
    first = _worker(tmp_path / "om.db", model, block_after=100_000)
    second = _worker(tmp_path / "om.db", model, block_after=100_000, waits=waits)
    full = history(24)
    reflecting, end = await _step_until_reflecting(first, model, full)
    groups = len((await second.aget_record("t1", resource_id="alice")).groups)
    for more in range(end + 2, len(full) + 1, 2):
        # were it waiting for the first worker's reflection, this would hang: that Reflector
        # answers only once the step is back (bounded well inside the 60 s lease ttl)
        ctx = await asyncio.wait_for(second.aprocess("t1", full[:more], resource_id="alice"), 30)
        assert not reflecting.done(), "the first worker is still reflecting"
        if len(ctx.record.groups) > groups:
            break
    else:
        raise AssertionError("the second worker never observed")
    assert not [w for w in waits if w.startswith("lease:reflect")]
    assert len(model.reflector_inputs) == 1, "the second worker left the log to the running reflection"
    model.gate.set()
    await reflecting
    record = await first.aget_record("t1", resource_id="alice")
    # the reflection committed on the log the second worker grew: its observation stays after it
    assert record.generation_count == 1 and record.groups[0].source == "reflection"
    assert "在庫" in record.groups[0].text and len(record.groups) >= 2
    assert len(model.reflector_inputs) == 1, "the commit race did not pay the Reflector again"
    for om in (first, second):
        await om.aclose()


async def test_a_step_over_block_after_waits_for_the_running_reflection(tmp_path: Path) -> None:
    model = GatedModel(hold_reflector=True)
    waits: list[str] = []
    first = _worker(tmp_path / "om.db", model, block_after=1)
    second = _worker(tmp_path / "om.db", model, block_after=1, waits=waits)
    full = history(24)
    reflecting, end = await _step_until_reflecting(first, model, full)
    waiting = asyncio.ensure_future(second.aprocess("t1", full[:end], resource_id="alice"))
    for _ in range(1500):  # until the step says what it waits for (or ends: a failure below)
        if "lease:reflect start" in waits or waiting.done():
            break
        await asyncio.sleep(0.02)
    assert "lease:reflect start" in waits and not waiting.done(), "over block_after the step waits"
    model.gate.set()
    first_ctx, second_ctx = await reflecting, await waiting
    assert len(model.reflector_inputs) == 1, "it waited, and did not reflect the same log again"
    assert second_ctx.record.generation_count == 1 == first_ctx.record.generation_count
    for om in (first, second):
        await om.aclose()


async def test_a_buffered_reflection_that_races_a_commit_is_staged_not_lost(tmp_path: Path) -> None:
    model = GatedModel(hold_reflector=True)
    first = _worker(tmp_path / "om.db", model, block_after=100_000, buffered=True)
    second = _worker(tmp_path / "om.db", model, block_after=100_000, buffered=True)
    full = history(30)
    end = 2
    for end in range(2, len(full) + 1, 2):  # until the first worker's background reflection starts
        await first.aprocess("t1", full[:end], resource_id="alice")
        await asyncio.sleep(0.05)
        if model.reflecting.is_set():
            break
    assert model.reflecting.is_set(), "the log reached the buffering point"
    before = (await second.aget_record("t1", resource_id="alice")).version
    for more in range(end + 2, len(full) + 1, 2):  # the second worker commits meanwhile
        await second.aprocess("t1", full[:more], resource_id="alice")
        await second.await_background()
        if (await second.aget_record("t1", resource_id="alice")).version != before:
            break
    model.gate.set()
    await first.await_background()
    record = await first.aget_record("t1", resource_id="alice")
    assert len(model.reflector_inputs) == 1
    staged_or_applied = record.buffered_reflection is not None or record.generation_count == 1
    assert staged_or_applied, "the Reflector's result was kept, not lost to the version race"
    for om in (first, second):
        await om.aclose()


async def test_a_step_waiting_for_another_workers_lease_lets_its_own_cycles_finish(tmp_path: Path) -> None:
    """A step over ``block_after`` waits for another worker's reflection holding the record's
    in-process lock; its own buffering cycle needs that lock to stage its chunk. Were the lock
    not lent for the wait, the chunk (and the cycle's ``buffer`` lease, which the other worker's
    steps wait for) would stay stuck until the step ends: across processes, a cycle of waits
    that only ``lease_ttl`` broke."""
    model = GatedModel()
    waits: list[str] = []
    builder = ObservationalMemory(SQLiteStore(tmp_path / "om.db"), model=model, token_counter="estimator",
                                  observation={"message_tokens": 300, "buffer_tokens": False},
                                  reflection={"observation_tokens": 1_000_000})
    worker = ObservationalMemory(
        SQLiteStore(tmp_path / "om.db"), model=model, token_counter="estimator",
        observation={"message_tokens": 2000, "buffer_tokens": 100, "buffer_on_idle": True},
        reflection={"observation_tokens": 400, "block_after": 1}, failure_policy={"lease_ttl": 60_000},
        on_debug_event=lambda e: waits.append(f"{e.data.waits_for} {e.data.phase}") if e.type == "data-om-wait"
        else None)
    full = history(30)
    end = 2
    for end in range(2, len(full) + 1, 2):  # a log over the reflection threshold, observed by another worker
        if (await builder.aprocess("t1", full[:end], resource_id="alice")).record.observation_tokens > 450:
            break
    other = "another-worker"  # reflecting this log right now
    store = SQLiteStore(tmp_path / "om.db")
    name = lease_name(record_key("alice", "t1"), "reflect")
    assert await _try(store, name, other, 60)
    model.hold_observer = True
    await worker.aon_turn_end("t1", full[: end + 2], resource_id="alice")  # starts a buffering cycle
    await asyncio.wait_for(model.observing.wait(), 30)
    step = asyncio.ensure_future(worker.aprocess("t1", full[: end + 2], resource_id="alice"))
    for _ in range(1500):
        if "lease:reflect start" in waits or step.done():
            break
        await asyncio.sleep(0.02)
    assert "lease:reflect start" in waits and not step.done(), "over block_after, the step waits"
    model.observer_gate.set()  # the buffering cycle's Observer answers while the step still waits
    for _ in range(500):
        if (await builder.aget_record("t1", resource_id="alice")).buffered_chunks:
            break
        await asyncio.sleep(0.02)
    assert (await builder.aget_record("t1", resource_id="alice")).buffered_chunks, "the chunk was staged"
    assert not step.done()
    await _release(store, name, other)
    ctx = await asyncio.wait_for(step, 30)
    assert ctx.record.generation_count == 1, "then it reflected the log itself"
    for closing in (builder, worker):
        await closing.aclose()
    await store.aclose()


@pytest.mark.parametrize("buffered", [False, True], ids=["sync", "buffered"])
async def test_workers_send_each_message_and_each_note_to_a_model_once(store: OMStore, buffered: bool) -> None:
    model = GatedModel(delay=0.03)
    workers = [ObservationalMemory(store, model=model, token_counter="estimator",
                                   observation={"message_tokens": 300, "buffer_tokens": 100 if buffered else False},
                                   reflection={"observation_tokens": 400})
               for _ in range(4)]
    full = history(14)

    async def run(om: ObservationalMemory) -> None:
        for end in range(2, len(full) + 1, 2):
            await om.aprocess("t1", full[:end], resource_id="alice")
        await om.await_background()

    await asyncio.gather(*(run(om) for om in workers))
    record = await workers[0].aget_record("t1", resource_id="alice")
    assert record.generation_count >= 2, "the run reflected more than once"
    turns = Counter(t for text in model.observer_inputs for t in set(_TURN.findall(text)))
    assert turns and max(turns.values()) == 1, f"a message went to the Observer twice: {turns}"
    notes = Counter(n for text in model.reflector_inputs for n in set(_NOTE.findall(text)))
    assert notes and max(notes.values()) == 1, f"a note went to the Reflector twice: {notes}"
    for om in workers:
        await om.aclose()
