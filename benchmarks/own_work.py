"""OM's own work per step, and CPU per turn, side by side with another checkout (issues 32/33).

    python -m benchmarks.own_work                                   # this checkout alone
    python -m benchmarks.own_work --baseline /work/wt/baseline      # before/after in one run
    python -m benchmarks.own_work --quick --baseline ../main

Only OM's entry points are timed: the middleware's hooks (``awrap_model_call`` minus the model
call it wraps, plus ``aafter_agent``) and ``aprocess``, at 152 / 2k / 10k stored messages, in
process CPU time with the scripted models' own CPU taken out (so the other processes of a shared
machine do not move the figures; on an idle machine OM's inline work takes as long in wall time). Three
wirings: ``create_agent`` with a checkpointer (InMemorySaver; the state holds what OM left in
it), ``create_agent`` without one (each call sends only its new message), and ``aprocess``
handed the state a checkpointed agent would hold. Beside them, CPU per turn of the checkpointed
agent (process CPU over the timed steps, the scripted models' own CPU excluded) with OM and
without (the bare agent), so OM's CPU is the difference. The floor to compare with is one
append and one token count.

Each checkout runs in its own subprocess (its ``langchain_om`` first on ``sys.path``, these
benchmark helpers from this directory), alternately, ``--rounds`` times per size, so both sit
side by side on the same machine in one run; the report takes the median of the rounds' p50s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import section_main, table

TARGET = 0.5  # issue 32 item 2 / issue 33 item 3: at most half of the baseline's
HERE = Path(__file__).resolve().parent
CASES = ("middleware+checkpointer", "middleware-stateless", "aprocess")

_BOOT = """
import importlib.util, json, sys
checkout, bench, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path.insert(0, checkout)
spec = importlib.util.spec_from_file_location("benchmarks", bench + "/__init__.py",
                                              submodule_search_locations=[bench])
