"""Keyword search in Japanese, Chinese and Korean on every store (memory, SQLite, PostgreSQL):
words in text written without spaces, Korean words with their particles attached, one- and
two-character words, katakana, full-width / half-width forms, English words inside Japanese
sentences, with the same contract as English (resource scope, plain-words syntax, ranking,
bounds); and the migration that indexes messages stored before the CJK index existed, in
batches, resumable after a crash between two batches."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_om.store import NewMessage, OMStore, PostgresStore, SQLiteStore
from langchain_om.store.cjk import cjk_index_tokens, normalise, query_words
from langchain_om.store.postgres import cjk as postgres_cjk
from langchain_om.store.sqlite import cjk as sqlite_cjk
from langchain_om.store.sqlite import keyword_queue as sqlite_keyword_queue

R1, R2 = "res-ja", "res-other"


def human(mid: str, text: str) -> NewMessage:
    return NewMessage(id=mid, data={"type": "human", "data": {"content": text}})


def ai(mid: str, text: str, calls: list[dict[str, Any]] | None = None) -> NewMessage:
    return NewMessage(id=mid, data={"type": "ai", "data": {"content": text, "tool_calls": calls or []}})


CONVERSATION = {
    "ja1": "魚アレルギーがあるので、京都の旅館では魚料理を避けてください。",
    "ja2": "新幹線で京都へ行き、露天風呂のある旅館に二泊します。",
    "ja3": "ｶﾀｶﾅの予約番号はＡＢＣ１２３です。担当はジョン・スミスさん。",
    "ja4": "Pythonのスクリプトで予約をExcelに書き出しました。",
    "zh1": "我们下周去上海，酒店已经订好了。",
    "ko1": "다음 주에 부산으로 여행을 갑니다. 저는 갑각류 알레르기가 있어요.",
    "en1": "My sister's flights to Lisbon land at noon",
}


async def seed(store: OMStore) -> None:
    await store.aappend_messages(R1, "t-ja", [human(mid, text) for mid, text in CONVERSATION.items()
                                              if mid.startswith("ja")])
    await store.aappend_messages(R1, "t-mixed", [
        human("zh1", CONVERSATION["zh1"]), human("ko1", CONVERSATION["ko1"]), human("en1", CONVERSATION["en1"]),
        ai("ja5", "予約しました", [{"name": "book_ryokan", "args": {}, "id": "c1"}]),
    ])
    await store.aappend_messages(R2, "t-secret", [human("x1", "京都の旅館、上海の酒店、부산 여행、魚アレルギー")])


def ids(hits: Any) -> set[str]:
    return {hit.message.id for hit in hits}


FOUND = [
    ("魚アレルギー", {"ja1"}),
    ("旅館", {"ja1", "ja2"}),
    ("新幹線", {"ja2"}),
    ("露天風呂", {"ja2"}),
    ("京都", {"ja1", "ja2"}),  # two characters
    ("魚", {"ja1"}),  # one character
    ("泊", {"ja2"}),  # one character, inside a run (二泊します)
    ("上海", {"zh1"}),
    ("酒店", {"zh1"}),
    ("부산", {"ko1"}),  # written 부산으로
    ("알레르기", {"ko1"}),
    ("カタカナ", {"ja3"}),  # stored half-width ｶﾀｶﾅ
    ("ｶﾀｶﾅ", {"ja3"}),
    ("abc123", {"ja3"}),  # stored full-width ＡＢＣ１２３
    ("ＡＢＣ１２３", {"ja3"}),
    ("スミス", {"ja3"}),  # a katakana name
    ("python", {"ja4"}),  # an English word glued to Japanese text
    ("Excel", {"ja4"}),
    ("book_ryokan", {"ja5"}),  # a tool name
    ("flight", {"en1"}),  # English keeps its stemming
    # queries written as sentences: cut where the script changes, particles dropped
    ("母の魚アレルギーはどうなった？", {"ja1"}),
    ("我们下周去上海吗", {"zh1"}),  # a Chinese sentence: its bigrams, ranked by how many match
    ("부산으로 가는 기차", {"ko1"}),
]


@pytest.mark.parametrize(("query", "expected"), FOUND, ids=[q for q, _ in FOUND])
async def test_words_in_every_script_are_found_in_the_resource_only(
    store: OMStore, query: str, expected: set[str]
) -> None:
    await seed(store)
    hits = await store.asearch_messages(R1, query)
    assert ids(hits) == expected
    assert all(hit.message.resource_id == R1 for hit in hits)


async def test_words_are_not_found_where_they_are_not(store: OMStore) -> None:
    await seed(store)
    for query in ("東京", "大阪", "서울", "北京", "都旅"):  # 都旅 spans の: never a false phrase
        assert await store.asearch_messages(R1, query) == [], query


async def test_another_resource_and_thread_scope(store: OMStore) -> None:
    await seed(store)
    assert ids(await store.asearch_messages(R2, "旅館")) == {"x1"}
    assert ids(await store.asearch_messages(R1, "旅館 上海", thread_id="t-mixed")) == {"zh1"}
    assert await store.asearch_messages(R1, "旅館", thread_id="t-secret") == []
    assert await store.asearch_messages("nobody", "京都") == []


async def test_mixed_queries_rank_messages_with_every_word_first(store: OMStore) -> None:
    await seed(store)
    hits = await store.asearch_messages(R1, "京都 露天風呂")
    assert hits[0].message.id == "ja2"
    assert ids(hits) == {"ja1", "ja2"}
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    # CJK and English words in one query: both indexes contribute
    assert ids(await store.asearch_messages(R1, "上海 Lisbon")) == {"zh1", "en1"}
    assert len(await store.asearch_messages(R1, "旅館 京都 魚 上海", limit=2)) == 2


HOSTILE = ['"京都" OR *', "京都 NEAR(旅館)", "旅館:*", "'京都' <-> '旅館'", "（京都）", "京\ud800都"]


@pytest.mark.parametrize("query", HOSTILE)
async def test_hostile_cjk_queries_are_plain_text(store: OMStore, query: str) -> None:
    await seed(store)
    hits = await store.asearch_messages(R1, query)
    assert ids(hits) <= {"ja1", "ja2"} and all(h.message.resource_id == R1 for h in hits)


async def test_any_text_is_indexed(store: OMStore) -> None:
    """NUL and emoji in a stored message never break indexing or search (lone surrogates: the
    normaliser replaces them, ``test_normaliser``; the English index's handling is its own)."""
    await store.aappend_messages(R1, "t-odd", [human("odd", "温泉🍣旅行\x00です")])
    assert ids(await store.asearch_messages(R1, "温泉")) == {"odd"}
    assert ids(await store.asearch_messages(R1, "旅行")) == {"odd"}


def test_query_words_of_a_sentence() -> None:
    assert query_words("京都") == ["京都"] and query_words("窓側の席") == ["窓側の席"]  # words stay whole
    assert query_words("予算はどうなった") == ["予算", "はどうなった"]
    assert query_words("妹の結婚式") == ["妹", "結婚式"]
    assert query_words("ベジタリアン料理") == ["ベジタリアン", "料理"]
    assert query_words("我们下周去上海") == ["我们", "们下", "下周", "周去", "去上", "上海"]


def test_normaliser() -> None:
    assert normalise("ＡＢＣ ｶﾀｶﾅ ｶﾞ") == "abc カタカナ ガ"
    assert normalise("a\ud800b\x00c") == "a\ufffdb c"
    assert cjk_index_tokens("温泉\ud800旅行") == ["温泉", "泉", "旅行", "行"]
    assert cjk_index_tokens("東京都") == ["東京", "京都", "都"]
    assert cjk_index_tokens("Pythonのコード") == ["python", "のコ", "コー", "ード", "ド"]
    assert cjk_index_tokens("English only") == []  # only CJK messages enter the CJK index


async def test_deleted_thread_leaves_the_cjk_index(store: OMStore) -> None:
    await seed(store)
    await store.adelete_thread(R1, "t-ja")
    assert await store.asearch_messages(R1, "旅館") == []
    assert ids(await store.asearch_messages(R1, "上海")) == {"zh1"}


# ---- migration: existing databases get the CJK index, in batches, resumable -----------------

CJK_COUNT = 8  # messages of R1 and R2 holding CJK text (all but en1)


def _downgrade_sqlite_to_v6(path: Path) -> None:
    conn = sqlite3.connect(path)
    sqlite_keyword_queue.index_queued(conn)  # a version 6 file indexed each message with its append
    conn.execute("DROP TABLE keyword_pending")
    conn.execute(f"DROP TABLE {sqlite_cjk.CJK_TABLE}")
    conn.execute("DROP TABLE search_backfill")
    conn.execute("UPDATE schema_version SET version = 6")
    conn.commit()
    conn.close()


class SimulatedKill(Exception):
    """The process dying between two backfill batches."""


class CrashAfter:
    """Wraps a backfill batch function; raises (a simulated kill) after ``n`` committed calls."""

    def __init__(self, batch: Callable[..., Any], n: int) -> None:
        self.batch, self.n, self.calls = batch, n, 0

    def __call__(self, *args: Any) -> Any:
        if self.calls == self.n:
            raise SimulatedKill("killed between two batches")
        self.calls += 1
        return self.batch(*args)


async def test_sqlite_migration_builds_the_index_in_batches_and_resumes_after_a_kill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "om.db"
    old = SQLiteStore(path)
    await seed(old)
    await old.aclose()
    _downgrade_sqlite_to_v6(path)
    monkeypatch.setattr(sqlite_cjk, "BACKFILL_BATCH", 2)
    crash = CrashAfter(sqlite_cjk.backfill_batch, 2)
    monkeypatch.setattr(sqlite_cjk, "backfill_batch", crash)
    killed = SQLiteStore(path)
    with pytest.raises(SimulatedKill):
        await killed.asetup()
    await killed.aclose()
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT after_rowid FROM search_backfill").fetchone()[0] == 4  # two batches kept
    assert conn.execute(f"SELECT COUNT(*) FROM {sqlite_cjk.CJK_TABLE}").fetchone()[0] == 4
    conn.close()
    monkeypatch.setattr(sqlite_cjk, "backfill_batch", crash.batch)
    reopened = SQLiteStore(path)
    try:
        assert ids(await reopened.asearch_messages(R1, "旅館")) == {"ja1", "ja2"}
        assert ids(await reopened.asearch_messages(R1, "부산")) == {"ko1"}
        assert ids(await reopened.asearch_messages(R2, "旅館")) == {"x1"}
        assert ids(await reopened.asearch_messages(R1, "flight")) == {"en1"}
    finally:
        await reopened.aclose()
    conn = sqlite3.connect(path)
    assert conn.execute(f"SELECT COUNT(*) FROM {sqlite_cjk.CJK_TABLE}").fetchone()[0] == CJK_COUNT  # none twice
    conn.close()


@pytest.mark.postgres
async def test_postgres_migration_builds_the_index_in_batches_and_resumes_after_a_kill(
    open_store: Callable[[str], Awaitable[OMStore]], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = await open_store("postgres")
    assert isinstance(store, PostgresStore)
    await seed(store)
    async with store._tx() as cur:
        await cur.execute(store._q("DROP TABLE {s}.message_search_cjk"))
        await cur.execute(store._q("DROP TABLE {s}.search_backfill"))
        await cur.execute(store._q("UPDATE {s}.schema_version SET version = 6"))
    monkeypatch.setattr(postgres_cjk, "BACKFILL_BATCH", 2)
    from langchain_om.store.postgres import connection as postgres_connection

    crash = CrashAfter(postgres_cjk.backfill_batch, 2)
    monkeypatch.setattr(postgres_connection, "backfill_batch", crash)
    killed = PostgresStore(store._dsn, schema=store.schema)
    with pytest.raises(SimulatedKill):
        await killed.asetup()
    await killed.aclose()
    monkeypatch.setattr(postgres_connection, "backfill_batch", crash.batch)
    reopened = PostgresStore(store._dsn, schema=store.schema)
    try:
        async with reopened._tx() as cur:
            await cur.execute(reopened._q("SELECT COUNT(*) AS n FROM {s}.message_search_cjk"))
            row = await cur.fetchone()
            assert row is not None and row["n"] == CJK_COUNT
            await cur.execute(reopened._q("SELECT done FROM {s}.search_backfill"))
            assert (await cur.fetchone()) == {"done": True}
        assert ids(await reopened.asearch_messages(R1, "旅館")) == {"ja1", "ja2"}
        assert ids(await reopened.asearch_messages(R1, "京")) == {"ja1", "ja2"}
        assert ids(await reopened.asearch_messages(R2, "부산")) == {"x1"}
    finally:
        await reopened.aclose()
