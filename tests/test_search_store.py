"""The search part of the storage contract (keyword index and stored embeddings), run on every
backend (memory, SQLite, PostgreSQL), plus the SQLite and PostgreSQL specifics: the index is
written with the messages, survives a reopen, is backfilled by the migration for databases made
before it, and a SQLite without FTS5 says so instead of failing."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_om.store import (
    InvalidStoreInput,
    NewMessage,
    OMStore,
    PostgresStore,
    SQLiteStore,
    VectorItem,
    decode_vector,
    encode_vector,
)
from langchain_om.store.search import MAX_QUERY_CHARS
from langchain_om.store.sqlite import schema as sqlite_schema

R1, R2 = "res-1", "res-2"


def human(mid: str, text: str) -> NewMessage:
    return NewMessage(id=mid, data={"type": "human", "data": {"content": text}})


def ai(mid: str, text: str, calls: list[dict[str, Any]] | None = None) -> NewMessage:
    return NewMessage(id=mid, data={"type": "ai", "data": {"content": text, "tool_calls": calls or []}})


def tool(mid: str, name: str, content: Any) -> NewMessage:
    return NewMessage(id=mid, data={"type": "tool", "data": {"content": content, "name": name, "tool_call_id": "c"}})


async def seed(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", [
        human("m1", "Book a dentist appointment for Tuesday"),
        ai("m2", "Done, the dentist expects you at 9am", [{"name": "calendar_add", "args": {}, "id": "c"}]),
        tool("m3", "calendar_add", [{"type": "text", "text": "event created: dentist 09:00"}]),
    ])
    await store.aappend_messages(R1, "t2", [human("m4", "My sister's flights to Lisbon land at noon")])
    await store.aappend_messages(R2, "u1", [human("x1", "Secret dentist notes of another user")])


def ids(hits: Any) -> list[str]:
    return [hit.message.id for hit in hits]


async def test_keyword_search_finds_ranks_and_stays_in_the_resource(store: OMStore) -> None:
    await seed(store)
    assert store.keyword_search_available
    hits = await store.asearch_messages(R1, "dentist")
    assert set(ids(hits)) == {"m1", "m2", "m3"}  # never x1, another resource's message
    assert all(hit.message.resource_id == R1 for hit in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    both = await store.asearch_messages(R1, "dentist appointment")
    assert ids(both)[0] == "m1"  # holds both words: ranked first
    assert ids(await store.asearch_messages(R1, "flight lisbon")) == ["m4"]  # stemmed: flights ~ flight
    assert set(ids(await store.asearch_messages(R1, "calendar_add"))) == {"m2", "m3"}  # tool name and result
    assert ids(await store.asearch_messages(R2, "dentist")) == ["x1"]
    assert await store.asearch_messages("nobody", "dentist") == []


async def test_keyword_search_by_thread_and_limit(store: OMStore) -> None:
    await seed(store)
    assert set(ids(await store.asearch_messages(R1, "dentist lisbon", thread_id="t2"))) == {"m4"}
    assert len(await store.asearch_messages(R1, "dentist", limit=2)) == 2
    assert await store.asearch_messages(R1, "dentist", thread_id="u1") == []  # R2's thread: nothing


HOSTILE = [
    '"', '""', "'", "dentist\"", '"dentist', "*", "dent*", "NEAR(dentist tuesday)", "dentist NEAR tuesday",
    "(dentist", "dentist)", "AND", "OR NOT", "dentist AND OR", "body:dentist", "scope:x", "-dentist",
    "^dentist", "{body scope}: dentist", "dentist & | ! <->", "\\", "':*", "!!", "a:*B", "\u00a0", "",
    "   ", "😀 dentist", "dentist\x01", "%", "_", "dentist' OR '1'='1", "'; DROP TABLE messages; --",
]


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_queries_are_plain_text(store: OMStore, query: str) -> None:
    await seed(store)
    hits = await store.asearch_messages(R1, query)
    assert all(hit.message.resource_id == R1 for hit in hits)
    if "dentist" in query.lower():
        assert {"m1", "m2", "m3"} <= set(ids(hits))
    assert {m.id for m in await store.aget_messages(R1, "t1")} == {"m1", "m2", "m3"}  # nothing harmed


async def test_bad_queries_are_errors_naming_the_field(store: OMStore) -> None:
    await seed(store)
    for bad in ("dentist\x00", "x" * (MAX_QUERY_CHARS + 1), "dentist " * 1_300_000, None, 5):
        with pytest.raises(InvalidStoreInput) as info:
            await store.asearch_messages(R1, bad)  # type: ignore[arg-type]
        assert info.value.field == "query"
    with pytest.raises(InvalidStoreInput):
        await store.asearch_messages(R1, "dentist", limit=0)
    assert len(await store.asearch_messages(R1, "dentist " * 1000)) == 3  # long but allowed


async def test_deleted_thread_leaves_the_index(store: OMStore) -> None:
    await seed(store)
    await store.aput_vectors(R1, "fake:3", [VectorItem(thread_id="t1", message_id="m1",
                                                       vector=encode_vector([1.0, 0.0, 0.0]))])
    before = await store.avector_stamp(R1, "fake:3")
    await store.adelete_thread(R1, "t1")
    assert await store.asearch_messages(R1, "dentist") == []
    after = await store.avector_stamp(R1, "fake:3")
    assert after[0] == before[0] + 1  # a deletion changes the stamp, so caches reload
    assert len(await store.aget_vectors(R1, "fake:3")) == 0
    assert ids(await store.asearch_messages(R2, "dentist")) == ["x1"]


async def test_temporal_markers_and_system_messages_are_not_searchable(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", [
        NewMessage(id="g1", data={"type": "human", "data": {"content": "dentist gap"}}, kind="temporal-marker"),
        NewMessage(id="s1", data={"type": "system", "data": {"content": "dentist rules"}}),
        human("h1", "dentist"),
    ])
    assert ids(await store.asearch_messages(R1, "dentist")) == ["h1"]


async def test_vectors_round_trip_scoped_and_incremental(store: OMStore) -> None:
    await seed(store)
    space = "fake:3"
    items = [VectorItem(thread_id="t1", message_id=m, vector=encode_vector([float(i), 1.0, 0.5]))
             for i, m in enumerate(["m1", "m2", "m3"])]
    assert await store.aput_vectors(R1, space, items) == 3
    assert await store.aput_vectors(R1, space, items[:1]) == 0  # already embedded: kept
    # another resource's message, or one that does not exist, gets no vector
    assert await store.aput_vectors(R1, space, [VectorItem(thread_id="u1", message_id="x1",
                                                           vector=encode_vector([1.0, 1.0, 1.0]))]) == 0
    assert await store.aput_vectors(R1, space, [VectorItem(thread_id="t1", message_id="nope",
                                                           vector=encode_vector([1.0, 1.0, 1.0]))]) == 0
    rows = await store.aget_vectors(R1, space)
    assert rows.message_ids == ["m1", "m2", "m3"] and rows.thread_ids == ["t1"] * 3
    assert decode_vector(rows.vectors[1]) == [1.0, 1.0, 0.5]
    assert rows.positions == sorted(rows.positions)
    deleted, top = await store.avector_stamp(R1, space)
    assert (deleted, top) == (0, rows.positions[-1])
    assert await store.aput_vectors(R1, space, [VectorItem(thread_id="t2", message_id="m4",
                                                           vector=encode_vector([0.0, 0.0, 1.0]))]) == 1
    newer = await store.aget_vectors(R1, space, after_pos=top)
    assert newer.message_ids == ["m4"] and (await store.avector_stamp(R1, space))[1] == newer.positions[0] > top
    assert (await store.aget_vectors(R1, space, limit=2)).message_ids == ["m1", "m2"]
    assert len(await store.aget_vectors(R2, space)) == 0 and len(await store.aget_vectors(R1, "other:3")) == 0
    assert await store.avector_stamp(R2, space) == (0, 0)
    with pytest.raises(InvalidStoreInput):
        await store.aput_vectors(R1, space, [VectorItem(thread_id="t1", message_id="m1", vector=b"abc")])


# ---- SQLite and PostgreSQL specifics --------------------------------------------------------


async def test_sqlite_index_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    first = SQLiteStore(path)
    await seed(first)
    await first.aclose()
    again = SQLiteStore(path)
    try:
        assert set(ids(await again.asearch_messages(R1, "dentist"))) == {"m1", "m2", "m3"}
    finally:
        await again.aclose()


def _downgrade_sqlite_to_v1(path: Path) -> None:
    """Make the file look like one written before the search index existed."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE message_search")
    conn.execute("DROP TABLE keyword_pending")
    conn.execute("DROP TABLE message_vectors")
    conn.execute("DROP TABLE vector_deletions")
    conn.execute("UPDATE schema_version SET version = 1")
    conn.commit()
    conn.close()