module = importlib.util.module_from_spec(spec)
sys.modules["benchmarks"] = module
spec.loader.exec_module(module)
from benchmarks.own_work import worker
print("OWN_WORK_RESULT " + json.dumps(worker(args)))
"""


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[152, 2000] if quick else [152, 2000, 10_000])
    parser.add_argument("--steps", type=int, default=6 if quick else 40)
    parser.add_argument("--rounds", type=int, default=1 if quick else 3)
    parser.add_argument("--store", choices=["sqlite", "memory", "postgres"], default="sqlite",
                        help="postgres: $LANGCHAIN_OM_TEST_PG_DSN, a throw-away schema per case")
    parser.add_argument("--baseline", default=None, help="another checkout's root, measured beside this one")
    parser.add_argument("--profile", default=None, help="write a cProfile of this checkout's steps to this file")
    parser.add_argument("--parts", action="store_true",
                        help="time each part of a checkpointed middleware step instead (CPU ms per step, inclusive)")
    parser.add_argument("--profile-case", dest="profile_case", choices=CASES, default=CASES[0])


def _subprocess(checkout: str, spec: dict[str, Any]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", _BOOT, checkout, str(HERE), json.dumps(spec)],
                          capture_output=True, text=True, env=env, check=False)
    for line in done.stdout.splitlines():
        if line.startswith("OWN_WORK_RESULT "):
            return dict(json.loads(line[len("OWN_WORK_RESULT "):]))
    raise RuntimeError(f"own_work worker failed for {checkout}:\n{done.stderr[-3000:]}")


def run(args: argparse.Namespace) -> dict[str, Any]:
    here = str(HERE.parent)
    checkouts = {"after": here}
    if args.baseline:
        checkouts = {"before": str(Path(args.baseline).resolve()), "after": here}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in checkouts}
    for size in args.sizes:
        for round_ in range(args.rounds):
            order = list(checkouts.items()) if round_ % 2 == 0 else list(reversed(checkouts.items()))
            for name, root in order:
                print(f"  own_work: {size:,} msgs, round {round_ + 1}/{args.rounds}, {name}", flush=True)
                spec = {"size": size, "steps": args.steps, "store": args.store,
                        "profile": args.profile if name == "after" and round_ == 0 and size == args.sizes[-1]
                        else None, "profile_case": args.profile_case, "parts": args.parts}
                raw[name].setdefault(str(size), []).append(_subprocess(root, spec))
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for name, per_size in raw.items():
        for size, runs in per_size.items():
            merged: dict[str, Any] = {"source": runs[0]["source"]}
            for key in runs[0]["figures"]:
                merged[key] = statistics.median(r["figures"][key] for r in runs)
            rows.setdefault(name, {})[size] = merged
    ratios: dict[str, float | None] = {}
    target: dict[str, bool] = {}
    if "before" in rows:
        for size in map(str, args.sizes):
            for key in rows["after"][size]:
                if key == "source":
                    continue
                before, after = rows["before"][size][key], rows["after"][size][key]
                ratios[f"{key} at {size}: after / before"] = after / before if before else None
                if key.endswith("own_ms") or key == "om_cpu_per_turn_ms":  # the targets (not with --parts)
                    target[f"{key} at {size} <= {TARGET:g} x before"] = bool(before) and after <= TARGET * before
    return {"params": {"sizes": args.sizes, "steps": args.steps, "rounds": args.rounds, "store": args.store,
                       "checkouts": checkouts}, "rows": rows, "ratios": ratios, "target": target}


_LABELS = {
    "middleware+checkpointer_own_ms": "middleware, checkpointer: OM hooks, CPU p50 ms",
    "middleware-stateless_own_ms": "middleware, no checkpointer: OM hooks, CPU p50 ms",
    "aprocess_own_ms": "aprocess, CPU p50 ms",
    "floor_ms": "floor: one append + one token count, ms",
    "agent_cpu_per_turn_ms": "CPU per turn, agent + OM (models excluded), ms",
    "bare_cpu_per_turn_ms": "CPU per turn, bare agent, ms",
    "om_cpu_per_turn_ms": "OM's CPU per turn (difference), ms",
}


def report(payload: dict[str, Any]) -> str:
    sizes = [str(s) for s in payload["params"]["sizes"]]
    names = list(payload["rows"])
    header = ["measure", *[f"{name} {int(size):,}" for size in sizes for name in names]]
    rows = []
    keys = [k for k in payload["rows"][names[-1]][sizes[0]] if k != "source"]
    for key in keys:
        rows.append([_LABELS.get(key, key),
                     *[payload["rows"][name][size].get(key) for size in sizes for name in names]])
    out = table(f"OM's own work per step ({payload['params']['store']}, {payload['params']['steps']} steps, "
                f"median of {payload['params']['rounds']} rounds' p50s)", header, rows)
    for name in names:
        source = payload["rows"][name][sizes[0]]["source"]
        out += f"\n  {name}: {payload['params']['checkouts'][name]} (langchain_om from {source})"
    out += "".join(f"\n  {key} = {value:.2f}" for key, value in payload["ratios"].items() if value is not None)
    out += "".join(f"\n  target {key}: {'met' if met else 'MISSED'}" for key, met in payload["target"].items())
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("own_work", __doc__, add_arguments, run, report, argv)


# --- the worker: runs inside a subprocess, with the measured checkout's langchain_om ---------------

PARTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    # (label, module, attributes patched there: a function, or Class.method); inclusive wall time,
    # an indented label is part of the one above it
    ("branch: resolve the checkpoint's branch", "langchain_om.integrations.graph", ("aresolve",)),
    ("branch: position for the state", "langchain_om.integrations.graph", ("aposition",)),
    ("branch: position at turn end", "langchain_om.integrations.middleware", ("aposition",)),
    ("aprocess (whole engine step)", "langchain_om.engine.facade", ("ObservationalMemory.aprocess",)),
    ("  thread check", "langchain_om.engine.step", ("aensure_thread",)),
    ("  thread check", "langchain_om.engine.persistence", ("aensure_thread",)),  # riding on the append since
    ("  persist new messages", "langchain_om.engine.step", ("apersist",)),
    ("  persist new messages", "langchain_om.engine.persistence", ("apersist",)),
    ("    edit detection (sort_inputs)", "langchain_om.engine.persistence", ("sort_inputs",)),
    ("    token count", "langchain_om.foundation.tokens", ("TokenCounter.count_message",)),
    ("    store append (+ search index)", "langchain_om.store.sqlite",
     ("SQLiteStore.aappend_messages", "SQLiteStore.aappend_to_incarnation", "SQLiteStore.aappend_with_head")),
    ("  record load", "langchain_om.engine.core", ("EngineCore.aload_record",)),
    ("  window", "langchain_om.engine.core", ("EngineCore.awindow",)),
    ("  phases (planner)", "langchain_om.engine.step", ("arun_phases",)),
    ("  status", "langchain_om.engine.step", ("status_of",)),
    ("  context build + render", "langchain_om.engine.step", ("abuild_context",)),
    ("  background scheduling", "langchain_om.engine.step", ("schedule",)),
    ("  event emission", "langchain_om.engine.core", ("EngineCore.dispatch",)),
    ("state trim (observed_state_ids)", "langchain_om.engine.facade", ("ObservationalMemory.observed_state_ids",)),
    ("turn end (aon_turn_end)", "langchain_om.engine.facade", ("ObservationalMemory.aon_turn_end",)),
    ("turn end (aon_turn_end)", "langchain_om.integrations.middleware", ("aturn_end",)),  # the middleware's since
)
_PART_MS: dict[str, float] = {}


def _install_parts() -> None:
    """Wrap each part's function with a timer (a name missing in a checkout is left out)."""
    import functools
    import importlib
    import inspect

    for label, module_name, attributes in PARTS:
        module = importlib.import_module(module_name)
        for attribute in attributes:
            owner: Any = module
            name = attribute
            if "." in attribute:
                owner_name, name = attribute.split(".")
                owner = getattr(module, owner_name, None)
            original = getattr(owner, name, None) if owner is not None else None
            if original is None:
                continue

            def wrap(original: Any, label: str) -> Any:
                if inspect.iscoroutinefunction(original):
                    @functools.wraps(original)
                    async def timed_async(*args: Any, **kwargs: Any) -> Any:
                        started = _om_cpu()
                        try:
                            return await original(*args, **kwargs)
                        finally:
                            _PART_MS[label] = _PART_MS.get(label, 0.0) + (_om_cpu() - started) * 1000
                    return timed_async

                @functools.wraps(original)
                def timed(*args: Any, **kwargs: Any) -> Any:
                    started = _om_cpu()
                    try:
                        return original(*args, **kwargs)
                    finally:
                        _PART_MS[label] = _PART_MS.get(label, 0.0) + (_om_cpu() - started) * 1000
                return timed

            setattr(owner, name, wrap(original, label))



