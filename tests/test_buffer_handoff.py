"""``buffer_handoff.LockLoans``: a step waiting for this process's buffering cycle lends it the lock."""

from __future__ import annotations

import asyncio

from langchain_om.engine.buffer_handoff import LockLoans


async def test_a_waiting_holder_lends_its_lock_to_the_cycle_it_waits_for() -> None:
    loans, lock = LockLoans(), asyncio.Lock()
    staged: list[str] = []

    async def cycle() -> None:
        await asyncio.sleep(0.01)  # the Observer call
        async with loans.hold("k", lock):
            staged.append("chunk")

    async with lock:  # the step holds the record's lock
        task = asyncio.create_task(cycle())
        assert await loans.wait_for("k", task, 2.0), "the cycle finished under the loan (no deadlock)"
        assert staged == ["chunk"]
    assert not lock.locked()


async def test_without_a_loan_the_cycle_takes_the_lock_and_gives_it_back() -> None:
    loans, lock = LockLoans(), asyncio.Lock()
    async with loans.hold("k", lock):
        assert lock.locked()
    assert not lock.locked()


async def test_a_loan_ends_with_the_wait_and_a_late_cycle_waits_for_the_lock() -> None:
    loans, lock = LockLoans(), asyncio.Lock()
    release = asyncio.Event()

    async def cycle() -> None:
        await release.wait()
        async with loans.hold("k", lock):
            pass

    async with lock:
        task = asyncio.create_task(cycle())
        assert not await loans.wait_for("k", task, 0.05), "timed out: the cycle is still running"
        release.set()
        await asyncio.sleep(0.02)
        assert not task.done(), "no loan any more: the cycle waits for the lock"
    await asyncio.wait_for(task, 1.0)


async def test_a_cycle_cancelled_while_waiting_for_the_lock_leaves_it_usable() -> None:
    loans, lock = LockLoans(), asyncio.Lock()

    async def cycle() -> None:
        async with loans.hold("k", lock):
            pass

    async with lock:
        task = asyncio.create_task(cycle())
        await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()
    await asyncio.wait_for(lock.acquire(), 1.0)
    lock.release()


async def test_nothing_running_is_over_at_once() -> None:
    assert await LockLoans().wait_for("k", None, 1.0)


async def test_lock_loans_keep_no_entry_per_record_once_nobody_lends() -> None:
    """A server that sees many records must not keep a loan event for each of them (issue 33:
    every in-process cache is bounded); an entry lives only while a lender or borrower holds it."""
    import gc

    from langchain_om.engine.buffer_handoff import LockLoans

    loans, lock = LockLoans(), asyncio.Lock()
    for i in range(500):
        async with loans.hold(f"user{i}\x1fthread{i}", lock):
            pass
    gc.collect()
    assert len(loans._loans) == 0


async def test_a_cycle_arriving_as_the_lock_is_handed_on_still_takes_a_loan() -> None:
    """The record's lock is free but promised (released to a queued step that has not run yet):
    a cycle arriving then queues behind the step, which takes the lock and waits for the cycle,
    lending it. The cycle must stage under the loan, not wait for the lock the step holds."""
    loans, lock, key = LockLoans(), asyncio.Lock(), "利用者\x1fスレッド"
    staged: list[str] = []
    cycle_task: asyncio.Task[None] | None = None
    finished: list[bool] = []

    async def cycle() -> None:
        async with loans.hold(key, lock):
            staged.append("chunk")

    async def step() -> None:
        async with lock:
            assert cycle_task is not None
            finished.append(await loans.wait_for(key, cycle_task, 2.0))

    await lock.acquire()  # another step holds it
    stepping = asyncio.create_task(step())
    await asyncio.sleep(0)  # the step queues for the lock
    cycle_task = asyncio.create_task(cycle())  # runs before the step wakes...
    lock.release()  # ...which is handed the lock now
    await asyncio.wait_for(stepping, 5.0)
    assert finished == [True], "the step's wait ended with the cycle done, not at its bound"
    assert staged == ["chunk"]
    await cycle_task
