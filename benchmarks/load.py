"""A chat server's load on one process: N concurrent users, each on its own thread (issue 33).

    python -m benchmarks.load                              # N = 1, 10, 50, 200; SQLite and PostgreSQL
    python -m benchmarks.load --quick                      # N = 1, 10; a few turns (~1 minute)
    python -m benchmarks.load --users 50 --stores sqlite --observer-latency 0.2
    python -m benchmarks.load --soak 8 --stores postgres   # 8 minutes over 3x cache_limit threads

Each run drives ``create_agent`` + ``ObservationalMemoryMiddleware`` (``--via aprocess`` for the
bare engine) with scripted models: the Observer and Reflector sleep ``--observer-latency`` s per
call, the agent's model ``--agent-latency`` s (``asyncio.sleep``: a provider leaves the loop
idle). The same run without OM (the bare agent) is measured beside it, so OM's own cost is the
difference. Figures per run: turns/s, per-turn p50/p95/p99/max, event-loop lag p99/max,
failed turns, background failures, CPU per turn (process CPU / turns, the scripted models'
own CPU excluded) and an integrity check (every sent message stored once, none observed
twice, none sent to the Observer twice). ``--soak M`` runs M minutes over more threads than
``om.cache_limit`` and samples RSS. PostgreSQL needs ``LANGCHAIN_OM_TEST_PG_DSN`` (or
``--pg-dsn``) and uses a throw-away schema on it; all traffic stays on this host's loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from langchain_om.store.base import OMStore

from .common import fmt, percentile, section_main, table
from .load_harness import LoadPlan, LoadResult, run_load

PG_ENV = "LANGCHAIN_OM_TEST_PG_DSN"


def add_arguments(parser: argparse.ArgumentParser, quick: bool) -> None:
    parser.add_argument("--users", type=lambda v: [int(x) for x in v.split(",")],
                        default=[1, 10] if quick else [1, 10, 50, 200], help="comma-separated user counts")
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--turns", type=int, default=4 if quick else 12, help="turns per user")
    parser.add_argument("--observer-latency", type=float, default=0.05 if quick else 1.0,
                        help="seconds per Observer / Reflector call")
    parser.add_argument("--agent-latency", type=float, default=0.0, help="seconds per agent model call")
    parser.add_argument("--via", choices=["middleware", "aprocess"], default="middleware")
    parser.add_argument("--no-bare", action="store_true", help="skip the runs without OM")
    parser.add_argument("--soak", type=float, default=0.0, help="minutes of soak (0: the user matrix)")
    parser.add_argument("--soak-users", type=int, default=24)
    parser.add_argument("--cache-limit", type=int, default=32, help="om.cache_limit in soak mode")
    parser.add_argument("--pg-dsn", default=os.environ.get(PG_ENV, ""))


@asynccontextmanager
async def open_store(kind: str, args: argparse.Namespace, workdir: Path) -> AsyncIterator[OMStore | None]:
    """A fresh store (None: PostgreSQL without a DSN); a PostgreSQL schema is dropped after."""
    if kind == "sqlite":
        from langchain_om.store.sqlite import SQLiteStore

        store: OMStore = SQLiteStore(str(workdir / f"load-{uuid.uuid4().hex[:8]}.db"))
        await store.asetup()
        try:
            yield store
        finally:
            await store.aclose()
        return
    if not args.pg_dsn:
        yield None
        return
    import psycopg
    from psycopg import sql

    from langchain_om.store.postgres import PostgresStore

    schema = f"om_load_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(args.pg_dsn, schema=schema)
    await store.asetup()
    try:
        yield store
    finally:
        await store.aclose()
        async with await psycopg.AsyncConnection.connect(args.pg_dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def figures(result: LoadResult) -> dict[str, Any]:
    lat, lag = result.latencies_ms, result.loop_lag_ms
    rss = [mb for _, mb in result.rss_mb]
    return {
        "turns": result.turns, "turns_per_s": result.turns / result.wall_s if result.wall_s else 0.0,
        "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
        "max_ms": max(lat, default=0.0), "lag_p99_ms": percentile(lag, 99), "lag_max_ms": max(lag, default=0.0),
        "errors": sum(result.errors.values()), "error_kinds": dict(result.errors.most_common(5)),
        "background_failures": sum(result.background_failures.values()),
        "cpu_per_turn_ms": result.cpu_per_turn_ms, "model_cpu_s": result.model_cpu_s,
        "observer_calls": result.observer_calls,
        "integrity": (result.problems or "ok") if result.checked else "n/a",
        "background_done": result.background_done, "wall_s": result.wall_s,
        "rss_mb": {"first": rss[0], "max": max(rss), "last": rss[-1], "samples": result.rss_mb} if rss else None,
    }


async def _runs(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    plans: list[tuple[str, str, LoadPlan]] = []
    for kind in args.stores:
        if args.soak:
            threads = 3 * args.cache_limit
            plans.append((kind, "soak", LoadPlan(
                users=args.soak_users, threads=threads, turns=10**6, via=args.via,
                observer_latency_s=args.observer_latency, agent_latency_s=args.agent_latency,
                cache_limit=args.cache_limit, duration_s=args.soak * 60)))
            continue
        for users in args.users:
            for with_om in ([True] if args.no_bare else [False, True]):
                plans.append((kind, f"{users}{'' if with_om else '-bare'}", LoadPlan(
                    users=users, turns=args.turns, via=args.via, with_om=with_om,
                    observer_latency_s=args.observer_latency, agent_latency_s=args.agent_latency)))
    out: dict[str, dict[str, Any]] = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns) as progress:
        for kind, name, plan in plans:
            total = None if plan.duration_s else plan.users * plan.turns
            bar = progress.add_task(f"{kind} {name} users={plan.users}", total=total)
            async with open_store(kind, args, workdir) as store:
                if store is None:
                    out.setdefault(kind, {})["skipped"] = f"no DSN ({PG_ENV} or --pg-dsn)"
                    progress.update(bar, visible=False)
                    continue
                result = await run_load(store, plan, on_turn=lambda bar=bar: progress.advance(bar))
            out.setdefault(kind, {})[name] = figures(result)
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="om-load-") as tmp:
        results = asyncio.run(_runs(args, Path(tmp)))
    for per in results.values():  # OM's own CPU per turn: with OM minus the bare agent, same N
        for name, data in list(per.items()):
            bare = per.get(f"{name}-bare")
            if isinstance(data, dict) and isinstance(bare, dict):
                data["om_cpu_per_turn_ms"] = data["cpu_per_turn_ms"] - bare["cpu_per_turn_ms"]
    params = {k: v for k, v in vars(args).items() if k != "pg_dsn"}
    return {"params": params, "stores": results}


def report(payload: dict[str, Any]) -> str:
    rows = []
    for kind, per in payload["stores"].items():
        for name, d in per.items():
            if not isinstance(d, dict):
                rows.append([kind, name, d] + [""] * 12)
                continue
            rss = d.get("rss_mb")
            rows.append([kind, name, d["turns"], fmt(d["turns_per_s"], 1), fmt(d["p50_ms"], 0), fmt(d["p95_ms"], 0),
                         fmt(d["p99_ms"], 0), fmt(d["max_ms"], 0), fmt(d["lag_p99_ms"], 0), fmt(d["lag_max_ms"], 0),
                         f"{d['errors']}/{d['background_failures']}", fmt(d["cpu_per_turn_ms"], 1),
                         fmt(d.get("om_cpu_per_turn_ms"), 1),
                         d["integrity"] if isinstance(d["integrity"], str) else f"{len(d['integrity'])} problems",
                         f"{rss['first']:.0f}->{rss['max']:.0f}->{rss['last']:.0f}" if rss else ""])
    return table("load: one process, N concurrent users (latencies ms; CPU ms per turn, scripted models excluded)",
                 ["store", "users", "turns", "turns/s", "p50", "p95", "p99", "max", "lag p99", "lag max",
                  "err/bg", "cpu/turn", "OM cpu/turn", "integrity", "RSS MB"], rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("load", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
