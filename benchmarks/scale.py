"""scale: what a step costs as one thread's stored history grows from 1k to 1M messages.

For each store (SQLite file, PostgreSQL) and each history size, the history is written through
the store directly (as if OM had run all along: everything observed but a short unobserved
tail). On PostgreSQL the schema is then vacuumed, analyzed and checkpointed, the state autovacuum
and the checkpointer bring a live database to within a minute of such a load (``--no-settle``
measures right after the load instead; the store's statements do not depend on it, see
tests/test_pg_bounded_history.py). Then **fresh processes** open the store and time only OM's
own calls:

* cold first step: a process's first ``aprocess`` on the thread, handed the state a trimmed
  integration holds (the unobserved tail and the new message), and the process's RSS right after;
* warm step: later steps that store a turn and cross no threshold;
* commit step: steps that run a synchronous observation and commit it, marking messages
  observed (instant scripted Observer).

Every size is loaded first; then ``--repeats`` rounds each run one fresh process per size, so
the sizes are measured side by side in time (on a shared machine a busy minute then hits every
size, not one). Figures are medians over all rounds: ``--repeats`` cold steps and RSS readings,
``--steps`` warm steps and ``--steps`` commit steps per size. With the defaults a round adds
about 65 messages to the thread, so "1k" ends near 1.3k.

Targets (issue "cost independent of history"): each figure at the largest size within 1.5x of
its value at 1k; the cold first step within 3x of a commit step.

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
from .progress import note

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


def _quiet_om(store: OMStore) -> ObservationalMemory:
    """OM that crosses no threshold: a step is the append and the bookkeeping around it."""
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": 10_000_000, "buffer_tokens": False},
                               reflection={"observation_tokens": 100_000_000})


async def measure(kind: str, where: str, schema: str, size: int, steps: int, tag: str) -> dict[str, Any]:
    """Runs in a fresh process: the cold step and RSS first, then ``steps`` warm steps and up to
    ``steps`` commit steps; every sample is returned (``tag`` keeps this round's ids apart)."""
    store = open_store(kind, where, schema)
    quiet = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                                observation={"message_tokens": 10_000_000, "buffer_tokens": False},
                                reflection={"observation_tokens": 100_000_000})
    state = _tail_state(size)
    state.append(HumanMessage(f"Cold start {tag}: what was the shed budget?", id=f"{tag}-cold-h"))
    started = time.perf_counter()
    await quiet.aprocess(THREAD, state, resource_id=RESOURCE)
    cold_ms = (time.perf_counter() - started) * 1000
    rss = _rss_mib()
    warm: list[float] = []
    for turn in range(steps):
        state.append(AIMessage(f"Answer {turn}: " + "fine " * 30, id=f"{tag}-warm-a{turn}"))
        state.append(HumanMessage(f"Warm turn {turn}: anything else on the shed?", id=f"{tag}-warm-h{turn}"))
        started = time.perf_counter()
        await quiet.aprocess(THREAD, state, resource_id=RESOURCE)
        warm.append((time.perf_counter() - started) * 1000)
        del state[:-TAIL]  # the integration's state stays bounded
    observing = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                                    observation={"message_tokens": 150, "buffer_tokens": False},
                                    reflection={"observation_tokens": 100_000_000})
    commits: list[float] = []
    for turn in range(4 * steps + 1):  # about one step in three commits; stop at ``steps`` commits
        state.append(AIMessage(f"Reply {turn}: " + "noted " * 40, id=f"{tag}-commit-a{turn}"))
        state.append(HumanMessage(f"Commit turn {turn}: add a window to the shed.", id=f"{tag}-commit-h{turn}"))
        before = (await observing.aget_record(THREAD, resource_id=RESOURCE)).version
        started = time.perf_counter()
        await observing.aprocess(THREAD, state, resource_id=RESOURCE)
        elapsed = (time.perf_counter() - started) * 1000
        if turn and (await observing.aget_record(THREAD, resource_id=RESOURCE)).version > before:
            commits.append(elapsed)  # the first is this instance's own cold step
        del state[:-TAIL]
        if len(commits) >= steps:
            break
    await quiet.aclose()
    await observing.aclose()
    await store.aclose()
    return {"cold_ms": cold_ms, "rss_mib": rss, "warm_ms": warm, "commit_ms": commits}


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
    kind, where, schema, size, steps, tag = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5]
    print(json.dumps(asyncio.run(measure(kind, where, schema, size, steps, tag))))


def _run_worker(kind: str, where: str, schema: str, size: int, steps: int, tag: str) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.scale", "--worker", kind, where, schema, str(size), str(steps), tag]
    done = subprocess.run(command, capture_output=True, text=True, check=True,
                          cwd=Path(__file__).resolve().parent.parent)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def _figures(samples: list[dict[str, Any]], seeded_s: float) -> dict[str, Any]:
    """Medians over every round's samples (a cold step and an RSS per round)."""
    warm = [v for s in samples for v in s["warm_ms"]]
    commits = [v for s in samples for v in s["commit_ms"]]
    return {"cold_ms": statistics.median(s["cold_ms"] for s in samples),
            "rss_mib": statistics.median(s["rss_mib"] for s in samples),
            "warm_p50_ms": statistics.median(warm), "commit_p50_ms": statistics.median(commits) if commits else None,
            "cold_all_ms": [s["cold_ms"] for s in samples], "warm_steps": len(warm), "commit_steps": len(commits),
            "rounds": len(samples), "seed_s": seeded_s}


