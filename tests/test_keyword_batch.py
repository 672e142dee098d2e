"""Issue 32, item 2: SQLite indexes appended messages for keyword search in batches.

An append queues its messages (``keyword_pending``, schema version 10) instead of writing both
FTS5 tables in its own transaction; an append indexes the queue once it holds ``INDEX_BATCH``
rows and every search indexes it first. These tests hold the promise that this never changes a
search's answer: right after an append (same store, or another store on the file), after an
edit, a thread deletion or a crash, and never across resources. English and Japanese.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store import NewMessage, SQLiteStore
from langchain_om.store.base import SCHEMA_VERSION
from langchain_om.store.sqlite import cjk as sqlite_cjk
from langchain_om.store.sqlite import keyword_queue as sqlite_keyword_queue
from langchain_om.testing import ScriptedObserverModel

EN = "The ferry to Miyajima leaves at 7:40 from pier four"
JA = "宮島へのフェリーは四番桟橋から七時四十分に出ます"


def _queued(path: Path) -> list[tuple[str, str]]:
    conn = sqlite3.connect(path)
    try:
        return [(str(t), str(m)) for t, m in conn.execute(
            "SELECT thread_id, message_id FROM keyword_pending ORDER BY pos")]
    finally:
        conn.close()


def _message(message_id: str, text: str) -> NewMessage:
    return NewMessage(id=message_id, data=_data(text), tokens=5)


def _data(text: str) -> dict[str, object]:
    return {"type": "human", "data": {"content": text}}


async def _ids(store: SQLiteStore, resource_id: str, query: str, thread_id: str | None = None) -> list[str]:
    return [hit.message.id for hit in await store.asearch_messages(resource_id, query, thread_id=thread_id)]


async def test_a_search_right_after_an_append_finds_it_in_this_store_and_another(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    writer, reader = SQLiteStore(path), SQLiteStore(path)
    try:
        await reader.asetup()  # open before the append: nothing read at open time helps
        await writer.aappend_messages("alice", "旅行", [_message("en", EN), _message("ja", JA)])
        assert _queued(path) == [("旅行", "en"), ("旅行", "ja")], "the append queued its rows, unindexed"
        assert await _ids(reader, "alice", "ferry") == ["en"]
        assert await _ids(reader, "alice", "フェリー") == ["ja"]
        assert _queued(path) == []  # the search indexed them for every store on the file
        await writer.aappend_messages("alice", "旅行", [_message("en2", "Another ferry, the 9:10"),
                                                          _message("ja2", "次のフェリーは九時十分")])
        assert set(await _ids(writer, "alice", "ferry")) == {"en", "en2"}
        assert set(await _ids(writer, "alice", "フェリー", thread_id="旅行")) == {"ja", "ja2"}
    finally:
        await writer.aclose()
        await reader.aclose()


async def test_a_step_through_the_engine_is_searchable_at_once(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    om = ObservationalMemory(SQLiteStore(path), model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 100_000})
    await om.aprocess("t", [HumanMessage(EN, id="h1"), AIMessage(JA, id="a1")], resource_id="alice")
    other = SQLiteStore(path)
    try:
        assert await _ids(other, "alice", "pier") == ["h1"]
        assert await _ids(other, "alice", "桟橋") == ["a1"]
    finally:
        await other.aclose()
        await om.aclose()


async def test_a_queued_message_edited_in_place_is_found_by_its_new_text_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "om.db")
    try:
        await store.aappend_messages("alice", "t", [_message("m", f"{EN} {JA}")])
        assert await store.areplace_message("alice", "t", "m", _data("The bus to Hiroshima, 広島行きのバス"), 5)
        assert _queued(tmp_path / "om.db") == [("t", "m")], "the edit left the queued row to its batch"
        for word in ("ferry", "フェリー", "桟橋"):
            assert await _ids(store, "alice", word) == [], word
        for word in ("bus", "Hiroshima", "広島", "バス"):
            assert await _ids(store, "alice", word) == ["m"], word
        # and an indexed message edited again is rewritten in place, not doubled
        assert await store.areplace_message("alice", "t", "m", _data(f"{EN} {JA}"), 5)
        assert await _ids(store, "alice", "ferry") == ["m"] and await _ids(store, "alice", "桟橋") == ["m"]
        assert await _ids(store, "alice", "bus") == [] and await _ids(store, "alice", "広島") == []
    finally:
        await store.aclose()


async def test_a_deleted_threads_queued_rows_never_appear(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    store = SQLiteStore(path)
    try:
        await store.aappend_messages("alice", "gone", [_message("m", EN), _message("n", JA)])
        await store.aappend_messages("alice", "kept", [_message("k", "A ferry timetable, フェリーの時刻表")])
        await store.adelete_thread("alice", "gone")
        assert _queued(path) == [("kept", "k")]
        assert await _ids(store, "alice", "ferry") == ["k"]
        assert await _ids(store, "alice", "フェリー") == ["k"]
        # the same thread and ids again, with other words: only the new words find them
        await store.aappend_messages("alice", "gone", [_message("m", "A tram ticket, 路面電車の切符")])
        assert await _ids(store, "alice", "tram") == ["m"] and await _ids(store, "alice", "切符") == ["m"]
        assert await _ids(store, "alice", "pier") == [] and await _ids(store, "alice", "桟橋") == []
    finally:
        await store.aclose()


async def test_rows_queued_when_a_process_died_are_indexed_by_the_next_append_or_search(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    crashed = SQLiteStore(path)
    await crashed.aappend_messages("alice", "t", [_message(f"m{i}", f"{EN} {JA} #{i}")
                                                  for i in range(sqlite_keyword_queue.INDEX_BATCH - 1)])
    await crashed.aclose()  # closing indexes nothing: the file is as a killed process leaves it
    assert len(_queued(path)) == sqlite_keyword_queue.INDEX_BATCH - 1
    reopened = SQLiteStore(path)
    try:
        await reopened.aappend_messages("alice", "t", [_message("last", "The last ferry, 最終のフェリー")])
        assert _queued(path) == [], "the append that filled the batch indexed the backlog"
        conn = sqlite3.connect(path)
        try:
            indexed = conn.execute("SELECT COUNT(*) FROM message_search").fetchone()[0]
            cjk = conn.execute(f"SELECT COUNT(*) FROM {sqlite_cjk.CJK_TABLE}").fetchone()[0]
        finally:
            conn.close()
        assert indexed == cjk == sqlite_keyword_queue.INDEX_BATCH
        assert len(await reopened.asearch_messages("alice", "ferry", limit=100)) == sqlite_keyword_queue.INDEX_BATCH
        assert len(await reopened.asearch_messages("alice", "フェリー", limit=100)) == sqlite_keyword_queue.INDEX_BATCH
    finally:
        await reopened.aclose()
    again = SQLiteStore(path)  # a backlog smaller than a batch: the search indexes it
    await again.aappend_messages("alice", "t", [_message("after", "Pier four is closed, 四番桟橋は閉鎖")])
    await again.aclose()
    fresh = SQLiteStore(path)
    try:
        assert await _ids(fresh, "alice", "closed") == ["after"]
        assert await _ids(fresh, "alice", "閉鎖") == ["after"]
    finally:
        await fresh.aclose()


async def test_one_batch_of_several_resources_keeps_each_to_its_own(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    store = SQLiteStore(path)
    try:
        for i in range(sqlite_keyword_queue.INDEX_BATCH // 2):  # indexed together by the filling append
            await store.aappend_messages("alice", "a", [_message(f"a{i}", f"alice ferry {i}, アリスのフェリー")])
            await store.aappend_messages("bob", "b", [_message(f"b{i}", f"bob ferry {i}, ボブのフェリー")])
        assert _queued(path) == []
        await store.aappend_messages("bob", "b", [_message("b-queued", "ferry, フェリー")])
        for resource, prefix in (("alice", "a"), ("bob", "b")):
            for query in ("ferry", "フェリー"):
                found = [hit.message for hit in await store.asearch_messages(resource, query, limit=100)]
                assert found and {m.resource_id for m in found} == {resource}, (resource, query)
                assert all(m.id.startswith(prefix) for m in found)
        assert await _ids(store, "alice", "アリス") and await _ids(store, "bob", "アリス") == []
    finally:
        await store.aclose()


async def test_a_version_9_file_opens_with_an_empty_queue_and_keeps_its_index(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    old = SQLiteStore(path)
    await old.aappend_messages("alice", "t", [_message("en", EN), _message("ja", JA)])
    await old.aclose()
    conn = sqlite3.connect(path)  # the file as version 9 left it: each append indexed, no queue
    sqlite_keyword_queue.index_queued(conn)
    conn.execute("DROP TABLE keyword_pending")
    conn.execute("UPDATE schema_version SET version = 9")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        assert await _ids(store, "alice", "ferry") == ["en"] and await _ids(store, "alice", "桟橋") == ["ja"]
        await store.aappend_messages("alice", "t", [_message("new", "New pier, 新しい桟橋")])
        assert _queued(path) == [("t", "new")]
        assert set(await _ids(store, "alice", "桟橋")) == {"ja", "new"}
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT version FROM schema_version").fetchall() == [(SCHEMA_VERSION,)]
            assert conn.execute("SELECT COUNT(*) FROM message_search").fetchone()[0] == 3  # none twice
        finally:
            conn.close()
    finally:
        await store.aclose()
