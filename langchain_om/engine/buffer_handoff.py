"""A step waiting for this process's buffering cycle lends it the record's lock.

A worker steps faster than its Observer answers: while its buffering cycle waits for the
Observer, the window crosses ``block_after`` and the step must observe synchronously. Another
worker's cycle is waited for through the store (its ``buffer`` lease); this worker's own cycle
was not: the step holds the record's in-process lock, which the cycle needs to stage its chunk,
so waiting would deadlock. The step observed the same messages again and the cycle's chunk was
thrown away: one worker paid the Observer about twice per message (measured with
``benchmarks.observer_spend``: 60 calls for 60 turns, 55 turns sent twice).

Now the step waits for the cycle (bounded) and, while it waits, lends it the lock: the cycle
stages its chunk under the step's hold (nothing else of this process touches the record
meanwhile), and the step activates the chunk instead of paying again.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any


class LockLoans:
    """Per (event loop, record key): whether the holder of the record's lock lends it right now."""

    def __init__(self) -> None:
        # weak values: an entry lives while a lender or a borrower refers to it, so a long-running
        # server does not keep one event per record it ever saw (an absent entry is an unset loan)
        self._loans: weakref.WeakValueDictionary[tuple[int, str], asyncio.Event] = weakref.WeakValueDictionary()

    def _loan(self, key: str) -> asyncio.Event:
        slot = (id(asyncio.get_running_loop()), key)
        event = self._loans.get(slot)
        if event is None:
            event = self._loans[slot] = asyncio.Event()
        return event

    async def wait_for(self, key: str, task: asyncio.Task[Any] | None, timeout_s: float | None) -> bool:
        """Wait (at most ``timeout_s``) for this process's cycle ``task``, lending it the lock the
        caller holds. Returns whether the cycle is over (a task of another loop is not waited for)."""
        if task is None or task.done():
            return True
        if task.get_loop() is not asyncio.get_running_loop() or (timeout_s is not None and timeout_s <= 0):
            return False
        loan = self._loan(key)
        loan.set()
        try:
            done, _ = await asyncio.wait({task}, timeout=timeout_s)
        finally:
            loan.clear()
        return task in done

    @asynccontextmanager
    async def lend(self, key: str) -> AsyncIterator[None]:
        """Lend the record's lock (which the caller holds) for the block: the caller waits for
        another worker's lease and touches the record only after, on a fresh read.

        A step waiting for a lease held the lock its own process's background cycles need to
        stage their result, while holding their own leases: worker A's step waited for B's
        ``reflect`` lease, held by B's reflection waiting for B's lock, held by B's step waiting
        for A's ``buffer`` lease, held by A's chunk waiting for A's lock. Nothing moved until a
        lease wait ran out (``lease_ttl``): steps of 10 s and more with eight workers."""
        loan = self._loan(key)
        lent = not loan.is_set()
        loan.set()
        try:
            yield
        finally:
            if lent:
                loan.clear()

    @asynccontextmanager
    async def hold(self, key: str, lock: asyncio.Lock) -> AsyncIterator[None]:
        """Hold ``lock`` for the block, or a loan of it if its holder lends it first."""
        loan = self._loan(key)
        if loan.is_set():
            yield
            return
        if _free_now(lock):
            # taken at once (acquire does not suspend on a free lock nobody waits for): racing it
            # against the loan cost two tasks and two waits on every cycle's commit
            await lock.acquire()
            try:
                yield
            finally:
                lock.release()
            return
        acquiring = asyncio.ensure_future(lock.acquire())
        lent = asyncio.ensure_future(loan.wait())
        holds = False
        try:
            try:
                await asyncio.wait({acquiring, lent}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                lent.cancel()
                acquiring.cancel()  # a no-op once acquired
                await asyncio.wait({acquiring, lent})  # no stray waiter left on the lock
                holds = not acquiring.cancelled() and acquiring.exception() is None
            yield
        finally:
            if holds:
                lock.release()


def _free_now(lock: asyncio.Lock) -> bool:
    """Whether ``lock.acquire()`` returns without waiting: unlocked, and nobody queued for it. A
    lock just released to a waiter that has not run yet is unlocked but promised: a newcomer
    queues behind it, and must still see a loan its next holder may make meanwhile. An
    implementation that does not show its queue is never taken for free."""
    if lock.locked():
        return False
    waiters = getattr(lock, "_waiters", False)
    return waiters is None or (waiters is not False and not waiters)


def lease_wait(core: Any, waits_for: str, key: str, bound_s: float) -> Callable[[], AbstractAsyncContextManager[None]]:
    """For ``leases.wait_for_lease``: a step's wait for another worker's lease, named (debug
    event ``waits_for``) and lending the record's lock the step holds (``LockLoans.lend``)."""

    @asynccontextmanager
    async def waiting() -> AsyncIterator[None]:
        async with core.waiting(waits_for, key, bound_s), core._loans.lend(key):
            yield

    return waiting
