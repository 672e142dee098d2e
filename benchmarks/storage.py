"""SQLite and PostgreSQL: messages stored per second, and recall page latency at 100k stored messages.

Messages (the shared synthetic conversation, serialized like OM stores them) are appended in
batches of ``--batch`` to ``--threads`` threads of one resource until ``--messages`` are stored.
Then ``--pages`` recall pages are read at random cursors of one thread, forward and backward,
with ``langchain_om.extensions.recall.RecallTool`` (the agent's tool, low detail, default token budget)
and, for comparison, with the store's raw paging query (``aget_messages(after_seq, limit=20)``).

PostgreSQL: ``--pg-dsn`` or ``$LANGCHAIN_OM_TEST_PG_DSN``; without either a private throw-away
cluster is started with ``.ci/start_postgres.sh`` (and stopped afterwards) when that script and
the PostgreSQL binaries exist; otherwise PostgreSQL is reported as skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import dump_message, message_timestamp
from langchain_om.foundation.tokens import get_token_counter
from langchain_om.store.base import NewMessage, OMRecord, OMStore
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import START, Timer, conversation, section_main, summary, table
from .progress import note

RESOURCE = "bench-user"
ROOT = Path(__file__).resolve().parent.parent
PG_SCRIPT = ROOT / ".ci" / "start_postgres.sh"


def _rows(count: int) -> list[NewMessage]:
    """``count`` rows cycling over a 5,000-message conversation. Each base message is dumped and
    counted once and its (read-only) data shared by the rows that repeat it, built without
    validation (which would copy it): 100k rows with their own dicts held ~200 MB in every section
    that stores them, shared ~95 MB."""
    counter = get_token_counter("auto")
    base = conversation(min(count, 5000), seed=5)
    dumped = [(dump_message(m), counter.count_message(m), message_timestamp(m) or START) for m in base]
    rows: list[NewMessage] = []
    for index in range(count):
        data, tokens, created_at = dumped[index % len(dumped)]
        rows.append(NewMessage.model_construct(id=f"s{index}", data=data, tokens=tokens, created_at=created_at))
    return rows


async def bench_store(store: OMStore, rows: list[NewMessage], threads: int, batch: int, pages: int,
                      seed: int = 1, steps: int = 200) -> dict[str, Any]:
    """Append ``rows`` across ``threads`` threads, time recall pages on the first thread, then
    ``steps`` appends of two messages each (an agent step's write) on another thread."""
    await store.asetup()
    per_thread = len(rows) // threads
    for t in range(threads):
        await store.aensure_thread(RESOURCE, f"t{t}")
    with Timer() as write:
        for t in range(threads):
            part = rows[t * per_thread:(t + 1) * per_thread]
            for start in range(0, len(part), batch):
                await store.aappend_messages(RESOURCE, f"t{t}", part[start:start + batch])
    stored = per_thread * threads
    om = ObservationalMemory(store, model=ScriptedObserverModel(), retrieval=True)
    tool = om.recall_tool(thread_id="t0", resource_id=RESOURCE)
    rng = random.Random(seed)
    first = rows[:per_thread]
    recall_ms: list[float] = []
    raw_ms: list[float] = []
    pages_seen = 0
    for i in range(pages):
        cursor = first[rng.randrange(len(first))].id
        page = 1 if i % 2 == 0 else -1
        with Timer() as timer:
            result = await tool.arecall(_input(cursor, page))
        recall_ms.append(timer.ms)
        pages_seen += bool(result.get("messages") or result.get("count"))
        after = rng.randrange(per_thread)
        with Timer() as timer:
            await store.aget_messages(RESOURCE, "t0", after_seq=after, limit=20)
        raw_ms.append(timer.ms)
    step_ms: list[float] = []  # what an agent step writes: one append of two messages
    step_rows = rows[: 2 * steps]
    for index in range(steps):
        with Timer() as timer:
            await store.aappend_messages(RESOURCE, "steps", step_rows[2 * index: 2 * index + 2])
        step_ms.append(timer.ms)
    return {"messages_stored": stored, "write_seconds": write.ms / 1000, "step_append_ms": summary(step_ms),
            "messages_per_s": stored / (write.ms / 1000), "recall_page_ms": summary(recall_ms),
            "raw_page_ms": summary(raw_ms), "non_empty_pages": pages_seen, "recall_via": "RecallTool.arecall"}


async def bench_sqlite_durability(directory: str, rows: list[NewMessage], commits: int) -> dict[str, Any]:
    """Per-commit cost of SQLite's durability choices: an observation commit (marks messages
    observed) with NORMAL (the behaviour before) and with FULL (now), and a step's append under
    ``synchronous="normal"`` (default) and ``"full"``."""
    result: dict[str, Any] = {"commits": commits}
    for label, flush in (("observe_commit_normal_ms", False), ("observe_commit_full_ms", True)):
        store = SQLiteStore(os.path.join(directory, f"durability-{label}.db"))
        store._FULL_SYNC_OBSERVED = flush  # type: ignore[misc]
        try:
            await store.aappend_messages(RESOURCE, "obs", rows[: 2 * commits])
            record = OMRecord(resource_id=RESOURCE, thread_id="obs")
            times: list[float] = []
            for index in range(commits):
                with Timer() as timer:
                    record = await store.acommit_record(record, expected_version=record.version,
                                                        mark_observed={"obs": 2 * (index + 1)})
                times.append(timer.ms)
            result[label] = summary(times)
        finally:
            await store.aclose()
    for label, mode in (("append_normal_ms", "normal"), ("append_full_ms", "full")):
        store = SQLiteStore(os.path.join(directory, f"durability-{label}.db"), synchronous=mode)  # type: ignore[arg-type]
        try:
            await store.asetup()
            times = []
            for index in range(commits):
                with Timer() as timer:
                    await store.aappend_messages(RESOURCE, "app", rows[2 * index: 2 * index + 2])
                times.append(timer.ms)
            result[label] = summary(times)
        finally:
            await store.aclose()
    return result


def _input(cursor: str, page: int) -> Any:
    from langchain_om.extensions.recall import RecallInput

    return RecallInput(cursor=cursor, page=page, limit=20)


def _start_private_pg() -> tuple[str, str] | None:
    """Start a throw-away cluster with the project's script; returns (dsn, cluster dir) or None."""
    if not PG_SCRIPT.exists():
        return None
    script = f'source "{PG_SCRIPT}" >/dev/null && printf "%s\\n%s\\n" "$LANGCHAIN_OM_TEST_PG_DSN" "$OM_PG_DIR"'
    # the test cluster runs with fsync=off; a benchmark of durable writes needs it on
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "OM_PG_FSYNC": "on"})
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or len(lines) < 2:
        return None
    return lines[0], lines[1]


