"""Tokens sent to the agent's model per step, and how much of each prompt a provider cache can reuse.

For every measured step the prompt is the message list the agent's model receives: OM's context
(one system message with the observation log, then the unobserved messages), SummarizationMiddleware's
state (summary message + kept + new messages), or the full history. Tokens are counted with OM's
default counter (exact o200k_base offline). "Prefix share" is the unchanged prefix of the previous
step's prompt (whole identical messages plus the common start of the first changed one, serialized
as role + text + tool calls) in tokens, divided by the prompt's tokens: what a prompt cache can reuse.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from .common import table, write_result
from .history import SUMMARY_CONFIGS, StepStats, bench_counter, run_full, run_om, run_summarization, tempdir


async def collect(sizes: list[int], steps: int) -> list[StepStats]:
    counter = bench_counter()
    out: list[StepStats] = []
    with tempdir() as tmp:
        for size in sizes:
            out.append(await run_om(size, steps, "memory", counter, tmp))
            for name in SUMMARY_CONFIGS:
                out.append(await run_summarization(name, size, steps, counter))
            out.append(await run_full(size, steps, counter))
    return out


def payload_from(stats: list[StepStats], sizes: list[int], steps: int) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for s in stats:
        if not s.prompt_tokens:
            continue
        name = "om" if s.strategy.startswith("om-") else s.strategy
        if name in rows and str(s.history) in rows[name]:
            continue  # the same prompts measured with another store
        rows.setdefault(name, {})[str(s.history)] = {
            "prompt_tokens_mean": statistics.fmean(s.prompt_tokens), "prompt_tokens_max": max(s.prompt_tokens),
            "prefix_share_mean": statistics.fmean(s.prefix_share), "prefix_share_min": min(s.prefix_share),
            "events": s.events,
        }
    return {"params": {"sizes": sizes, "steps": steps, "counter": bench_counter().source}, "strategies": rows}


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, per_size in payload["strategies"].items():
        for size, d in per_size.items():
            rows.append([name, int(size), d["prompt_tokens_mean"], d["prompt_tokens_max"], 100 * d["prefix_share_mean"],
                         100 * d["prefix_share_min"]])
    out = table(f"Prompt tokens per step ({payload['params']['steps']} steps, counter {payload['params']['counter']})",
                ["strategy", "history", "tokens mean", "tokens max", "prefix % mean", "prefix % min"], rows)
    out += "\n  (full history above ~200k tokens would not fit a model's context; shown for scale)"
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000] if quick else [1000, 10_000, 50_000])
    parser.add_argument("--steps", type=int, default=8 if quick else 50)


def run(args: argparse.Namespace, stats: list[StepStats] | None = None) -> dict[str, Any]:
    """Report from ``stats`` already collected by step_cost (same run), or collect them now."""
    if stats is None:
        stats = asyncio.run(collect(args.sizes, args.steps))
    return payload_from(stats, args.sizes, args.steps)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.prompt_tokens", description=__doc__)
    parser.add_argument("--quick", action="store_true")
    known, _ = parser.parse_known_args(argv)
    add_arguments(parser, known.quick)
    payload = run(parser.parse_args(argv))
    print(report(payload))
    print(f"  -> {write_result('prompt_tokens', payload)}")
    return payload


if __name__ == "__main__":
    main()
