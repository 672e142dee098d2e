"""Several workers on one thread: step latency and OM's model spend, 1 worker against 8 (issue 32, item 5).

Workers are **separate processes** on one store (a SQLite file; a throw-away PostgreSQL schema
with ``--stores postgres``), because that is what a deployment has: each process its own
caches, background tasks and event loop, sharing only the store and its leases. (Separate
``ObservationalMemory`` instances in one process would share the in-process leases of the
in-memory store and one event loop, and hide exactly the cross-process waits measured here.)

One scripted model answers as Observer (``--observer-delay`` s) and Reflector
(``--reflector-delay`` s) and logs each call: role, trigger and input tokens (characters / 4).
Thresholds are small so that a run observes and reflects many times (``--thresholds``:
``deployment``, the default, 600 / 1,500 tokens, where one worker's buffered reflection is ready
in time, as with a deployment's 30k / 40k; ``tight``, 400 / 600, where even one worker blocks on
reflections; every verdict names its setting); buffering is on (the default ``buffer_tokens`` /
``block_after``). Three runs per setting, each on a fresh store:

* **1 worker** steps the conversation, waiting ``--agent-delay`` between steps (the agent's
  model and the user: longer than an Observer call, as a turn is);
* **8 sequential**: the same steps dealt round-robin to 8 workers, one at a time (a load
  balancer in front of one user);
* **8 concurrent**: all 8 workers replay the conversation at once, each at its own pace
  (8 requests for one thread in flight at a time).

Reported: OM's step time (``aprocess``) p50 / p95 / max over warm steps (each worker's first step,
a cold start with empty caches, is reported apart: issue 32 item 3 measures that), the steps
that blocked (took half an Observer call or more) and on what
(``data-om-wait`` debug events; a step's own synchronous Observer / Reflector call), and the
Observer's and Reflector's input tokens per stored message. Targets: 8 workers' step p95 within
2x of one worker's; Observer and Reflector input per stored message within 1.25x.

    python -m benchmarks.workers                          # SQLite
    python -m benchmarks.workers --quick                  # shorter delays and conversation
    python -m benchmarks.workers --stores sqlite,postgres --turns 40
    python -m benchmarks.workers --thresholds deployment,tight    # also the hard setting
    python -m benchmarks.workers --turns 32 --observer-delay 0.3 --reflector-delay 0.6 --agent-delay 0.1
                                                          # fast steps: turns outpace the Observer
    python -m benchmarks.workers --modes sequential --profile /tmp/om-prof   # one cProfile per worker

Not a timed test: the figures depend on scheduling; ratios are measured side by side in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import IO, Any

from .common import conversation, machine, open_store_url, percentile, section_main, table, verdicts

_TRIGGER: contextvars.ContextVar[str] = contextvars.ContextVar("workers_trigger", default="?")
_TAG = "@@"  # protocol lines on a worker's stdout start with this
BLOCKED_SHARE = 0.5
"""A step is counted as blocked when it took at least this share of the Observer's delay."""


# ------------------------------------------------------------------------------ worker


def _conversation(turns: int) -> tuple[list[Any], list[int]]:
    """The suite's chat (with tool rounds) and where each of its first ``turns`` steps ends: at a
    user message, as an agent step that has just received it."""
    full = conversation(4 * turns + 8)
    ends = [i + 1 for i, m in enumerate(full) if m.type == "human"][:turns]
    return full[: ends[-1] + 1], ends


class _Step:
    """What happened during the step a worker is running (waits named by OM's debug events)."""

    def __init__(self) -> None:
        self.active = False
        self.waits: Counter[str] = Counter()  # what the step waited for -> milliseconds
        self.own: Counter[str] = Counter()
        self.steps = 0


THRESHOLDS = {"deployment": (600, 1500), "tight": (400, 600)}
"""Named ``(observation.message_tokens, reflection.observation_tokens)`` settings. ``deployment``:
small enough that a run observes and reflects many times, large enough that one worker's
buffered reflection is ready before the log reaches ``block_after`` (as in a deployment, where
the thresholds are 30k / 40k). ``tight``: the reflection outruns buffering, so even one worker
blocks on it: the hard case, as first measured."""


def _thresholds(args: argparse.Namespace, name: str) -> tuple[int, int]:
    message, observation = THRESHOLDS[name]
    return args.message_tokens or message, args.observation_tokens or observation


def _name(args: argparse.Namespace, preset: str) -> str:
    """The setting's name, or ``custom`` when ``--message-tokens`` / ``--observation-tokens`` changed it."""
    return preset if _thresholds(args, preset) == THRESHOLDS[preset] else "custom"


