"""What OM's Reflector costs with one worker and with eight on one thread (issue 30, item 5).

Workers are separate processes stepping the *same* thread through the same conversation on
one store (SQLite file, PostgreSQL schema), as a horizontally scaled agent would. The
thresholds make the observation log cross ``reflection.observation_tokens`` every few
observations, so a run reflects many times. Both OM models are one scripted fake that takes
``--model-delay`` seconds and logs each call: Observer or Reflector, and its input tokens
(characters / 4). Measured with reflection synchronous (``buffer_tokens=False``) and buffered
in the background (the default buffering), per backend:

* Reflector calls and Reflector input tokens (and the Observer's, for comparison);
* the ratio of 8 workers to 1 (target: at most 1.25x for the Reflector).

    python -m benchmarks.reflector_spend                     # SQLite, and PostgreSQL if a DSN is set
    python -m benchmarks.reflector_spend --workers 1,8 --spend-turns 40 --modes sync --stores sqlite

Not a timed test: the counts depend on scheduling; the smoke test runs it small.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from .common import machine, open_store_url, section_main, spend_history, table
from .progress import note

_MODES = ("sync", "buffered")


async def _worker(url: str, thread: str, turns: int, delay: float, log_path: str, mode: str) -> None:
    """One worker process: step the conversation, log every OM model call as a JSON line."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import BaseMessage

    from langchain_om.engine import ObservationalMemory
    from langchain_om.model_calls.reflector import build_reflector_messages

    marker = str(build_reflector_messages("x")[0].content)[:80]
    observation = ("<observations>\nDate: 2026-11-30 (Monday)\n"
                   + "".join(f"* 🟡 (09:{i:02d}) User listed item {i} of the inventory with its count.\n"
                             for i in range(8))
                   + "</observations>")
    reflection = "<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 User keeps an inventory of items.\n</observations>"

    class CountingModel(FakeListChatModel):
        def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> str:
            role = "reflector" if str(messages[0].content)[:80] == marker else "observer"
            chars = sum(len(str(m.content)) for m in messages)
            with open(log_path, "a", encoding="utf-8") as log:  # one short line per call: atomic append
                log.write(json.dumps({"role": role, "input_tokens": chars // 4, "pid": os.getpid()}) + "\n")
            time.sleep(delay)
            return reflection if role == "reflector" else observation

    om = ObservationalMemory(
        open_store_url(url), model=CountingModel(responses=["unused"]), token_counter="estimator",
        observation={"message_tokens": 300, "buffer_tokens": 100 if mode == "buffered" else False},
        reflection={"observation_tokens": 400},
    )
    full = spend_history(turns)
    for end in range(1, len(full) + 1, 2):
        await om.aprocess(thread, full[:end])
        await asyncio.sleep(0)
    await om.aprocess(thread, full)
    await om.await_background()
    await om.aclose()


def measure(url: str, workers: int, turns: int, delay: float, mode: str) -> dict[str, Any]:
    """Run ``workers`` processes on one thread of ``url``; count each OM model's calls and input."""
    thread = f"reflect-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        log_path = str(Path(tmp) / "calls.jsonl")
        Path(log_path).touch()
        command = [sys.executable, "-m", "benchmarks.reflector_spend", "--worker", url, thread, str(turns),
                   str(delay), log_path, mode]
        started = time.perf_counter()
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        procs = [subprocess.Popen(command, env=env) for _ in range(workers)]
        codes = [p.wait(timeout=1800) for p in procs]
        elapsed = time.perf_counter() - started
        if any(codes):
            raise RuntimeError(f"a worker failed: exit codes {codes}")
        calls = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    row: dict[str, Any] = {"workers": workers, "mode": mode, "seconds": elapsed}
    for role in ("reflector", "observer"):
        mine = [c for c in calls if c["role"] == role]
        row[f"{role}_calls"] = len(mine)
        row[f"{role}_input_tokens"] = sum(c["input_tokens"] for c in mine)
        row[f"{role}_workers_calling"] = len({c["pid"] for c in mine})
    return row


def run(args: argparse.Namespace) -> dict[str, Any]:
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    tmp = tempfile.mkdtemp(prefix="om-reflect-")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for backend in args.stores:
        if backend not in ("sqlite", "postgres") or (backend == "postgres" and args.no_pg):
            continue  # (--stores is shared with other sections, which also measure "memory")
        if backend == "postgres" and not dsn:
            print("postgres: skipped (no --pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)")
            continue
        for mode in args.modes:
            rows = []
            for workers in args.workers:
                url = (f"sqlite:{tmp}/om-{mode}-{workers}-{uuid.uuid4().hex[:6]}.db" if backend == "sqlite"
                       else f"postgres:om_reflect_{uuid.uuid4().hex[:8]}:{dsn}")
                note(f"{backend} {mode}: {workers} worker(s)")
                rows.append(measure(url, workers, args.spend_turns, args.model_delay, mode))
            base = rows[0]
            for row in rows:
                for metric in ("reflector_calls", "reflector_input_tokens", "observer_calls"):
                    row[f"{metric}_vs_1"] = row[metric] / base[metric] if base[metric] else None
            results.setdefault(backend, {})[mode] = rows
    ratios = {f"{backend}/{mode}/reflector_{what}_x{rows[-1]['workers']}":
              rows[-1][f"reflector_{what}_vs_1"]
              for backend, modes in results.items() for mode, rows in modes.items()
              for what in ("calls", "input_tokens")}
    return {"machine": machine(),
            "params": {"turns": args.spend_turns, "model_delay": args.model_delay, "workers": args.workers,
                       "modes": args.modes},
            "results": results, "ratios": ratios,
            "target": "Reflector calls and input tokens at 8 workers <= 1.25x of one worker"}


def report(payload: dict[str, Any]) -> str:
    rows = []
    for backend, modes in payload["results"].items():
        for mode, measured in modes.items():
            for row in measured:
                rows.append([backend, mode, row["workers"], row["reflector_calls"], row["reflector_input_tokens"],
                             row["reflector_calls_vs_1"], row["reflector_input_tokens_vs_1"], row["observer_calls"],
                             row["observer_calls_vs_1"], row["seconds"]])
    header = ["backend", "mode", "workers", "refl calls", "refl in-tok", "calls x1", "in-tok x1", "obs calls",
              "obs x1", "s"]
    return table("Reflector spend, N workers on one thread", header, rows) + "\ntarget: " + payload["target"]


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8])
    parser.add_argument("--spend-turns", type=int, default=12 if quick else 24)
    parser.add_argument("--model-delay", type=float, default=0.05)
    parser.add_argument("--modes", type=lambda v: v.split(","), default=["sync"] if quick else list(_MODES))
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-pg", action="store_true")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("reflector_spend", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, thread, turns, delay, log_path, mode = sys.argv[2:8]
        asyncio.run(_worker(url, thread, int(turns), float(delay), log_path, mode))
    else:
        main()
