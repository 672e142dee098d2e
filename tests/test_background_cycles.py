"""Issue 16: background buffering cycles answer to no turn, and workers buffer each range once.

A buffering cycle runs after the step that started it has returned: the step's budget for OM's
model calls (``failure_policy.turn_budget``) must not cut it off. Workers sharing one thread
must not pay the Observer twice for one range, nor split the window into more, smaller chunks
than one worker would.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.messages import BaseMessage
from om_fakes import OBSERVATION, CallableFake, conversation

from langchain_om import ObservationalMemory
from langchain_om.buffering import BackgroundTasks
from langchain_om.failures import remaining_budget, turn_budget
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
