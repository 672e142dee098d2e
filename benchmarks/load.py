"""A chat server's load on one process: N concurrent users, each on its own thread (issue 33).

    python -m benchmarks.load                              # N = 1, 10, 8 turns each; SQLite and PostgreSQL
    python -m benchmarks.load --full                       # N = 1, 10, 50, 200, 12 turns each (minutes)
    python -m benchmarks.load --quick                      # N = 1, 10; a few turns, 0.05 s Observer
    python -m benchmarks.load --users 50 --stores sqlite --observer-latency 0.2
    python -m benchmarks.load --soak 8 --stores postgres   # 8 minutes over 3x cache_limit threads
    python -m benchmarks.load --users 10,50 --observer-latency 0.2 --baseline /work/wt/issuebase

Each run drives ``create_agent`` + ``ObservationalMemoryMiddleware`` (``--via aprocess`` for the
bare engine) with scripted models: the Observer and Reflector sleep ``--observer-latency`` s per
call, the agent's model ``--agent-latency`` s (``asyncio.sleep``: a provider leaves the loop
idle). The same run without OM (the bare agent) is measured beside it, so OM's own cost is the
difference. Figures per run: turns/s, per-turn p50/p95/p99/max, event-loop lag p99/max,
failed turns, background failures, CPU per turn (process CPU / turns, excluding the scripted
models' own CPU and the harness's threads: the lag probe, the progress bar's redraws; OM runs
without an ``on_debug_event`` handler, as a server does, unless ``--debug-events``) and an
integrity check (every sent message stored once, none observed twice, none sent to the Observer
twice). ``--soak M`` runs M minutes over more threads than
``om.cache_limit`` and samples RSS. PostgreSQL needs ``LANGCHAIN_OM_TEST_PG_DSN`` (or
``--pg-dsn``) and uses a throw-away schema on it; all traffic stays on this host's loopback.

``--baseline DIR`` measures another checkout beside this one: each (store, N) runs the same plan
(bare agent, then with OM) once per checkout, each in its own subprocess (that checkout's
``langchain_om`` first on ``sys.path``, this directory's harness), alternately, after a small
warm-up run in the same process; the report puts OM's CPU per turn before and after side by side.
``--rounds R`` repeats that R times (alternately) and takes the median CPU figures; a small N
gets more rounds, so that each figure covers at least ``--min-turns`` (120) turns: one user's
twelve turns are ~0.1 s of CPU, and which cycles run in the background or inline in them
depends on timing, so single 12-turn runs of the same checkout moved from 5.6 to 10.4 ms a turn.
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
import threading
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

from langchain_om.store.base import OMStore

from .common import fmt, percentile, section_main, table
from .load_harness import LoadPlan, LoadResult, run_load

PG_ENV = "LANGCHAIN_OM_TEST_PG_DSN"
HERE = Path(__file__).resolve().parent
TARGET = 0.5  # issue 33 item 3: OM's CPU per turn at most half of the baseline's
_BOOT = """
import importlib.util, json, sys
checkout, bench, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, checkout)
init = importlib.util.spec_from_file_location("benchmarks", bench + "/__init__.py", submodule_search_locations=[bench])
module = importlib.util.module_from_spec(init)
sys.modules["benchmarks"] = module
init.loader.exec_module(module)
from benchmarks.load import worker
print("LOAD_RESULT " + json.dumps(worker(spec)))
"""


def add_arguments(parser: argparse.ArgumentParser, quick: bool) -> None:
    # The suite runs the short form (1 and 10 users, 8 turns: the figures README.md quotes, ~20 s);
    # --full adds 50 and 200 users and 12 turns each.
    parser.add_argument("--full", action="store_true", help="N = 1, 10, 50, 200 users, 12 turns each")
    parser.add_argument("--users", type=lambda v: [int(x) for x in v.split(",")], default=None,
                        help="comma-separated user counts (default 1,10; --full 1,10,50,200)")
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--turns", type=int, default=None, help="turns per user (default 8; --full 12; --quick 4)")
    parser.add_argument("--observer-latency", type=float, default=0.05 if quick else 1.0,
                        help="seconds per Observer / Reflector call")
    parser.add_argument("--agent-latency", type=float, default=0.0, help="seconds per agent model call")
    parser.add_argument("--via", choices=["middleware", "aprocess"], default="middleware")
    parser.add_argument("--no-bare", action="store_true", help="skip the runs without OM")
    parser.add_argument("--debug-events", action="store_true",
                        help="run OM with an on_debug_event handler (off: OM as a server runs it)")
    parser.add_argument("--soak", type=float, default=0.0, help="minutes of soak (0: the user matrix)")
    parser.add_argument("--soak-users", type=int, default=24)
    parser.add_argument("--cache-limit", type=int, default=32, help="om.cache_limit in soak mode")
    parser.add_argument("--pg-dsn", default=os.environ.get(PG_ENV, ""))
    parser.add_argument("--baseline", default=None,
                        help="another checkout's root, measured beside this one (each in its own subprocess)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --baseline: runs per checkout and N, alternately; CPU figures are their medians")
    parser.add_argument("--min-turns", type=int, default=120,
                        help="with --baseline: more rounds for a small N, until its rounds hold this many turns")
    parser.set_defaults(load_quick=quick)


def resolve_sizes(args: argparse.Namespace) -> None:
    """Fill ``--users`` and ``--turns`` left unset from ``--quick`` / ``--full`` / the short default."""
    quick, full = getattr(args, "load_quick", False), getattr(args, "full", False)
    if args.users is None:
        args.users = [1, 10, 50, 200] if full else [1, 10]
    if args.turns is None:
        args.turns = 12 if full else 4 if quick else 8


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


async def _runs(args: argparse.Namespace, workdir: Path, *, warm_up: bool = False,
                stderr: bool = False) -> dict[str, Any]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    plans: list[tuple[str, str, LoadPlan]] = []
    debug_events = args.debug_events
    for kind in args.stores:
        if args.soak:
            threads = 3 * args.cache_limit
            plans.append((kind, "soak", LoadPlan(
                users=args.soak_users, threads=threads, turns=10**6, via=args.via,
                observer_latency_s=args.observer_latency, agent_latency_s=args.agent_latency,
                debug_events=debug_events, cache_limit=args.cache_limit, duration_s=args.soak * 60)))
            continue
        for users in args.users:
            for with_om in ([True] if args.no_bare else [False, True]):
                plans.append((kind, f"{users}{'' if with_om else '-bare'}", LoadPlan(
                    users=users, turns=args.turns, via=args.via, with_om=with_om,
                    observer_latency_s=args.observer_latency, agent_latency_s=args.agent_latency,
                    debug_events=debug_events)))
    out: dict[str, dict[str, Any]] = {}
    if warm_up:  # lazy imports and first-use caches are paid here, not in a measured run
        for kind in args.stores:
            async with open_store(kind, args, workdir) as store:
                if store is not None:
                    # the measured runs' latencies and length: with an instant Observer no step waited
                    # on a cycle and none activated, so the first measured run built those events'
                    # schemas (pydantic's deferred build, ~0.8 ms) and was charged for it
                    await run_load(store, LoadPlan(users=2, turns=max(6, args.turns), via=args.via,
                                                   observer_latency_s=args.observer_latency,
                                                   agent_latency_s=args.agent_latency,
                                                   debug_events=debug_events))
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True) if stderr else None, auto_refresh=False) as progress, \
            BarRedraws(progress) as redraws:
        for kind, name, plan in plans:
            total = None if plan.duration_s else plan.users * plan.turns
            bar = progress.add_task(f"{kind} {name} users={plan.users}", total=total)
            async with open_store(kind, args, workdir) as store:
                if store is None:
                    out.setdefault(kind, {})["skipped"] = f"no DSN ({PG_ENV} or --pg-dsn)"
                    progress.update(bar, visible=False)
                    continue
                result = await run_load(store, plan, on_turn=partial(progress.advance, bar),
                                        harness_cpu=redraws.cpu_s)
            out.setdefault(kind, {})[name] = figures(result)
    return out


class BarRedraws:
    """Redraws the progress bar from a thread of its own and counts that thread's CPU, so that the
    runs exclude it (``run_load``'s ``harness_cpu``).

    rich's own refresher thread redrew the bar 10 times a second, all of it counted as the run's
    CPU. A run with OM lasts longer in wall time than the bare agent's (with one user it mostly
    waits on the scripted Observer's latency), so it was charged more redraws: ~4 ms a run, ~0.3 ms
    of "OM's CPU" a turn with one user, none of it OM's work."""

    def __init__(self, progress: Any, every_s: float = 0.1) -> None:
        self.progress, self.every_s = progress, every_s
        self._cpu_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._redraw, name="load-progress", daemon=True)

    def __enter__(self) -> BarRedraws:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def cpu_s(self) -> float:
        """This thread's CPU so far (up to its last redraw: one redraw at most is missed)."""
        return self._cpu_s

    def _redraw(self) -> None:
        started = time.thread_time()
        while not self._stop.wait(self.every_s):
            self.progress.refresh()
            self._cpu_s = time.thread_time() - started