def worker(spec: dict[str, Any]) -> dict[str, Any]:
    import asyncio

    import langchain_om

    figures = asyncio.run(_measure(spec))
    return {"source": str(Path(langchain_om.__file__).resolve().parent.parent), "figures": figures}


async def _measure(spec: dict[str, Any]) -> dict[str, float]:
    import cProfile
    import tempfile

    size, steps = int(spec["size"]), int(spec["steps"])
    figures: dict[str, float] = {}
    profiler = cProfile.Profile() if spec.get("profile") else None
    with tempfile.TemporaryDirectory(prefix="om-own-") as tmp:
        if spec.get("parts"):  # only the parts: the wrappers' own cost would skew the other figures
            _install_parts()
            await _case(CASES[0], size, steps, spec["store"], tmp, None)
            return {f"part: {label}": _PART_MS.get(label, 0.0) / steps for label, _m, _a in PARTS}
        for case in CASES:
            chosen = profiler if case == spec.get("profile_case", CASES[0]) else None
            own, cpu = await _case(case, size, steps, spec["store"], tmp, chosen)
            figures[f"{case}_own_ms"] = statistics.median(own)
            if case == "middleware+checkpointer":
                figures["agent_cpu_per_turn_ms"] = cpu
        _, bare = await _case("bare", size, steps, spec["store"], tmp, None)
        figures["bare_cpu_per_turn_ms"] = bare
        figures["om_cpu_per_turn_ms"] = figures["agent_cpu_per_turn_ms"] - bare
        figures["floor_ms"] = await _floor(size, spec["store"], tmp)
    if profiler is not None:
        profiler.dump_stats(spec["profile"])
    return figures


