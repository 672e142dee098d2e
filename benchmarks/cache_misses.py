"""cache_misses: what a step costs when this process holds nothing of the thread (issue 32, items 3, 4).

Two ways a step finds OM's in-process state missing, both on SQLite files in a temp dir:

* **A cold step handed the whole state.** A fresh process (or an evicted thread) gets a request
  holding the thread's whole history, as a client that sends full history does, or a worker
  that takes over another's conversation. The history is written through the store first (all
  observed but an unobserved tail, as if OM had run all along); each round then opens a fresh
  ``ObservationalMemory``, times its first step handed every stored message plus a new one (fresh
  objects, as a checkpoint or a request body gives them), then ``--warm-steps`` steps of the same
  instance. Reported: cold and warm medians, **cold minus warm per handed message** (target at
  most 10 us at the largest size, so 50k messages cost under 0.5 s more than a warm step; at 1k
  a cold step's fixed costs dominate), the slope between the smallest and largest size, and the
  peak of Python allocations during one more (untimed) cold step, per handed message. "cold CPU"
  is the process's CPU time during the cold step (all threads): steadier than wall time on a
  shared machine.
* **More active threads than the cache.** ``--threads`` counts of threads (default 500, 600,
  1000 with ``cache_limit`` 512), each count on its own store and instance, stepped round robin
  with one new message per step. Every round runs one pass of each count in turn, so the counts
  are measured side by side in time. Reported: per-step median and the share of steps that
  found the thread cached; target: 600 threads within 1.5x of 500 per step.

Sizes are interleaved the same way (each round runs every size in turn).

    python -m benchmarks.cache_misses                             # 1k, 10k, 50k; 500/600/1000 threads
    python -m benchmarks.cache_misses --cold-sizes 1000,10000 --threads 500,600
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import tracemalloc
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage, messages_from_dict, messages_to_dict

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import record_key
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import conversation, fmt, ratio, section_main, spread, table, verdict_with_spread, verdicts
from .history import OM_MESSAGE_TOKENS, OM_OBSERVATION_TOKENS, THREAD, bench_counter, preload_om, tempdir

PER_MESSAGE_TARGET_US = 10.0
THREADS_TARGET = 1.5


def _om(store: SQLiteStore, counter: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": OM_MESSAGE_TOKENS},
                               reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)


async def _cold_round(store: SQLiteStore, state: list[BaseMessage], counter: Any, tag: str,
                      warm_steps: int) -> tuple[float, float, list[float]]:
    """One fresh instance: its cold step handed ``state`` plus a new message, then warm steps."""
    handed = messages_from_dict(messages_to_dict(state))  # fresh objects, as a request body gives them
    handed.append(HumanMessage(f"Back again ({tag}): where were we?", id=f"{tag}-cold"))
    om = _om(store, counter)
    try:
        started, cpu = time.perf_counter(), time.process_time()
        await om.aprocess(THREAD, handed)
        cold = (time.perf_counter() - started) * 1000
        cold_cpu = (time.process_time() - cpu) * 1000
        warm: list[float] = []
        for step in range(warm_steps):
            handed.append(HumanMessage(f"And then ({tag} {step})?", id=f"{tag}-warm{step}"))
            started = time.perf_counter()
            await om.aprocess(THREAD, handed)
            warm.append((time.perf_counter() - started) * 1000)
        await om.await_background()
    finally:
        await om.aclose(cancel=True)
    state[:] = handed
    return cold, cold_cpu, warm


async def _cold_peak(store: SQLiteStore, state: list[BaseMessage], counter: Any) -> float:
    """Peak bytes Python allocates during one cold step (untimed: tracing slows it down)."""
    handed = messages_from_dict(messages_to_dict(state))
    handed.append(HumanMessage("One more cold start", id="peak-cold"))
    om = _om(store, counter)
    tracemalloc.start()
    try:
        await om.aprocess(THREAD, handed)
        peak = float(tracemalloc.get_traced_memory()[1])
    finally:
        tracemalloc.stop()
        await om.aclose(cancel=True)
    state[:] = handed
    return peak


async def cold_steps(sizes: list[int], rounds: int, warm_steps: int, tmp: str) -> dict[str, Any]:
    counter = bench_counter()
    stores: dict[int, SQLiteStore] = {}
    states: dict[int, list[BaseMessage]] = {}
    samples: dict[int, dict[str, list[float]]] = {s: {"cold": [], "cpu": [], "warm": []} for s in sizes}
    try:
        for size in sizes:
            history = conversation(size)
            stores[size] = SQLiteStore(os.path.join(tmp, f"cold-{size}.db"))
            await preload_om(stores[size], history, counter, unobserved_tokens=int(OM_MESSAGE_TOKENS * 0.6),
                             observation_tokens=OM_OBSERVATION_TOKENS // 2)
            states[size] = list(history)
        await _cold_round(stores[sizes[0]], states[sizes[0]], counter, "warmup", 1)  # the process's one-time
        # costs (the token counter's tables, first imports) are no part of any cold step's figure
        for round_ in range(rounds):
            for size in sizes:
                cold, cpu, warm = await _cold_round(stores[size], states[size], counter, f"r{round_}", warm_steps)
                samples[size]["cold"].append(cold)
                samples[size]["cpu"].append(cpu)
                samples[size]["warm"].extend(warm)
                print(f"  cold step, round {round_ + 1}/{rounds}, {size:,} messages: {cold:.0f} ms", flush=True)
        out: dict[str, Any] = {}
        for size in sizes:
            handed = len(states[size])
            cold = statistics.median(samples[size]["cold"])
            warm = statistics.median(samples[size]["warm"])
            peak = await _cold_peak(stores[size], states[size], counter)
            out[str(size)] = {"handed": handed, "cold_ms": cold, "warm_ms": warm,
                              "cold_cpu_ms": statistics.median(samples[size]["cpu"]),
                              "cold_minus_warm_us_per_message": (cold - warm) * 1000 / handed,
                              "peak_bytes_per_message": peak / handed, "cold_all_ms": samples[size]["cold"]}
        return out
    finally:
        for store in stores.values():
            await store.aclose()


async def many_threads(counts: list[int], cache_limit: int, rounds: int, tmp: str) -> dict[str, Any]:
    counter = bench_counter()
    instances: dict[int, tuple[SQLiteStore, ObservationalMemory]] = {}
    steps: dict[int, list[float]] = {n: [] for n in counts}
    round_p50: dict[int, list[float]] = {n: [] for n in counts}
    hits: dict[int, int] = dict.fromkeys(counts, 0)
    try:
        for n in counts:
            store = SQLiteStore(os.path.join(tmp, f"threads-{n}.db"))
            om = _om(store, counter)
            om.cache_limit = cache_limit
            instances[n] = (store, om)
            for t in range(n):  # the threads exist and hold a message before any timing
                await om.aprocess(f"thread-{t}", [HumanMessage(f"hello from {t}", id=f"h-{t}")],
                                  resource_id=f"user-{t}")
        for round_ in range(rounds):
            for n in counts:
                om = instances[n][1]
                for t in range(n):
                    hits[n] += record_key(f"user-{t}", f"thread-{t}") in om._recent_threads
                    message = HumanMessage(f"round {round_} of thread {t}", id=f"r{round_}-t{t}")
                    started = time.perf_counter()
                    await om.aprocess(f"thread-{t}", [message], resource_id=f"user-{t}")
                    steps[n].append((time.perf_counter() - started) * 1000)
                round_p50[n].append(statistics.median(steps[n][-n:]))
                print(f"  threads, round {round_ + 1}/{rounds}, {n:,} threads: "
                      f"{statistics.fmean(steps[n][-n:]):.2f} ms per step", flush=True)
    finally:
        for store, om in instances.values():
            await om.aclose(cancel=True)
            await store.aclose()
    return {str(n): {"step_p50_ms": statistics.median(steps[n]), "step_mean_ms": statistics.fmean(steps[n]),
                     "cached_share": hits[n] / len(steps[n]), "round_p50_ms": round_p50[n]} for n in counts}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempdir() as tmp:
        cold = asyncio.run(cold_steps(args.cold_sizes, args.rounds, args.warm_steps, tmp)) if args.cold_sizes else {}
        threads = asyncio.run(many_threads(args.threads, args.cache_limit, args.rounds, tmp)) if args.threads else {}
    ratios: dict[str, float | None] = {}
    target: dict[str, bool | str] = {}
    if cold:
        # the target is on the largest size: at 1k a cold step's fixed costs (the record, the
        # window, the first render) outweigh its per-message ones
        largest = str(max(args.cold_sizes))
        per = cold[largest]["cold_minus_warm_us_per_message"]
        target[f"cold minus warm at {int(largest):,} <= {PER_MESSAGE_TARGET_US:.0f} us per handed message"] = (
            per <= PER_MESSAGE_TARGET_US)
        if len(cold) > 1:
            small = str(min(args.cold_sizes))
            slope = ((cold[largest]["cold_ms"] - cold[small]["cold_ms"]) * 1000
                     / (cold[largest]["handed"] - cold[small]["handed"]))
            ratios[f"cold step slope {int(small):,} -> {int(largest):,} (us per handed message)"] = slope
    if threads:
        base = args.threads[0]
        for n in args.threads[1:]:
            value = ratio(threads[str(n)]["step_p50_ms"], threads[str(base)]["step_p50_ms"])
            ratios[f"{n} threads / {base} threads per step (p50)"] = value
            if n <= 1.25 * base:
                # each round's ratio too: one run had 1.58x against 1.5, a line the rounds may straddle
                runs = [a / b for a, b in zip(threads[str(n)].get("round_p50_ms") or [],
                                              threads[str(base)].get("round_p50_ms") or [], strict=False) if b]
                stats = spread(runs)
                label = (f"{n} threads within {THREADS_TARGET}x of {base} per step (pooled p50 "
                         f"{value:.2f}x; per round {stats['min']:.2f}-{stats['max']:.2f}x over {len(runs)})"
                         if runs and value is not None else f"{n} threads within {THREADS_TARGET}x of {base} per step")
                within = value is not None and value <= THREADS_TARGET
                straddle = bool(runs) and verdict_with_spread(runs, THREADS_TARGET) == "within spread"
                target[label] = "within spread: the rounds straddle the target" if straddle else within
    return {"params": {"cold_sizes": args.cold_sizes, "threads": args.threads, "cache_limit": args.cache_limit,
                       "rounds": args.rounds, "warm_steps": args.warm_steps},
            "cold": cold, "threads": threads, "ratios": ratios, "target": target}


def report(payload: dict[str, Any]) -> str:
    lines: list[str] = []
    if payload["cold"]:
        rows = [[f"{int(size):,}", row["handed"], row["cold_ms"], row["cold_cpu_ms"], row["warm_ms"],
                 row["cold_minus_warm_us_per_message"], row["peak_bytes_per_message"]]
                for size, row in payload["cold"].items()]
        lines.append(table("cold step handed the whole state vs warm step, SQLite (ms, medians; target "
                           f"cold minus warm <= {PER_MESSAGE_TARGET_US:.0f} us per handed message)",
                           ["stored", "handed", "cold", "cold CPU", "warm", "cold minus warm, us per handed message",
                            "peak alloc, bytes per handed message"], rows))
    if payload["threads"]:
        rows = [[f"{int(n):,}", row["step_p50_ms"], row["step_mean_ms"], fmt(row["cached_share"] * 100, 0) + "%"]
                for n, row in payload["threads"].items()]
        lines.append(table(f"threads stepped round robin, cache_limit {payload['params']['cache_limit']}, SQLite "
                           "(ms per step; side by side, one pass of each count per round)",
                           ["threads", "step p50", "step mean", "found cached"], rows))
    return "\n".join(lines) + verdicts(payload, digits=2)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    def ints(value: str) -> list[int]:
        return [int(x) for x in value.split(",") if x]

    parser.add_argument("--cold-sizes", dest="cold_sizes", type=ints,
                        default=[200, 1000] if quick else [1000, 10_000, 50_000])
    parser.add_argument("--threads", type=ints, default=[50, 60, 100] if quick else [500, 600, 1000],
                        help="thread counts stepped round robin; the first is the baseline of the ratios")
    parser.add_argument("--cache-limit", dest="cache_limit", type=int, default=51 if quick else 512)
    parser.add_argument("--rounds", type=int, default=2 if quick else 3)
    parser.add_argument("--warm-steps", dest="warm_steps", type=int, default=3 if quick else 5)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("cache_misses", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
