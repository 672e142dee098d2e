"""Issue 16: background buffering cycles answer to no turn, and workers buffer each range once.

A buffering cycle runs after the step that started it has returned: the step's budget for OM's
model calls (``failure_policy.turn_budget``) must not cut it off. Workers sharing one thread
must not pay the Observer twice for one range, nor split the window into more, smaller chunks
than one worker would.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from om_fakes import OBSERVATION, CallableFake, conversation, observer_or_reflector

from langchain_om import ObservationalMemory
from langchain_om.engine.tasks import BackgroundTasks
from langchain_om.model_calls.failures import remaining_budget, turn_budget
from langchain_om.store.base import OMStore
from langchain_om.store.memory import InMemoryStore


class Slow(CallableFake):
    """An Observer that takes ``delay`` seconds to answer."""

    delay: float = 0.3

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(self.delay)
        return await super()._agenerate(messages, *args, **kwargs)


async def test_a_background_task_does_not_inherit_the_starting_turns_budget() -> None:
    tasks = BackgroundTasks()
    seen: list[float | None] = []

    async def job() -> None:
        seen.append(remaining_budget())

    with turn_budget(0.05):
        assert remaining_budget() is not None
        tasks.start("k", "observe", job())
    await tasks.wait()
    assert seen == [None]


async def test_a_buffering_cycle_started_in_a_bounded_step_outlives_the_steps_budget() -> None:
    model = Slow(fn=lambda _m: OBSERVATION, delay=0.3)
    om = ObservationalMemory(
        InMemoryStore(), model=model, token_counter="estimator",
        observation={"message_tokens": 5000, "buffer_tokens": 200},
        reflection={"observation_tokens": 50_000},
    )
    with turn_budget(0.1):  # a caller bounding its whole step; the buffering Observer takes 0.3 s
        for history in conversation(4):
            await om.aprocess("t1", history)
    await om.await_background()
    assert model.prompts, "a buffering cycle called the Observer"
    status = await om.astatus("t1")
    assert status.observation_error is None
    record = await om.aget_record("t1")
    assert record.buffered_chunks, "the chunk was staged, not cut off by the step's 0.1 s budget"
    await om.aclose()


_SENT = re.compile(r"\b(Turn|Answer) (\d+):")


def sends(model: CallableFake) -> Counter[str]:
    """How many times each conversation message reached the Observer (read from its transcripts)."""
    sent: Counter[str] = Counter()
    for prompt in model.prompts:
        transcript = str(prompt[-1].content).split("<transcript>", 1)[-1]
        sent.update(f"{kind} {n}" for kind, n in _SENT.findall(transcript))
    return sent


def buffering_om(store: OMStore, model: Any) -> ObservationalMemory:
    return ObservationalMemory(
        store, model=model, token_counter="estimator",
        observation={"message_tokens": 300, "buffer_tokens": 100},
        reflection={"observation_tokens": 1_000_000},
    )


@pytest.mark.parametrize("store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
async def test_a_worker_stepping_faster_than_its_observer_sends_each_message_once(store: OMStore) -> None:
    """The window crosses ``block_after`` while the worker's own buffering cycle waits for the
    Observer: the synchronous observation takes that cycle's chunk instead of observing the same
    messages again (before: nearly every message was sent twice)."""
    model = Slow(fn=observer_or_reflector, delay=0.15)
    om = buffering_om(store, model)
    histories = list(conversation(14))
    for history in histories:
        await om.aprocess("t1", history)
    await om.await_background()
    sent = sends(model)
    assert sent, "the Observer was called"
    assert max(sent.values()) == 1, f"messages sent twice: {[m for m, n in sent.items() if n > 1]}"
    status = await om.astatus("t1")
    assert status.observation_error is None
    record = await om.aget_record("t1")
    assert record.groups, "buffered chunks were activated into the log"


@pytest.mark.parametrize("store_kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
                         indirect=True)
async def test_workers_stepping_one_thread_together_send_each_message_once(store: OMStore) -> None:
    """Three workers step the same conversation at once, each buffering from its own view of the
    window: every message reaches the Observer once, and the log holds each turn once."""
    model = Slow(fn=observer_or_reflector, delay=0.1)
    workers = [buffering_om(store, model) for _ in range(3)]
    histories = list(conversation(14))

    async def worker(om: ObservationalMemory, lag: float) -> None:
        await asyncio.sleep(lag)
        for history in histories:
            await om.aprocess("t1", history)
            await asyncio.sleep(0)

    await asyncio.gather(*(worker(om, 0.01 * i) for i, om in enumerate(workers)))
    for om in workers:
        await om.await_background()
    sent = sends(model)
    assert sent, "the Observer was called"
    assert max(sent.values()) == 1, f"messages sent twice: {[m for m, n in sent.items() if n > 1]}"
    record = await workers[0].aget_record("t1")
    assert len(record.groups) >= 1


async def test_a_step_waits_for_its_never_answering_cycle_only_within_its_budget_and_aclose_cancels_it() -> None:
    """The step that must observe waits for its own buffering cycle no longer than the turn's
    budget; the cycle's Observer never answers, and ``aclose(cancel=True)`` still ends it."""
    gate = asyncio.Event()

    class FirstNeverAnswers(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
            if not self.prompts:
                self.prompts.append(list(messages))
                await gate.wait()  # the buffering cycle's call: never answered
            return await super()._agenerate(messages, *args, **kwargs)

    model = FirstNeverAnswers(fn=observer_or_reflector)
    om = ObservationalMemory(
        InMemoryStore(), model=model, token_counter="estimator",
        observation={"message_tokens": 300, "buffer_tokens": 100},
        reflection={"observation_tokens": 1_000_000}, failure_policy={"turn_budget": "500ms"},
    )
    loop = asyncio.get_running_loop()
    slowest = 0.0
    for history in conversation(6):
        started = loop.time()
        await om.aprocess("t1", history)
        slowest = max(slowest, loop.time() - started)
    assert model.prompts, "the buffering cycle called the Observer"
    assert 0.4 <= slowest < 3.0, f"the step that had to observe waited {slowest:.1f} s (budget 0.5 s)"
    status = await om.astatus("t1")
    assert status.windows.buffered.observations.status == "running", "the cycle is still waiting"
    await asyncio.wait_for(om.aclose(cancel=True), 5.0)
