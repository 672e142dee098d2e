"""What OM's Observer costs per stored message, with one worker and with eight (issue 16).

Workers are separate processes stepping the *same* thread through the same conversation on
one store (SQLite file, PostgreSQL schema), as a horizontally scaled agent would. The Observer
is a scripted model that takes ``--observer-delay`` seconds and logs every call: which turns
its transcript held and how many input tokens it got. Reported per backend and worker count:

* Observer calls and Observer input tokens per stored message;
* the most times one message was sent to the Observer;
* Observer input tokens per 1k conversation tokens;
* the ratio of 8 workers to 1 (target: at most 1.25x).

    python -m benchmarks.observer_spend                       # SQLite, and PostgreSQL if a DSN is set
    python -m benchmarks.observer_spend --workers 1,8 --turns 60 --pg-dsn postgresql://...

Not a timed test: the numbers depend on scheduling; the suite's smoke test only runs it small.
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from .common import machine, open_store_url, spend_history, write_result

_TURN = re.compile(r"turn (\d+):")
_TRIGGER: contextvars.ContextVar[str] = contextvars.ContextVar("observer_spend_trigger", default="?")


async def _worker(url: str, thread: str, turns: int, delay: float, log_path: str, buffering: bool) -> None:
    """One worker process: step the conversation, log every Observer call as a JSON line."""
    from langchain_core.language_models.fake_chat_models import FakeListChatModel
    from langchain_core.messages import BaseMessage

    from langchain_om.engine import ObservationalMemory

    observation = ("<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 (09:00) User keeps counting.\n"
                   "</observations>")

    class CountingObserver(FakeListChatModel):
        def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> str:
            text = str(messages[-1].content)
            transcript = text.split("<transcript>", 1)[-1]
            turns_seen = sorted({int(t) for t in _TURN.findall(transcript)})
            chars = sum(len(str(m.content)) for m in messages)
            with open(log_path, "a", encoding="utf-8") as log:  # one short line per call: atomic append
                log.write(json.dumps({"turns": turns_seen, "input_tokens": chars // 4, "pid": os.getpid(),
                                      "trigger": _TRIGGER.get(), "t": time.time()}) + "\n")
            time.sleep(delay)
            return observation

    def started(ctx: Any) -> None:  # the hook runs in the cycle's task: the Observer call sees the trigger
        _TRIGGER.set(ctx.trigger)

    om = ObservationalMemory(
        open_store_url(url), model=CountingObserver(responses=["unused"]), token_counter="estimator",
        hooks={"on_observation_start": started},
        observation={"message_tokens": 300, "buffer_tokens": 100 if buffering else False},
        reflection={"observation_tokens": 10_000_000},
    )
    full = spend_history(turns)
    for end in range(1, len(full) + 1, 2):
        await om.aprocess(thread, full[:end])
        await asyncio.sleep(0)
    await om.aprocess(thread, full)
    await om.await_background()
    await om.aclose()


async def _stored(url: str, thread: str) -> tuple[int, int]:
    store = open_store_url(url)
    await store.asetup()
    from langchain_om.store.base import implicit_resource

    rows = await store.aget_messages(implicit_resource(thread), thread)  # the workers pass no resource
    await store.aclose()
    return len(rows), sum(r.tokens for r in rows)


def measure(url: str, workers: int, turns: int, delay: float, buffering: bool) -> dict[str, Any]:
    """Run ``workers`` processes on one thread of ``url``; the Observer's spend per stored message."""
    thread = f"spend-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as tmp:
        log_path = str(Path(tmp) / "calls.jsonl")
        Path(log_path).touch()
        command = [sys.executable, "-m", "benchmarks.observer_spend", "--worker", url, thread, str(turns), str(delay),
                   log_path, "1" if buffering else "0"]
        started = time.perf_counter()
        procs = [subprocess.Popen(command, env={**os.environ, "PYTHONPATH": os.getcwd()}) for _ in range(workers)]
        codes = [p.wait(timeout=1800) for p in procs]
        elapsed = time.perf_counter() - started
        if any(codes):
            raise RuntimeError(f"a worker failed: exit codes {codes}")
        calls = [json.loads(line) for line in Path(log_path).read_text().splitlines() if line.strip()]
    count, tokens = asyncio.run(_stored(url, thread))
    sends: Counter[int] = Counter()
    for call in calls:
        sends.update(call["turns"])
    input_tokens = sum(c["input_tokens"] for c in calls)
    by_trigger: Counter[str] = Counter(c.get("trigger", "?") for c in calls)
    chunk_turns = [len(c["turns"]) for c in calls]
    return {
        "calls_by_trigger": dict(by_trigger),
        "turns_per_call": chunk_turns,
        "calls": calls if os.environ.get("OBSERVER_SPEND_KEEP_CALLS") else None,
        "workers_calling": len({c.get("pid") for c in calls}),
        "workers": workers,
        "stored_messages": count,
        "conversation_tokens": tokens,
        "observer_calls": len(calls),
        "observer_input_tokens": input_tokens,
        "calls_per_message": len(calls) / max(1, count),
        "input_tokens_per_message": input_tokens / max(1, count),
        "input_tokens_per_1k_conversation_tokens": 1000 * input_tokens / max(1, tokens),
        "max_sends_of_one_turn": max(sends.values(), default=0),
        "seconds": elapsed,
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    backends: dict[str, str] = {}
    tmp = tempfile.mkdtemp(prefix="om-spend-")
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    results: dict[str, Any] = {}
    for backend in args.stores:
        if backend == "postgres" and not dsn:
            print("postgres: skipped (no --pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)")
            continue
        rows = []
        for workers in args.workers:
            if backend == "sqlite":
                url = f"sqlite:{tmp}/om-{workers}-{uuid.uuid4().hex[:6]}.db"
            else:
                url = f"postgres:om_spend_{uuid.uuid4().hex[:8]}:{dsn}"
            backends[backend] = url
            rows.append(measure(url, workers, args.turns, args.observer_delay, not args.no_buffering))
        base = rows[0]
        for row in rows:
            for metric in ("calls_per_message", "input_tokens_per_message"):
                row[f"{metric}_vs_1"] = row[metric] / base[metric] if base[metric] else None
        results[backend] = rows
    return {"machine": machine(), "params": {"turns": args.turns, "observer_delay": args.observer_delay,
                                             "buffering": not args.no_buffering, "workers": args.workers},
            "results": results}


def report(payload: dict[str, Any]) -> str:
    lines = ["backend   workers  calls/msg  in-tok/msg  in-tok/1k-conv  max sends  calls x1  in-tok x1"]
    for backend, rows in payload["results"].items():
        for row in rows:
            lines.append(
                f"{backend:9} {row['workers']:7}  {row['calls_per_message']:9.3f}"
                f"  {row['input_tokens_per_message']:10.1f}"
                f"  {row['input_tokens_per_1k_conversation_tokens']:14.1f}  {row['max_sends_of_one_turn']:9}"
                f"  {row['calls_per_message_vs_1'] or 0:8.2f}  {row['input_tokens_per_message_vs_1'] or 0:9.2f}")
    lines.append("target: 8 workers at most 1.25x the Observer calls and input tokens per message of 1 worker")
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--workers", type=lambda v: [int(x) for x in v.split(",")], default=[1, 8])
    parser.add_argument("--turns", type=int, default=20 if quick else 60)
    parser.add_argument("--observer-delay", type=float, default=0.05)
    parser.add_argument("--stores", type=lambda v: v.split(","), default=["sqlite", "postgres"])
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-buffering", action="store_true")
    parser.add_argument("--out", type=Path, default=None)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    add_arguments(parser)
    args = parser.parse_args(argv)
    payload = run(args)
    print(report(payload))
    write_result("observer_spend", payload, args.out)
    return payload


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        url, thread, turns, delay, log_path, buffering = sys.argv[2:8]
        asyncio.run(_worker(url, thread, int(turns), float(delay), log_path, buffering == "1"))
    else:
        main()
