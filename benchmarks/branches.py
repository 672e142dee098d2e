"""Cost of checkpoint-aware memory (issue 21): a step that continues its branch, and a fork.

At 1k and 10k messages of history (OM's store preloaded as in ``step_cost``), each step adds a
user message and a reply. Timed per step: the plain engine step (``aprocess``, what the
integrations ran before issue 21) and the checkpoint-aware step the graph nodes and middleware
run now (``aprocess_at_checkpoint``: branch check, the step, the position written into state).
Then, from the checkpoint of a step in the middle, a run with new input forks: the fork step is
timed with what it copied (rows, snapshot size). Models are instant: every millisecond is bookkeeping.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import CONFIG_KEY_CHECKPOINTER

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.turn import aprocess_at_checkpoint
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import Timer, conversation, fmt, ratio, section_main, summary, table, turn_messages
from .history import OM_MESSAGE_TOKENS, OM_OBSERVATION_TOKENS, THREAD, _append, bench_counter, preload_om, tempdir
from .progress import track

# the thread's private resource, as preload_om writes it; and a checkpointer, as LangGraph hands every node
# one in a checkpointed run (without one the record snapshots would stay in the process: branches.aposition)
CONFIG: Any = {"configurable": {"thread_id": THREAD, CONFIG_KEY_CHECKPOINTER: InMemorySaver()}}


def _om(store: OMStore, counter: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": OM_MESSAGE_TOKENS},
                               reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)


def _store(kind: str, tmp: str, name: str) -> OMStore:
    return InMemoryStore() if kind == "memory" else SQLiteStore(os.path.join(tmp, f"{name}.db"))


async def _preloaded(kind: str, size: int, tmp: str, name: str, counter: Any) -> tuple[OMStore, list[BaseMessage]]:
    history = conversation(size)
    store = _store(kind, tmp, name)
    await preload_om(store, history, counter, unobserved_tokens=int(OM_MESSAGE_TOKENS * 0.6),
                     observation_tokens=OM_OBSERVATION_TOKENS // 2)
    return store, list(history)


async def plain_steps(kind: str, size: int, steps: int, tmp: str, counter: Any) -> list[float]:
    store, state = await _preloaded(kind, size, tmp, f"plain-{size}", counter)
    om = _om(store, counter)
    times: list[float] = []
    try:
        for turn in range(steps + 1):
            human, ai = turn_messages(turn)
            state = _append(state, human)
            with Timer() as timer:
                await om.aprocess(THREAD, state)
            await om.await_background()
            state = _append(state, ai)
            if turn:
                times.append(timer.ms)
    finally:
        await om.aclose(cancel=True)
        await store.aclose()
    return times


async def checkpoint_steps(kind: str, size: int, steps: int, forks: int, tmp: str, counter: Any) -> dict[str, Any]:
    store, state = await _preloaded(kind, size, tmp, f"cp-{size}", counter)
    om = _om(store, counter)
    times: list[float] = []
    checkpoints: list[tuple[list[BaseMessage], dict[str, Any]]] = []
    position: dict[str, Any] | None = None
    fork_ms: list[float] = []
    copied: list[int] = []
    snapshot_bytes = 0
    try:
        for turn in range(steps + 1):
            human, ai = turn_messages(turn)
            state = _append(state, human)
            with Timer() as timer:
                _, position, _, _ = await aprocess_at_checkpoint(om, {"om_position": position}, state, CONFIG)
            await om.await_background()
            state = _append(state, ai)
            checkpoints.append((list(state), position))
            if turn:
                times.append(timer.ms)
        past_state, past_position = checkpoints[len(checkpoints) // 2]
        value = await store.aget_value(implicit_resource(THREAD), "om-branch",
                                       f"record:{past_position['record']}:{past_position['version']}")
        snapshot_bytes = len(json.dumps(value, default=str)) if value is not None else 0
        for index in range(forks):
            fresh = _append(past_state, HumanMessage(f"Let us go another way ({index}).", id=f"fork-{index}"))
            with Timer() as timer:
                _, _, branch, _ = await aprocess_at_checkpoint(om, {"om_position": past_position}, fresh, CONFIG)
            await om.await_background()
            fork_ms.append(timer.ms)
            copied.append(await store.acount_messages(implicit_resource(THREAD), branch) - 1)  # minus the new one
    finally:
        await om.aclose(cancel=True)
        await store.aclose()
    return {"step_ms": times, "fork_ms": fork_ms, "rows_copied": copied, "snapshot_bytes": snapshot_bytes}


async def collect(sizes: list[int], steps: int, forks: int, stores: list[str]) -> dict[str, Any]:
    counter = bench_counter()
    rows: dict[str, dict[str, Any]] = {}
    with tempdir() as tmp:
        for kind, size in track([(k, n) for k in stores for n in sizes], lambda c: f"{c[0]} at {c[1]:,} messages"):
            plain = await plain_steps(kind, size, steps, tmp, counter)
            aware = await checkpoint_steps(kind, size, steps, forks, tmp, counter)
            rows.setdefault(kind, {})[str(size)] = {
                "plain_step_ms": summary(plain),
                "checkpoint_step_ms": summary(aware["step_ms"]),
                "fork_step_ms": summary(aware["fork_ms"]),
                "rows_copied_per_fork": max(aware["rows_copied"], default=0),
                "snapshot_bytes": aware["snapshot_bytes"],
            }
    ratios: dict[str, Any] = {}
    for kind, per in rows.items():
        first, last = str(sizes[0]), str(sizes[-1])
        # medians: a collector pause in a few dozen steps moves a mean, not a median
        ratios[f"{kind}: checkpoint step / plain step at {last} (p50)"] = ratio(
            per[last]["checkpoint_step_ms"]["p50"], per[last]["plain_step_ms"]["p50"])
        ratios[f"{kind}: checkpoint step at {last} / at {first} (p50, flat = 1)"] = ratio(
            per[last]["checkpoint_step_ms"]["p50"], per[first]["checkpoint_step_ms"]["p50"])
        ratios[f"{kind}: fork step at {last} / at {first} (p50, flat = 1)"] = ratio(
            per[last]["fork_step_ms"]["p50"], per[first]["fork_step_ms"]["p50"])
    return {"params": {"sizes": sizes, "steps": steps, "forks": forks, "stores": stores,
                       "om_message_tokens": OM_MESSAGE_TOKENS}, "stores": rows, "ratios": ratios}


def add_arguments(parser: argparse.ArgumentParser, quick: bool) -> None:
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")],
                        default=[200, 1000] if quick else [1000, 10000])
    parser.add_argument("--steps", type=int, default=6 if quick else 30)
    parser.add_argument("--forks", type=int, default=2 if quick else 5)
    parser.add_argument("--stores", type=lambda s: s.split(","), default=["memory", "sqlite"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(collect(args.sizes, args.steps, args.forks, args.stores))


def report(payload: dict[str, Any]) -> str:
    lines = []
    for kind, per in payload["stores"].items():
        lines.append(table(
            f"Checkpoint-aware memory, {kind} store (ms per step, p50 / p95)",
            ["history", "plain step", "checkpoint-aware step", "fork step", "rows copied", "snapshot KB"],
            [[int(size), f"{v['plain_step_ms']['p50']:.2f} / {v['plain_step_ms']['p95']:.2f}",
              f"{v['checkpoint_step_ms']['p50']:.2f} / {v['checkpoint_step_ms']['p95']:.2f}",
              f"{v['fork_step_ms']['p50']:.2f} / {v['fork_step_ms']['p95']:.2f}",
              v["rows_copied_per_fork"], round(v["snapshot_bytes"] / 1024, 1)] for size, v in per.items()]))
    lines.append("\n".join(f"  {k}: {fmt(v, 3)}" for k, v in payload["ratios"].items()))
    return "\n\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("branches", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
