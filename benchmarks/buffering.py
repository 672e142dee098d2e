"""How long each agent step waits for memory when the Observer / summarizer is slow (issue 4).

A 200-turn conversation; the Observer (and the summarizer) take ``--observer-delay`` seconds per
call (default 2 s). Each turn: the user's message arrives, memory runs (timed: this is the wait),
then the agent's own model "runs" for ``--agent-delay`` seconds (an ``asyncio.sleep``, default
0.3 s) and its reply is appended. Background buffering shares the event loop with the agent, so
the simulated model time is when background observations make progress, as in a real agent,
where the model call and tool calls leave the loop idle far longer than 0.3 s.

Strategies, measured one after another in the same run:
* ``om-buffered``: ObservationalMemory with async buffering (default ``buffer_tokens=0.2``);
* ``om-sync``: the same with ``buffer_tokens=False`` (every observation blocks the step);
* ``summarization``: LangChain's ``SummarizationMiddleware`` (trigger and keep scaled the same).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import Timer, ratio, summary, table, turn_messages, write_result
from .strategies import summarization_middleware, summarization_step


async def _run_om(buffered: bool, args: argparse.Namespace, db: Path) -> dict[str, Any]:
    model = ScriptedObserverModel(delay_s=args.observer_delay)
    observation: dict[str, Any] = {"message_tokens": args.message_tokens}
    if not buffered:
        observation["buffer_tokens"] = False
    om = ObservationalMemory(SQLiteStore(str(db)), model=model, observation=observation,
                             reflection={"observation_tokens": args.observation_tokens})
    waits: list[float] = []
    messages: list[BaseMessage] = []
    activations = observations = 0
    try:
        for turn in range(args.turns):
            human, ai = turn_messages(turn)
            messages.append(human)
            with Timer() as timer:
                context = await om.aprocess("bench-thread", messages)
            waits.append(timer.ms)
            for event in context.events:
                activations += event.type == "data-om-activation"
                observations += event.type == "data-om-observation-end"
            await asyncio.sleep(args.agent_delay)  # the agent's own model call: the loop is free meanwhile
            messages.append(ai)
        await om.await_background()
        record = await om.aget_record("bench-thread")
    finally:
        await om.aclose(cancel=True)
        await om.store.aclose()
    return {"waits_ms": waits, "observer_calls": len(model.calls), "activations": activations,
            "sync_observations": observations, "observation_tokens": record.observation_tokens}


async def _run_summarization(args: argparse.Namespace) -> dict[str, Any]:
    middleware, model = summarization_middleware(
        trigger_tokens=args.message_tokens, keep_tokens=int(args.message_tokens * 0.2), delay_s=args.observer_delay)
    waits: list[float] = []
    messages: list[BaseMessage] = []
    summaries = 0
    for turn in range(args.turns):
        human, ai = turn_messages(turn)
        messages.append(human)
        with Timer() as timer:
            messages, did = await summarization_step(middleware, messages)
        waits.append(timer.ms)
        summaries += did
        await asyncio.sleep(args.agent_delay)
        messages.append(ai)
    return {"waits_ms": waits, "summarizer_calls": len(model.calls), "summaries": summaries}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run the three strategies one after another and return the JSON payload."""
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="om-bench-") as tmp:
        results["om-buffered"] = await _run_om(True, args, Path(tmp) / "buffered.db")
        results["om-sync"] = await _run_om(False, args, Path(tmp) / "sync.db")
    results["summarization"] = await _run_summarization(args)
    for data in results.values():
        waits = data.pop("waits_ms")
        data["wait_ms"] = summary(waits)
        data["steps_waiting_over_100ms"] = sum(1 for w in waits if w > 100)
        data["total_wait_s"] = sum(waits) / 1000
    sync_p95 = results["om-sync"]["wait_ms"]["p95"]
    ratios = {
        "buffered_p95_over_sync_p95": ratio(results["om-buffered"]["wait_ms"]["p95"], sync_p95),
        "buffered_p95_over_summarization_p95": ratio(results["om-buffered"]["wait_ms"]["p95"],
                                                     results["summarization"]["wait_ms"]["p95"]),
        "buffered_total_over_sync_total": ratio(results["om-buffered"]["total_wait_s"],
                                                results["om-sync"]["total_wait_s"]),
    }
    return {
        "params": {"turns": args.turns, "observer_delay_s": args.observer_delay, "agent_delay_s": args.agent_delay,
                   "message_tokens": args.message_tokens, "observation_tokens": args.observation_tokens,
                   "store": "sqlite (temp file)"},
        "strategies": results,
        "ratios": ratios,
        "target": {"buffered_p95_over_sync_p95_below": 0.05,
                   "met": (ratios["buffered_p95_over_sync_p95"] or 0.0) < 0.05},
    }


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, data in payload["strategies"].items():
        w = data["wait_ms"]
        calls = data.get("observer_calls", data.get("summarizer_calls"))
        rows.append([name, w["p50"], w["p95"], w["max"], data["total_wait_s"], data["steps_waiting_over_100ms"], calls])
    p = payload["params"]
    out = table(
        f"Buffering: wait for memory per agent step (ms), {p['turns']} turns, model calls of "
        f"{p['observer_delay_s']} s, agent model {p['agent_delay_s']} s",
        ["strategy", "p50", "p95", "max", "total s", "steps>100ms", "model calls"], rows)
    r = payload["ratios"]
    out += (f"\n  buffered p95 / sync p95 = {r['buffered_p95_over_sync_p95']:.4f}"
            f" (target < 0.05: {'met' if payload['target']['met'] else 'NOT met'})"
            f"; buffered p95 / summarization p95 = {r['buffered_p95_over_summarization_p95']:.4f}"
            f"; total wait buffered / sync = {r['buffered_total_over_sync_total']:.4f}")
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--turns", type=int, default=60 if quick else 200)
    parser.add_argument("--observer-delay", type=float, default=0.5 if quick else 2.0,
                        help="seconds per Observer/summarizer call (default 2.0; quick 0.5)")
    parser.add_argument("--agent-delay", type=float, default=0.1 if quick else 0.3,
                        help="simulated agent model call per step, seconds (the loop is idle meanwhile)")
    parser.add_argument("--message-tokens", type=int, default=2000)
    parser.add_argument("--observation-tokens", type=int, default=4000)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.buffering", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    known, _ = parser.parse_known_args(argv)
    add_arguments(parser, known.quick)
    args = parser.parse_args(argv)
    payload = asyncio.run(run(args))
    print(report(payload))
    print(f"  -> {write_result('buffering', payload)}")
    return payload


if __name__ == "__main__":
    main()
