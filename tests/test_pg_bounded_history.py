"""PostgreSQL: a step's statements read a bounded number of rows whatever the thread's history.

Measured as plans (``EXPLAIN ANALYZE``: rows each scan node read), never as time. The state is
the hard one: a thread bulk-loaded and bulk-marked observed, with no ``ANALYZE`` and no
``VACUUM`` since (autovacuum is off for the table), so the planner has no statistics and every
row marked observed left a dead tuple behind. Issue 19: a commit's UPDATE walked those dead
entries of the unobserved index and the id lookup chose the (resource_id, thread_id, seq) index.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from langchain_om.store import NewMessage, ObservationGroup, OMRecord, PostgresStore
from langchain_om.store.base import record_key
from langchain_om.store.postgres import append as postgres_append
from langchain_om.store.postgres import fingerprints as postgres_fingerprints
from langchain_om.store.postgres import schema as postgres_schema
from langchain_om.store.postgres import store as pg

pytestmark = pytest.mark.postgres

R, T = "res-h", "thread-h"
HISTORY = 3000
TAIL = 10


def _rows(start: int, stop: int) -> list[NewMessage]:
    return [NewMessage(id=f"m{i}", data={"type": "human", "data": {"content": f"note {i} " + "words " * 10}},
                       tokens=12) for i in range(start, stop)]


def _record(last_seq: int) -> OMRecord:
    return OMRecord(resource_id=R, thread_id=T, scope="thread",
                    groups=[ObservationGroup(thread_id=T, start_id="m0", end_id=f"m{last_seq - 1}", tokens=5,
                                             text="* the user keeps notes")])


@pytest.fixture
async def loaded(pg_dsn: str, pg_schema: str) -> AsyncIterator[PostgresStore]:
    """HISTORY messages on one thread, all but TAIL marked observed in one commit, never analyzed."""
    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.asetup()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for table in ("messages", "threads"):
            await conn.execute(sql.SQL("ALTER TABLE {}.{} SET (autovacuum_enabled = false)").format(
                sql.Identifier(pg_schema), sql.Identifier(table)))
    for start in range(0, HISTORY, 500):
        await store.aappend_messages(R, T, _rows(start, min(HISTORY, start + 500)))
    await store.acommit_record(_record(HISTORY - TAIL), expected_version=0, mark_observed={T: HISTORY - TAIL})
    try:
        yield store
    finally:
        await store.aclose()


async def _plan(dsn: str, schema: str, template: str, params: tuple[Any, ...] | dict[str, Any]) -> dict[str, Any]:
    """The executed plan of one of the store's statements, rolled back afterwards."""
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        statement = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) ") + sql.SQL(template).format(s=sql.Identifier(schema))
        cursor = await conn.execute(statement, params)
        row = await cursor.fetchone()
        await conn.rollback()
    assert row is not None
    plan = row[0] if not isinstance(row[0], str) else json.loads(row[0])
    return dict(plan[0]["Plan"])


def _rows_read(node: dict[str, Any]) -> int:
    """Rows every node of the plan produced or threw away (index entries and heap rows alike)."""
    own = sum(int(node.get(key, 0)) for key in ("Actual Rows", "Rows Removed by Filter",
                                                   "Rows Removed by Index Recheck"))
    return own + sum(_rows_read(child) for child in node.get("Plans", []))


