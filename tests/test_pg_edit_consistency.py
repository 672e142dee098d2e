"""Issue 44, items 1 and 2: on PostgreSQL an edited message is indexed with its new words or with its
old ones, never with a mix, whatever happens while it is written.

1. ``areplace_message`` writes the row, both keyword indexes (English ``tsvector``, CJK bigrams)
   and drops the vectors: one transaction. A worker killed between two of those statements
   (simulated in process at each statement, and for real with SIGKILL in a subprocess) leaves the
   old text with the old entries: "peanuts" and ピーナッツ find it, "shellfish" and 甲殻類 do not,
   and the next edit applies in full.
2. The v7 CJK backfill (a schema upgraded from v6) indexes messages while another worker serves:
   an edit or a thread deleted and started again during a batch never leaves the old text
   indexed (話題 finds nothing, 青い鳥 finds the new message).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from langchain_om.store import NewMessage, PostgresStore, VectorItem
from langchain_om.store.postgres import backfill as postgres_backfill
from langchain_om.store.postgres import cjk as postgres_cjk
from langchain_om.store.postgres import connection as postgres_connection
from langchain_om.store.postgres import store as postgres_store
from langchain_om.store.search import encode_vector

pytestmark = pytest.mark.postgres

R, T = "res-edit", "thread-edit"
OLD = "I am allergic to peanuts. ピーナッツアレルギーがあります。"
NEW = "Correction: I am allergic to shellfish. 甲殻類アレルギーです。"
SPACE = "test-space"


def human(mid: str, text: str) -> NewMessage:
    return NewMessage(id=mid, data={"type": "human", "data": {"content": text}})


def content(text: str) -> dict[str, Any]:
    return {"type": "human", "data": {"content": text}}


@pytest.fixture
async def pg(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.asetup()
    try:
        yield store
    finally:
        await store.aclose()


async def found(store: PostgresStore, query: str) -> set[str]:
    return {hit.message.id for hit in await store.asearch_messages(R, query)}


async def assert_indexed_as(store: PostgresStore, text: str) -> None:
    """The message reads ``text`` and every index agrees: its words found, the other text's not."""
    other = NEW if text == OLD else OLD
    [message] = await store.aget_messages(R, T)
    assert message.data["data"]["content"] == text
    for query in (("peanuts", "ピーナッツ") if text == OLD else ("shellfish", "甲殻類")):
        assert await found(store, query) == {"m1"}, f"{query!r} should find the message reading {text!r}"
    for query in (("shellfish", "甲殻類") if text == OLD else ("peanuts", "ピーナッツ")):
        assert await found(store, query) == set(), f"{query!r} found the message reading {text!r} ({other!r} gone)"


async def seed(store: PostgresStore) -> None:
    await store.aappend_messages(R, T, [human("m1", OLD)])
    await store.aput_vectors(R, SPACE, [VectorItem(thread_id=T, message_id="m1", vector=encode_vector([1.0, 0.0]))])


class SimulatedKill(BaseException):
    """The worker dying at a statement (a BaseException: nothing on the way catches it)."""


# each point is a statement of the edit after the row's UPDATE: the CJK entry, the vectors' lock
KILL_POINTS = ["index_cjk", "lock_vectors"]


@pytest.mark.parametrize("point", KILL_POINTS)
async def test_an_edit_killed_half_way_leaves_the_old_text_consistently_indexed(
    pg: PostgresStore, monkeypatch: pytest.MonkeyPatch, point: str
) -> None:
    await seed(pg)
    await assert_indexed_as(pg, OLD)

    async def killed(*args: Any, **kwargs: Any) -> None:
        raise SimulatedKill(point)

    real = getattr(postgres_store, point)
    monkeypatch.setattr(postgres_store, point, killed)
    with pytest.raises(SimulatedKill):
        await pg.areplace_message(R, T, "m1", content(NEW), 12)
    await assert_indexed_as(pg, OLD)
    assert len(await pg.aget_vectors(R, SPACE)) == 1, "the old text keeps its vector"
    monkeypatch.setattr(postgres_store, point, real)
    assert await pg.areplace_message(R, T, "m1", content(NEW), 12), "the retried edit applies"
    await assert_indexed_as(pg, NEW)
    assert len(await pg.aget_vectors(R, SPACE)) == 0, "the new text is embedded anew"


