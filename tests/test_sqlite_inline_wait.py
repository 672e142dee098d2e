"""SQLite's short calls wait on the event loop for a worker thread, then run inline (issue 33).

Under concurrency a worker thread often holds the store's connection (a long read, a record
commit). A step's short call used to hand itself to a thread of its own whenever it found the
connection taken, so each concurrent step queued a thread behind the first one and nearly every
call took the dear path. Now it waits for the release on the event loop and runs inline; it
still goes to a thread when SQLite itself must wait (another connection holds the write lock).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from langchain_om.store.base import NewMessage
from langchain_om.store.sqlite import SQLiteStore

TEXTS = ["the invoice is due on Friday", "請求書の期限は金曜日です", "emoji 🎉 and NUL \x00 kept"]


def _message(i: int) -> NewMessage:
    text = TEXTS[i % len(TEXTS)] + f" #{i}"
    return NewMessage(id=f"m{i}", data={"type": "human", "data": {"content": text, "id": f"m{i}"}})


class _CountingStore(SQLiteStore):
    """Counts the calls handed to a worker thread, and can hold the connection in one."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.thread_calls = 0

    async def _run(self, fn: Any) -> Any:
        self.thread_calls += 1
        return await super()._run(fn)

    async def hold_connection(self, started: threading.Event, release: threading.Event) -> None:
        """A worker-thread call that keeps the connection until ``release`` is set."""

        def hold(conn: sqlite3.Connection) -> None:
            started.set()
            release.wait(10)

        await super()._run(hold)


async def test_calls_queued_behind_a_worker_thread_run_inline_and_store_everything(tmp_path: Path) -> None:
    store = _CountingStore(tmp_path / "om.db")
    await store.asetup()
    try:
        for user in ("alice", "bob"):
            await store.aensure_thread(user, f"t-{user}")
        started, release = threading.Event(), threading.Event()
        holder = asyncio.create_task(store.hold_connection(started, release))
        assert await asyncio.to_thread(started.wait, 5)
        # 30 steps' appends and head reads arrive while the thread holds the connection
        appends = [
            asyncio.create_task(store.aappend_messages(user, f"t-{user}", [_message(i)]))
            for i in range(15) for user in ("alice", "bob")
        ]
        heads = [asyncio.create_task(store.aget_thread("alice", "t-alice")) for _ in range(5)]
        await asyncio.sleep(0.05)
        assert not any(task.done() for task in appends + heads), "nothing can run while the thread holds it"
        before = store.thread_calls
        release.set()
        await asyncio.gather(holder, *appends, *heads)
        assert store.thread_calls == before, "the queued calls ran inline, not in 35 more threads"
        for user in ("alice", "bob"):
            stored = await store.aget_messages(user, f"t-{user}")
            assert [m.id for m in stored] == [f"m{i}" for i in range(15)]  # each once, in order
            assert stored[1].data["data"]["content"].startswith("請求書")
    finally:
        await store.aclose()


async def test_a_cancelled_waiter_leaves_the_others_running(tmp_path: Path) -> None:
    store = _CountingStore(tmp_path / "om.db")
    await store.asetup()
    try:
        await store.aensure_thread("alice", "t1")
        started, release = threading.Event(), threading.Event()
        holder = asyncio.create_task(store.hold_connection(started, release))
        assert await asyncio.to_thread(started.wait, 5)
        doomed = asyncio.create_task(store.aappend_messages("alice", "t1", [_message(0)]))
        kept = asyncio.create_task(store.aappend_messages("alice", "t1", [_message(1)]))
        await asyncio.sleep(0.01)
        doomed.cancel()
        release.set()
        await holder
        with pytest.raises(asyncio.CancelledError):
            await doomed
        assert [m.id for m in await kept] == ["m1"]
        assert [m.id for m in await store.aget_messages("alice", "t1")] == ["m1"]
    finally:
        await store.aclose()


async def test_a_write_lock_held_by_another_connection_still_waits_in_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    store = _CountingStore(path)
    await store.asetup()
    try:
        await store.aensure_thread("alice", "t1")
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another process's writer, say
        append = asyncio.create_task(store.aappend_messages("alice", "t1", [_message(1)]))
        await asyncio.sleep(0.05)
        assert not append.done()
        assert store.thread_calls >= 1, "SQLite's own wait happens in a worker thread, not on the loop"
        other.execute("COMMIT")
        other.close()
        assert [m.id for m in await append] == ["m1"]
    finally:
        await store.aclose()


