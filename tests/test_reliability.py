"""Reliability under faults (issue 7, item 2): SIGKILLed workers and concurrent workers.

Each test is bounded: a fixed number of kills, fixed turn counts and subprocess timeouts.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from om_checks import assert_consistent

from langchain_om.store.base import SCHEMA_VERSION, OMStore, implicit_resource

WORKER = str(Path(__file__).parent / "workers" / "om_worker.py")
TURNS = 200  # 100+ observation/activation cycles at message_tokens=300
KILLS = 8
MIN_CONCURRENT_CYCLES = 80  # measured 132-139 on 2 cores; one worker alone commits 100+


def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> tuple[str, Any]:
    if backend == "sqlite":
        path = tmp_path / "om.db"
        return f"sqlite:{path}", None
    dsn = request.getfixturevalue("pg_dsn")
    schema = f"om_rel_{uuid.uuid4().hex[:10]}"
    return f"postgres:{schema}:{dsn}", (schema, dsn)


def open_store(url: str) -> OMStore:
    sys.path.insert(0, str(Path(WORKER).parent))
    try:
        from om_worker import open_store as worker_open
    finally:
        sys.path.pop(0)
    return worker_open(url)


def drop_schema(info: Any) -> None:
    if info is None:
        return
    import psycopg
    from psycopg import sql

    schema, dsn = info
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


def spawn(url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, WORKER, url, "t1", str(TURNS), *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


@dataclass
class Outcome:
    """What the workers left in the store once they all finished."""

    cycles: int  # observation groups (reflection is off in the worker, so one per committed cycle)
    spans: list[tuple[int, int]]  # (first seq, last seq) of each group, oldest first
    last_observed: int  # the record's last observed seq


async def check(url: str) -> Outcome:
    """assert_consistent (stored once, marks agree, groups disjoint), then what was observed."""
    store = open_store(url)
    await store.asetup()
    try:
        await assert_consistent(store, implicit_resource("t1"), "t1", expected_messages=2 * TURNS)
        record = await store.aget_record(implicit_resource("t1"), "t1")
        if record is None:
            return Outcome(0, [], 0)
        seq_of = {m.id: m.seq for m in await store.aget_messages(implicit_resource("t1"), "t1")}
        spans = sorted((seq_of[g.start_id], seq_of[g.end_id]) for g in record.groups)
        return Outcome(len(record.groups), spans, record.last_observed_seq.get("t1", 0))
    finally:
        await store.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sigkill_at_random_points_loses_and_duplicates_nothing(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, info = store_url(backend, tmp_path, request)
    rng = random.Random(20261202)
    reached = -1  # the newest turn any worker reported as processed
    kill_points: list[int] = []
    try:
        for _ in range(KILLS):
            # a turn some way past the last one reached, then a random slice of time into the
            # following step, so the kill lands inside storing, observing, activating or committing
            target = min(reached + rng.randint(4, 2 * TURNS // KILLS), TURNS - 2)
            # resumes near where the last one died (re-sending the history in its first step), and
            # waits at most 2 s for the killed worker's leases to lapse
            proc = spawn(url, "--delay", "0.01", "--resume", "--lease-ttl", "2000")
            assert proc.stdout is not None
            for line in proc.stdout:
                if line.startswith("turn "):
                    reached = max(reached, int(line.split()[1]))
                    if reached >= target:
                        break
            time.sleep(rng.uniform(0.0, 0.05))
            finished = proc.poll() is not None
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            stderr = proc.stderr.read() if proc.stderr else ""
            assert not finished, f"the worker exited before its kill at turn {target}: {stderr}"
            kill_points.append(target)
            # the store must be consistent after every kill, not only at the end
            asyncio.run(_consistent_so_far(url))
        proc = spawn(url, "--delay", "0.01", "--lease-ttl", "2000")  # from turn 0: every turn re-sent once more
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
        assert "done" in out
        cycles = asyncio.run(check(url)).cycles
        assert len(set(kill_points)) == KILLS, f"kills landed at distinct turns: {kill_points}"
        assert cycles >= 100, f"only {cycles} observation/activation cycles were committed"
    finally:
        drop_schema(info)


async def _consistent_so_far(url: str) -> None:
    store = open_store(url)
    await store.asetup()
    try:
        stored = await store.aget_messages(implicit_resource("t1"), "t1")
        ids = [m.id for m in stored]
        assert len(ids) == len(set(ids))
        record = await store.aget_record(implicit_resource("t1"), "t1")
        if record is not None:
            last = record.last_observed_seq.get("t1", 0)
            assert all(m.observed == (m.seq <= last) for m in stored)
    finally:
        await store.aclose()


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_eight_concurrent_workers_never_double_observe(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url, info = store_url(backend, tmp_path, request)
    try:
        # set the schema up once so eight cold starts do not all race on migration
        asyncio.run(_setup(url))
        procs = [spawn(url, "--delay", "0.002") for _ in range(8)]
        for proc in procs:
            out, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err
            assert "done" in out
        outcome = asyncio.run(check(url))
        # the eight replays really observed: many cycles, and most of the thread is behind them
        assert outcome.cycles >= MIN_CONCURRENT_CYCLES, f"only {outcome.cycles} observation cycles were committed"
        assert outcome.last_observed >= 2 * TURNS - 20, f"only {outcome.last_observed} of {2 * TURNS} observed"
        # groups tile the observed range: disjoint, in order, no gap, starting at the first message
        assert outcome.spans[0][0] == 1
        for (_, end), (start, _) in pairwise(outcome.spans):
            assert start == end + 1, f"groups overlap or leave a gap: {outcome.spans}"
        assert outcome.spans[-1][1] == outcome.last_observed
    finally:
        drop_schema(info)


async def _setup(url: str) -> None:
    store = open_store(url)
    await store.asetup()
    await store.aclose()


# ---- schema migration 2 under SIGKILL (issue 15) ----------------------------------------------

MIGRATION_THREADS = 4000
MIGRATION_KILLS = 4  # each kill costs a Python start-up (seconds on a loaded machine)
OPEN_SCRIPT = (
    "import asyncio, sys\n"
    "from langchain_om.store.sqlite import SQLiteStore\n"
    "async def main():\n"
    "    store = SQLiteStore(sys.argv[1])\n"
    "    print('opening', flush=True)\n"
    "    await store.asetup()\n"
    "    await store.aclose()\n"
    "    print('migrated', flush=True)\n"
    "asyncio.run(main())\n"
)


def _v1_database_with_many_implicit_threads(path: Path) -> None:
    """The committed v1 fixture plus thousands of implicit threads, so migrating takes long enough
    for kills to land inside it."""
    import shutil
    import sqlite3

    shutil.copy(Path(__file__).parent / "data" / "om_v1.sqlite", path)
    with sqlite3.connect(path) as conn:
        stamp = "2026-11-30T09:00:00.000000+00:00"
        conn.executemany(
            "INSERT INTO threads (thread_id, resource_id, title, created_at, updated_at, metadata) "
            "VALUES (?, ?, NULL, ?, ?, '{}')",
            [(f"bulk-{i}", f"bulk-{i}", stamp, stamp) for i in range(MIGRATION_THREADS)],
        )
        conn.executemany(
            "INSERT INTO messages (id, resource_id, thread_id, seq, kind, data, tokens, created_at) "
            "VALUES (?, ?, ?, ?, 'message', '{}', 1, ?)",
            [(f"m{j}", f"bulk-{i}", f"bulk-{i}", j + 1, stamp) for i in range(MIGRATION_THREADS) for j in range(3)],
        )
        conn.executemany(
            "INSERT INTO kv (resource_id, namespace, key, value, updated_at) VALUES (?, 'working_memory', 'resource', "
            "'{\"value\": \"note\"}', ?)",
            [(f"bulk-{i}", stamp) for i in range(MIGRATION_THREADS)],
        )


def _migration_state(path: Path) -> int:
    """The schema version, after checking the rows agree with it: all old layout or all new."""
    import sqlite3

    from langchain_om.store.base import IMPLICIT_RESOURCE_PREFIX

    with sqlite3.connect(path) as conn:
        version = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]
        moved = {table: conn.execute(f"SELECT COUNT(*) FROM {table} WHERE resource_id LIKE ?",
                                     (IMPLICIT_RESOURCE_PREFIX + "%",)).fetchone()[0]
                 for table in ("threads", "messages", "kv", "records")}
    expected = ({"threads": MIGRATION_THREADS + 1, "messages": 3 * MIGRATION_THREADS + 15, "kv": MIGRATION_THREADS + 1,
                 "records": 1} if version == SCHEMA_VERSION else dict.fromkeys(moved, 0))
    assert version in (1, SCHEMA_VERSION) and moved == expected, \
        f"half-migrated database: version {version}, moved {moved}"
    return int(version)


def test_sigkill_during_migration_leaves_old_or_new_schema_and_reopening_finishes(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    _v1_database_with_many_implicit_threads(path)
    rng = random.Random(20261204)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    # how long one whole migration takes here, so the kills spread over it
    probe = tmp_path / "probe.db"
    _v1_database_with_many_implicit_threads(probe)
    with subprocess.Popen([sys.executable, "-c", OPEN_SCRIPT, str(probe)], stdout=subprocess.PIPE, text=True,
                          env=env) as timed:
        assert timed.stdout is not None and timed.stdout.readline().strip() == "opening"
        started = time.perf_counter()
        assert timed.stdout.readline().strip() == "migrated"
        whole = time.perf_counter() - started
    versions: list[int] = []
    for _ in range(MIGRATION_KILLS):
        proc = subprocess.Popen([sys.executable, "-c", OPEN_SCRIPT, str(path)], stdout=subprocess.PIPE, text=True,
                                env=env)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "opening"
        time.sleep(rng.uniform(0.0, whole * 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        versions.append(_migration_state(path))
        if versions[-1] == SCHEMA_VERSION:
            break
    assert versions[0] == 1, "the first kill landed inside the migration (or before it)"
    done = subprocess.run([sys.executable, "-c", OPEN_SCRIPT, str(path)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0 and "migrated" in done.stdout, done.stderr
    assert _migration_state(path) == SCHEMA_VERSION


PG_OPEN_SCRIPT = (
    "import asyncio, sys\n"
    "from langchain_om.store.postgres import PostgresStore\n"
    "async def main():\n"
    "    store = PostgresStore(sys.argv[1], schema=sys.argv[2])\n"
    "    print('opening', flush=True)\n"
    "    await store.asetup()\n"
    "    await store.aclose()\n"
    "    print('migrated', flush=True)\n"
    "asyncio.run(main())\n"
)


def _pg_v1_schema_with_many_implicit_threads(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    from langchain_om.store.base import record_key
    from langchain_om.store.postgres import MIGRATIONS

    v1 = MIGRATIONS[1]
    assert isinstance(v1, list)
    ident = sql.Identifier(schema)
    with psycopg.connect(dsn, autocommit=True) as conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        for statement in v1:
            conn.execute(sql.SQL(statement).format(s=ident))
        conn.execute(sql.SQL("CREATE TABLE {}.schema_version (version INTEGER NOT NULL)").format(ident))
        conn.execute(sql.SQL("INSERT INTO {}.schema_version VALUES (1)").format(ident))
        with conn.cursor() as cur:
            cur.executemany(sql.SQL("INSERT INTO {}.threads (thread_id, resource_id, created_at, updated_at) "
                                    "VALUES (%s, %s, now(), now())").format(ident),
                            [(f"bulk-{i}", f"bulk-{i}") for i in range(MIGRATION_THREADS)])
            cur.executemany(sql.SQL("INSERT INTO {}.messages (id, resource_id, thread_id, seq, kind, data, created_at) "
                                    "VALUES (%s, %s, %s, %s, 'message', '{{}}', now())").format(ident),
                            [(f"m{j}", f"bulk-{i}", f"bulk-{i}", j + 1)
                             for i in range(MIGRATION_THREADS) for j in range(3)])
            cur.executemany(sql.SQL("INSERT INTO {}.kv (resource_id, namespace, key, value, updated_at) VALUES "
                                    "(%s, 'working_memory', 'resource', '{{\"value\": 1}}', now())").format(ident),
                            [(f"bulk-{i}",) for i in range(MIGRATION_THREADS)])
            cur.execute(sql.SQL("INSERT INTO {}.records (key, resource_id, thread_id, scope, version, body, "
                                "updated_at) VALUES (%s, 'bulk-0', 'bulk-0', 'thread', 1, %s, now())").format(ident),
                        (record_key("bulk-0", "bulk-0"),
                         '{"resource_id": "bulk-0", "thread_id": "bulk-0", "scope": "thread"}'))


def _pg_migration_state(dsn: str, schema: str) -> int:
    import psycopg
    from psycopg import sql

    from langchain_om.store.base import IMPLICIT_RESOURCE_PREFIX

    with psycopg.connect(dsn) as conn:
        version = conn.execute(sql.SQL("SELECT MAX(version) FROM {}.schema_version").format(
            sql.Identifier(schema))).fetchone()
        moved = {}
        for table in ("threads", "messages", "kv", "records"):
            row = conn.execute(sql.SQL("SELECT COUNT(*) FROM {}.{} WHERE resource_id LIKE %s").format(
                sql.Identifier(schema), sql.Identifier(table)), (IMPLICIT_RESOURCE_PREFIX + "%",)).fetchone()
            moved[table] = row[0] if row else -1
    assert version is not None
    expected = ({"threads": MIGRATION_THREADS, "messages": 3 * MIGRATION_THREADS, "kv": MIGRATION_THREADS,
                 "records": 1} if version[0] == SCHEMA_VERSION else dict.fromkeys(moved, 0))
    assert version[0] in (1, SCHEMA_VERSION) and moved == expected, \
        f"half-migrated schema: version {version[0]}, moved {moved}"
    return int(version[0])


def test_sigkill_during_postgres_migration_leaves_old_or_new_schema(pg_dsn: str, pg_schema: str) -> None:
    _pg_v1_schema_with_many_implicit_threads(pg_dsn, pg_schema)
    rng = random.Random(20261205)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)}
    probe = f"{pg_schema}_probe"
    try:
        _pg_v1_schema_with_many_implicit_threads(pg_dsn, probe)
        with subprocess.Popen([sys.executable, "-c", PG_OPEN_SCRIPT, pg_dsn, probe], stdout=subprocess.PIPE,
                              text=True, env=env) as timed:
            assert timed.stdout is not None and timed.stdout.readline().strip() == "opening"
            started = time.perf_counter()
            assert timed.stdout.readline().strip() == "migrated"
            whole = time.perf_counter() - started
    finally:
        drop_schema((probe, pg_dsn))
    versions: list[int] = []
    for _ in range(MIGRATION_KILLS):
        proc = subprocess.Popen([sys.executable, "-c", PG_OPEN_SCRIPT, pg_dsn, pg_schema], stdout=subprocess.PIPE,
                                text=True, env=env)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "opening"
        time.sleep(rng.uniform(0.0, whole * 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        time.sleep(0.2)  # the server notices the closed connection and rolls its transaction back
        versions.append(_pg_migration_state(pg_dsn, pg_schema))
        if versions[-1] == SCHEMA_VERSION:
            break
    assert versions[0] == 1, "the first kill landed inside the migration (or before it)"
    done = subprocess.run([sys.executable, "-c", PG_OPEN_SCRIPT, pg_dsn, pg_schema], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0 and "migrated" in done.stdout, done.stderr
    assert _pg_migration_state(pg_dsn, pg_schema) == SCHEMA_VERSION