async def _no_statistics(dsn: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        cursor = await conn.execute(
            "SELECT last_analyze, last_autoanalyze, last_vacuum, last_autovacuum, n_dead_tup "
            "FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'messages'", (schema,))
        row = await cursor.fetchone()
    assert row is not None and row[:4] == (None, None, None, None), "the table was analyzed or vacuumed"


async def test_a_commit_after_a_bulk_mark_reads_only_the_rows_it_marks(loaded: PostgresStore, pg_dsn: str,
                                                                      pg_schema: str) -> None:
    await loaded.aappend_messages(R, T, _rows(HISTORY, HISTORY + 6))
    await _no_statistics(pg_dsn, pg_schema)
    async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
        cursor = await conn.execute(sql.SQL("SELECT observed_through FROM {}.threads WHERE thread_id = %s").format(
            sql.Identifier(pg_schema)), (T,))
        row = await cursor.fetchone()
    assert row == (HISTORY - TAIL,), "the bulk commit moved the thread's all-observed prefix"
    mark = HISTORY + 4
    plan = await _plan(pg_dsn, pg_schema, pg.MARK_OBSERVED_SQL, (None, T, HISTORY - TAIL, mark, R))
    assert _rows_read(plan) <= 3 * (mark - (HISTORY - TAIL)), json.dumps(plan, indent=1)
    # the statement a commit runs: the prefix read, the marking and the advance in one
    plan = await _plan(pg_dsn, pg_schema, pg.MARK_THREAD_OBSERVED_SQL,
                       {"thread": T, "resource": R, "mark": mark, "now": None})
    assert _rows_read(plan) <= 4 * (mark - (HISTORY - TAIL)), json.dumps(plan, indent=1)

    record = await loaded.aget_record(R, T)
    assert record is not None
    await loaded.acommit_record(record, expected_version=record.version, mark_observed={T: mark})
    flags = [m.observed for m in await loaded.aget_messages(R, T, after_seq=HISTORY - TAIL - 2)]
    assert flags == [True, True] + [True] * (mark - (HISTORY - TAIL)) + [False] * 2


async def test_the_id_lookup_reads_only_the_asked_ids(loaded: PostgresStore, pg_dsn: str, pg_schema: str) -> None:
    await _no_statistics(pg_dsn, pg_schema)
    wanted = [f"m{HISTORY - 1}", f"m{HISTORY - 2}", "never-stored"]
    plan = await _plan(pg_dsn, pg_schema, pg.MESSAGES_BY_IDS_SQL, (T, wanted))
    assert _rows_read(plan) <= 3 * len(wanted), json.dumps(plan, indent=1)
    found = await loaded.aget_messages_by_ids(R, T, wanted)
    assert sorted(m.seq for m in found) == [HISTORY - 1, HISTORY]
    assert await loaded.aget_messages_by_ids("another-resource", T, wanted) == [], "the resource is still checked"


async def test_the_head_append_reads_only_the_rows_it_checks_and_writes(loaded: PostgresStore, pg_dsn: str,
                                                                          pg_schema: str) -> None:
    """A warm step's append (``aappend_with_head``): the last seq, the ids it checks and the rows it
    writes, whatever the thread holds; and what it writes is what the store then returns."""
    await _no_statistics(pg_dsn, pg_schema)
    thread = await loaded.aget_thread(R, T)
    assert thread is not None
    batch = [(m, json.dumps(m.data, separators=(",", ":"))) for m in [*_rows(HISTORY - 1, HISTORY), *_rows(
        HISTORY, HISTORY + 2)]]  # one row the thread holds, two new ones
    params = {"thread": T, "resource": R, "key": record_key(R, T), "born": thread.created_at, "at_most": None,
              "now": thread.updated_at, "rows": postgres_append.rows_json(R, T, batch)}
    plan = await _plan(pg_dsn, pg_schema, postgres_append.HEAD_APPEND_SQL, params)
    assert _rows_read(plan) <= 60, json.dumps(plan, indent=1)
    inserted, head = await loaded.aappend_with_head(R, T, [m for m, _ in batch], thread.created_at, T) or ([], None)
    assert [(m.id, m.seq) for m in inserted] == [(f"m{HISTORY}", HISTORY + 1), (f"m{HISTORY + 1}", HISTORY + 2)]
    assert head is not None and head[0] == HISTORY + 2 == await loaded.alast_seq(R, T)


async def test_migration_6_sets_each_threads_observed_prefix(pg_dsn: str, pg_schema: str,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A version-5 schema (marks through the v3 index) moves to 6 with every thread's prefix right."""
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", 5)
    old = PostgresStore(pg_dsn, schema=pg_schema)
    await old.asetup()
    async with old._tx() as cur:  # this code's appends also fill the v9 fingerprint column
        await cur.execute(old._q(postgres_fingerprints.SCHEMA_V9[0]))
    for thread, count in (("partly", 6), ("fully", 4), ("never", 3)):
        await old.aappend_messages(R, thread, _rows(0, count))
    await old.aclose()
    marks = {"partly": 4, "fully": 4}
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for thread, seq in marks.items():  # what a version-5 commit did
            await conn.execute(sql.SQL("UPDATE {}.messages SET observed = TRUE, observed_at = now() "
                                       "WHERE thread_id = %s AND seq <= %s").format(sql.Identifier(pg_schema)),
                               (thread, seq))
    monkeypatch.setattr(postgres_schema, "SCHEMA_VERSION", 6)
    store = PostgresStore(pg_dsn, schema=pg_schema)
    try:
        await store.asetup()
        async with await psycopg.AsyncConnection.connect(pg_dsn) as conn:
            cursor = await conn.execute(sql.SQL("SELECT thread_id, observed_through FROM {}.threads").format(
                sql.Identifier(pg_schema)))
            prefixes = dict(await cursor.fetchall())
            cursor = await conn.execute("SELECT 1 FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
                                        (pg_schema, "messages_unobserved"))
            assert await cursor.fetchone() is None, "the v3 index is dropped"
        assert prefixes == {"partly": 4, "fully": 4, "never": 0}
        await store.acommit_record(OMRecord(resource_id=R, thread_id=None, scope="resource"), expected_version=0,
                                   mark_observed={"partly": 5, "never": 2})
        assert [m.observed for m in await store.aget_messages(R, "partly")] == [True] * 5 + [False]
        assert [m.observed for m in await store.aget_messages(R, "never")] == [True, True, False]
    finally:
        await store.aclose()