def _config(args: argparse.Namespace, name: str) -> dict[str, Any]:
    message, observation = _thresholds(args, name)
    return {"observation": {"message_tokens": message}, "reflection": {"observation_tokens": observation}}


def _log_call(path: str, entry: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as log:  # one short line per call: an atomic append
        log.write(json.dumps(entry) + "\n")


async def _worker(spec: dict[str, Any]) -> None:
    """One worker process: step the thread as the parent says, log each OM model call."""
    from langchain_core.messages import BaseMessage

    from langchain_om.engine import ObservationalMemory
    from langchain_om.model_calls.reflector import REFLECTOR_PROMPT_MARKER
    from langchain_om.testing import ScriptedObserverModel

    state = _Step()
    log_path = spec["log"]

    class LoggingModel(ScriptedObserverModel):
        """The package's scripted Observer / Reflector, taking its role's delay, logging each call."""

        async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                             **kw: Any) -> Any:
            reply = await super()._agenerate(messages, stop, run_manager, **kw)
            role = "reflector" if REFLECTOR_PROMPT_MARKER in str(messages[0].content) else "observer"
            trigger = _TRIGGER.get()
            if state.active and trigger in ("turn-sync", "manual"):
                state.own[role] += 1
            chars = sum(len(str(m.content)) for m in messages)
            prompt = len(str(messages[0].content)) if len(messages) > 1 else 0  # the role's fixed instructions
            transcript = str(messages[-1].content).rpartition("<transcript>")[2] if role == "observer" else ""
            _log_call(log_path, {"role": role, "trigger": trigger, "input_tokens": chars // 4,
                                 "prompt_tokens": prompt // 4, "transcript_tokens": len(transcript) // 4,
                                 "pid": os.getpid()})
            await asyncio.sleep(spec["reflector_delay"] if role == "reflector" else spec["observer_delay"])
            return reply

    def started(ctx: Any) -> None:  # runs in the cycle's task: the model call sees its trigger
        _TRIGGER.set(ctx.trigger)

    def debug(event: Any) -> None:
        data = event.data
        if state.active and getattr(data, "phase", None) == "end" and not data.waits_for.startswith("background"):
            state.waits[data.waits_for] += round(data.waited_ms or 0.0)

    om = ObservationalMemory(open_store_url(spec["url"]), model=LoggingModel(),
                             token_counter="estimator", hooks={"on_observation_start": started,
                                                               "on_reflection_start": started},
                             on_debug_event=debug, **spec["config"])
    full, ends = _conversation(spec["turns"])
    loop = asyncio.get_running_loop()

    profiler = None
    if spec.get("profile"):
        import cProfile

        profiler = cProfile.Profile()

    async def step(k: int) -> dict[str, Any]:
        state.active, state.waits, state.own = True, Counter(), Counter()
        if profiler is not None and state.steps:  # warm steps only, as reported
            profiler.enable()
        began = time.perf_counter()
        ctx = await om.aprocess(spec["thread"], full[: ends[k]])
        ms = (time.perf_counter() - began) * 1000
        if profiler is not None:
            profiler.disable()
        state.active = False
        state.steps += 1
        return {"k": k, "ms": ms, "waits": dict(state.waits), "own": dict(state.own), "cold": state.steps == 1,
                "log": ctx.record.observation_tokens if ctx.record is not None else None}

    def say(payload: Any) -> None:
        print(_TAG + json.dumps(payload), flush=True)

    say("ready")
    while True:
        command = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if command == "go":  # concurrent: replay the whole conversation at this worker's own pace
            await asyncio.sleep(random.uniform(0, spec["agent_delay"]))
            for k in range(spec["turns"]):
                say(await step(k))
                await asyncio.sleep(spec["agent_delay"] * random.uniform(0.5, 1.5))
        elif command.isdigit():
            say(await step(int(command)))
        else:  # "end" (or the parent went away)
            break
    await om.aprocess(spec["thread"], full)
    await om.await_background()
    await om.aclose()
    if profiler is not None:  # one file per worker process: ``python -m pstats`` reads it
        profiler.dump_stats(str(Path(spec["profile"]) / f"{spec['label']}-{os.getpid()}.prof"))
    say("bye")


# ------------------------------------------------------------------------------ parent


def _read(proc: subprocess.Popen[str]) -> Any:
    stdout: IO[str] | None = proc.stdout
    assert stdout is not None
    while True:
        line = stdout.readline()
        if not line:
            raise RuntimeError(f"worker {proc.pid} ended early (exit {proc.wait()})")
        if line.startswith(_TAG):
            return json.loads(line[len(_TAG):])


