"""A whole ``create_agent`` step with a checkpointer, everything but model calls (issue 7).

``step_cost`` times the memory hook alone. Here each step is ``agent.ainvoke`` of one user
message through a real LangChain v1 agent with a checkpointer (InMemorySaver, or
AsyncSqliteSaver on a temp file), minus the time spent inside model calls (every model is
scripted and clocked): so the middleware, LangGraph's reducer and the checkpoint writes are
all counted, as a user pays them. Strategies: OM's middleware (observed messages leave the
state: ``remove_observed``), the same keeping only the current turn in state
(``keep_in_state="turn"``) or the whole conversation,
SummarizationMiddleware at two triggers, and no memory at all. Also, once per checkpointer,
the floor: the same agent with no memory and a 2-message history, LangGraph's own cost of a
step, which no memory strategy can go below; the verdict says how low a ratio it allows.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from typing import Any, cast

from langchain.agents import create_agent
from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedAgentModel, ScriptedChatModel, ScriptedObserverModel

from .common import conversation, ratio, section_main, summary, table, turn_messages
from .history import (
    OM_MESSAGE_TOKENS,
    OM_OBSERVATION_TOKENS,
    SUMMARY_CONFIGS,
    THREAD,
    bench_counter,
    preload_om,
    summarized_history,
    tempdir,
)
from .progress import track
from .strategies import scripted_summary

TARGET = 0.1
STRATEGIES = ("om", "om-turn-state", "om-keep-state", *SUMMARY_CONFIGS, "full-history")
OM_VARIANTS = ("om", "om-turn-state")  # the ones with a bounded state, compared with the rest
FLOOR = "langgraph-floor"  # no memory, a 2-message history: LangGraph's own cost of a step
FLOOR_HISTORY = 2
HEAVY = ("om-keep-state", "summarization-800k", "full-history")
"""The strategies whose state keeps the whole history: at 10k messages each of their steps costs
0.6-2 s (checkpointing 10k messages), so they take ``--heavy-steps`` steps there, not 20 (their
ratios to OM are 15-30x from the 0.1 line; 20 of them were two thirds of the section's time)."""
HEAVY_FROM = 5_000


class ModelClock:
    """Milliseconds spent inside model calls since the last reset."""

    def __init__(self) -> None:
        self.ms = 0.0


class _Clocked:
    """Mixin for the scripted models: time each call, keep no reference to its messages."""

    clock: Any = None

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                         run_manager: Any = None, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await super()._agenerate(messages, stop, run_manager, **kwargs)  # type: ignore[misc]
        finally:
            if self.clock is not None:
                self.clock.ms += (time.perf_counter() - started) * 1000

    def _record(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> int:
        return int(super()._record([], kwargs))  # type: ignore[misc]


class ClockedAgentModel(_Clocked, ScriptedAgentModel):
    pass


class ClockedChatModel(_Clocked, ScriptedChatModel):
    pass


class ClockedObserverModel(_Clocked, ScriptedObserverModel):
    pass


def keep_latest_checkpoint(saver: InMemorySaver) -> None:
    """Drop every checkpoint but each thread's latest, with the blobs and writes only they used.

    InMemorySaver keeps every step's checkpoint, and each holds the whole ``messages`` channel
    serialized: at 50k messages of state that is tens of MB per step, and the section once grew
    to 2.2 GB. A step reads only the latest checkpoint (``get_tuple`` without an id), so dropping
    the others between timed steps bounds memory without changing what a step does.
    """
    for thread_id, namespaces in saver.storage.items():
        for namespace, checkpoints in namespaces.items():
            if len(checkpoints) <= 1:
                continue
            latest = max(checkpoints)
            versions = saver.serde.loads_typed(checkpoints[latest][0])["channel_versions"]
            for checkpoint_id in [c for c in checkpoints if c != latest]:
                del checkpoints[checkpoint_id]
            for write in [k for k in saver.writes if k[:2] == (thread_id, namespace) and k[2] != latest]:
                del saver.writes[write]
            for blob in [k for k in saver.blobs if k[:2] == (thread_id, namespace) and versions.get(k[2]) != k[3]]:
                del saver.blobs[blob]


def _disk_bytes(directory: str) -> int:
    return sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))


