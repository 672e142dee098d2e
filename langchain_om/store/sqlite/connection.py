"""The SQLite store's connection: opening the file, the write lock, worker threads, checkpoints.

``SQLiteConnection`` is the base of ``SQLiteStore``: it owns the one connection per store
(guarded by a threading lock), runs calls in a worker thread or, when nothing can make them
wait, inline (``_run_inline``), keeps the WAL bounded with passive checkpoints, and migrates
the schema on open (``sqlite/schema``). The store's tables are read and written by its
subclasses; the reasons for each choice are in ``sqlite/store.py``'s docstring.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal, TypeVar

from .. import _util as u
from ..base import InvalidStoreInput, StoreError
from . import cjk as sqlite_cjk
from . import fingerprints as sqlite_fingerprints
from . import schema as schema

T = TypeVar("T")

# about 1000 WAL pages (SQLite's own autocheckpoint size) of agent steps: each step's append
# changes three rows (two messages, the thread) and writes about six pages
_CHECKPOINT_AFTER_CHANGES = 500
_RELEASE_POLL_S = 0.02  # the longest a call waiting for the connection sleeps without a wake-up
_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (named in sqlite3 only from Python 3.11)


def is_busy(exc: BaseException | None) -> bool:
    """Whether SQLite refused because another connection holds a lock."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _BUSY_CODES  # an extended code keeps the primary one in its low byte
    return "locked" in str(exc)  # Python 3.10: "database is locked", "database table is locked"


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """A write transaction that takes the database write lock before its first read."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
            conn.execute("ROLLBACK")
        raise


class SQLiteConnection:
    """One SQLite connection per store, opened on first use and migrated; subclasses run SQL on it."""

    def __init__(
        self,
        path: str | Path = "./langchain_om.db",
        *,
        busy_timeout_ms: int = 30_000,
        synchronous: Literal["normal", "full"] = "normal",
    ) -> None:
        if not isinstance(path, (str, Path)) or str(path) == "":
            raise InvalidStoreInput("path", "must be a file path or ':memory:'")
        if "\x00" in str(path):
            raise InvalidStoreInput("path", "must not contain NUL characters")
        self.path = str(path)
        self.busy_timeout_ms = u.check_count(busy_timeout_ms, "busy_timeout_ms")
        if synchronous not in ("normal", "full"):
            raise InvalidStoreInput("synchronous", f"must be 'normal' or 'full', got {synchronous!r}")
        self.synchronous = synchronous
        self._lock = threading.Lock()
        # event-loop callers waiting for a worker thread to release ``_lock`` (``_await_release``)
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._waiters_lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._changes_at_checkpoint = 0
        self._checkpoint_claimed = False  # a call is taking the due checkpoint to a worker thread
        self._waits = True  # the connection's busy timeout: busy_timeout_ms (True) or zero (inline calls)
        self._fts = schema.fts5_available()  # confirmed (index present) on every open, in _migrate

    @property
    def keyword_search_available(self) -> bool:
        """Keyword search needs SQLite's FTS5 extension (built into nearly every Python)."""
        return self._fts

    @property
    def in_memory(self) -> bool:
        return self.path == ":memory:" or self.path.startswith("file::memory:")

    def _connect(self) -> sqlite3.Connection:
        if not self.in_memory:
            Path(self.path).expanduser().parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            self.path if self.in_memory else str(Path(self.path).expanduser()),
            timeout=self.busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit; transactions are explicit BEGIN IMMEDIATE
            check_same_thread=False,  # the threading lock serialises use across worker threads
        )
        try:
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            self._waits = True
            schema.check_not_newer(conn, self.path)
            if not self.in_memory:
                self._switch_to_wal(conn)
                conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
                conn.execute("PRAGMA wal_autocheckpoint = 0")  # see _checkpoint_due and _checkpoint
            self._migrate(conn)
            self._backfill_cjk(conn)
            self._backfill_fingerprints(conn)
        except BaseException:
            conn.close()
            raise
        return conn

    def _switch_to_wal(self, conn: sqlite3.Connection) -> None:
        """Put the file in WAL mode, waiting up to ``busy_timeout_ms`` for another writer.

        The switch writes the file's header, so it needs SQLite's write lock; when another
        connection holds it (a second process opening the same new file), SQLite refuses at
        once without calling the busy handler, as it does for any read upgraded to a write.
        Retried here with a short backoff (runs in a worker thread: ``_run_inline`` never
        opens the file)."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        pause = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if not is_busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            pause = min(pause * 2, 0.05)

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with immediate(conn):
            self._fts = schema.migrate(conn, self.path)

    def _backfill_cjk(self, conn: sqlite3.Connection) -> None:
        """Index the messages stored before the CJK index existed, one committed batch at a time
        (a process killed half-way resumes from the last committed batch on its next open)."""
        while self._fts and sqlite_cjk.backfill_pending(conn):
            with immediate(conn):
                if sqlite_cjk.backfill_batch(conn):
                    return

    @staticmethod
    def _backfill_fingerprints(conn: sqlite3.Connection) -> None:
        """Fill the v9 ``fingerprint`` column of older messages, one committed batch at a time."""
        while sqlite_fingerprints.backfill_pending(conn):
            with immediate(conn):
                if sqlite_fingerprints.backfill_batch(conn):
                    return

    def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` in the calling (worker) thread, then a checkpoint if one is due."""
        try:
            with self._lock:
                result = self._locked_call(fn)
                if self._conn is not None and self._checkpoint_due(self._conn):
                    self._locked_call(self._checkpoint)
                return result
        finally:
            self._checkpoint_claimed = False
            self._wake_waiters()

    def _wake_waiters(self) -> None:
        """After ``_lock`` is released: wake every event-loop caller waiting for it."""
        if not self._waiters:  # the common case; a waiter added after this check retries the lock itself
            return
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for loop, future in waiters:
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:  # that loop is closed: nobody waits on it any more
                pass

    async def _await_release(self) -> None:
        """Wait, without a thread, until ``_lock`` is released (at once when it already is).

        The waiter is registered before the lock is tried again, so a release between the
        caller's failed try and the registration is not missed (``_wake_waiters``)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._waiters_lock:
            self._waiters.append((loop, future))
        if self._lock.acquire(blocking=False):
            self._lock.release()  # free after all: withdraw (each other waiter tries for itself)
            with self._waiters_lock:
                if (loop, future) in self._waiters:
                    self._waiters.remove((loop, future))
            return
        # a holder that took ``_lock`` without passing ``_call`` wakes nobody: look again soon
        timer = loop.call_later(_RELEASE_POLL_S, _resolve, future)
        try:
            await future
        finally:
            timer.cancel()

    def _checkpoint_due(self, conn: sqlite3.Connection) -> bool:
        return not self.in_memory and conn.total_changes - self._changes_at_checkpoint >= _CHECKPOINT_AFTER_CHANGES

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the database without waiting for anyone (PASSIVE), so the log
        stays bounded; readers or writers in other processes just make it copy less."""
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        self._changes_at_checkpoint = conn.total_changes

    def _locked_call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection (opened on first use); the caller holds ``_lock``."""
        try:
            if self._conn is None:
                self._conn = self._connect()
                self._changes_at_checkpoint = 0  # total_changes counts from each connection's opening
            self._set_waits(self._conn, True)
            return fn(self._conn)
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await asyncio.to_thread(self._call, fn)

    async def _run_inline(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A short call of a step (a one-row read, an append), run inline when nothing can make
        it wait; handing it to a worker thread costs ~0.2 ms, as much as the call itself.

        Inline only when SQLite need not wait for another connection, and no checkpoint is
        due (the one call that finds it due first takes it to a worker thread):
        the call runs with a zero busy timeout, so if another connection (or process) holds a
        lock it needs, it fails at once, rolls back, and runs again in a worker thread, waiting
        there as long as ``busy_timeout_ms`` allows. ``fn`` must therefore be a read or a whole
        transaction. While a worker thread holds the connection, the call waits on the event
        loop for its release and then runs inline: handing it to a thread of its own instead
        (as before) made every concurrent step queue a thread behind the first one, so under
        load nearly every call (2,224 of 2,265 in a 10-user run) took the dear path.
        """
        while True:
            if self._lock.acquire(blocking=False):
                try:
                    if self._conn is None:
                        break  # opening the file: a worker thread's job
                    if not self._checkpoint_claimed and self._checkpoint_due(self._conn):
                        # this call takes the checkpoint to a worker thread (``_call``); the
                        # calls arriving meanwhile run inline rather than follow it there: each
                        # taking a thread made a burst of ~50 per checkpoint under 50 users
                        self._checkpoint_claimed = True
                        break
                    try:
                        self._set_waits(self._conn, False)  # stays zero for the next inline call
                        return fn(self._conn)
                    except sqlite3.Error as exc:
                        if not is_busy(exc):
                            raise StoreError(f"SQLite error on {self.path}: {exc}") from exc
                        break  # another connection holds a lock: wait for it in a worker thread
                finally:
                    self._lock.release()
                    self._wake_waiters()
            await self._await_release()
        return await self._run(fn)

    def _set_waits(self, conn: sqlite3.Connection, waits: bool) -> None:
        """Set the busy timeout only when it changes: a run of inline calls pays no PRAGMA each
        (the caller holds ``_lock``; every use of the connection passes here first)."""
        if waits != self._waits:
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms) if waits else 0}")
            self._waits = waits

    async def asetup(self) -> None:
        """Open the file, switch to WAL and create or migrate the schema (idempotent)."""
        await self._run(lambda conn: None)

    async def aclose(self) -> None:
        """Close the connection; a later call reopens it (a ``:memory:`` database starts empty again)."""

        def close() -> None:
            try:
                with self._lock:
                    if self._conn is not None:
                        self._conn.close()
                        self._conn = None
            finally:
                self._wake_waiters()

        await asyncio.to_thread(close)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():  # a waiter cancelled meanwhile
        future.set_result(None)
