"""What only the SQLite backend promises, beside the shared conformance suite (``test_store_contract.py``):
persistence across reopen, several processes on one file, the WAL and its flushes, schema checks on open."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import sys
import textwrap
from pathlib import Path

import pytest
from test_store_contract import R1, REPO_ROOT, msg, msgs, record, seqs  # the conformance suite's builders

from langchain_om.store import (
    SCHEMA_VERSION,
    InMemoryStore,
    InvalidStoreInput,
    NewMessage,
    OMRecord,
    SQLiteStore,
    StoredMessage,
    StoreError,
    default_store,
)

_WORKER = textwrap.dedent(
    """
    import asyncio, sys
    from langchain_om.store import NewMessage, RecordConflictError, SQLiteStore

    async def main(path: str, name: str) -> None:
        store = SQLiteStore(path)
        for b in range(25):
            batch = [NewMessage(id=f"{name}-{b}-{i}", data={"w": name}) for i in range(4)]
            batch.append(NewMessage(id=f"shared-{b}", data={"w": "shared"}))
            await store.aappend_messages("res", "t", batch)
        for _ in range(15):
            while True:
                current = await store.aget_record("res", "t")
                bumped = current.model_copy(update={"metadata": {"n": current.metadata["n"] + 1}})
                try:
                    await store.acommit_record(bumped, expected_version=current.version)
                    break
                except RecordConflictError:
                    pass
        await store.aclose()

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


def test_sqlite_marks_observed_through_the_unobserved_index(tmp_path: Path) -> None:
    """A commit walks the partial index of unobserved rows, not the thread's history."""
    from langchain_om.store.sqlite import MARK_OBSERVED_SQL, MIGRATIONS

    conn = sqlite3.connect(tmp_path / "plan.db")
    for version in sorted(MIGRATIONS):
        migration = MIGRATIONS[version]
        if callable(migration):
            migration(conn)
        else:
            conn.executescript(migration)
    plan = " ".join(str(row) for row in conn.execute("EXPLAIN QUERY PLAN " + MARK_OBSERVED_SQL, ("x", "t", 5, "r")))
    assert "messages_unobserved" in plan


async def test_default_store_uses_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LANGCHAIN_OM_DB", str(tmp_path / "env.db"))
    store = default_store()
    assert isinstance(store, SQLiteStore) and store.path == str(tmp_path / "env.db")
    monkeypatch.delenv("LANGCHAIN_OM_DB")
    assert default_store().path == "./langchain_om.db"


async def test_memory_stores_are_independent() -> None:
    a, b = InMemoryStore(), InMemoryStore()
    await a.aappend_messages(R1, "t1", [msg("m1")])
    assert await b.aget_messages(R1, "t1") == []


async def test_sqlite_persists_across_reopen(sqlite_path: Path) -> None:
    first = SQLiteStore(sqlite_path)
    await first.aensure_thread(R1, "t1", title="kept")
    await first.aappend_messages(R1, "t1", msgs("m", 3))
    committed = await first.acommit_record(record(), expected_version=0, mark_observed={"t1": 2})
    await first.aput_value(R1, "wm", "doc", {"a": 1})
    await first.aclose()

    second = SQLiteStore(str(sqlite_path))
    try:
        assert (await second.aget_thread(R1, "t1")).title == "kept"  # type: ignore[union-attr]
        assert [m.observed for m in await second.aget_messages(R1, "t1")] == [True, True, False]
        assert await second.aget_record(R1, "t1") == committed
        assert await second.aget_value(R1, "wm", "doc") == {"a": 1}
        assert seqs(await second.aappend_messages(R1, "t1", [msg("m3"), msg("m4")])) == [4]
    finally:
        await second.aclose()
    with sqlite3.connect(sqlite_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]


