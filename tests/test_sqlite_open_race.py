"""Opening a new SQLite file while another connection writes it: no "database is locked".

Switching a file to WAL needs SQLite's write lock. When another connection (a second worker
process opening the same new file) holds it, SQLite refuses the switch at once instead of
calling its busy handler (it would upgrade a read to a write, which SQLite never waits for),
so the store's ``busy_timeout_ms`` did not cover it and one worker in four died on start-up in
``benchmarks.workers``. The store now retries the switch for as long as ``busy_timeout_ms``
allows.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from langchain_om.store.base import NewMessage, StoreError
from langchain_om.store.sqlite import SQLiteStore

TEXTS = ["the invoice is due on Friday", "請求書の期限は金曜日です", "絵文字 🎉 と English"]


def _message(writer: int, i: int) -> NewMessage:
    text = f"{TEXTS[i % len(TEXTS)]} ({writer}-{i})"
    mid = f"w{writer}-m{i}"
    return NewMessage(id=mid, data={"type": "human", "data": {"content": text, "id": mid}})


def _hold_write_lock(path: Path, held: threading.Event, release: threading.Event) -> threading.Thread:
    """Another connection that creates ``path`` and keeps SQLite's write lock until ``release``."""

    def hold() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE other_writer (x)")
        held.set()
        release.wait(10)
        conn.execute("COMMIT")
        conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


async def test_a_store_opening_while_another_connection_writes_waits_and_switches_to_wal(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    held, release = threading.Event(), threading.Event()
    writer = _hold_write_lock(path, held, release)
    assert held.wait(5)
    threading.Timer(0.3, release.set).start()
    store = SQLiteStore(path)
    try:
        await store.asetup()  # failed at once with "database is locked" before the retry
        await store.aensure_thread("alice", "t1")
        await store.aappend_messages("alice", "t1", [_message(0, i) for i in range(3)])
        rows = await store.aget_messages("alice", "t1")
        assert [r.data["data"]["content"] for r in rows] == [f"{TEXTS[i]} (0-{i})" for i in range(3)]
    finally:
        await store.aclose()
        writer.join()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT count(*) FROM other_writer").fetchone()[0] == 0  # its table kept


async def test_the_wait_for_the_switch_is_bounded_by_busy_timeout_ms(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    held, release = threading.Event(), threading.Event()
    writer = _hold_write_lock(path, held, release)
    assert held.wait(5)
    store = SQLiteStore(path, busy_timeout_ms=200)
    began = time.monotonic()
    try:
        with pytest.raises(StoreError, match="database is locked"):
            await store.asetup()  # gives up while the writer still holds its lock
        assert time.monotonic() - began >= 0.2  # but only once busy_timeout_ms has passed
    finally:
        release.set()
        await store.aclose()
        writer.join()
    store = SQLiteStore(path)  # the writer is gone: the same file opens and keeps its table
    try:
        await store.asetup()
    finally:
        await store.aclose()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM other_writer").fetchone()[0] == 0


def _open_and_write(path: Path, writer: int, start: threading.Barrier, errors: list[BaseException]) -> None:
    """One writer (its own store, loop and connection): open the new file when all are ready."""

    async def run() -> None:
        store = SQLiteStore(path)
        start.wait()
        try:
            await store.aensure_thread("alice", "shared")
            await store.aappend_messages("alice", "shared", [_message(writer, i) for i in range(3)])
        finally:
            await store.aclose()

    try:
        asyncio.run(run())
    except BaseException as exc:
        errors.append(exc)


async def _stored(path: Path) -> set[str]:
    store = SQLiteStore(path)
    try:
        return {str(r.data["data"]["content"]) for r in await store.aget_messages("alice", "shared")}
    finally:
        await store.aclose()


def test_several_stores_opening_one_new_file_at_once_all_start_and_store_everything(tmp_path: Path) -> None:
    writers = 6
    for r in range(4):
        path = tmp_path / f"om-{r}.db"
        start, errors = threading.Barrier(writers), []
        threads = [threading.Thread(target=_open_and_write, args=(path, w, start, errors)) for w in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        expected = {f"{TEXTS[i % len(TEXTS)]} ({w}-{i})" for w in range(writers) for i in range(3)}
        assert asyncio.run(_stored(path)) == expected
