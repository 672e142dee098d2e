"""Memory bookkeeping time per agent step at 1k / 10k / 50k messages of history (issue 7).

Models are instant, so the time of the memory hook is pure bookkeeping: ``aprocess`` for OM
(SQLite in a temp dir, and the in-memory store), ``abefore_model`` for SummarizationMiddleware
(two triggers: OM's whole context budget of 70k tokens, and 800k = 0.8 of a 1M-token window),
nothing for full history. Also timed apart: OM's background buffering (awaited after each step
so it never overlaps the next measurement) and LangGraph's ``add_messages`` reducer appending
the step's 2 messages to the agent state (OM leaves the state whole; summarization shrinks it).
The first OM step of a process loads the thread's known ids once; it is reported as "cold".
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from .common import ratio, summary, table, write_result
from .history import SUMMARY_CONFIGS, StepStats, bench_counter, run_full, run_om, run_summarization, tempdir


async def collect(sizes: list[int], steps: int, stores: list[str]) -> list[StepStats]:
    """Run every strategy at every history length (prompts are measured too, for prompt_tokens)."""
    counter = bench_counter()
    out: list[StepStats] = []
    with tempdir() as tmp:
        for size in sizes:
            for kind in stores:
                out.append(await run_om(size, steps, kind, counter, tmp))
            for name in SUMMARY_CONFIGS:
                out.append(await run_summarization(name, size, steps, counter))
            out.append(await run_full(size, steps, counter))
    return out


def payload_from(stats: list[StepStats], sizes: list[int], steps: int) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for s in stats:
        rows.setdefault(s.strategy, {})[str(s.history)] = {
            "memory_ms": summary(s.memory_ms), "background_ms": summary(s.background_ms) if s.background_ms else None,
            "reducer_ms": summary(s.reducer_ms), "cold_ms": s.cold_ms, "setup_s": s.setup_s,
            "state_messages": s.state_messages, "events": s.events,
        }
    mid = "10000" if 10_000 in sizes else str(sizes[len(sizes) // 2])
    ratios: dict[str, Any] = {}
    for om in [k for k in rows if k.startswith("om-")]:
        per_size = rows[om]
        first, last = str(sizes[0]), str(sizes[-1])
        ratios[f"{om}: mean at {last} / mean at {first} (flat = 1)"] = ratio(
            per_size[last]["memory_ms"]["mean"], per_size[first]["memory_ms"]["mean"])
        for name in SUMMARY_CONFIGS:
            ratios[f"{om} / {name} at {mid} (mean)"] = ratio(
                per_size[mid]["memory_ms"]["mean"], rows[name][mid]["memory_ms"]["mean"])
    target_key = f"om-sqlite / summarization-70k at {mid} (mean)"
    return {
        "params": {"sizes": sizes, "steps": steps, "om_message_tokens": 30_000, "om_observation_tokens": 40_000,
                   "summarization_configs": {k: {"trigger_tokens": v[0], "keep_tokens": v[1]}
                                             for k, v in SUMMARY_CONFIGS.items()}},
        "strategies": rows,
        "ratios": ratios,
        "target": {"om_over_summarization_at_10k_at_most": 0.1, "key": target_key,
                   "met": (ratios.get(target_key) or 1.0) <= 0.1},
    }


def report(payload: dict[str, Any]) -> str:
    sizes = payload["params"]["sizes"]
    rows = []
    for name, per_size in payload["strategies"].items():
        for size in sizes:
            d = per_size[str(size)]
            bg = d["background_ms"]["mean"] if d["background_ms"] else None
            rows.append([name, size, d["memory_ms"]["mean"], d["memory_ms"]["p95"], bg, d["reducer_ms"]["mean"],
                         d["cold_ms"], d["state_messages"]])
    out = table(f"Step cost: memory bookkeeping per agent step (ms), {payload['params']['steps']} steps "
                "of 2 new messages, instant models",
                ["strategy", "history", "mean", "p95", "background", "add_messages", "cold", "state msgs"], rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.3f}" if value is not None else f"\n  {key} = n/a"
    verdict = "met" if payload["target"]["met"] else "NOT met"
    out += f"\n  target (OM <= 1/10 of SummarizationMiddleware at 10k): {verdict}"
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000] if quick else [1000, 10_000, 50_000])
    parser.add_argument("--steps", type=int, default=8 if quick else 50)
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "memory"])


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[StepStats]]:
    stats = asyncio.run(collect(args.sizes, args.steps, args.stores))
    return payload_from(stats, args.sizes, args.steps), stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.step_cost", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    known, _ = parser.parse_known_args(argv)
    add_arguments(parser, known.quick)
    payload, _ = run(parser.parse_args(argv))
    print(report(payload))
    print(f"  -> {write_result('step_cost', payload)}")
    return payload


if __name__ == "__main__":
    main()