async def test_sqlite_small_reads_never_make_the_event_loop_wait_for_a_busy_connection(sqlite_path: Path) -> None:
    """Stamp and last-seq reads run inline only when the connection is free; while a worker
    thread holds it they wait for it without blocking the loop: other coroutines keep running
    meanwhile (here the holder takes the lock directly, so no release wakes them: they look
    again on their own)."""
    import threading

    store = SQLiteStore(sqlite_path)
    await store.aappend_messages(R1, "t1", msgs("m", 3))
    v1 = await store.acommit_record(record(), expected_version=0)
    assert await store.alast_seq(R1, "t1") == 3
    assert await store.aget_record_stamp(R1, "t1") == (1, v1.updated_at)

    release = threading.Event()
    holding = threading.Event()

    def hold_connection() -> None:
        with store._lock:
            holding.set()
            release.wait(5)
        holding.clear()

    holder = threading.Thread(target=hold_connection)
    holder.start()
    holding.wait(5)
    ticks = 0

    async def ticker() -> None:  # counts only while the worker thread holds the connection
        nonlocal ticks
        while holding.is_set():
            ticks += 1
            await asyncio.sleep(0.005)

    async def release_later() -> None:
        await asyncio.sleep(0.1)
        release.set()

    stamp, seq, *_ = await asyncio.gather(
        store.aget_record_stamp(R1, "t1"), store.alast_seq(R1, "t1"), ticker(), release_later())
    holder.join(5)
    assert stamp == (1, v1.updated_at) and seq == 3
    assert ticks >= 5, "the loop kept running while the connection was busy"
    await store.aclose()


async def test_sqlite_inline_append_never_waits_for_another_process_write_lock(sqlite_path: Path) -> None:
    """An append runs inline only while SQLite's write lock is free. When another connection
    (another process, say) holds it, the append fails fast with no trace, waits in a worker
    thread, and lands once the lock is released; other coroutines keep running meanwhile."""
    store = SQLiteStore(sqlite_path)
    await store.aappend_messages(R1, "t1", msgs("a", 2))
    other = sqlite3.connect(sqlite_path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")  # holds the write lock, as a second process's writer would
    ticks = 0
    done = False

    async def ticker() -> None:
        nonlocal ticks
        while not done:
            ticks += 1
            await asyncio.sleep(0.005)

    async def append() -> list[StoredMessage]:
        nonlocal done
        try:
            return await store.aappend_messages(R1, "t1", msgs("b", 2))
        finally:
            done = True

    async def release_later() -> None:
        await asyncio.sleep(0.15)
        other.execute("COMMIT")

    inserted, *_ = await asyncio.gather(append(), ticker(), release_later())
    assert [m.seq for m in inserted] == [3, 4], "the append waited for the lock, then took the next seqs"
    assert ticks >= 10, "the loop kept running while the append waited"
    assert [m.id for m in await store.aget_messages(R1, "t1")] == ["a1", "a2", "b1", "b2"], "stored once each"
    other.close()
    await store.aclose()


async def test_sqlite_checkpoints_keep_the_wal_bounded(sqlite_path: Path) -> None:
    """Commits never checkpoint (that would flush on the event loop); the store checkpoints in
    its worker thread every few hundred changed rows, so the WAL stays small however long the
    thread gets."""
    store = SQLiteStore(sqlite_path)
    for reopened in range(2):  # a closed store reopens its connection: the count starts again
        for step in range(1500):
            await store.aappend_messages(R1, "t1", msgs(f"s{reopened}-{step}-", 2))
        wal_size = await asyncio.to_thread(os.path.getsize, f"{sqlite_path}-wal")
        # 1500 steps write ~9000 WAL pages (~36 MB) when nothing checkpoints
        assert 0 < wal_size < 8 * 1024 * 1024, (reopened, wal_size)
        assert await store.alast_seq(R1, "t1") == 3000 * (reopened + 1)
        await store.aclose()


async def test_sqlite_memory_path() -> None:
    store = SQLiteStore(":memory:")
    await store.aappend_messages(R1, "t1", msgs("m", 2))
    assert seqs(await store.aget_messages(R1, "t1")) == [1, 2]
    await store.aclose()


async def test_sqlite_refuses_newer_schema(sqlite_path: Path) -> None:
    store = SQLiteStore(sqlite_path)
    await store.aappend_messages(R1, "t1", msgs("m", 2))
    await store.aclose()
    with sqlite3.connect(sqlite_path) as conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.close()
    before = await asyncio.to_thread(sqlite_path.read_bytes)

    newer = SQLiteStore(sqlite_path)
    with pytest.raises(StoreError, match="newer"):
        await newer.asetup()
    with pytest.raises(StoreError, match="newer"):
        await newer.aget_messages(R1, "t1")
    await newer.aclose()
    assert await asyncio.to_thread(sqlite_path.read_bytes) == before, "the newer file is left untouched"


async def test_sqlite_rejects_garbage_file(tmp_path: Path) -> None:
    path = tmp_path / "not-a-db.db"
    path.write_bytes(b"this is not sqlite" * 100)
    store = SQLiteStore(path)
    with pytest.raises(StoreError):
        await store.asetup()


async def test_sqlite_two_processes_on_one_file(sqlite_path: Path) -> None:
    """Two OS processes append to one thread and CAS one record: no duplicate seq, no lost update."""
    store = SQLiteStore(sqlite_path)
    await store.acommit_record(OMRecord(resource_id="res", thread_id="t", metadata={"n": 0}), expected_version=0)
    env = {"PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin"}
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable, "-c", _WORKER, str(sqlite_path), name, env=env, stderr=asyncio.subprocess.PIPE
        )
        for name in ("proc-a", "proc-b")
    ]
    try:
        for b in range(25):  # this process writes too, at the same time
            await store.aappend_messages("res", "t", [NewMessage(id=f"main-{b}-{i}", data={}) for i in range(2)])
        for proc in procs:
            _, err = await asyncio.wait_for(proc.communicate(), timeout=120)
            assert proc.returncode == 0, err.decode()
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    rows = await store.aget_messages("res", "t")
    expected = 2 * 25 * 4 + 25 + 25 * 2
    assert seqs(rows) == list(range(1, expected + 1)), "seq is gap-free and unique across processes"
    assert len({m.id for m in rows}) == expected
    final = await store.aget_record("res", "t")
    assert final is not None and final.metadata["n"] == 30 and final.version == 31
    await store.aclose()