async def run_case(strategy: str, size: int, saver_kind: str, steps: int, tmp: str) -> dict[str, Any]:
    """``steps`` timed agent steps of one strategy at a history of ``size`` messages."""
    case_dir = os.path.join(tmp, f"{strategy}-{size}-{saver_kind}")
    os.makedirs(case_dir)
    clock = ModelClock()
    counter = bench_counter()
    history = conversation(size)
    middleware: list[Any] = []
    om: ObservationalMemory | None = None
    store: OMStore | None = None
    initial: list[BaseMessage] = history
    if strategy.startswith("om"):
        store = InMemoryStore() if saver_kind == "memory" else SQLiteStore(os.path.join(case_dir, "om.db"))
        await preload_om(store, history, counter, unobserved_tokens=int(OM_MESSAGE_TOKENS * 0.6),
                         observation_tokens=OM_OBSERVATION_TOKENS // 2)
        om = ObservationalMemory(store, model=ClockedObserverModel(clock=clock),
                                 observation={"message_tokens": OM_MESSAGE_TOKENS},
                                 reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)
        middleware = [ObservationalMemoryMiddleware(om, remove_observed=strategy != "om-keep-state",
                                                    keep_in_state="turn" if strategy == "om-turn-state"
                                                    else "unobserved")]
        if strategy == "om-turn-state":  # the state as OM would have left it: no earlier turn
            initial = []
        elif strategy == "om":  # the state as OM would have left it: the unobserved tail
            record = await store.aget_record(implicit_resource(THREAD), THREAD)
            after = record.last_observed_seq.get(THREAD, 0) if record else 0
            tail = {row.id for row in await store.aget_messages(implicit_resource(THREAD), THREAD, after_seq=after)}
            initial = [m for m in history if m.id in tail]
    elif strategy in SUMMARY_CONFIGS:
        trigger, keep = SUMMARY_CONFIGS[strategy]
        summarizer = SummarizationMiddleware(model=ClockedChatModel(clock=clock, responses=[scripted_summary]),
                                             trigger=("tokens", trigger), keep=("tokens", keep))
        middleware = [summarizer]
        initial = await summarized_history(summarizer, size, trigger)
    saver_cm = AsyncSqliteSaver.from_conn_string(os.path.join(case_dir, "checkpoints.db")) \
        if saver_kind == "sqlite" else None
    saver = await saver_cm.__aenter__() if saver_cm is not None else InMemorySaver()
    step_ms: list[float] = []
    background_ms: list[float] = []
    try:
        agent = create_agent(ClockedAgentModel(clock=clock), [], middleware=middleware, checkpointer=saver)
        config = cast(RunnableConfig, {"configurable": {"thread_id": THREAD}})
        started = time.perf_counter()
        await agent.ainvoke({"messages": [*initial, turn_messages(0)[0]]}, config)
        cold_ms = (time.perf_counter() - started) * 1000
        if om is not None:
            await om.await_background()
        bytes_before = _disk_bytes(case_dir)
        for turn in range(1, steps + 1):
            clock.ms = 0.0
            started = time.perf_counter()
            await agent.ainvoke({"messages": [turn_messages(turn)[0]]}, config)
            step_ms.append((time.perf_counter() - started) * 1000 - clock.ms)
            if om is not None:
                started = time.perf_counter()
                await om.await_background()
                background_ms.append((time.perf_counter() - started) * 1000)
            if isinstance(saver, InMemorySaver):
                keep_latest_checkpoint(saver)
        written = (_disk_bytes(case_dir) - bytes_before) / steps if saver_kind == "sqlite" else None
        state = (await agent.aget_state(config)).values["messages"]
    finally:
        if saver_cm is not None:
            await saver_cm.__aexit__(None, None, None)
        if om is not None:
            await om.aclose(cancel=True)
        if store is not None:
            await store.aclose()
        shutil.rmtree(case_dir, ignore_errors=True)  # a 10k full-history checkpoint file is ~1 GB
    return {"strategy": strategy, "saver": saver_kind, "history": size, "step_ms": summary(step_ms),
            "background_ms": summary(background_ms) if background_ms else None, "cold_ms": cold_ms,
            "state_messages": len(state), "disk_bytes_per_step": written}


def steps_for(strategy: str, size: int, steps: int, heavy_steps: int) -> int:
    """``steps``, or ``heavy_steps`` for a strategy of ``HEAVY`` at ``HEAVY_FROM`` messages or more."""
    return min(steps, heavy_steps) if strategy in HEAVY and size >= HEAVY_FROM else steps


async def collect(sizes: list[int], steps: int, savers: list[str], strategies: list[str],
                  heavy_steps: int | None = None) -> list[dict[str, Any]]:
    plan = [(strategy, size, saver) for saver in savers
            for strategy, size in [(FLOOR, FLOOR_HISTORY), *((s, n) for n in sizes for s in strategies)]]
    out = []
    with tempdir() as tmp:
        for strategy, size, saver in track(plan, lambda case: f"{case[0]} at {case[1]:,} messages, {case[2]} saver"):
            n = steps if heavy_steps is None else steps_for(strategy, size, steps, heavy_steps)
            out.append(await run_case(strategy, size, saver, n, tmp))
    return out


def payload_from(cases: list[dict[str, Any]], sizes: list[int], steps: int) -> dict[str, Any]:
    mid = 10_000 if 10_000 in sizes else sizes[len(sizes) // 2]
    by = {(c["strategy"], c["saver"], c["history"]): c for c in cases}
    ratios: dict[str, float | None] = {}
    comparisons = []
    for saver in sorted({c["saver"] for c in cases}):
        floor = by.get((FLOOR, saver, FLOOR_HISTORY))
        for variant in OM_VARIANTS:
            om = by.get((variant, saver, mid))
            if om is None:
                continue
            first, last = by.get((variant, saver, sizes[0])), by.get((variant, saver, sizes[-1]))
            if first and last:
                ratios[f"{variant} ({saver}): p50 at {sizes[-1]} / p50 at {sizes[0]} (flat = 1)"] = ratio(
                    last["step_ms"]["p50"], first["step_ms"]["p50"])
            for other in STRATEGIES:
                rival = by.get((other, saver, mid))
                if rival is None or other in OM_VARIANTS:
                    continue
                # verdicts on medians: one collector pause moves a mean of a few dozen steps
                value = ratio(om["step_ms"]["p50"], rival["step_ms"]["p50"])
                ratios[f"{variant} / {other} ({saver}) at {mid}, p50"] = value
                ratios[f"{variant} / {other} ({saver}) at {mid}, mean"] = ratio(om["step_ms"]["mean"],
                                                                                rival["step_ms"]["mean"])
                if other in SUMMARY_CONFIGS:
                    floor_ms = floor["step_ms"]["p50"] if floor else None
                    comparisons.append({"om": variant, "saver": saver, "summarization": other, "ratio": value,
                                        "om_ms": om["step_ms"]["p50"], "summarization_ms": rival["step_ms"]["p50"],
                                        "floor_ms": floor_ms,
                                        "lowest_possible_ratio": ratio(floor_ms, rival["step_ms"]["p50"])
                                        if floor_ms is not None else None,
                                        "met": value is not None and value <= TARGET})
    return {"params": {"sizes": sizes, "steps": steps}, "cases": cases, "ratios": ratios,
            "target": {"om_over_summarization_at_10k_at_most": TARGET, "history": mid, "comparisons": comparisons,
                       "met_all": bool(comparisons) and all(c["met"] for c in comparisons),
                       "met_any": any(c["met"] for c in comparisons)}}


def report(payload: dict[str, Any]) -> str:
    rows = [[c["strategy"], c["saver"], c["history"], int(c["step_ms"]["n"]), c["step_ms"]["mean"],
             c["step_ms"]["p50"], c["step_ms"]["p95"], c["background_ms"]["mean"] if c["background_ms"] else None,
             c["cold_ms"], c["state_messages"], c["disk_bytes_per_step"]] for c in payload["cases"]]
    heavy = payload["params"].get("heavy_steps")
    out = table(f"Agent step: create_agent + checkpointer, ms per step minus model time, "
                f"{payload['params']['steps']} steps"
                + (f" ({heavy} for {', '.join(HEAVY)} at {HEAVY_FROM:,}+ messages)" if heavy else ""),
                ["strategy", "saver", "history", "n", "mean", "p50", "p95", "background", "cold", "state msgs",
                 "disk B/step"],
                rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.3f}" if value is not None else f"\n  {key} = n/a"
    target = payload["target"]
    for c in target["comparisons"]:
        verdict = "met" if c["met"] else "MISSED"
        out += (f"\n  target (p50) {c['om']} <= {TARGET:g} x {c['summarization']} ({c['saver']}): "
                f"{c['om_ms']:.2f} ms vs {c['summarization_ms']:.2f} ms = {c['ratio']:.3f} -> {verdict}")
        lowest = c.get("lowest_possible_ratio")
        if lowest is not None:
            out += (f"; LangGraph's own step ({FLOOR}, {c['floor_ms']:.2f} ms) alone is {lowest:.3f} of it"
                    + (", so no memory strategy can meet it here" if lowest > TARGET else ""))
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    # The verdicts are taken at 10k; 50k (add it with --agent-sizes) took most of the section's
    # minutes: every step of the strategies that keep the whole history re-serializes 50k messages.
    parser.add_argument("--agent-sizes", dest="agent_sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000])
    parser.add_argument("--agent-steps", dest="agent_steps", type=int, default=3 if quick else 20)
    parser.add_argument("--heavy-steps", dest="heavy_steps", type=int, default=3 if quick else 8,
                        help=f"steps of {', '.join(HEAVY)} at {HEAVY_FROM:,}+ messages (--full: --agent-steps)")
    parser.add_argument("--full", action="store_true", help="every strategy takes --agent-steps steps")
    parser.add_argument("--savers", type=lambda v: v.split(","), default=["sqlite", "memory"])
    parser.add_argument("--strategies", type=lambda v: v.split(","), default=list(STRATEGIES))


def run(args: argparse.Namespace) -> dict[str, Any]:
    unknown = set(args.strategies) - set(STRATEGIES)
    if unknown:
        raise SystemExit(f"--strategies: unknown {sorted(unknown)}; choose from {', '.join(STRATEGIES)}")
    heavy = None if getattr(args, "full", False) else getattr(args, "heavy_steps", None)
    cases = asyncio.run(collect(args.agent_sizes, args.agent_steps, args.savers, args.strategies, heavy))
    payload = payload_from(cases, args.agent_sizes, args.agent_steps)
    payload["params"]["heavy_steps"] = heavy
    return payload


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("agent_step", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
