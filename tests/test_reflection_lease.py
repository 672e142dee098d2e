"""Issue 30, item 5: concurrent workers on one thread never run two reflections of the same log.

Observation was leased (``observe``), reflection was not: every worker that crossed
``reflection.observation_tokens`` on the same step paid the Reflector for the same log, and the
record's compare-and-swap threw all but one result away. Reflection, synchronous and buffered,
now takes the record's ``reflect`` lease. Integrity, not timing: every Reflector call of a run
gets a log no other call got. (Spend at 1 vs 8 worker processes: ``benchmarks.reflector_spend``.)
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import is_reflector_prompt
from pydantic import Field

from langchain_om import ObservationalMemory
from langchain_om.store import OMStore


def observation(call: int) -> str:
    """Each Observer call writes lines no other call writes, so a log names its groups."""
    lines = "".join(f"* 🟡 (09:{i:02d}) User listed item {i} of inventory {call} with its count.\n" for i in range(8))
    return f"<observations>\nDate: 2026-11-30 (Monday)\n{lines}</observations>"


def reflection(call: int) -> str:
    return f"<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 User keeps inventory {call}.\n</observations>"


class SlowModel(FakeListChatModel):
    """Observer and Reflector in one: a slow Reflector, so workers overlap while it runs; every
    Reflector call's log (its last message) is kept."""

    responses: list[str] = Field(default_factory=lambda: ["unused"])
    logs: list[str] = Field(default_factory=list)
    calls: int = 0

    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.15 if is_reflector_prompt(messages) else 0.02)
        return await super()._agenerate(messages, *args, **kwargs)

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.calls += 1
        if is_reflector_prompt(messages):
            self.logs.append(str(messages[-1].content))
            return reflection(self.calls)
        return observation(self.calls)


def history(turns: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for turn in range(turns):
        words = " ".join(f"w{turn}_{i}" for i in range(25))
        out += [HumanMessage(f"turn {turn}: {words} 在庫 {turn}", id=f"h{turn}"),
                AIMessage(f"reply {turn}: {words}", id=f"a{turn}")]
    return out


@pytest.mark.parametrize("buffered", [False, True], ids=["sync", "buffered"])
async def test_concurrent_workers_never_reflect_the_same_log_twice(store: OMStore, buffered: bool) -> None:
    model = SlowModel()
    workers = [ObservationalMemory(store, model=model, token_counter="estimator",
                                   observation={"message_tokens": 300, "buffer_tokens": 100 if buffered else False},
                                   reflection={"observation_tokens": 400})
               for _ in range(4)]
    full = history(10)

    async def run(om: ObservationalMemory) -> None:
        for end in range(2, len(full) + 1, 2):
            await om.aprocess("t1", full[:end], resource_id="alice")
        await om.await_background()

    await asyncio.gather(*(run(om) for om in workers))
    record = await workers[0].aget_record("t1", resource_id="alice")
    assert record.generation_count >= 2, "the run reflected more than once"
    twice = {log[-120:]: n for log, n in Counter(model.logs).items() if n > 1}
    assert not twice, f"{len(model.logs)} Reflector calls; logs reflected more than once: {twice}"
    stored = await store.aget_messages("alice", "t1")
    assert [m.id for m in stored] == [m.id for m in full], "no message lost or duplicated"
    for om in workers:
        await om.aclose()


def test_the_reflector_spend_benchmark_runs(tmp_path: Any) -> None:
    from benchmarks.reflector_spend import measure

    row = measure(f"sqlite:{tmp_path / 'spend.db'}", workers=2, turns=10, delay=0.0, mode="sync")
    assert row["reflector_calls"] >= 1 and row["reflector_input_tokens"] > 0
    assert row["observer_calls"] >= row["reflector_calls"]
    assert row["workers"] == 2 and row["mode"] == "sync"
