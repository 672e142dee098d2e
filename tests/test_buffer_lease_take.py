"""A buffering cycle takes its ``buffer`` lease unless a synchronous observation holds the
record's ``observe`` lease (it would take the same messages): one store call where a store can
check both (``atry_lease_unless``, SQLite), a take, a read and a give-back otherwise."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from langchain_om.engine.leases import _release, _try, lease_name, try_lease, wait_until_free
from langchain_om.store.base import OMStore, record_key

KEYS = [record_key("r1", "t1"), record_key("利用者", "スレッド🧵")]


@pytest.mark.parametrize("key", KEYS, ids=["english", "japanese"])
async def test_the_buffer_lease_is_not_taken_while_an_observation_holds_the_record(store: OMStore, key: str) -> None:
    buffer, observe = lease_name(key, "buffer"), lease_name(key, "observe")
    assert await _try(store, observe, "observing-worker", 30.0)
    async with try_lease(store, buffer, 30.0, unless_held=observe) as held:
        assert not held
        assert await _try(store, buffer, "other", 30.0), "nothing held: another worker may take it"
        await _release(store, buffer, "other")
    await _release(store, observe, "observing-worker")
    async with try_lease(store, buffer, 30.0, unless_held=observe) as held:
        assert held
        assert not await _try(store, buffer, "other", 30.0), "held for the block"
        assert await _try(store, observe, "observing-worker", 30.0), "only checked, never taken"
        await _release(store, observe, "observing-worker")
    assert await _try(store, buffer, "other", 30.0), "given back after the block"
    await _release(store, buffer, "other")


def _counted(store: Any) -> list[str]:
    """The lease calls made on ``store`` from now on, by method name."""
    calls: list[str] = []
    for method in ("atry_lease", "alease_free", "arelease_lease", "atry_lease_unless"):
        original = getattr(store, method)

        async def counted(*args: Any, _original: Any = original, _name: str = method) -> Any:
            calls.append(_name)
            return await _original(*args)

        setattr(store, method, counted)
    return calls


async def test_sqlite_takes_the_buffer_lease_in_one_call(tmp_path: Any) -> None:
    from langchain_om.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "om.db")
    await store.asetup()
    calls = _counted(store)
    key = record_key("利用者", "t1")
    async with try_lease(store, lease_name(key, "buffer"), 30.0, unless_held=lease_name(key, "observe")) as held:
        assert held and calls == ["atry_lease_unless"]
    assert calls == ["atry_lease_unless", "arelease_lease"]
    await store.aclose()


@pytest.mark.parametrize("key", KEYS, ids=["english", "japanese"])
async def test_waiting_for_a_free_lease_is_one_read_and_a_held_one_is_waited_for(tmp_path: Any, key: str) -> None:
    """A synchronous observation waits for a buffering cycle's lease to be free; free, that is one
    read (no take, give-back and heartbeat), held, it waits until the holder gives it back."""
    from langchain_om.store.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "om.db")
    await store.asetup()
    name = lease_name(key, "buffer")
    calls = _counted(store)
    await wait_until_free(store, name, 5.0)
    assert calls == ["alease_free"]
    assert await _try(store, name, "buffering-worker", 5.0)
    waits: list[str] = []

    @asynccontextmanager
    async def waiting() -> AsyncIterator[None]:
        waits.append("start")
        yield

    async def give_back_soon() -> None:
        await asyncio.sleep(0.1)
        await _release(store, name, "buffering-worker")

    giver = asyncio.create_task(give_back_soon())
    await asyncio.wait_for(wait_until_free(store, name, 5.0, waiting), 5.0)
    await giver
    assert waits == ["start"], "a held lease is waited for, and the wait is named"
    assert await _try(store, name, "other", 5.0), "nothing is left held"
    await store.aclose()