KILLED_WORKER = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from langchain_om.store import PostgresStore
    from langchain_om.store.postgres import store as postgres_store

    async def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)  # between the keyword indexes and the vectors

    async def main():
        store = PostgresStore(sys.argv[1], schema=sys.argv[2])
        postgres_store.lock_vectors = die
        await store.areplace_message(sys.argv[3], sys.argv[4], "m1",
                                     {"type": "human", "data": {"content": sys.argv[5]}}, 12)

    asyncio.run(main())
    """
)


async def test_a_worker_sigkilled_mid_edit_leaves_the_old_text_consistently_indexed(
    pg: PostgresStore, pg_dsn: str, pg_schema: str
) -> None:
    await seed(pg)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = await asyncio.to_thread(subprocess.run, [sys.executable, "-c", KILLED_WORKER, pg_dsn, pg_schema, R, T, NEW],
                                   env=env, capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr.decode(errors="replace")
    await assert_indexed_as(pg, OLD)
    assert len(await pg.aget_vectors(R, SPACE)) == 1


# ---- item 2: the v7 CJK backfill while another worker serves ---------------------------------

OLD_JA, NEW_JA = "今日の話題は天気です。", "青い鳥が窓の外で鳴いています。"


async def downgrade_to_v6(store: PostgresStore) -> None:
    """What a version-6 schema looked like: no CJK table, no backfill bookmark."""
    async with store._tx() as cur:
        await cur.execute(store._q("DROP TABLE {s}.message_search_cjk"))
        await cur.execute(store._q("DROP TABLE {s}.search_backfill"))
        await cur.execute(store._q("UPDATE {s}.schema_version SET version = 6"))


Serve = Callable[[PostgresStore], Coroutine[Any, Any, None]]


async def edit(serving: PostgresStore) -> None:
    assert await serving.areplace_message(R, T, "m1", content(NEW_JA), 9)


async def restart(serving: PostgresStore) -> None:
    """The thread deleted and started again, its first message under the same id."""
    await serving.adelete_thread(R, T)
    await serving.aappend_messages(R, T, [human("m1", NEW_JA)])


class ServeDuringBatch:
    """Wraps a backfill batch: once the batch has written its entries (before it commits), starts
    the serving worker's change and gives it time to run to the point where it waits for the
    batch (or to commit, if nothing stops it); then lets the batch commit."""

    def __init__(self, serving: PostgresStore, serve: Serve) -> None:
        self.serving, self.serve = serving, serve
        self.task: asyncio.Task[None] | None = None
        self.batch = postgres_cjk.backfill_batch

    async def __call__(self, cur: Any, q: Any, schema: str) -> bool:
        return await self.batch(cur if self.task is not None else _HookedCursor(cur, self), q, schema)

    async def written(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self.serve(self.serving))
            await asyncio.wait({self.task}, timeout=0.5)


class _HookedCursor:
    """The batch's cursor, calling ``ServeDuringBatch.written`` after the CJK entries' insert."""

    def __init__(self, cur: Any, hook: ServeDuringBatch) -> None:
        self._cur, self._hook = cur, hook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    async def executemany(self, query: Any, params: Any) -> None:
        await self._cur.executemany(query, params)
        if "message_search_cjk" in query.as_string(None):
            await self._hook.written()


@pytest.mark.parametrize("serve", [edit, restart], ids=["edit", "delete-and-restart"])
async def test_the_cjk_backfill_keeps_no_stale_entry_while_another_worker_serves(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch, serve: Serve
) -> None:
    old = PostgresStore(pg_dsn, schema=pg_schema)
    await old.asetup()
    await old.aappend_messages(R, T, [human("m0", "前置き"), human("m1", OLD_JA)])
    await downgrade_to_v6(old)
    await old.aclose()
    serving = PostgresStore(pg_dsn, schema=pg_schema)  # another worker (it finds the schema migrated)
    upgrading = PostgresStore(pg_dsn, schema=pg_schema)
    wrapped = ServeDuringBatch(serving, serve)
    monkeypatch.setattr(postgres_connection, "backfill_batch", wrapped)
    try:
        await asyncio.wait_for(upgrading.asetup(), timeout=60)
        assert wrapped.task is not None, "the serving change ran during a batch"
        await asyncio.wait_for(wrapped.task, timeout=60)
        assert await found(upgrading, "青い鳥") == {"m1"}
        assert await found(upgrading, "話題") == set(), "the old text stayed indexed"
        assert await found(upgrading, "天気") == set()
    finally:
        await upgrading.aclose()
        await serving.aclose()


async def test_a_batch_that_cannot_lock_a_row_retries_instead_of_indexing_it(
    pg_dsn: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A serving worker holding a message row (an edit in progress, not committed) when a batch
    starts: the batch gives up after its lock timeout and is tried again until the edit has
    committed; the upgrade completes with the edit's text indexed, not the text it replaced."""
    old = PostgresStore(pg_dsn, schema=pg_schema)
    await old.asetup()
    await old.aappend_messages(R, T, [human("m1", OLD_JA)])
    await downgrade_to_v6(old)
    await old.aclose()
    monkeypatch.setattr(postgres_backfill, "LOCK_TIMEOUT_MS", 50, raising=False)
    calls = 0
    async with await psycopg.AsyncConnection.connect(pg_dsn) as holder:

        async def batch(cur: Any, q: Any, schema: str) -> bool:
            nonlocal calls
            calls += 1
            if calls == 1:  # after the migration, before the first batch: the edit takes the row
                await holder.execute(sql.SQL("UPDATE {}.messages SET data = %s WHERE id = %s").format(
                    sql.Identifier(pg_schema)), (Jsonb(content(NEW_JA)), "m1"))
            return await postgres_cjk.backfill_batch(cur, q, schema)

        monkeypatch.setattr(postgres_connection, "backfill_batch", batch)
        upgrading = PostgresStore(pg_dsn, schema=pg_schema)
        setup = asyncio.create_task(upgrading.asetup())
        await asyncio.sleep(0.6)
        tries = calls
        await holder.commit()
        try:
            await asyncio.wait_for(setup, timeout=60)
            assert tries > 1, "the batch went on with a row another transaction was changing"
            assert await found(upgrading, "青い鳥") == {"m1"}
            assert await found(upgrading, "話題") == set()
        finally:
            await upgrading.aclose()