def _stop_private_pg(cluster_dir: str) -> None:
    """Stop the cluster this run started (pg_ctl as its owner) and delete its files."""
    data = Path(cluster_dir) / "data"
    bindir = subprocess.run(["bash", "-c", f'source <(grep "^OM_PG_BIN=" "{PG_SCRIPT}"); echo "$OM_PG_BIN"'],
                            capture_output=True, text=True, check=False).stdout.strip()
    command = [os.path.join(bindir, "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, capture_output=True, timeout=60, check=False)
    shutil.rmtree(cluster_dir, ignore_errors=True)


async def run_async(args: argparse.Namespace) -> dict[str, Any]:
    rows = _rows(args.messages)
    backends: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="om-bench-") as tmp:
        store = SQLiteStore(os.path.join(tmp, "storage.db"))
        try:
            note(f"sqlite: {len(rows):,} messages, {args.pages} recall pages")
            backends["sqlite"] = await bench_store(store, rows, args.threads, args.batch, args.pages,
                                                   steps=args.steps)
            backends["sqlite"]["durability"] = "WAL; synchronous NORMAL, FULL for commits that mark observed"
        finally:
            await store.aclose()
        note("sqlite: commits with synchronous NORMAL and FULL")
        durability = await bench_sqlite_durability(tmp, rows, args.commits)
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    started: tuple[str, str] | None = None
    if not dsn and not args.no_pg:
        started = _start_private_pg()
        dsn = started[0] if started else None
    if args.no_pg or not dsn:
        backends["postgres"] = {"skipped": "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN) and no private cluster"
                                if not args.no_pg else "--no-pg"}
    else:
        schema = f"om_bench_{uuid.uuid4().hex[:8]}"
        pg = PostgresStore(dsn, schema=schema)
        try:
            note(f"postgres: {len(rows):,} messages, {args.pages} recall pages")
            backends["postgres"] = await bench_store(pg, rows, args.threads, args.batch, args.pages,
                                                     steps=args.steps)
            backends["postgres"]["cluster"] = "private (.ci/start_postgres.sh)" if started else "given DSN"
            backends["postgres"]["durability"] = await _pg_durability(dsn)
        finally:
            await _drop_schema(pg, schema)
            await pg.aclose()
            if started:
                _stop_private_pg(started[1])
    ratios: dict[str, float] = {}
    if "messages_per_s" in backends.get("postgres", {}):
        ratios["postgres / sqlite messages per s"] = backends["postgres"]["messages_per_s"] / backends["sqlite"][
            "messages_per_s"]
        ratios["postgres / sqlite recall p95"] = backends["postgres"]["recall_page_ms"]["p95"] / backends["sqlite"][
            "recall_page_ms"]["p95"]
    return {"params": {"messages": args.messages, "threads": args.threads, "batch": args.batch, "pages": args.pages},
            "backends": backends, "ratios": ratios, "sqlite_durability": durability}


async def _pg_durability(dsn: str) -> str:
    """The server's settings that decide whether a commit survives a power loss."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        values = []
        for name in ("fsync", "synchronous_commit"):
            row = await (await conn.execute(f"SHOW {name}")).fetchone()
            values.append(f"{name}={row[0] if row else '?'}")
    return ", ".join(values)


async def _drop_schema(store: PostgresStore, schema: str) -> None:
    try:
        import psycopg

        dsn = getattr(store, "_dsn", None)
        if isinstance(dsn, str):
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    except Exception:  # cleanup of a benchmark schema is best effort
        pass


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_async(args))


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, d in payload["backends"].items():
        if "skipped" in d:
            rows.append([name, "skipped: " + d["skipped"], "", "", "", "", "", "", ""])
            continue
        rows.append([name, d["messages_stored"], d["messages_per_s"], d["step_append_ms"]["p50"],
                     d["step_append_ms"]["p95"], d["recall_page_ms"]["p50"], d["recall_page_ms"]["p95"],
                     d["raw_page_ms"]["p95"], d.get("durability", "")])
    out = table(f"Storage: {payload['params']['messages']:,} messages in batches of {payload['params']['batch']}, "
                "then appends of 2 messages (an agent step's write), "
                f"{payload['params']['pages']} recall pages (RecallTool, 20 messages)",
                ["backend", "stored", "batch messages/s", "step append p50 ms", "step append p95 ms",
                 "recall p50 ms", "recall p95 ms", "raw page p95 ms", "durability"], rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.2f}"
    durability = payload.get("sqlite_durability")
    if durability:
        out += "\n" + table(
            f"SQLite durability: {durability['commits']} commits each (ms per commit)",
            ["commit", "p50", "p95", "mean"],
            [[name.removesuffix("_ms").replace("_", " "), d["p50"], d["p95"], d["mean"]]
             for name, d in durability.items() if name.endswith("_ms")])
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--messages", type=int, default=10_000 if quick else 100_000)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--pages", type=int, default=40 if quick else 200)
    parser.add_argument("--commits", type=int, default=50 if quick else 300,
                        help="commits timed per SQLite durability setting")
    parser.add_argument("--steps", type=int, default=50 if quick else 200,
                        help="appends of two messages timed per store")
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("storage", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
