"""What only the PostgreSQL backend promises, beside the shared conformance suite (``test_store_contract.py``):
migration locking between workers, pool ownership, odd schema names, session time zones."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest
from test_store_contract import R1, msg, record, seqs  # the conformance suite's builders

from langchain_om.store import (
    SCHEMA_VERSION,
    InvalidStoreInput,
    NewMessage,
    PostgresStore,
    RecordConflictError,
    StoreError,
)


async def _drop_schema(dsn: str, schema: str) -> None:
    import psycopg
    from psycopg import sql

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@pytest.mark.postgres
async def test_postgres_concurrent_setup_and_workers(pg_dsn: str, pg_schema: str) -> None:
    """Workers opening one fresh schema at once migrate it exactly once and then share its data."""
    workers = [PostgresStore(pg_dsn, schema=pg_schema, max_size=2) for _ in range(4)]
    try:
        await asyncio.gather(*(w.asetup() for w in workers))

        async def append(i: int, w: PostgresStore) -> None:
            for b in range(5):
                await w.aappend_messages(R1, "t1", [msg(f"w{i}-{b}-{k}") for k in range(3)] + [msg(f"dup-{b}")])

        await asyncio.gather(*(append(i, w) for i, w in enumerate(workers)))
        rows = await workers[0].aget_messages(R1, "t1")
        assert seqs(rows) == list(range(1, 4 * 5 * 3 + 5 + 1))

        base = await workers[0].acommit_record(record(), expected_version=0)

        async def commit(w: PostgresStore) -> bool:
            try:
                await w.acommit_record(base, expected_version=1)
                return True
            except RecordConflictError:
                return False

        assert sorted(await asyncio.gather(*(commit(w) for w in workers))) == [False, False, False, True]
    finally:
        for w in workers:
            await w.aclose()


@pytest.mark.postgres
async def test_postgres_refuses_newer_schema(pg_dsn: str, pg_schema: str) -> None:
    import psycopg
    from psycopg import sql

    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.aappend_messages(R1, "t1", [msg("m1")])
    await store.aclose()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("UPDATE {}.schema_version SET version = %s").format(sql.Identifier(pg_schema)),
            (SCHEMA_VERSION + 1,),
        )
    newer = PostgresStore(pg_dsn, schema=pg_schema)
    with pytest.raises(StoreError, match="newer"):
        await newer.asetup()
    await newer.aclose()


@pytest.mark.postgres
async def test_postgres_external_pool_is_not_closed(pg_dsn: str, pg_schema: str) -> None:
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(pg_dsn, min_size=1, max_size=2, open=False)
    await pool.open(wait=True)
    try:
        store = PostgresStore(pool=pool, schema=pg_schema)
        await store.aappend_messages(R1, "t1", [msg("m1")])
        await store.aclose()
        assert not pool.closed, "a pool passed in belongs to the caller"
        again = PostgresStore(pool=pool, schema=pg_schema)
        assert seqs(await again.aget_messages(R1, "t1")) == [1]
    finally:
        await pool.close()


@pytest.mark.postgres
async def test_postgres_from_env_and_odd_schema_name(monkeypatch: pytest.MonkeyPatch, pg_dsn: str) -> None:
    schema = 'Odd "Schema"; DROP SCHEMA public;--'
    monkeypatch.setenv("LANGCHAIN_OM_PG_DSN", pg_dsn)
    store = PostgresStore.from_env(schema=schema)
    implicit = PostgresStore(schema=schema)
    try:
        await store.aappend_messages(R1, "t1", [msg("m1")])
        assert seqs(await implicit.aget_messages(R1, "t1")) == [1]
    finally:
        await store.aclose()
        await implicit.aclose()
        await _drop_schema(pg_dsn, schema)
    monkeypatch.delenv("LANGCHAIN_OM_PG_DSN")
    with pytest.raises(StoreError):
        PostgresStore.from_env()
    with pytest.raises(StoreError):
        PostgresStore()


def test_postgres_store_validates_arguments() -> None:
    with pytest.raises(InvalidStoreInput) as err:
        PostgresStore("postgresql://x", schema="")
    assert err.value.field == "schema"
    with pytest.raises(InvalidStoreInput):
        PostgresStore("postgresql://x", pool=object())  # type: ignore[arg-type]


async def test_postgres_reads_every_instant_whatever_the_session_time_zone(pg_dsn: str, pg_schema: str) -> None:
    """Read as timestamptz in a western session zone, year 1 in UTC would be a BC date psycopg refuses."""
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(pg_dsn, kwargs={"autocommit": True, "options": "-c TimeZone=America/New_York"},
                               open=False)
    await pool.open(wait=True)
    store = PostgresStore(pool=pool, schema=pg_schema)
    try:
        edges = [datetime(1, 1, 1, 2, tzinfo=timezone.utc), datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)]
        await store.aappend_messages(R1, "t1", [NewMessage(id=f"m{i}", data={}, created_at=moment)
                                                for i, moment in enumerate(edges)])
        assert [m.created_at for m in await store.aget_messages(R1, "t1")] == edges
        assert (await store.aget_message(R1, "m0")).created_at == edges[0]  # type: ignore[union-attr]
        created = await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 2})
        stamp = await store.aget_record_stamp(R1, "t1")
        assert stamp == (1, created.updated_at)
        assert all(m.observed_at is not None and m.observed_at.utcoffset() == timedelta(0)
                   for m in await store.aget_messages(R1, "t1"))
        assert (await store.alist_threads(R1))[0].created_at.utcoffset() == timedelta(0)
    finally:
        await store.aclose()
        await pool.close()