def _om_cpu(results: dict[str, Any]) -> dict[str, Any]:
    """OM's own CPU per turn: with OM minus the bare agent, same store and N."""
    for per in results.values():
        for name, data in list(per.items()):
            bare = per.get(f"{name}-bare")
            if isinstance(data, dict) and isinstance(bare, dict):
                data["om_cpu_per_turn_ms"] = data["cpu_per_turn_ms"] - bare["cpu_per_turn_ms"]
    return results


def run(args: argparse.Namespace) -> dict[str, Any]:
    resolve_sizes(args)
    params = {k: v for k, v in vars(args).items() if k not in ("pg_dsn", "load_quick")}
    if getattr(args, "baseline", None):
        return _side_by_side(args, params)
    with tempfile.TemporaryDirectory(prefix="om-load-") as tmp:
        results = asyncio.run(_runs(args, Path(tmp)))
    return {"params": params, "stores": _om_cpu(results)}


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One checkout's runs (inside its subprocess): the spec's flags, a warm-up run first."""
    import langchain_om

    args = argparse.Namespace(**spec)
    args.pg_dsn = os.environ.get(PG_ENV, "")
    with tempfile.TemporaryDirectory(prefix="om-load-") as tmp:
        results = asyncio.run(_runs(args, Path(tmp), warm_up=True, stderr=True))
    return {"source": str(Path(langchain_om.__file__).resolve().parent.parent), "stores": _om_cpu(results)}


def _subprocess(checkout: str, spec: dict[str, Any], pg_dsn: str) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env[PG_ENV] = pg_dsn  # through the environment, not argv: a DSN may hold a password
    done = subprocess.run([sys.executable, "-c", _BOOT, checkout, str(HERE), json.dumps(spec)],
                          stdout=subprocess.PIPE, text=True, env=env, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("LOAD_RESULT "):
            return dict(json.loads(line[len("LOAD_RESULT "):]))
    raise RuntimeError(f"load worker failed for {checkout} (exit {done.returncode}; its stderr is above)")


def _side_by_side(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """Each (store, N) ``--rounds`` times per checkout, alternately (who goes first swaps each
    time); a run's CPU figures are the medians of its rounds (a shared machine moves single runs)."""
    checkouts = {"before": str(Path(args.baseline).resolve()), "after": str(HERE.parent)}
    runs: dict[str, dict[str, Any]] = {name: {} for name in checkouts}
    sources: dict[str, str] = {}
    turn = 0
    rounds = max(1, int(getattr(args, "rounds", 1)))
    for kind in args.stores:
        for users in ([0] if args.soak else args.users):
            spec = {k: v for k, v in params.items() if k not in ("baseline", "out", "quick", "rounds")}
            spec.update(stores=[kind], users=[users] if users else args.users)
            seen: dict[str, dict[str, dict[str, list[Any]]]] = {name: {} for name in checkouts}
            per_round = max(1, (users or max(args.users)) * args.turns)
            for round_ in range(max(rounds, -(-int(getattr(args, "min_turns", 0)) // per_round))):
                order = list(checkouts.items()) if turn % 2 == 0 else list(reversed(checkouts.items()))
                turn += 1
                for name, root in order:
                    print(f"  load: {kind}, {'soak' if args.soak else f'{users} users'}, round {round_ + 1}, "
                          f"{name} ({root})", file=sys.stderr, flush=True)
                    got = _subprocess(root, spec, args.pg_dsn)
                    sources[name] = got["source"]
                    for store, per in got["stores"].items():
                        for run_name, data in per.items():
                            seen[name].setdefault(store, {}).setdefault(run_name, []).append(data)
            for name, per_store in seen.items():
                for store, per_run in per_store.items():
                    runs[name].setdefault(store, {}).update({run_name: _median_round(rounds_)
                                                             for run_name, rounds_ in per_run.items()})
    ratios: dict[str, float | None] = {}
    target: dict[str, bool] = {}
    for kind, per in runs["after"].items():
        for name, data in per.items():
            before = runs["before"].get(kind, {}).get(name)
            if not (isinstance(data, dict) and isinstance(before, dict) and "om_cpu_per_turn_ms" in data):
                continue
            b, a = before["om_cpu_per_turn_ms"], data["om_cpu_per_turn_ms"]
            ratios[f"{kind} {name} users: OM cpu/turn after / before"] = a / b if b > 0 else None
            target[f"{kind} {name} users: OM cpu/turn <= {TARGET:g} x before"] = b > 0 and a <= TARGET * b
    return {"params": params, "checkouts": checkouts, "sources": sources, "stores": runs["after"],
            "before": runs["before"], "ratios": ratios, "target": target}


def _median_round(rounds: list[Any]) -> Any:
    """One run's figures over its rounds: the first round's, with the CPU figures the rounds' medians."""
    first = rounds[0]
    if not isinstance(first, dict):
        return first
    merged = dict(first)
    for key in ("cpu_per_turn_ms", "om_cpu_per_turn_ms"):
        values = [r[key] for r in rounds if isinstance(r, dict) and r.get(key) is not None]
        if values:
            merged[key] = statistics.median(values)
            merged[f"{key}_rounds"] = values
    return merged


def report(payload: dict[str, Any]) -> str:
    if "before" not in payload:
        return _table(payload["stores"], "")
    out = _table(payload["before"], "before: ") + "\n" + _table(payload["stores"], "after: ")
    rows = []
    for kind, per in payload["stores"].items():
        for name, data in per.items():
            before = payload["before"].get(kind, {}).get(name)
            if isinstance(data, dict) and isinstance(before, dict) and "om_cpu_per_turn_ms" in data:
                ratio = payload["ratios"].get(f"{kind} {name} users: OM cpu/turn after / before")
                met = payload["target"].get(f"{kind} {name} users: OM cpu/turn <= {TARGET:g} x before")
                rows.append([kind, name, fmt(before["cpu_per_turn_ms"], 1), fmt(data["cpu_per_turn_ms"], 1),
                             fmt(before["om_cpu_per_turn_ms"], 1), fmt(data["om_cpu_per_turn_ms"], 1),
                             fmt(ratio, 2), "met" if met else "MISSED"])
    out += "\n" + table(f"load: OM's CPU per turn, before -> after (ms; target after <= {TARGET:g} x before)",
                        ["store", "users", "cpu/turn before", "after", "OM cpu/turn before", "after",
                         "after / before", "target"], rows)
    for name, root in payload["checkouts"].items():
        out += f"\n  {name}: {root} (langchain_om from {payload['sources'].get(name, '?')})"
    return out


def _table(stores: dict[str, Any], title: str) -> str:
    rows = []
    for kind, per in stores.items():
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
    return table(f"{title}load: one process, N concurrent users "
                 "(latencies ms; CPU ms per turn, scripted models excluded)",
                 ["store", "users", "turns", "turns/s", "p50", "p95", "p99", "max", "lag p99", "lag max",
                  "err/bg", "cpu/turn", "OM cpu/turn", "integrity", "RSS MB"], rows)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("load", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
