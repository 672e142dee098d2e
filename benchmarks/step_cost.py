"""Memory bookkeeping time per agent step at 1k / 10k / 50k messages of history (issue 7).

Models are instant, so the time of the memory hook is pure bookkeeping: ``aprocess`` for OM
(SQLite in a temp dir, and the in-memory store), ``abefore_model`` for SummarizationMiddleware
(two triggers: OM's whole context budget of 70k tokens, and 800k = 0.8 of a 1M-token window),
nothing for full history. Only the memory call is in the timed region. Timed apart: OM's
background buffering (awaited after each step so it never overlaps the next measurement) and
LangGraph's ``add_messages`` reducer appending the step's 2 messages to the agent state (OM is
handed the whole state here, like ``remove_observed=False``; summarization shrinks it).

The plain steps cross no OM threshold, so OM's two rarer kinds of step have rows of their own:
"cold first step" (a fresh ``ObservationalMemory`` on the open store, its caches empty; median
of up to ``history.COLD_SAMPLES``) and "commit step" (a step that observes synchronously and commits,
marking messages observed; instant scripted Observer). Verdicts are taken on medians (p50).
"""

from __future__ import annotations

import argparse
import asyncio
import os
from statistics import median
from typing import Any

from .common import ratio, section_main, spread, summary, table, verdict_with_spread
from .history import SUMMARY_CONFIGS, StepStats, bench_counter, run_full, run_om, run_summarization, tempdir
from .progress import track

TARGET = 0.1  # issue 7: OM at most 1/10 of SummarizationMiddleware's per-step cost at 10k messages


