"""One Observer cycle at a time per record, across workers: leases held in the store.

Eight workers stepping one thread all cross the threshold on the same step and all called the
Observer on the same messages; the record's compare-and-swap kept the log right, but every
duplicate was paid for. Before a synchronous observation a worker now takes the record's
``observe`` lease; a worker that finds it taken waits (polling, jittered) until it is free,
then reloads the record and observes only what is still unobserved, usually nothing. Background
buffering takes the ``buffer`` lease without waiting: if another worker is buffering, it skips.

Leases are rows with an expiry (SQLite and PostgreSQL, schema migration 2), renewed by a
heartbeat (``_Heartbeat``) every third of ``failure_policy.lease_ttl`` while held: a worker that dies holding
one loses it within that ttl and the work is redone once. A store
without ``atry_lease`` / ``arelease_lease`` (the in-memory store, custom stores) gets an
in-process lease, which is all a process-local store needs.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from typing import Any

from ..model_calls.failures import remaining_budget
from ..store.base import new_id

_POLL_S = (0.02, 0.25)
_local: dict[str, tuple[str, float]] = {}
_local_lock = threading.Lock()


async def _try(store: Any, name: str, owner: str, ttl_s: float) -> bool:
    if hasattr(store, "atry_lease"):
        return bool(await store.atry_lease(name, owner, ttl_s))
    now = time.monotonic()
    key = f"{id(store)}:{name}"  # in-process leases are per store object, like the data they guard
    with _local_lock:
        held = _local.get(key)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        _local[key] = (owner, now + ttl_s)
        return True


async def _release(store: Any, name: str, owner: str) -> None:
    if hasattr(store, "arelease_lease"):
        await store.arelease_lease(name, owner)
        return
    key = f"{id(store)}:{name}"
    with _local_lock:
        held = _local.get(key)
        if held is not None and held[0] == owner:
            del _local[key]


class _Heartbeat:
    """Renews a held lease every third of its ttl, so a live holder keeps it through a long
    Observer call while a dead one (no renewal) loses it within one ttl.

    A timer on the loop that starts a renewal only when one is due: most holds (a buffering
    cycle, a reflection) end before the first renewal, and a task per hold that slept until then
    cost a task, a timer, two steps and a wait to stop it on every cycle. ``stopped`` ends it
    even when a renewal in flight loses its cancellation inside a store call (Python 3.11's
    ``wait_for`` in psycopg's pool wait can swallow one): it then schedules no further renewal."""

    __slots__ = ("_handle", "_loop", "_name", "_owner", "_renewal", "_store", "_ttl_s", "stopped")

    def __init__(self, store: Any, name: str, owner: str, ttl_s: float) -> None:
        self._store, self._name, self._owner, self._ttl_s = store, name, owner, ttl_s
        self._loop = asyncio.get_running_loop()
        self._renewal: asyncio.Task[None] | None = None
        self.stopped = False
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(ttl_s / 3, self._due)

    def _due(self) -> None:
        self._handle = None
        if not self.stopped:
            self._renewal = self._loop.create_task(self._renew())

    async def _renew(self) -> None:
        try:
            kept = await _try(self._store, self._name, self._owner, self._ttl_s)
        except Exception:
            return
        # lost it (expired and taken): the record's compare-and-swap still guards the log
        if kept and not self.stopped:
            self._handle = self._loop.call_later(self._ttl_s / 3, self._due)

    async def stop(self) -> None:
        """No renewal after this; one in flight is cancelled and waited for (bounded)."""
        self.stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        renewal = self._renewal
        if renewal is not None and not renewal.done():
            await _stop(renewal, self._ttl_s)


@asynccontextmanager
async def _held(store: Any, name: str, owner: str, ttl_s: float, acquired: bool) -> AsyncIterator[None]:
    beat = _Heartbeat(store, name, owner, ttl_s) if acquired else None
    try:
        yield
    finally:
        try:
            if beat is not None:
                await beat.stop()
        finally:
            if acquired:
                await _release(store, name, owner)


async def _stop(beat: asyncio.Future[None], ttl_s: float) -> None:
    """Cancel a renewal in flight and wait for it to end, letting a cancel of the *caller* through.

    ``await beat`` after ``beat.cancel()`` cannot tell the renewal's CancelledError from the
    caller's: a cancel of the caller landing in that await is handed to the awaited renewal
    (already cancelled), comes back as its CancelledError and was swallowed with it, so the
    caller went on (``aclose(cancel=True)`` hung on a buffering cycle that then called an
    Observer which never answered). ``asyncio.wait`` never raises the renewal's outcome and
    raises the caller's own cancellation."""
    beat.cancel()
    await asyncio.wait({beat}, timeout=ttl_s)  # bounded: a renewal that lost its cancel still sees `stopped`


@asynccontextmanager
async def wait_for_lease(store: Any, name: str, ttl_s: float,
                         waiting: Callable[[], AbstractAsyncContextManager[None]] | None = None) -> AsyncIterator[bool]:
    """Hold the lease ``name`` for the block; yields whether another worker held it first.

    Waits at most ``ttl_s`` (a holder that died loses it by then) and never past the turn's
    budget; if it still cannot take it, the block runs without it (the record's compare-and-swap
    still keeps the log right, only the spend may double)."""
    owner = new_id()
    waited = False
    deadline = time.monotonic() + ttl_s + _POLL_S[1]
    acquired = await _try(store, name, owner, ttl_s)
    if not acquired:
        waited = True
        async with waiting() if waiting is not None else nullcontext():  # names the wait (debug event)
            while not acquired:
                left = remaining_budget()
                if time.monotonic() >= deadline or (left is not None and left <= 0):
                    break
                pause = random.uniform(*_POLL_S)
                await asyncio.sleep(pause if left is None else min(pause, left))
                acquired = await _try(store, name, owner, ttl_s)
    async with _held(store, name, owner, ttl_s, acquired):
        yield waited


@asynccontextmanager
async def try_lease(store: Any, name: str, ttl_s: float, *, unless_held: str | None = None) -> AsyncIterator[bool]:
    """Hold the lease ``name`` for the block if it is free; yields whether it was taken.

    ``unless_held``: and only while nobody holds that other lease (a hint, like ``is_free``). A
    store with ``atry_lease_unless`` checks both in one call; otherwise the lease is taken, the
    other one read, and the lease given back at once when the other is held."""
    owner = new_id()
    if unless_held is not None and hasattr(store, "atry_lease_unless"):
        acquired = bool(await store.atry_lease_unless(name, owner, ttl_s, unless_held))
    else:
        acquired = await _try(store, name, owner, ttl_s)
        if acquired and unless_held is not None and not await is_free(store, unless_held):
            await _release(store, name, owner)
            acquired = False
    async with _held(store, name, owner, ttl_s, acquired):
        yield acquired


async def is_free(store: Any, name: str) -> bool:
    """Whether nobody holds ``name`` right now (taken and given back at once; a hint, not a hold).

    So short a hold needs no heartbeat (and starts none). A store that can answer with a read
    (``alease_free``) does: one round trip, and no write."""
    if hasattr(store, "alease_free"):
        return bool(await store.alease_free(name))
    owner = new_id()
    if not await _try(store, name, owner, 5.0):
        return False
    await _release(store, name, owner)
    return True


async def wait_until_free(store: Any, name: str, ttl_s: float,
                          waiting: Callable[[], AbstractAsyncContextManager[None]] | None = None) -> None:
    """Wait (bounded like ``wait_for_lease``) until nobody holds ``name``.

    A free lease is seen with one read (``is_free``): taking and giving it back cost two writes
    and a heartbeat task on every synchronous observation. Only a held one is waited for."""
    if await is_free(store, name):
        return
    async with wait_for_lease(store, name, ttl_s, waiting):
        pass


def lease_name(record_key: str, purpose: str) -> str:
    return f"{purpose}:{record_key}"