async def settle(kind: str, where: str, schema: str) -> str:
    """Bring a freshly bulk-loaded PostgreSQL schema to the state a live database is in: vacuumed
    and analyzed (autovacuum does both within a minute of a load this size: 20% dead rows, 10%
    changed) and checkpointed (``checkpoint_timeout``). Without it the first minutes after the
    load are measured instead: autovacuum of the load's dead rows and a checkpoint flushing it,
    both competing with the steps. SQLite needs nothing (the store checkpoints its WAL)."""
    if kind != "postgres":
        return "none needed"
    import psycopg
    from psycopg import sql

    done = []
    async with await psycopg.AsyncConnection.connect(where, autocommit=True) as conn:
        for table in ("messages", "message_search", "threads", "records"):
            await conn.execute(sql.SQL("VACUUM (ANALYZE) {}.{}").format(sql.Identifier(schema), sql.Identifier(table)))
        done.append("VACUUM ANALYZE")
        try:
            await conn.execute("CHECKPOINT")
            done.append("CHECKPOINT")
        except psycopg.Error:  # needs superuser or pg_checkpoint; a given DSN may not have it
            pass
    return " + ".join(done)


async def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = list(args.sizes) + ([1_000_000] if args.full and 1_000_000 not in args.sizes else [])
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    rounds = max(1, args.repeats)
    per_round_steps = max(1, args.steps // rounds)
    results: dict[str, Any] = {}
    settled: dict[str, str] = {}
    for kind in args.stores:
        if kind == "postgres" and not dsn:
            results[kind] = {"skipped": "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)"}
            continue
        with tempfile.TemporaryDirectory() as folder:
            places: dict[int, tuple[str, str, float]] = {}
            try:
                for size in sizes:  # every size is loaded first, so the rounds below alternate sizes
                    where = str(Path(folder) / f"scale-{size}.db") if kind == "sqlite" else str(dsn)
                    schema = f"om_scale_{uuid.uuid4().hex[:10]}"
                    started = time.perf_counter()
                    asyncio.run(_seed_and_close(open_store(kind, where, schema), size))
                    places[size] = (where, schema, time.perf_counter() - started)
                    settled[kind] = "not settled (--no-settle)" if args.no_settle else asyncio.run(
                        settle(kind, where, schema))
                    note(f"{kind}: {size:,} messages stored")
                samples: dict[int, list[dict[str, Any]]] = {size: [] for size in sizes}
                for round_ in range(rounds):  # sizes side by side in time, so a busy minute hits them all
                    note(f"{kind}: round {round_ + 1} of {rounds}, one fresh process per size")
                    for size in sizes:
                        where, schema, _ = places[size]
                        samples[size].append(_run_worker(kind, where, schema, size, per_round_steps, f"r{round_}"))
                results[kind] = {str(size): _figures(samples[size], places[size][2]) for size in sizes}
            finally:
                if kind == "postgres":
                    for _, schema, _ in places.values():
                        asyncio.run(_drop_schema(str(dsn), schema))
        note(f"{kind}: measured")
    if args.rounds:
        note(f"many threads: {args.rounds} rounds")
    many = asyncio.run(many_threads(args.rounds)) if args.rounds else None
    durability = {"sqlite": "WAL, synchronous=NORMAL (FULL for commits that mark messages observed)",
                  "postgres": asyncio.run(_pg_durability(str(dsn))) if dsn and "postgres" in args.stores else "n/a"}
    return {"params": {"sizes": sizes, "steps": args.steps, "repeats": rounds, "tail": TAIL, "stores": args.stores},
            "stores": results, "many_threads": many, "durability": durability, "after_load": settled}


async def _pg_durability(dsn: str) -> str:
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        values = []
        for name in ("fsync", "synchronous_commit", "autovacuum"):
            row = await (await conn.execute(f"SHOW {name}")).fetchone()
            values.append(f"{name}={row[0] if row else '?'}")
    return ", ".join(values)


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
        lines.append(table(f"{kind}: one thread's history vs OM's step (ms, medians; RSS MiB after the cold step); "
                           f"durability: {payload['durability'][kind]}; after the load: "
                           f"{payload.get('after_load', {}).get(kind, '?')}",
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
    parser.add_argument("--steps", type=int, default=10 if quick else 40)
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=2 if quick else 4)
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--repeats", type=int, default=2 if quick else 5,
                        help="rounds over the sizes, each a fresh process per size (one cold step each); "
                             "--steps warm and commit steps are split over them")
    parser.add_argument("--no-settle", action="store_true",
                        help="measure right after the bulk load (no VACUUM ANALYZE / CHECKPOINT on PostgreSQL)")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("scale", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        _worker(sys.argv[2:])
    else:
        main()
