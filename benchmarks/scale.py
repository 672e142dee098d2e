"""scale: what a step costs as one thread's stored history grows from 1k to 1M messages.

For each store (SQLite file, PostgreSQL) and each history size, the history is written through
the store directly (as if OM had run all along: everything observed but a short unobserved
tail), then a **fresh process** opens the store and measures, timing only OM's own calls:

* cold first step: the process's first ``aprocess`` on the thread, handed the state a trimmed
  integration holds (the unobserved tail and the new message), and the process's RSS right after;
* warm step: later steps that store a turn and cross no threshold (p50 of ``--steps``);
* commit step: steps that run a synchronous observation and commit it, marking messages
  observed (instant scripted Observer; p50 of ``--steps``).

Targets (issue "cost independent of history"): each figure at the largest size within 1.5x of
its value at 1k; the cold first step within 3x of a warm commit step.

A many-threads run steps ``3 x cache_limit`` threads round robin on one SQLite store (more
threads than OM keeps in-process state for) and reports the step cost per round and the RSS
after each round, which must level off.

    python -m benchmarks.scale                    # 1k, 10k, 100k; SQLite and PostgreSQL
    python -m benchmarks.scale --full             # adds 1M (several minutes of seeding)
    python -m benchmarks.scale --stores sqlite --sizes 1000,10000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.store import NewMessage, ObservationGroup, OMRecord, OMStore, PostgresStore, SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import fmt, ratio, section_main, table

RESOURCE, THREAD = "scale-user", "scale-thread"
TAIL = 20
SEED_BATCH = 2000


def _rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _row(i: int) -> NewMessage:
    human = i % 2 == 0
    text = (f"Turn {i // 2}: please keep note {i} about the garden shed, budget {i % 900} euros."
            if human else f"Noted item {i}: the shed plan, the budget and the date. " + "detail " * 20)
    data = {"type": "human" if human else "ai", "data": {"content": text, "id": f"m{i}", "type": "human" if human
                                                          else "ai"}}
    return NewMessage(id=f"m{i}", data=data, tokens=20 if human else 40)


def open_store(kind: str, where: str, schema: str) -> OMStore:
    return SQLiteStore(where) if kind == "sqlite" else PostgresStore(where, schema=schema)


async def seed(store: OMStore, size: int) -> None:
    """``size`` messages on one thread, all but the last ``TAIL`` observed, with a small log."""
    await store.asetup()
    for start in range(0, size, SEED_BATCH):
        await store.aappend_messages(RESOURCE, THREAD, [_row(i) for i in range(start, min(size, start + SEED_BATCH))])
    record = OMRecord(resource_id=RESOURCE, thread_id=THREAD, scope="thread", groups=[ObservationGroup(
        thread_id=THREAD, start_id="m0", end_id=f"m{size - TAIL - 1}", tokens=60,
        text="Date: 2026-03-02 (Monday)\n* 🔴 (09:00) User keeps notes about the garden shed.")],
        last_observed_seq={THREAD: size - TAIL}, last_observed_id={THREAD: f"m{size - TAIL - 1}"})
    await store.acommit_record(record, expected_version=0, mark_observed={THREAD: size - TAIL})


def _tail_state(size: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(size - TAIL, size):
        row = _row(i)
        content = row.data["data"]["content"]
        out.append(HumanMessage(content, id=row.id) if i % 2 == 0 else AIMessage(content, id=row.id))
    return out


async def measure(kind: str, where: str, schema: str, size: int, steps: int) -> dict[str, Any]:
    """Runs in a fresh process: cold step and RSS first, then warm and commit steps."""
    store = open_store(kind, where, schema)
    quiet = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                                observation={"message_tokens": 10_000_000, "buffer_tokens": False},
                                reflection={"observation_tokens": 100_000_000})
    state = _tail_state(size)
    state.append(HumanMessage("Cold start: what was the shed budget?", id="cold-h"))
    started = time.perf_counter()
    await quiet.aprocess(THREAD, state, resource_id=RESOURCE)
    cold_ms = (time.perf_counter() - started) * 1000
    rss = _rss_mib()
    warm: list[float] = []
    for turn in range(steps):
        state.append(AIMessage(f"Answer {turn}: " + "fine " * 30, id=f"warm-a{turn}"))
        state.append(HumanMessage(f"Warm turn {turn}: anything else on the shed?", id=f"warm-h{turn}"))
        started = time.perf_counter()
        await quiet.aprocess(THREAD, state, resource_id=RESOURCE)
        warm.append((time.perf_counter() - started) * 1000)
        del state[:-TAIL]  # the integration's state stays bounded
    observing = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                                    observation={"message_tokens": 150, "buffer_tokens": False},
                                    reflection={"observation_tokens": 100_000_000})
    commits: list[float] = []
    for turn in range(steps + 1):
        state.append(AIMessage(f"Reply {turn}: " + "noted " * 40, id=f"commit-a{turn}"))
        state.append(HumanMessage(f"Commit turn {turn}: add a window to the shed.", id=f"commit-h{turn}"))
        before = (await observing.aget_record(THREAD, resource_id=RESOURCE)).version
        started = time.perf_counter()
        await observing.aprocess(THREAD, state, resource_id=RESOURCE)
        elapsed = (time.perf_counter() - started) * 1000
        if turn and (await observing.aget_record(THREAD, resource_id=RESOURCE)).version > before:
            commits.append(elapsed)  # the first is this instance's own cold step
        del state[:-TAIL]
    await store.aclose()
    return {"cold_ms": cold_ms, "rss_mib": rss, "warm_p50_ms": statistics.median(warm),
            "commit_p50_ms": statistics.median(commits) if commits else None, "commit_steps": len(commits)}


async def many_threads(rounds: int) -> dict[str, Any]:
    """Round-robin steps over more threads than the engine keeps state for, on one SQLite file."""
    with tempfile.TemporaryDirectory() as folder:
        store = SQLiteStore(str(Path(folder) / "many.db"))
        om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                                 observation={"message_tokens": 10_000_000, "buffer_tokens": False},
                                 reflection={"observation_tokens": 100_000_000})
        threads = 3 * om.cache_limit
        per_round: list[dict[str, float]] = []
        for round_ in range(rounds):
            started = time.perf_counter()
            for t in range(threads):
                message = HumanMessage(f"round {round_} of thread {t}", id=f"r{round_}-t{t}")
                await om.aprocess(f"thread-{t}", [message], resource_id=f"user-{t}")
            elapsed = (time.perf_counter() - started) * 1000
            per_round.append({"step_ms": elapsed / threads, "rss_mib": _rss_mib()})
        await om.aclose()
        return {"threads": threads, "cache_limit": om.cache_limit, "rounds": per_round}


def _worker(argv: list[str]) -> None:
    kind, where, schema, size, steps = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    print(json.dumps(asyncio.run(measure(kind, where, schema, size, steps))))


def _run_worker(kind: str, where: str, schema: str, size: int, steps: int) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.scale", "--worker", kind, where, schema, str(size), str(steps)]
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


async def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = list(args.sizes) + ([1_000_000] if args.full and 1_000_000 not in args.sizes else [])
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    results: dict[str, Any] = {}
    for kind in args.stores:
        if kind == "postgres" and not dsn:
            results[kind] = {"skipped": "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)"}
            continue
        per_size: dict[str, Any] = {}
        for size in sizes:
            with tempfile.TemporaryDirectory() as folder:
                where = str(Path(folder) / "scale.db") if kind == "sqlite" else str(dsn)
                schema = f"om_scale_{uuid.uuid4().hex[:10]}"
                store = open_store(kind, where, schema)
                started = time.perf_counter()
                asyncio.run(_seed_and_close(store, size))
                seeded = time.perf_counter() - started
                try:
                    per_size[str(size)] = {**_run_worker(kind, where, schema, size, args.steps), "seed_s": seeded}
                finally:
                    if kind == "postgres":
                        asyncio.run(_drop_schema(str(dsn), schema))
            print(f"  scale: {kind} {size:,} messages done", file=sys.stderr)
        results[kind] = per_size
    many = asyncio.run(many_threads(args.rounds)) if args.rounds else None
    durability = {"sqlite": "WAL, synchronous=NORMAL (the store's setting)",
                  "postgres": "server defaults of the cluster used (fsync on unless the DSN's cluster says otherwise)"}
    return {"params": {"sizes": sizes, "steps": args.steps, "tail": TAIL, "stores": args.stores},
            "stores": results, "many_threads": many, "durability": durability}


async def _seed_and_close(store: OMStore, size: int) -> None:
    try:
        await seed(store, size)
    finally:
        await store.aclose()


def report(payload: dict[str, Any]) -> str:
    sizes = payload["params"]["sizes"]
    lines: list[str] = []
    for kind, per_size in payload["stores"].items():
        if "skipped" in per_size:
            lines.append(f"{kind}: skipped ({per_size['skipped']})")
            continue
        rows = [[f"{int(s):,}", d["cold_ms"], d["rss_mib"], d["warm_p50_ms"], d["commit_p50_ms"],
                 ratio(d["cold_ms"], d["commit_p50_ms"] or 0.0)] for s, d in per_size.items()]
        lines.append(table(f"{kind}: one thread's history vs OM's step (ms; RSS MiB after the cold step); "
                           f"durability: {payload['durability'][kind]}",
                           ["stored", "cold first step", "RSS", "warm p50", "commit p50", "cold / commit"], rows))
        first, last = per_size[str(sizes[0])], per_size[str(sizes[-1])]
        for name in ("cold_ms", "rss_mib", "warm_p50_ms", "commit_p50_ms"):
            growth = ratio(last[name] or 0.0, first[name] or 0.0)
            verdict = "met" if growth is not None and growth <= 1.5 else "MISSED"
            lines.append(f"  {name} at {sizes[-1]:,} / at {sizes[0]:,}: {fmt(growth)} (target <= 1.5: {verdict})")
        worst = max((d["cold_ms"] / d["commit_p50_ms"]) for d in per_size.values() if d["commit_p50_ms"])
        lines.append(f"  worst cold / commit: {fmt(worst)} (target <= 3: {'met' if worst <= 3 else 'MISSED'})")
    many = payload.get("many_threads")
    if many:
        lines.append(table(f"{many['threads']:,} threads round robin (cache_limit {many['cache_limit']}), SQLite",
                           ["round", "ms per step", "RSS MiB"],
                           [[i + 1, r["step_ms"], r["rss_mib"]] for i, r in enumerate(many["rounds"])]))
    return "\n\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1000, 10_000] if quick else [1000, 10_000, 100_000])
    parser.add_argument("--full", action="store_true", help="also 1M messages")
    parser.add_argument("--steps", type=int, default=10 if quick else 30)
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=2 if quick else 4)
    parser.add_argument("--pg-dsn", default=None)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("scale", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2:])
    else:
        main()