def test_calls_from_two_event_loops_in_two_threads_all_land(tmp_path: Path) -> None:
    """A waiter is woken on its own loop (a sync wrapper runs its own loop in another thread)."""
    store = SQLiteStore(tmp_path / "om.db")
    asyncio.run(store.asetup())
    asyncio.run(store.aensure_thread("alice", "t1"))
    errors: list[BaseException] = []

    def worker(offset: int) -> None:
        async def run() -> None:
            await asyncio.gather(*(
                store.aappend_messages("alice", "t1", [_message(offset + i)]) for i in range(40)
            ))
        try:
            asyncio.run(run())
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k * 100,)) for k in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    stored = asyncio.run(store.aget_messages("alice", "t1"))
    assert sorted(m.id for m in stored) == sorted(f"m{k * 100 + i}" for k in range(3) for i in range(40))
    asyncio.run(store.aclose())


async def test_a_due_checkpoint_runs_once_in_a_thread_while_concurrent_steps_stay_inline(tmp_path: Path) -> None:
    """A due WAL checkpoint is taken to a worker thread by one call; the calls that find it due
    meanwhile keep running inline instead of each taking a thread (a burst of ~50 per
    checkpoint under load)."""
    import os

    store = _CountingStore(tmp_path / "om.db")
    await store.asetup()
    try:
        users = [f"user{k}" for k in range(20)]
        for user in users:
            await store.aensure_thread(user, f"t-{user}")
        store.thread_calls = 0
        for turn in range(40):  # ~1,600 changed rows: three checkpoints or more
            await asyncio.gather(*(
                store.aappend_messages(user, f"t-{user}", [_message(2 * turn), _message(2 * turn + 1)])
                for user in users
            ))
        assert store._conn is not None
        checkpoints = store._conn.total_changes // 500  # _CHECKPOINT_AFTER_CHANGES
        assert checkpoints >= 3
        # one call per checkpoint takes it to a thread (here one was due between gathers)
        assert store.thread_calls <= checkpoints + 1, (store.thread_calls, checkpoints)
        wal = await asyncio.to_thread(os.path.getsize, f"{tmp_path / 'om.db'}-wal")
        assert 0 < wal < 4 * 1024 * 1024, wal  # checkpoints did run
        for user in (users[0], users[-1]):
            stored = await store.aget_messages(user, f"t-{user}")
            assert [m.id for m in stored] == [f"m{i}" for i in range(80)]
            assert stored[1].data["data"]["content"].startswith("請求書")
    finally:
        await store.aclose()


@asynccontextmanager
async def _three_messages(path: Path) -> AsyncIterator[_CountingStore]:
    """A counting store whose thread t1 (alice) holds three messages; closed afterwards."""
    store = _CountingStore(path)
    await store.asetup()
    try:
        await store.aensure_thread("alice", "t1")
        await store.aappend_messages("alice", "t1", [_message(i) for i in range(3)])
        yield store
    finally:
        await store.aclose()


def _observed_record(text: str) -> Any:
    from langchain_om.store import ObservationGroup, OMRecord

    group = ObservationGroup(thread_id="t1", start_id="m0", end_id="m2", text=text, tokens=12)
    return OMRecord(resource_id="alice", thread_id="t1", scope="thread", groups=[group])


@pytest.mark.parametrize("text", ["- 🔴 The user prefers trains", "- 🔴 ユーザーは電車を好む 🚄"])
async def test_a_flushed_commit_runs_inline_when_the_connection_is_free(tmp_path: Path, text: str) -> None:
    """The commit that marks messages observed (synchronous = FULL) runs on the loop like the other
    short calls: in a worker thread under a busy loop it held the one connection while it waited
    for the GIL, and every step's call queued behind it (200 users: ~90 waits a turn)."""
    async with _three_messages(tmp_path / "om.db") as store:
        before = store.thread_calls
        committed = await store.acommit_record(_observed_record(text), expected_version=0, mark_observed={"t1": 3})
        assert store.thread_calls == before
        assert committed.groups[0].text == text
        assert all(m.observed for m in await store.aget_messages("alice", "t1"))


async def test_a_flushed_commit_still_waits_in_a_thread_for_another_writer(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    async with _three_messages(path) as store:
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")
        commit = asyncio.create_task(
            store.acommit_record(_observed_record("- 🔴 請求書は金曜日"), expected_version=0, mark_observed={"t1": 3}))
        await asyncio.sleep(0.05)
        assert not commit.done() and store.thread_calls >= 1
        other.execute("COMMIT")
        other.close()
        assert (await commit).version == 1
        assert all(m.observed for m in await store.aget_messages("alice", "t1"))