async def test_sqlite_flushes_commits_that_mark_messages_observed(sqlite_path: Path) -> None:
    """A commit that marks messages observed runs with synchronous = FULL (durable before the
    checkpoint that drops those messages from the state); appends and plain commits keep NORMAL."""
    store = SQLiteStore(sqlite_path)
    await store.aappend_messages(R1, "t1", msgs("m", 4))
    statements: list[str] = []
    assert store._conn is not None
    store._conn.set_trace_callback(statements.append)
    created = await store.acommit_record(record(), expected_version=0)
    plain = list(statements)
    statements.clear()
    await store.acommit_record(created, expected_version=1, mark_observed={"t1": 2})
    # (the busy timeout is switched between inline calls and worker-thread calls: not the point here)
    marking = [s for s in statements if not s.startswith("PRAGMA busy_timeout")]
    statements.clear()
    await store.aappend_messages(R1, "t1", msgs("n", 2))
    append = list(statements)
    await store.aclose()
    assert not any("synchronous" in s for s in plain + append)
    assert marking[0] == "PRAGMA synchronous = FULL" and marking[1] == "BEGIN IMMEDIATE"
    assert marking[-1] == "PRAGMA synchronous = NORMAL" and "COMMIT" in marking
    assert [m.observed for m in await SQLiteStore(sqlite_path).aget_messages(R1, "t1")][:3] == [True, True, False]
    with pytest.raises(InvalidStoreInput) as err:
        SQLiteStore(sqlite_path, synchronous="off")  # type: ignore[arg-type]
    assert err.value.field == "synchronous"
    always = SQLiteStore(sqlite_path, synchronous="full")
    await always.asetup()
    assert always._conn is not None and always._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    await always.aclose()