class _ModelCPU:
    """CPU and wall time spent inside the scripted models (excluded from OM's figures)."""

    cpu_s = 0.0
    wall_s = 0.0


def _om_cpu() -> float:
    """The process's CPU seconds minus the scripted models' own: what OM's figures are timed with.
    CPU, not wall time, so other processes on a shared machine do not move the figures, and
    background work that runs during an ``await`` (OM's too) is counted where it runs."""
    return time.process_time() - _ModelCPU.cpu_s


def _clocked(base: Any) -> Any:
    class Clocked(base):  # type: ignore[misc, valid-type]
        async def _agenerate(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                return await super()._agenerate(messages, stop, run_manager, **kwargs)
            finally:
                _ModelCPU.cpu_s += time.process_time() - cpu
                _ModelCPU.wall_s += time.perf_counter() - wall

        def _record(self, messages: Any, kwargs: Any) -> int:
            return int(super()._record([], kwargs))

    return Clocked


def _timed_middleware(om: Any, own: list[float], profiler: Any) -> Any:
    """The middleware with its hooks timed: ``awrap_model_call`` minus the wrapped model call,
    plus ``aafter_agent``; one figure per step."""
    from langchain_om.integrations.middleware import ObservationalMemoryMiddleware

    class Timed(ObservationalMemoryMiddleware):
        pending = 0.0

        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            inner = 0.0

            async def timed_handler(req: Any) -> Any:
                nonlocal inner
                if profiler is not None:
                    profiler.disable()
                started = _om_cpu()
                try:
                    return await handler(req)
                finally:
                    inner += _om_cpu() - started
                    if profiler is not None:
                        profiler.enable()

            if profiler is not None:
                profiler.enable()
            started = _om_cpu()
            try:
                return await super().awrap_model_call(request, timed_handler)
            finally:
                self.pending = _om_cpu() - started - inner
                if profiler is not None:
                    profiler.disable()

        async def aafter_agent(self, state: Any, runtime: Any) -> Any:
            if profiler is not None:
                profiler.enable()
            started = _om_cpu()
            try:
                return await super().aafter_agent(state, runtime)
            finally:
                own.append((_om_cpu() - started + self.pending) * 1000)
                self.pending = 0.0
                if profiler is not None:
                    profiler.disable()

    return Timed(om)


async def _case(case: str, size: int, steps: int, store_kind: str, tmp: str,
                profiler: Any) -> tuple[list[float], float]:
    """``steps`` timed steps of one wiring: OM's own ms per step, and CPU per turn (models excluded)."""
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_om.engine import ObservationalMemory
    from langchain_om.store.base import implicit_resource
    from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

    from .common import conversation, turn_messages
    from .history import OM_MESSAGE_TOKENS, OM_OBSERVATION_TOKENS, THREAD, bench_counter, preload_om

    counter = bench_counter()
    history = conversation(size)
    store: Any = _open_store(store_kind, os.path.join(tmp, f"{case}.db"))
    await preload_om(store, history, counter, unobserved_tokens=int(OM_MESSAGE_TOKENS * 0.6),
                     observation_tokens=OM_OBSERVATION_TOKENS // 2)
    record = await store.aget_record(implicit_resource(THREAD), THREAD)
    after = record.last_observed_seq.get(THREAD, 0) if record else 0
    tail_ids = {row.id for row in await store.aget_messages(implicit_resource(THREAD), THREAD, after_seq=after)}
    tail = [m for m in history if m.id in tail_ids]
    om = ObservationalMemory(store, model=_clocked(ScriptedObserverModel)(),
                             observation={"message_tokens": OM_MESSAGE_TOKENS},
                             reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)
    own: list[float] = []
    cpu_total = 0.0
    try:
        if case == "aprocess":
            state = list(tail)
            for turn in range(steps + 1):
                human, ai = turn_messages(turn)
                state.append(human)
                if profiler is not None and turn:
                    profiler.enable()
                cpu, started = time.process_time(), _om_cpu()
                await om.aprocess(THREAD, state)
                elapsed, cpu_used = _om_cpu() - started, time.process_time() - cpu
                if profiler is not None:
                    profiler.disable()
                state.append(ai)
                await om.await_background()
                if turn:
                    own.append(elapsed * 1000)
                    cpu_total += cpu_used
            return own, 1000 * cpu_total / steps
        middleware = [] if case == "bare" else [_timed_middleware(om, own, profiler)]
        saver = None if case == "middleware-stateless" else InMemorySaver()
        agent = create_agent(_clocked(ScriptedAgentModel)(), [], middleware=middleware, checkpointer=saver)
        config: Any = {"configurable": {"thread_id": THREAD}}
        first = [*tail, turn_messages(0)[0]] if saver is not None or case == "bare" else [turn_messages(0)[0]]
        await agent.ainvoke({"messages": first}, config)
        await om.await_background()
        own.clear()
        _PART_MS.clear()
        model_cpu = _ModelCPU.cpu_s
        for turn in range(1, steps + 1):
            cpu = time.process_time()
            await agent.ainvoke({"messages": [turn_messages(turn)[0]]}, config)
            cpu_total += time.process_time() - cpu
            await om.await_background()
        cpu_total -= _ModelCPU.cpu_s - model_cpu
        return own, 1000 * cpu_total / steps
    finally:
        await om.aclose(cancel=True)
        await _close_store(store)


async def _floor(size: int, store_kind: str, tmp: str) -> float:
    """One append of a new message and one token count of it: the least a step can do."""
    from langchain_om.foundation.messages import dump_message, message_timestamp
    from langchain_om.store.base import NewMessage, implicit_resource

    from .common import START, conversation, turn_messages
    from .history import THREAD, bench_counter, preload_om

    counter = bench_counter()
    store: Any = _open_store(store_kind, os.path.join(tmp, "floor.db"))
    await preload_om(store, conversation(size), counter, unobserved_tokens=18_000, observation_tokens=20_000)
    times = []
    try:
        for turn in range(30):
            human = turn_messages(turn)[0]
            started = _om_cpu()
            tokens = counter.count_text(human.text)
            await store.aappend_messages(implicit_resource(THREAD), THREAD, [NewMessage(
                id=human.id or "", data=dump_message(human), tokens=tokens,
                created_at=message_timestamp(human) or START)])
            times.append((_om_cpu() - started) * 1000)
    finally:
        await _close_store(store)
    return statistics.median(times)


if __name__ == "__main__":
    main()


def _open_store(kind: str, path: str) -> Any:
    """The case's store: in memory, a SQLite file, or a throw-away PostgreSQL schema."""
    if kind == "memory":
        from langchain_om.store.memory import InMemoryStore

        return InMemoryStore()
    if kind == "postgres":
        import uuid

        from langchain_om.store.postgres import PostgresStore

        dsn = os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
        if not dsn:
            raise SystemExit("--store postgres needs $LANGCHAIN_OM_TEST_PG_DSN")
        return PostgresStore(dsn, schema=f"om_own_{uuid.uuid4().hex[:12]}")
    from langchain_om.store.sqlite import SQLiteStore

    return SQLiteStore(path)


async def _close_store(store: Any) -> None:
    await store.aclose()
    schema = getattr(store, "schema", None) or getattr(store, "_schema", None)
    dsn = os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    if type(store).__name__ == "PostgresStore" and isinstance(schema, str) and dsn:
        import psycopg
        from psycopg import sql

        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