def mid_size(sizes: list[int]) -> int:
    """The history the verdicts are taken at: 10k when measured, else the middle size."""
    return 10_000 if 10_000 in sizes else sizes[len(sizes) // 2]


async def collect(sizes: list[int], steps: int, stores: list[str],
                  repeats: int = 1) -> tuple[list[StepStats], list[list[StepStats]]]:
    """Run every strategy at every history length (prompts are measured too, for prompt_tokens);
    then ``repeats - 1`` more rounds of the compared strategies at the verdict's size alone, each
    round back to back in time, so each verdict's ratio comes with its run-to-run spread."""
    counter = bench_counter()
    out: list[StepStats] = []
    plan = [(name, size, 0) for size in sizes
            for name in [*(f"om-{k}" for k in stores), *SUMMARY_CONFIGS, "full-history"]]
    mid = mid_size(sizes)
    plan += [(name, mid, r) for r in range(1, repeats) for name in [*(f"om-{k}" for k in stores), *SUMMARY_CONFIGS]]
    rounds: list[list[StepStats]] = [[] for _ in range(repeats - 1)]
    with tempdir() as tmp:
        for name, size, round_ in track(plan, lambda case: f"{case[0]} at {case[1]:,} messages"
                                        + (f" (repeat {case[2]} for the verdicts' spread)" if case[2] else "")):
            if name.startswith("om-"):
                folder = os.path.join(tmp, f"round{round_}")  # each round on a fresh SQLite file
                os.makedirs(folder, exist_ok=True)
                stats = await run_om(size, steps, name[3:], counter, folder, prompts=not round_,
                                     rare_steps=not round_)
            elif name in SUMMARY_CONFIGS:
                stats = await run_summarization(name, size, steps, counter, prompts=not round_)
            else:
                stats = await run_full(size, steps, counter)
            (rounds[round_ - 1] if round_ else out).append(stats)
    return out, rounds


def payload_from(stats: list[StepStats], sizes: list[int], steps: int,
                 rounds: list[list[StepStats]] | None = None) -> dict[str, Any]:
    rows: dict[str, dict[str, Any]] = {}
    for s in stats:
        rows.setdefault(s.strategy, {})[str(s.history)] = {
            "memory_ms": summary(s.memory_ms), "background_ms": summary(s.background_ms) if s.background_ms else None,
            "reducer_ms": summary(s.reducer_ms), "cold_ms": summary(s.cold_samples_ms) if s.cold_samples_ms else None,
            "commit_ms": summary(s.commit_ms) if s.commit_ms else None, "setup_s": s.setup_s,
            "state_messages": s.state_messages, "events": s.events,
        }
    mid = str(mid_size(sizes))
    ratios: dict[str, Any] = {}
    for om in [k for k in rows if k.startswith("om-")]:
        per_size = rows[om]
        first, last = str(sizes[0]), str(sizes[-1])
        ratios[f"{om}: p50 at {last} / p50 at {first} (flat = 1)"] = ratio(
            per_size[last]["memory_ms"]["p50"], per_size[first]["memory_ms"]["p50"])
        for kind in ("cold_ms", "commit_ms"):
            if per_size[last][kind] and per_size[first][kind]:
                ratios[f"{om} {kind[:-3]} step: p50 at {last} / p50 at {first} (flat = 1)"] = ratio(
                    per_size[last][kind]["p50"], per_size[first][kind]["p50"])
        for name in SUMMARY_CONFIGS:
            ratios[f"{om} / {name} at {mid} (p50)"] = ratio(
                per_size[mid]["memory_ms"]["p50"], rows[name][mid]["memory_ms"]["p50"])
    persistence: dict[str, Any] = {}
    if "om-sqlite" in rows and "om-memory" in rows:
        for size in map(str, sizes):
            on_disk = rows["om-sqlite"][size]["memory_ms"]["p50"]
            in_memory = rows["om-memory"][size]["memory_ms"]["p50"]
            persistence[size] = {"sqlite_ms": on_disk, "memory_ms": in_memory,
                                 "sqlite_minus_memory_ms": on_disk - in_memory,
                                 "sqlite_over_memory": ratio(on_disk, in_memory)}
    comparisons = []
    repeated = [{s.strategy: median(s.memory_ms) for s in round_} for round_ in rounds or []]
    for om in [k for k in rows if k.startswith("om-")]:
        for name in SUMMARY_CONFIGS:
            first = ratios.get(f"{om} / {name} at {mid} (p50)")
            runs = [r for r in [first, *(ratio(p[om], p[name]) for p in repeated if om in p and name in p)]
                    if r is not None]
            value = spread(runs)["median"] if runs else None
            comparisons.append({"om": om, "summarization": name, "history": int(mid), "ratio": value,
                                "first_run_ratio": first, "runs": runs, "spread": spread(runs),
                                "verdict": verdict_with_spread(runs, TARGET),
                                "om_ms": rows[om][mid]["memory_ms"]["p50"],
                                "summarization_ms": rows[name][mid]["memory_ms"]["p50"],
                                "summarization_state_messages": rows[name][mid]["state_messages"],
                                "met": verdict_with_spread(runs, TARGET) == "met"})
    return {
        "params": {"sizes": sizes, "steps": steps, "repeats": 1 + len(rounds or []),
                   "om_message_tokens": 30_000, "om_observation_tokens": 40_000,
                   "summarization_configs": {k: {"trigger_tokens": v[0], "keep_tokens": v[1]}
                                             for k, v in SUMMARY_CONFIGS.items()}},
        "strategies": rows,
        "ratios": ratios,
        "persistence": persistence,
        "target": {"om_over_summarization_at_10k_at_most": TARGET, "history": int(mid), "comparisons": comparisons,
                   "met_all": bool(comparisons) and all(c["met"] for c in comparisons),
                   "met_any": any(c["met"] for c in comparisons)},
    }


_STATE_NOTE = {
    "summarization-70k": "its state shrinks to a summary plus recent messages",
    "summarization-800k": "its state still holds the whole history",
}


def verdict_lines(target: dict[str, Any]) -> list[str]:
    """One line per OM store x summarization config: the ratio (the median of the repeated runs,
    with their range), met, missed or within the spread, and by what factor."""
    limit = target["om_over_summarization_at_10k_at_most"]
    lines = [f"target: OM's median (p50) bookkeeping <= {limit:g} x SummarizationMiddleware's at "
             f"{target['history']:,} messages of history"]
    for c in target["comparisons"]:
        value = c["ratio"]
        head = (f"{c['om']} vs {c['summarization']} ({_STATE_NOTE.get(c['summarization'], '')}: "
                f"{c['summarization_state_messages']:,} msgs): {c['om_ms']:.2f} ms vs {c['summarization_ms']:.2f} ms")
        runs = c.get("runs") or []
        if len(runs) > 1:
            head += (f" (first run); ratio median of {len(runs)} runs {value:.3f}, "
                     f"min-max {c['spread']['min']:.3f}-{c['spread']['max']:.3f}")
            value = None if c.get("verdict") == "within spread" else value
        if c.get("verdict") == "within spread":
            lines.append(f"{head} -> within spread: the runs straddle {limit:g}, no verdict")
        elif value is None:
            lines.append(f"{head} -> n/a")
        elif c["met"]:
            lines.append(f"{head} = {value:.3f} -> met ({limit / value:.1f}x inside the target)")
        elif value < 1:
            lines.append(f"{head} = {value:.3f} -> MISSED: OM is cheaper, but {value / limit:.1f}x above the target")
        else:
            lines.append(f"{head} = {value:.3f} -> MISSED: OM costs {value:.1f}x as much "
                         f"({value / limit:.0f}x above the target)")
    met = sum(c.get("verdict", "met" if c["met"] else "MISSED") == "met" for c in target["comparisons"])
    straddle = sum(c.get("verdict") == "within spread" for c in target["comparisons"])
    lines.append(f"verdict: {met} of {len(target['comparisons'])} comparisons meet the target"
                 + (f", {straddle} within the run-to-run spread" if straddle else "")
                 + (" (all)" if target["met_all"] else ""))
    return lines


_RARE_STEPS = (("cold_ms", "cold first step"), ("commit_ms", "commit step"))


def report(payload: dict[str, Any]) -> str:
    sizes = payload["params"]["sizes"]
    rows = []
    for name, per_size in payload["strategies"].items():
        for size in sizes:
            d = per_size[str(size)]
            bg = d["background_ms"]["p50"] if d["background_ms"] else None
            rows.append([name, size, d["memory_ms"]["p50"], d["memory_ms"]["mean"], d["memory_ms"]["p95"],
                         int(d["memory_ms"]["n"]), bg, d["reducer_ms"]["p50"], d["state_messages"]])
        if not name.startswith("om-"):
            continue
        for key, label in _RARE_STEPS:  # OM's rarer steps, each a row of its own
            for size in sizes:
                d = per_size[str(size)]
                if d.get(key):
                    rows.append([f"{name}: {label}", size, d[key]["p50"], d[key]["mean"], d[key]["p95"],
                                 int(d[key]["n"]), None, None, None])
    out = table(f"Step cost: memory bookkeeping per agent step (ms), {payload['params']['steps']} steps "
                "of 2 new messages, instant models; only the memory call is timed",
                ["strategy", "history", "p50", "mean", "p95", "n", "background p50", "add_messages p50",
                 "state msgs"], rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.3f}" if value is not None else f"\n  {key} = n/a"
    persistence = payload.get("persistence") or {}
    if persistence:
        out += "\n\n" + table(
            "OM persistence: the same steps on SQLite (temp file) vs the in-memory store (no-op persistence), p50 ms",
            ["history", "sqlite", "in-memory", "sqlite - in-memory", "sqlite / in-memory"],
            [[int(size), d["sqlite_ms"], d["memory_ms"], d["sqlite_minus_memory_ms"], d["sqlite_over_memory"]]
             for size, d in persistence.items()])
    out += "\n" + "\n".join("  " + line for line in verdict_lines(payload["target"]))
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000] if quick else [1000, 10_000, 50_000])
    # 30 plain steps a case (--full: 50): their medians moved by less than the run-to-run spread the
    # repeats report, and at 50k each step's add_messages pass alone costs ~0.2 s
    parser.add_argument("--steps", type=int, default=None, help="plain steps per case (default 30; --full 50)")
    parser.add_argument("--full", action="store_true", help="50 plain steps per case")
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "memory"])
    parser.add_argument("--repeats", type=int, default=2 if quick else 5,
                        help="runs of the compared strategies at the verdicts' size (their spread is reported)")
    parser.set_defaults(step_cost_quick=quick)


def resolve_steps(args: argparse.Namespace) -> int:
    """``--steps``, or its default: 8 with ``--quick``, 50 with ``--full``, else 30."""
    if args.steps is None:
        args.steps = 8 if getattr(args, "step_cost_quick", False) else 50 if getattr(args, "full", False) else 30
    return int(args.steps)


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[StepStats]]:
    resolve_steps(args)
    stats, rounds = asyncio.run(collect(args.sizes, args.steps, args.stores, max(1, args.repeats)))
    return payload_from(stats, args.sizes, args.steps, rounds), stats


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("step_cost", __doc__, add_arguments, lambda args: run(args)[0], report, argv)


if __name__ == "__main__":
    main()
