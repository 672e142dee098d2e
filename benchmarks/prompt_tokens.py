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

from .common import fmt, ratio, section_main, table
from .history import SUMMARY_CONFIGS, StepStats, bench_counter, run_full, run_om, run_summarization, tempdir
from .progress import track


async def collect(sizes: list[int], steps: int) -> list[StepStats]:
    counter = bench_counter()
    out: list[StepStats] = []
    plan = [(name, size) for size in sizes for name in ["om-memory", *SUMMARY_CONFIGS, "full-history"]]
    with tempdir() as tmp:
        for name, size in track(plan, lambda case: f"{case[0]} at {case[1]:,} messages"):
            if name == "om-memory":
                out.append(await run_om(size, steps, "memory", counter, tmp))
            elif name in SUMMARY_CONFIGS:
                out.append(await run_summarization(name, size, steps, counter))
            else:
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
    return {"params": {"sizes": sizes, "steps": steps, "counter": bench_counter().source}, "strategies": rows,
            "ratios": ratios_from(rows, sizes)}


def ratios_from(rows: dict[str, dict[str, Any]], sizes: list[int]) -> dict[str, Any]:
    """OM's prompt tokens (mean and max) over each other strategy's, and every prefix share, per size."""
    ratios: dict[str, Any] = {}
    om = rows.get("om", {})
    others = [name for name in rows if name != "om"]
    for size in map(str, sizes):
        if size not in om:
            continue
        for name in others:
            if size not in rows[name]:
                continue
            ratios[f"om / {name} tokens mean at {size}"] = ratio(om[size]["prompt_tokens_mean"],
                                                                 rows[name][size]["prompt_tokens_mean"])
            ratios[f"om / {name} tokens max at {size}"] = ratio(om[size]["prompt_tokens_max"],
                                                                rows[name][size]["prompt_tokens_max"])
        ratios[f"prefix share mean at {size}"] = {name: rows[name][size]["prefix_share_mean"]
                                                  for name in rows if size in rows[name]}
    return ratios


_REWRITES = ("data-om-activation", "data-om-observation-end", "summaries")


def context_changes(events: dict[str, int]) -> int:
    """How many steps rewrote the head of the prompt (each one breaks the prompt-cache prefix)."""
    return sum(events.get(name, 0) for name in _REWRITES)


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, per_size in payload["strategies"].items():
        for size, d in per_size.items():
            rows.append([name, int(size), d["prompt_tokens_mean"], d["prompt_tokens_max"], 100 * d["prefix_share_mean"],
                         100 * d["prefix_share_min"], context_changes(d["events"])])
    out = table(f"Prompt tokens per step ({payload['params']['steps']} steps, counter {payload['params']['counter']})",
                ["strategy", "history", "tokens mean", "tokens max", "prefix % mean", "prefix % min",
                 "context rewrites"], rows)
    out += ("\n  context rewrites: OM activations, observations and reflections, or summaries, during the measured"
            " steps; with none, the prefix share is the steady state between them")
    out += "\n  (full history above ~200k tokens would not fit a model's context; shown for scale)"
    ratios = payload.get("ratios") or {}
    names = [n for n in payload["strategies"] if n != "om"]
    sizes = [str(s) for s in payload["params"]["sizes"]]
    if "om" in payload["strategies"] and names:
        ratio_rows = []
        for size in sizes:
            row: list[Any] = [int(size)]
            for name in names:
                mean = ratios.get(f"om / {name} tokens mean at {size}")
                top = ratios.get(f"om / {name} tokens max at {size}")
                row.append(f"{fmt(mean, 3)} / {fmt(top, 3)}")
            ratio_rows.append(row)
        out += "\n\n" + table("OM prompt tokens / other strategy's (mean / max)", ["history", *names], ratio_rows)
        share_rows = []
        for size in sizes:
            shares = ratios.get(f"prefix share mean at {size}", {})
            share_rows.append([int(size), *(f"{100 * shares[n]:.1f}" if n in shares else "n/a"
                                            for n in ["om", *names])])
        out += "\n\n" + table("Prefix share of the prompt, mean % (what a prompt cache can reuse)",
                                ["history", "om", *names], share_rows)
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000] if quick else [1000, 10_000, 50_000])
    parser.add_argument("--steps", type=int, default=None, help="steps per case (default 30, as step_cost; --full 50)")
    parser.add_argument("--full", action="store_true", help="50 steps per case")
    parser.set_defaults(step_cost_quick=quick)


def run(args: argparse.Namespace, stats: list[StepStats] | None = None) -> dict[str, Any]:
    """Report from ``stats`` already collected by step_cost (same run), or collect them now."""
    from .step_cost import resolve_steps

    resolve_steps(args)
    if stats is None:
        stats = asyncio.run(collect(args.sizes, args.steps))
    return payload_from(stats, args.sizes, args.steps)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("prompt_tokens", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