def _send(proc: subprocess.Popen[str], command: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()


async def _stored(url: str, thread: str) -> int:
    from langchain_om.store.base import implicit_resource

    store = open_store_url(url)
    await store.asetup()
    rows = await store.aget_messages(implicit_resource(thread), thread)  # the workers pass no resource
    await store.aclose()
    return len(rows)


def measure(url: str, workers: int, mode: str, args: argparse.Namespace, thresholds: str = "deployment",
            ) -> dict[str, Any]:
    """Run ``workers`` processes on one thread of ``url`` in ``mode`` with the ``thresholds``
    setting; steps, waits and spend."""
    thread = f"workers-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"url": url, "thread": thread, "turns": args.turns, "log": str(Path(tmp) / "calls.jsonl"),
                "observer_delay": args.observer_delay, "reflector_delay": args.reflector_delay,
                "agent_delay": args.agent_delay, "config": _config(args, thresholds),
                "profile": args.profile, "label": f"{workers}-{mode}"}
        Path(spec["log"]).touch()
        command = [sys.executable, "-m", "benchmarks.workers", "--worker", json.dumps(spec)]
        env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH") or os.getcwd()}
        procs = [subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                 for _ in range(workers)]
        steps: list[dict[str, Any]] = []
        try:
            for proc in procs:
                _read(proc)  # "ready": imports and store setup are not part of any step
            started = time.perf_counter()
            if mode == "concurrent":
                for proc in procs:
                    _send(proc, "go")
                for proc in procs:
                    steps.extend(_read(proc) for _ in range(args.turns))
            else:
                for k in range(args.turns):
                    proc = procs[k % workers]
                    _send(proc, str(k))
                    steps.append(_read(proc))
                    time.sleep(args.agent_delay)
            for proc in procs:
                _send(proc, "end")
            for proc in procs:
                _read(proc)  # "bye": background work done
            elapsed = time.perf_counter() - started
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
        calls = [json.loads(line) for line in Path(spec["log"]).read_text().splitlines() if line.strip()]
    stored = asyncio.run(_stored(url, thread))
    return summarise(steps, calls, stored, workers, mode, elapsed, args.observer_delay)


def _reason(step: dict[str, Any]) -> str:
    own = step["own"]
    if own.get("reflector"):
        return "ran Reflector"
    if own.get("observer"):
        return "ran Observer"
    if step["waits"]:
        return "waited " + max(step["waits"], key=lambda w: step["waits"][w])
    return "unnamed"


def summarise(steps: list[dict[str, Any]], calls: list[dict[str, Any]], stored: int, workers: int, mode: str,
              elapsed: float, observer_delay: float) -> dict[str, Any]:
    warm = [s for s in steps if not s["cold"]]
    times = [s["ms"] for s in warm]
    blocked = [s for s in warm if s["ms"] >= BLOCKED_SHARE * observer_delay * 1000]
    row: dict[str, Any] = {
        "workers": workers, "mode": mode, "steps": len(steps), "stored_messages": stored, "seconds": elapsed,
        "step_ms": {"p50": percentile(times, 50), "p95": percentile(times, 95), "max": max(times, default=0.0)},
        "cold_step_ms": sorted(s["ms"] for s in steps if s["cold"]),
        "blocked": len(blocked), "blocked_by": dict(Counter(_reason(s) for s in blocked)),
        "blocked_steps": [{key: s[key] for key in ("k", "ms", "waits", "own", "log")} for s in blocked],
    }
    for role in ("observer", "reflector"):
        mine = [c for c in calls if c["role"] == role]
        row[f"{role}_calls"] = len(mine)
        row[f"{role}_calls_by_trigger"] = dict(Counter(c["trigger"] for c in mine))
        row[f"{role}_input_tokens"] = sum(c["input_tokens"] for c in mine)
        # the part that is not the role's fixed instructions: what the calls carried of the conversation
        row[f"{role}_content_tokens"] = sum(c["input_tokens"] - c.get("prompt_tokens", 0) for c in mine)
        row[f"{role}_content_sizes"] = [[c["trigger"], c["input_tokens"] - c.get("prompt_tokens", 0),
                                         c.get("transcript_tokens", 0)] for c in mine]
        row[f"{role}_per_message"] = row[f"{role}_input_tokens"] / max(1, stored)
    return row


