"""recall's mode="search" end to end, on every store: keyword search with no embedder, semantic
search over embeddings kept in the store (SQLite, PostgreSQL), both rankings fused, restart
survival without re-embedding, isolation between resources, and hostile queries."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, HumanMessage
from recall_helpers import T0, make_om, result_dict, seed, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import fuse_rankings, retrieval_instructions
from langchain_om.store import OMStore, PostgresStore, SQLiteStore
from langchain_om.store.sqlite import schema as sqlite_schema


class CountingEmbedding(DeterministicFakeEmbedding):
    """The deterministic fake, counting the texts it embeds (to prove nothing is re-embedded)."""

    embedded: int = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.embedded += len(texts)
        return super().embed_documents(texts)


def conversation(prefix: str) -> list[Any]:
    lines = [
        (HumanMessage, "Please book a dentist appointment for next Tuesday morning"),
        (AIMessage, "Booked: dentist on Tuesday at 9am, Dr. Ferreira"),
        (HumanMessage, "Also my sister's flights to Lisbon arrive Friday at noon"),
        (AIMessage, "Noted the Lisbon arrival on Friday"),
        (HumanMessage, "What's a good pasta recipe with mushrooms?"),
        (AIMessage, "Try tagliatelle with porcini, butter and parmesan"),
    ]
    return [stamped(cls(text, id=f"{prefix}-{i}"), T0) for i, (cls, text) in enumerate(lines)]


def cursors(result: dict[str, Any]) -> list[str]:
    return re.findall(r"cursor: (\S+)", result["results"])


async def _seeded(store: OMStore, **retrieval: Any) -> ObservationalMemory:
    om = make_om(store, scope="resource", retrieval={"scope": "resource", **retrieval})
    await seed(om, "alice", {"a1": conversation("a1"), "a2": conversation("a2")[4:]})
    await seed(om, "bob", {"b1": [stamped(HumanMessage("bob's dentist is in Porto, PIN 4321", id="b-0"), T0)]})
    return om


async def test_keyword_search_without_embeddings(store: OMStore) -> None:
    om = await _seeded(store)
    tool = om.recall_tool(thread_id="a1", resource_id="alice")
    found = result_dict(await tool.ainvoke({"mode": "search", "query": "dentist"}))
    assert set(cursors(found)) == {"a1-0", "a1-1"} and found["count"] == 2
    assert "Thread (untitled) (id: a1) ← current" in found["results"] and "[score " in found["results"]
    assert "Porto" not in found["results"]  # bob's message: never
    pasta = result_dict(await tool.ainvoke({"mode": "search", "query": "mushrooms pasta"}))
    assert set(cursors(pasta)) == {"a1-4", "a2-4"}  # across the user's threads
    nothing = result_dict(await tool.ainvoke({"mode": "search", "query": "volcano"}))
    assert nothing["count"] == 0 and nothing["results"] == "(no matching messages)"
    bob = result_dict(await om.recall_tool(thread_id="b1", resource_id="bob").ainvoke(
        {"mode": "search", "query": "dentist"}))
    assert cursors(bob) == ["b-0"]


async def test_thread_scope_searches_only_the_current_thread(store: OMStore) -> None:
    om = make_om(store, retrieval={"scope": "thread"})
    await seed(om, "alice", {"a1": conversation("a1"), "a2": conversation("a2")})
    found = result_dict(await om.recall_tool(thread_id="a2", resource_id="alice").ainvoke(
        {"mode": "search", "query": "pasta"}))
    assert cursors(found) == ["a2-4"]


HOSTILE_QUERIES = ['"dentist', "dentist*", "NEAR(dentist Tuesday)", "(dentist", "dentist)", 'dentist" OR "x',
                   "body : dentist", "scope : x dentist", "dentist & !pasta", "dentist <-> Tuesday", "-dentist",
                   "^dentist", "dentist AND NOT", "'dentist'", "dentist\\", "dentist'); DROP TABLE messages; --"]


@pytest.mark.parametrize("query", HOSTILE_QUERIES)
async def test_hostile_queries_are_plain_words(store: OMStore, query: str) -> None:
    om = await _seeded(store)
    out = result_dict(await om.recall_tool(thread_id="a1", resource_id="alice").ainvoke(
        {"mode": "search", "query": query}))
    assert {"a1-0", "a1-1"} <= set(cursors(out)) and "Porto" not in out["results"]


@pytest.mark.parametrize(("query", "mentions"), [
    ("dentist\x00", "control characters"), ("x" * 10_000_000, "too long"), ("   ", "must not be empty"),
])
async def test_bad_queries_are_clear_errors(store: OMStore, query: str, mentions: str) -> None:
    om = await _seeded(store)
    out = await om.recall_tool(thread_id="a1", resource_id="alice").ainvoke({"mode": "search", "query": query})
    assert isinstance(out, str) and out.startswith("recall error: query:") and mentions in out
    assert len(out) < 300  # the query is not echoed back


async def test_semantic_search_fused_with_keywords_and_isolated(store: OMStore) -> None:
    om = await _seeded(store, vector=True, embeddings=CountingEmbedding(size=64))
    tool = om.recall_tool(thread_id="a1", resource_id="alice")
    exact = "Noted the Lisbon arrival on Friday"
    found = result_dict(await tool.ainvoke({"mode": "search", "query": exact, "limit": 3}))
    assert cursors(found)[0] == "a1-3"  # first by meaning (identical text) and by words
    assert "mean something similar" in retrieval_instructions(om)
    # a message only the embedder can find (no word to match: emoji only) still comes back
    await seed(om, "alice", {"a4": [stamped(HumanMessage("🍝🍄", id="a4-0"), T0)]})
    only_semantic = result_dict(await tool.ainvoke({"mode": "search", "query": "🍝🍄"}))
    assert cursors(only_semantic)[0] == "a4-0"
    bob_text = "bob's dentist is in Porto, PIN 4321"
    leak = result_dict(await tool.ainvoke({"mode": "search", "query": bob_text, "limit": 50}))
    assert "b-0" not in cursors(leak) and "Porto" not in leak["results"]


async def _restart_survival(first: OMStore, reopen: Callable[[], OMStore]) -> None:
    embedder = CountingEmbedding(size=64)
    om = await _seeded(first, vector=True, embeddings=embedder)
    embedded = embedder.embedded
    assert embedded == 9  # alice's 8 messages and bob's 1, each once
    await first.aclose()
    again = reopen()
    try:
        fresh = CountingEmbedding(size=64)
        restarted = make_om(again, scope="resource", retrieval={"vector": True, "embeddings": fresh})
        tool = restarted.recall_tool(thread_id="a1", resource_id="alice")
        found = result_dict(await tool.ainvoke({"mode": "search", "query": "Noted the Lisbon arrival on Friday"}))
        assert cursors(found)[0] == "a1-3"
        words = result_dict(await tool.ainvoke({"mode": "search", "query": "dentist"}))
        assert {"a1-0", "a1-1"} <= set(cursors(words))
        assert fresh.embedded == 0  # nothing re-indexed after the restart (only queries embedded)
        await seed(restarted, "alice", {"a3": [stamped(HumanMessage("Call the plumber about the leak",
                                                                    id="a3-0"), T0)]})
        assert fresh.embedded == 1  # new messages are embedded once
        plumber = result_dict(await tool.ainvoke({"mode": "search", "query": "Call the plumber about the leak"}))
        assert cursors(plumber)[0] == "a3-0"  # the resident matrix picked up the new vector
    finally:
        await again.aclose()
    del om


async def test_sqlite_search_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    await _restart_survival(SQLiteStore(path), lambda: SQLiteStore(path))


@pytest.mark.postgres
async def test_postgres_search_survives_restart(open_store: Callable[[str], Awaitable[OMStore]]) -> None:
    first = await open_store("postgres")
    assert isinstance(first, PostgresStore)
    dsn, schema = first._dsn, first.schema
    await _restart_survival(first, lambda: PostgresStore(dsn, schema=schema))


async def test_deleted_thread_disappears_from_semantic_results(store: OMStore) -> None:
    om = await _seeded(store, vector=True, embeddings=DeterministicFakeEmbedding(size=64))
    tool = om.recall_tool(thread_id="a1", resource_id="alice")
    query = "What's a good pasta recipe with mushrooms?"
    assert {"a1-4", "a2-4"} <= set(cursors(result_dict(await tool.ainvoke({"mode": "search", "query": query}))))
    await store.adelete_thread("alice", "a2")
    after = result_dict(await tool.ainvoke({"mode": "search", "query": query}))
    assert "a2-4" not in cursors(after) and "a1-4" in cursors(after)


async def test_sqlite_without_fts5_offers_no_keyword_search(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_schema, "fts5_available", lambda: False)
    store = SQLiteStore(tmp_path / "om.db")
    try:
        om = await _seeded(store)
        assert 'mode="search"' not in retrieval_instructions(om)  # only what is available is described
        out = await om.recall_tool(thread_id="a1", resource_id="alice").ainvoke({"mode": "search", "query": "x"})
        assert isinstance(out, str) and "not available" in out
        semantic = make_om(store, scope="resource", retrieval={"vector": True,
                                                               "embeddings": DeterministicFakeEmbedding(size=8)})
        text = retrieval_instructions(semantic)
        assert "similar meaning" in text and "its words" not in text
    finally:
        await store.aclose()


def test_rank_fusion_rewards_agreement() -> None:
    a, b, c = ("t", "a"), ("t", "b"), ("t", "c")
    fused = fuse_rankings([[(a, 9.0), (b, 5.0)], [(b, 0.9), (c, 0.8)]])
    assert [key for key, _ in fused] == [b, a, c]  # b is in both lists
    assert fuse_rankings([[(a, 2.0), (a, 1.0), (c, 0.5)], []]) == [(a, 2.0), (c, 0.5)]
    assert fuse_rankings([[], []]) == []


class BrokenEmbedding(DeterministicFakeEmbedding):
    """Embeds documents, then its API goes down for queries."""

    def embed_query(self, text: str) -> list[float]:
        raise ConnectionError("embedding API unreachable")


async def test_failing_embedder_falls_back_to_keywords(store: OMStore) -> None:
    om = await _seeded(store, vector=True, embeddings=BrokenEmbedding(size=16))
    found = result_dict(await om.recall_tool(thread_id="a1", resource_id="alice").ainvoke(
        {"mode": "search", "query": "dentist"}))
    assert set(cursors(found)) == {"a1-0", "a1-1"}


async def test_a_query_without_a_mode_searches_instead_of_paging_from_the_start(store: OMStore) -> None:
    """Issue 47, item 7: ``recall(query=...)`` used to return the thread's first messages, which read as
    an answer; a query alone now searches. An explicit mode still wins, and no query still pages."""
    om = await _seeded(store)
    tool = om.recall_tool(thread_id="a1", resource_id="alice")
    found = result_dict(await tool.ainvoke({"query": "Lisbon"}))
    assert set(cursors(found)) == {"a1-2", "a1-3"} and found["count"] == 2
    assert "results" in found and "messages" not in found
    paged = result_dict(await tool.ainvoke({}))
    assert "results" not in paged and paged["count"] == 6 and paged["messages"].startswith("--- message a1-0")
    explicit = result_dict(await tool.ainvoke({"mode": "messages", "query": "Lisbon", "limit": 1}))
    assert "results" not in explicit and explicit["messages"].startswith("--- message a1-0")
    await om.aclose()