async def test_sqlite_migration_backfills_the_index(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    old = SQLiteStore(path)
    await seed(old)
    await old.aclose()
    _downgrade_sqlite_to_v1(path)
    migrated = SQLiteStore(path)
    try:
        assert set(ids(await migrated.asearch_messages(R1, "dentist"))) == {"m1", "m2", "m3"}
        assert ids(await migrated.asearch_messages(R2, "dentist")) == ["x1"]
    finally:
        await migrated.aclose()


async def test_sqlite_without_fts5_reports_it_and_indexes_once_it_has_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "om.db"
    monkeypatch.setattr(sqlite_schema, "fts5_available", lambda: False)
    plain = SQLiteStore(path)
    await seed(plain)  # appends work without the index
    assert not plain.keyword_search_available
    with pytest.raises(Exception, match="FTS5"):
        await plain.asearch_messages(R1, "dentist")
    await plain.aclose()
    monkeypatch.undo()
    upgraded = SQLiteStore(path)
    try:
        await upgraded.asetup()
        assert upgraded.keyword_search_available
        assert set(ids(await upgraded.asearch_messages(R1, "dentist"))) == {"m1", "m2", "m3"}
    finally:
        await upgraded.aclose()


@pytest.mark.postgres
async def test_postgres_index_survives_reopen_and_migration_backfills(
    open_store: Callable[[str], Awaitable[OMStore]],
) -> None:
    store = await open_store("postgres")
    assert isinstance(store, PostgresStore)
    await seed(store)
    reopened = PostgresStore(store._dsn, schema=store.schema)
    try:
        assert set(ids(await reopened.asearch_messages(R1, "dentist"))) == {"m1", "m2", "m3"}
        # make the schema look like version 1 (no search column), then migrate it again
        async with reopened._tx() as cur:
            await cur.execute(reopened._q("DROP TABLE {s}.message_vectors"))
            await cur.execute(reopened._q("DROP TABLE {s}.vector_deletions"))
            await cur.execute(reopened._q("DROP TABLE {s}.message_search"))
            await cur.execute(reopened._q("UPDATE {s}.schema_version SET version = 1"))
    finally:
        await reopened.aclose()
    migrated = PostgresStore(store._dsn, schema=store.schema)
    try:
        assert set(ids(await migrated.asearch_messages(R1, "dentist"))) == {"m1", "m2", "m3"}
        assert ids(await migrated.asearch_messages(R2, "dentist")) == ["x1"]
    finally:
        await migrated.aclose()


async def test_messages_with_every_word_rank_first(store: OMStore, store_kind: str) -> None:
    await store.aappend_messages(R1, "t1", [
        human("both", "the garden shed roof leaks"),
        *[human(f"some{i}", f"garden party number {i} garden garden") for i in range(5)],
    ])
    hits = await store.asearch_messages(R1, "garden shed", limit=3)
    assert ids(hits)[0] == "both" and len(hits) == 3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    only_stop_words = await store.asearch_messages(R1, "the")
    # a query of stop words alone still searches, except on PostgreSQL, whose "english"
    # configuration leaves stop words out of the index itself
    assert ids(only_stop_words) == ([] if store_kind == "postgres" else ["both"])


@pytest.mark.parametrize("store_kind", ["sqlite", "postgres"], indirect=True)
async def test_common_words_rank_only_the_newest_candidates(
    store: OMStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_om.store.postgres import search as postgres_search
    from langchain_om.store.sqlite import search as sqlite_search

    for module in (sqlite_search, postgres_search):  # where each store's ranking lives
        monkeypatch.setattr(module, "RANK_CANDIDATES", 3)
    for i in range(8):  # one append per message: insertion order is recency
        await store.aappend_messages(R1, "t1", [human(f"b{i}", "budget " * (8 - i))])
    hits = await store.asearch_messages(R1, "budget", limit=8)
    assert set(ids(hits)) == {"b5", "b6", "b7"}  # the newest three, though older ones say it more often