def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def run(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    tmp = tempfile.mkdtemp(prefix="om-workers-")
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict[str, Any]]] = {}
    ratios: dict[str, float | None] = {}
    target: dict[str, bool] = {}
    for backend in args.stores:
        if backend not in ("sqlite", "postgres") or (backend == "postgres" and not dsn):
            if backend == "postgres":
                print("postgres: skipped (no --pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)")
            continue
        rows = []
        for preset in args.thresholds:
            measured = []
            for workers, mode in [(1, "sequential"), *((args.workers, m) for m in args.modes)]:
                schema = f"om_workers_{uuid.uuid4().hex[:8]}"
                url = (f"sqlite:{tmp}/om-{workers}-{mode}-{uuid.uuid4().hex[:6]}.db" if backend == "sqlite"
                       else f"postgres:{schema}:{dsn}")
                print(f"  {backend} ({preset}): {workers} worker(s), {mode} ...", flush=True)
                try:
                    measured.append(measure(url, workers, mode, args, preset))
                finally:
                    if backend == "postgres" and dsn:
                        _drop_schema(dsn, schema)
            message, observation = _thresholds(args, preset)
            name = _name(args, preset)
            setting = f"{name}: message_tokens {message}, observation_tokens {observation}"
            for row in measured:
                row["thresholds"] = name
            base = measured[0]
            for row in measured[1:]:
                label = f"{backend}/{name}/{row['mode']}/x{row['workers']}"
                p95 = row["step_ms"]["p95"] / base["step_ms"]["p95"] if base["step_ms"]["p95"] else None
                ratios[f"{label}/step_p95"] = p95
                target[f"{label} ({setting}): step p95 <= 2x one worker"] = p95 is not None and p95 <= 2.0
                for role in ("observer", "reflector"):
                    spend = (row[f"{role}_per_message"] / base[f"{role}_per_message"]
                             if base[f"{role}_per_message"] else None)
                    ratios[f"{label}/{role}_input_per_message"] = spend
                    target[f"{label} ({setting}): {role} input per stored message <= 1.25x"] = \
                        spend is not None and spend <= 1.25
            rows.extend(measured)
        results[backend] = rows
    return {"machine": machine(),
            "params": {"turns": args.turns, "workers": args.workers, "modes": args.modes,
                       "observer_delay": args.observer_delay, "reflector_delay": args.reflector_delay,
                       "agent_delay": args.agent_delay,
                       "thresholds": {_name(args, preset): _config(args, preset) for preset in args.thresholds}},
            "results": results, "ratios": ratios, "target": target}


def report(payload: dict[str, Any]) -> str:
    rows = []
    for backend, measured in payload["results"].items():
        for row in measured:
            why = ", ".join(f"{n} {k}" for k, n in sorted(row["blocked_by"].items())) or "-"
            rows.append([backend, row.get("thresholds", "-"), row["mode"], row["workers"], row["steps"],
                         row["step_ms"]["p50"], row["step_ms"]["p95"], row["step_ms"]["max"], row["blocked"], why,
                         row["stored_messages"], row["observer_calls"], row["observer_per_message"],
                         row["reflector_calls"], row["reflector_per_message"]])
    header = ["backend", "thresholds", "mode", "workers", "steps", "p50 ms", "p95 ms", "max ms", "blocked",
              "blocked by", "stored", "obs calls", "obs in/msg", "refl calls", "refl in/msg"]
    settings = "; ".join(f"{name}: message_tokens {c['observation']['message_tokens']}, observation_tokens "
                         f"{c['reflection']['observation_tokens']}"
                         for name, c in payload["params"].get("thresholds", {}).items())
    others = [name for name in THRESHOLDS if name not in payload["params"].get("thresholds", {})]
    note = f"thresholds: {settings}" + (f" (also: --thresholds {','.join(others)})" if others else "")
    return table("Several workers on one thread", header, rows) + "\n  " + note + verdicts(payload, 2)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--modes", type=lambda v: v.split(","), default=["sequential", "concurrent"])
    parser.add_argument("--turns", type=int, default=24 if quick else 48)
    parser.add_argument("--observer-delay", type=float, default=0.1 if quick else 0.4)
    parser.add_argument("--reflector-delay", type=float, default=0.2 if quick else 0.8)
    parser.add_argument("--agent-delay", type=float, default=0.25 if quick else 1.0)
    parser.add_argument("--thresholds", type=lambda v: v.split(","), default=["deployment"],
                        help="named settings to run, comma-separated: " + ", ".join(
                            f"{k} ({m}/{o})" for k, (m, o) in THRESHOLDS.items()))
    parser.add_argument("--message-tokens", type=int, default=None, help="overrides the setting's")
    parser.add_argument("--observation-tokens", type=int, default=None, help="overrides the setting's")
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite"])
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--profile", default=None, metavar="DIR",
                        help="write each worker process's cProfile of its warm steps into DIR")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("workers", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--worker":
        asyncio.run(_worker(json.loads(sys.argv[2])))
    else:
        main()
