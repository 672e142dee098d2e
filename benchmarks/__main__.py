"""Run the whole benchmark suite in one process and print every table of ratios.

    python -m benchmarks                  # every figure the docs quote (time: benchmarks/README.md)
    python -m benchmarks --full           # also the big sizes and the long model delays (much longer)
    python -m benchmarks --quick          # small sizes and short delays, a smoke run
    python -m benchmarks --only buffering,storage --no-pg
    python -m benchmarks --only workers   # opt-in: 1 vs 8 worker processes on one thread

Results: benchmarks/results/<section>.json, summary.json and benchmarks.png.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from . import (
    OPT_IN,
    SECTIONS,
    agent_step,
    branches,
    buffering,
    cache_misses,
    import_time,
    load,
    own_work,
    prompt_cache,
    prompt_tokens,
    reflector_spend,
    scale,
    search,
    search_languages,
    step_cost,
    storage,
    token_counting,
    vector_restart,
    wirings,
    workers,
)
from .common import RESULTS_DIR, write_result
from .progress import measure_section, peak_rss_mib, release_memory
from .results_page import page_path, write_page


def _args(module: Any, quick: bool, extra: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(add_help=False)
    module.add_arguments(parser, quick)
    known, _ = parser.parse_known_args(extra)
    return known


def plot(results: dict[str, dict[str, Any]], path: Path) -> Path | None:
    """One PNG with a panel per section that ran (matplotlib's Agg backend, no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [name for name in ("buffering", "step_cost", "prompt_tokens", "token_counting", "storage", "search")
              if name in results]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, name in zip(axes[0], panels, strict=True):
        data = results[name]
        if name == "buffering":
            names = list(data["strategies"])
            ax.bar([n + " p50" for n in names], [data["strategies"][n]["wait_ms"]["p50"] for n in names])
            ax.bar([n + " p95" for n in names], [data["strategies"][n]["wait_ms"]["p95"] for n in names])
            ax.set_yscale("log")
            ax.set_ylabel("wait for memory per step (ms, log)")
            ax.tick_params(axis="x", rotation=60, labelsize=7)
        elif name == "step_cost":
            sizes = data["params"]["sizes"]
            for strategy, per in data["strategies"].items():
                if strategy == "full-history":
                    continue
                ax.plot(sizes, [max(per[str(s)]["memory_ms"]["mean"], 1e-3) for s in sizes], marker="o",
                        label=strategy)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("history (messages)")
            ax.set_ylabel("bookkeeping per step (ms, log)")
            ax.legend(fontsize=7)
        elif name == "prompt_tokens":
            for strategy, per in data["strategies"].items():
                sizes = sorted(int(s) for s in per)
                ax.plot(sizes, [per[str(s)]["prompt_tokens_mean"] for s in sizes], marker="o", label=strategy)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("history (messages)")
            ax.set_ylabel("prompt tokens per step (mean, log)")
            ax.legend(fontsize=7)
        elif name == "token_counting":
            names = list(data["counters"])
            ax.bar([n + "\ncold" for n in names], [data["counters"][n]["messages_per_s"] for n in names])
            ax.bar([n + "\ncached" for n in names], [data["counters"][n]["cached_messages_per_s"] for n in names])
            ax.set_ylabel("messages / s")
            ax.tick_params(axis="x", labelsize=7)
        elif name == "storage":
            backends = [b for b, d in data["backends"].items() if "skipped" not in d]
            ax.bar([b + " p50" for b in backends], [data["backends"][b]["recall_page_ms"]["p50"] for b in backends])
            ax.bar([b + " p95" for b in backends], [data["backends"][b]["recall_page_ms"]["p95"] for b in backends])
            ax.set_ylabel(f"recall page at {data['params']['messages']:,} stored (ms)")
        elif name == "search":
            backends = [b for b, d in data["backends"].items() if "skipped" not in d]
            for key, label in (("keyword_tool_ms", "kw"), ("hybrid_tool_ms", "sem+kw")):
                ax.bar([f"{b} {label} p95" for b in backends], [data["backends"][b][key]["p95"] for b in backends])
            ax.set_ylabel(f"recall search at {data['params']['messages']:,} stored (ms)")
            ax.tick_params(axis="x", rotation=30, labelsize=7)
        ax.set_title(name)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> dict[str, dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes and short delays (a smoke run)")
    parser.add_argument("--full", action="store_true",
                        help="the sections' big sizes too: buffering's 2 s Observer, agent_step's 20 steps for every "
                             "strategy, load's 50 and 200 users, scale's 1M messages (passed to each section)")
    parser.add_argument("--only", type=lambda v: v.split(","), default=[s for s in SECTIONS if s not in OPT_IN],
                        help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for the JSON files and the PNG")
    args, extra = parser.parse_known_args(argv)
    if args.full:
        extra = ["--full", *extra]
    unknown = set(args.only) - set(SECTIONS)
    if unknown:
        parser.error(f"--only: unknown section(s) {sorted(unknown)}; choose from {', '.join(SECTIONS)}")
    results: dict[str, dict[str, Any]] = {}
    timings: dict[str, float] = {}
    modules = {"buffering": buffering, "step_cost": step_cost, "agent_step": agent_step, "prompt_tokens": prompt_tokens,
               "prompt_cache": prompt_cache, "token_counting": token_counting, "storage": storage, "search": search,
               "search_languages": search_languages, "vector_restart": vector_restart,
               "scale": scale, "branches": branches, "wirings": wirings, "cache_misses": cache_misses,
               "reflector_spend": reflector_spend, "import_time": import_time, "load": load,
               "workers": workers, "own_work": own_work}
    collected = None
    runs: dict[str, dict[str, Any]] = {}
    for name in SECTIONS:
        if name not in args.only:
            continue
        module = modules[name]
        section_args = _args(module, args.quick, extra)
        release_memory()  # what earlier sections freed goes back to the OS before this one is measured
        print(f"\n=== {name} ===", flush=True)
        with measure_section(name, quick=args.quick) as section:
            if name == "buffering":
                import asyncio

                payload = asyncio.run(buffering.run(section_args))
            elif name == "step_cost":
                payload, collected = step_cost.run(section_args)
            elif name == "prompt_tokens":
                same = collected is not None and section_args.sizes == _args(step_cost, args.quick, extra).sizes
                payload = prompt_tokens.run(section_args, collected if same else None)
            else:
                payload = module.run(section_args)
        if name == "prompt_tokens":
            collected = None  # the steps' prompts are no longer needed: let them go
        text = module.report(payload)
        print(text)
        print(f"  -> {write_result(name, payload, args.out, report=text, run=section)}", flush=True)
        print(f"  {name}: {section.seconds:.0f} s, peak RSS {section.peak_rss_mib:,.0f} MiB", flush=True)
        results[name] = payload
        timings[name] = section.seconds
        runs[name] = section.as_dict()
    picture = plot(results, args.out / "benchmarks.png")
    summary_path = write_result("summary", {"quick": args.quick, "sections_seconds": timings, "sections": runs,
                                            "total_seconds": sum(timings.values()), "peak_rss_mib": peak_rss_mib(),
                                            "ratios": {k: v.get("ratios") for k, v in results.items()},
                                            "targets": {k: v["target"] for k, v in results.items() if "target" in v}},
                                 args.out)
    page = write_page(args.out, page_path(args.out, args.quick))
    print(f"\nplot: {picture}\nsummary: {summary_path}\nresults page: {page}\n"
          f"total: {sum(timings.values()):.0f} s, peak RSS {peak_rss_mib():,.0f} MiB")
    return results


if __name__ == "__main__":
    main()
