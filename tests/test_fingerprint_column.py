"""Schema version 9: each message's fingerprint in a column (issue 32, item 3).

A cold step handed a whole history compares every handed message with the stored fingerprint;
the SQL stores keep it in a column written with the row, so the lookup reads no JSON. Existing
databases get the column empty and backfilled in committed batches, resumable after a kill;
until a row is reached the lookup reads its JSON, so answers never change during the backfill.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import STORE_FACTORIES
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.tokens import CACHE_KEY
from langchain_om.store._util import from_jsonb_safe
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.known import FINGERPRINT_PATH, stored_fingerprint
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.postgres import fingerprints as postgres_fingerprints
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.store.sqlite import fingerprints as sqlite_fingerprints
from langchain_om.store.sqlite import keyword_queue as sqlite_keyword_queue
from langchain_om.testing import ScriptedObserverModel

THREAD = "指紋スレッド"
RESOURCE = implicit_resource(THREAD)


class SimulatedKill(Exception):
    """The process dying between two backfill batches."""


class CrashAfter:
    """Wraps a backfill batch function; raises (a simulated kill) after ``n`` committed calls."""

    def __init__(self, batch: Any, n: int) -> None:
        self.batch, self.n, self.calls = batch, n, 0

    def __call__(self, *args: Any) -> Any:
        if self.calls == self.n:
            raise SimulatedKill("killed between two batches")
        self.calls += 1
        return self.batch(*args)


def _om(store: OMStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": 100_000},
                               reflection={"observation_tokens": 100_000}, token_counter="estimator")


def _history() -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(5):
        out += [HumanMessage(f"Question {i}: 京都の天気は? and in Kyoto?", id=f"h{i}"),
                AIMessage(f"Answer {i}: 晴れ, sunny 🌤", id=f"a{i}")]
    return out


async def _seed(store: OMStore) -> None:
    om = _om(store)
    await om.aprocess(THREAD, _history())
    await om.aclose()


def _sqlite_column(path: Path) -> dict[str, tuple[str | None, str | None]]:
    """id -> (column, the fingerprint in the row's JSON)."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT id, fingerprint, data FROM messages ORDER BY rowid").fetchall()
    finally:
        conn.close()
    import json

    return {mid: (column, stored_fingerprint(json.loads(data))) for mid, column, data in rows}


async def _pg_column(store: PostgresStore) -> dict[str, tuple[str | None, str | None]]:
    async with store._tx() as cur:
        await cur.execute(store._q("SELECT id, fingerprint, data FROM {s}.messages ORDER BY thread_id, seq"))
        return {row["id"]: (row["fingerprint"], stored_fingerprint(from_jsonb_safe(row["data"])))
                for row in await cur.fetchall()}


def test_the_path_is_where_the_counter_keeps_its_fingerprint() -> None:
    assert FINGERPRINT_PATH[2] == CACHE_KEY
    assert stored_fingerprint({"data": {"response_metadata": {CACHE_KEY: {"content_hash": "1a-ff"}}}}) == "1a-ff"
    assert stored_fingerprint({"data": {"response_metadata": {CACHE_KEY: {"content_hash": 7}}}}) is None
    assert stored_fingerprint({"data": []}) is None


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_appends_and_edits_write_the_column(kind: str, request: pytest.FixtureRequest) -> None:
    async with STORE_FACTORIES[kind](request) as store:
        await _seed(store)
        om = _om(store)
        handed = _history()
        handed[-1] = AIMessage("Answer 4: 雨になりました, rain after all", id="a4")  # an edit, unobserved
        await om.aprocess(THREAD, [*handed, HumanMessage("次は?", id="h5")])
        await om.aclose()
        columns = _sqlite_column(Path(store.path)) if isinstance(store, SQLiteStore) else await _pg_column(
            store)  # type: ignore[arg-type]
        assert set(columns) == {m.id for m in handed} | {"h5"}
        assert all(column is not None and column == from_json for column, from_json in columns.values()), columns
        rows = await store.aget_messages_by_ids(RESOURCE, THREAD, ["a4"])
        assert "雨" in str(rows[0].data) and columns["a4"][0] == stored_fingerprint(rows[0].data)


async def test_the_lookup_reads_the_column_and_the_json_where_the_column_is_empty(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    store = SQLiteStore(path)
    await _seed(store)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE messages SET fingerprint = 'not-this-content' WHERE id = 'h1'")
    conn.execute("UPDATE messages SET fingerprint = NULL WHERE id = 'h2'")
    conn.commit()
    conn.close()
    found = {f.id: f.value for f in await store.aget_message_fields(RESOURCE, THREAD, ["h1", "h2"], FINGERPRINT_PATH)}
    columns = _sqlite_column(path)
    assert found == {"h1": "not-this-content", "h2": columns["h2"][1]}
    # a cold step trusts the column: h1 looks edited and is rewritten (same text), the column healed
    om = _om(store)
    await om.aprocess(THREAD, [*_history(), HumanMessage("hi", id="h9")])
    await om.aclose()
    await store.aclose()
    assert _sqlite_column(path)["h1"][0] == columns["h1"][1]


async def test_sqlite_backfill_runs_in_batches_and_resumes_after_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "om.db"
    old = SQLiteStore(path)
    await _seed(old)
    await old.aclose()
    conn = sqlite3.connect(path)  # the file as version 8 left it
    sqlite_keyword_queue.index_queued(conn)  # version 8 indexed each message with its append
    conn.execute("DROP TABLE keyword_pending")
    conn.execute("ALTER TABLE messages DROP COLUMN fingerprint")
    conn.execute("DELETE FROM search_backfill WHERE name = 'fingerprint'")
    conn.execute("UPDATE schema_version SET version = 8")
    conn.commit()
    conn.close()
    monkeypatch.setattr(sqlite_fingerprints, "BACKFILL_BATCH", 3)
    crash = CrashAfter(sqlite_fingerprints.backfill_batch, 2)
    monkeypatch.setattr(sqlite_fingerprints, "backfill_batch", crash)
    killed = SQLiteStore(path)
    with pytest.raises(SimulatedKill):
        await killed.asetup()
    await killed.aclose()
    columns = list(_sqlite_column(path).values())
    assert [c is not None for c, _ in columns] == [True] * 6 + [False] * 4  # two batches of 3 kept
    # meanwhile a step still finds every message stored (the JSON answers for the rest)
    monkeypatch.setattr(sqlite_fingerprints, "backfill_batch", crash.batch)
    reopened = SQLiteStore(path)
    om = _om(reopened)
    await om.aprocess(THREAD, [*_history(), HumanMessage("続き", id="h7")])
    await om.aclose()
    stored = [m.id for m in await reopened.aget_messages(RESOURCE, THREAD)]
    await reopened.aclose()
    assert stored == [m.id for m in _history()] + ["h7"]
    assert all(column is not None and column == from_json for column, from_json in _sqlite_column(path).values())


@pytest.mark.postgres
async def test_postgres_backfill_runs_in_batches_and_resumes_after_a_kill(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with STORE_FACTORIES["postgres"](request) as store:
        assert isinstance(store, PostgresStore)
        await _seed(store)
        async with store._tx() as cur:
            await cur.execute(store._q("ALTER TABLE {s}.messages DROP COLUMN fingerprint"))
            await cur.execute(store._q("DELETE FROM {s}.search_backfill WHERE name = 'fingerprint'"))
            await cur.execute(store._q("UPDATE {s}.schema_version SET version = 8"))
        monkeypatch.setattr(postgres_fingerprints, "BACKFILL_BATCH", 3)
        crash = CrashAfter(postgres_fingerprints.backfill_batch, 2)
        monkeypatch.setattr(postgres_fingerprints, "backfill_batch", crash)
        killed = PostgresStore(store._dsn, schema=store.schema)
        with pytest.raises(SimulatedKill):
            await killed.asetup()
        await killed.aclose()
        columns = await _pg_column(store)
        assert sum(column is not None for column, _ in columns.values()) == 6  # two batches of 3 kept
        monkeypatch.setattr(postgres_fingerprints, "backfill_batch", crash.batch)
        reopened = PostgresStore(store._dsn, schema=store.schema)
        try:
            om = _om(reopened)
            await om.aprocess(THREAD, [*_history(), HumanMessage("続き", id="h7")])
            await om.aclose()
            assert [m.id for m in await reopened.aget_messages(RESOURCE, THREAD)] == [m.id for m in _history()] + [
                "h7"]
            columns = await _pg_column(reopened)
            assert all(column is not None and column == from_json for column, from_json in columns.values())
            async with reopened._tx() as cur:
                await cur.execute(reopened._q("SELECT done FROM {s}.search_backfill WHERE name = 'fingerprint'"))
                assert (await cur.fetchone()) == {"done": True}
        finally:
            await reopened.aclose()
