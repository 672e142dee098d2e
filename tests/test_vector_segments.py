"""Issue 32, item 7: semantic recall after a restart reads persisted vector segments.

A fresh index (a restart, another worker) must find exactly what the numpy scan of every stored
row finds, on every backend; an edit, a thread delete and a deleted message in the middle of a
segment must never bring back a vector that is gone; one resource's segments never reach another.
Segments are made small here (``SEGMENT_ROWS`` patched) so a few dozen messages span several.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import HumanMessage, message_to_dict

from langchain_om.extensions import vector_index
from langchain_om.extensions.vector_index import StoreVectorIndex
from langchain_om.store import OMStore
from langchain_om.store.base import NewMessage, replace_lone_surrogates
from langchain_om.store.vector_segments import SupportsVectorSegments, VectorSegment

DIM = 16
QUERIES = ["budget meeting", "旅行の計画", "door code 4406", "猫の名前 🐈", "lone \ud800 surrogate"]


@pytest.fixture(autouse=True)
def small_segments(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_index, "SEGMENT_ROWS", 8)


def text(resource: str, thread: str, i: int) -> str:
    return f"{resource} {thread} message {i}: 話題 {i % 7} topic {i % 5}"


async def fill(store: OMStore, resource: str, threads: list[str], per_thread: int) -> StoreVectorIndex:
    """Messages and their vectors, stored through the store API, interleaved across threads (so
    one segment holds several threads' rows)."""
    index = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    for i in range(per_thread):
        for thread in threads:
            mid = f"{thread}-m{i}"
            await store.aappend_messages(resource, thread, [NewMessage(
                id=mid, data=message_to_dict(HumanMessage(text(resource, thread, i), id=mid)))])
            await index.aadd(resource, thread, [(mid, text(resource, thread, i))])
    return index


async def exact(store: OMStore, index: StoreVectorIndex, resource: str, query: str, k: int,
                thread: str | None = None) -> list[tuple[str, str]]:
    """The reference: every stored row of the resource scored with numpy, read from the table."""
    batch = await store.aget_vectors(resource, index.space)
    rows = [(t, m, v) for t, m, v in zip(batch.thread_ids, batch.message_ids, batch.vectors, strict=True)
            if thread is None or t == thread]
    matrix = np.array([np.frombuffer(v, dtype="<f4") for _, _, v in rows], dtype=np.float64)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    q = np.asarray(index.embeddings.embed_query(replace_lone_surrogates(query)), dtype=np.float64)
    scores = matrix @ (q / np.linalg.norm(q))
    order = np.argsort(-scores, kind="stable")[:k]
    return [(rows[i][0], rows[i][1]) for i in order]


async def found(index: StoreVectorIndex, resource: str, query: str, k: int,
                thread: str | None = None) -> list[tuple[str, str]]:
    return [(h.thread_id, h.message_id) for h in await index.asearch(resource, query, k=k, thread_id=thread)]


async def assert_restart_is_exact(store: OMStore, resource: str, threads: list[str]) -> StoreVectorIndex:
    """A fresh index finds what the full scan finds, for the resource and for each thread."""
    fresh = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    for query in QUERIES:
        assert await found(fresh, resource, query, 10) == await exact(store, fresh, resource, query, 10), query
        for thread in threads:
            assert await found(fresh, resource, query, 5, thread) == await exact(
                store, fresh, resource, query, 5, thread), (query, thread)
    return fresh


async def segment_rows(store: OMStore, resource: str, index: StoreVectorIndex) -> list[tuple[int, int, int]]:
    if not isinstance(store, SupportsVectorSegments):
        return []
    return [(s.lo, s.hi, s.rows) for s in await store.aget_vector_segments(resource, index.space)]


async def assert_segments_match_the_table(store: OMStore, resource: str, index: StoreVectorIndex) -> None:
    """Every kept segment holds exactly the rows the table has in its range (none deleted since)."""
    positions = (await store.aget_vectors(resource, index.space)).positions
    for lo, hi, rows in await segment_rows(store, resource, index):
        assert rows == sum(1 for p in positions if lo < p <= hi), (lo, hi)


async def test_a_restart_finds_the_same_hits_as_the_full_scan(store: OMStore) -> None:
    index = await fill(store, "alice", ["t-a", "t-b"], 20)  # 40 vectors: 5 segments of 8
    await index.asearch("alice", "anything", k=3)  # the first search writes the segments
    segments = await segment_rows(store, "alice", index)
    if isinstance(store, SupportsVectorSegments):
        assert [rows for _, _, rows in segments] == [8] * 5
        assert all(a[1] == b[0] for a, b in itertools.pairwise(segments)), "they tile the range"
    await assert_restart_is_exact(store, "alice", ["t-a", "t-b"])
    # rows added after the segments: read from the table, found too, then persisted in turn
    more = await fill(store, "alice", ["t-c"], 11)
    assert (await more.asearch("alice", text("alice", "t-c", 3), k=1))[0].message_id == "t-c-m3"
    await assert_restart_is_exact(store, "alice", ["t-a", "t-c"])
    if isinstance(store, SupportsVectorSegments):
        assert sum(rows for _, _, rows in await segment_rows(store, "alice", index)) == 48  # 51 rows, 3 left


async def test_an_edit_and_a_thread_delete_never_bring_back_a_gone_vector(store: OMStore) -> None:
    index = await fill(store, "alice", ["t-a", "t-b"], 12)
    await index.asearch("alice", "warm", k=1)
    before = await segment_rows(store, "alice", index)
    edited = "t-a-m5"
    new_text = "猫の名前 🐈 is Tama now"
    assert await store.areplace_message("alice", "t-a", edited, message_to_dict(HumanMessage(new_text, id=edited)), 0)
    if isinstance(store, SupportsVectorSegments):
        after = await segment_rows(store, "alice", index)
        assert len(after) == len(before) - 1, "the segment holding the edited row was dropped, only it"
    await assert_segments_match_the_table(store, "alice", index)
    fresh = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    old_vector_query = text("alice", "t-a", 5)
    assert edited not in [m for _, m in await found(fresh, "alice", old_vector_query, 30)], "old vector is gone"
    await fresh.aadd("alice", "t-a", [(edited, new_text)])
    await assert_restart_is_exact(store, "alice", ["t-a", "t-b"])  # the hole is read from the table...
    if isinstance(store, SupportsVectorSegments):
        assert len(await segment_rows(store, "alice", index)) == len(before), "...and persisted again"
    assert (await found(StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM)), "alice", new_text, 1))[0] == (
        "t-a", edited)

    await store.adelete_thread("alice", "t-b")
    await assert_segments_match_the_table(store, "alice", index)
    fresh = await assert_restart_is_exact(store, "alice", ["t-a"])
    hits = await found(fresh, "alice", text("alice", "t-b", 3), 50)
    assert hits and all(thread == "t-a" for thread, _ in hits), "the deleted thread's vectors are gone"
    assert await found(fresh, "alice", "anything", 5, "t-b") == []
    # the already-warm index follows the deletions too
    assert all(thread == "t-a" for thread, _ in await found(index, "alice", text("alice", "t-b", 3), 50))


async def test_no_vector_of_one_resource_reaches_another(store: OMStore) -> None:
    alice = await fill(store, "alice", ["t-a"], 20)
    bob = await fill(store, "bob", ["t-b"], 20)
    await alice.asearch("alice", "warm", k=1)
    await bob.asearch("bob", "warm", k=1)
    fresh = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    hits = await found(fresh, "bob", text("alice", "t-a", 4), 40)
    assert len(hits) == 20 and all(thread == "t-b" for thread, _ in hits)
    assert await found(fresh, "bob", "x", 5, "t-a") == [], "a thread of another resource finds nothing"
    if isinstance(store, SupportsVectorSegments):
        # a segment is checked against the writer's own resource: alice's rows cannot be filed under bob
        alice_segments = await store.aget_vector_segments("alice", alice.space)
        stolen = alice_segments[0]
        assert not await store.aput_vector_segment("bob", alice.space, VectorSegment(
            lo=stolen.lo, hi=stolen.hi, rows=stolen.rows, pos_sum=stolen.pos_sum, body=stolen.body))
        assert all(s.body != stolen.body for s in await store.aget_vector_segments("bob", alice.space))


async def test_a_segment_is_checked_before_it_is_kept(store: OMStore) -> None:
    if not isinstance(store, SupportsVectorSegments):
        pytest.skip("this store keeps no segments")
    index = await fill(store, "alice", ["t-a"], 6)
    batch = await store.aget_vectors("alice", index.space)
    lo, hi = 0, batch.positions[-1]
    wrong = VectorSegment(lo=lo, hi=hi, rows=5, pos_sum=sum(batch.positions), body=b"x")
    assert not await store.aput_vector_segment("alice", index.space, wrong), "row count differs"
    right = wrong.model_copy(update={"rows": 6})
    assert await store.aput_vector_segment("alice", index.space, right)
    assert not await store.aput_vector_segment("alice", index.space, right), "overlaps the kept one"
    with pytest.raises(ValueError, match="segment"):
        await store.aput_vector_segment("alice", index.space, right.model_copy(update={"lo": hi}))
    # a body this version cannot read is skipped: its range comes from the table, exactly
    await assert_restart_is_exact(store, "alice", ["t-a"])


async def test_many_equal_messages_are_all_rescored_and_ranked_like_the_full_scan(
        store: OMStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vector_index, "_RESCORE_BATCH", 4)  # candidates fetched in several calls
    index = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    for i in range(40):
        mid = f"m{i}"
        words = "ok" if i % 4 else f"はい、了解です {i}"  # 30 messages with the very same vector
        await store.aappend_messages("alice", "t-a", [NewMessage(
            id=mid, data=message_to_dict(HumanMessage(words, id=mid)))])
        await index.aadd("alice", "t-a", [(mid, words)])
    await index.asearch("alice", "ok", k=1)  # writes the segments
    fresh = StoreVectorIndex(store, DeterministicFakeEmbedding(size=DIM))
    for k in (5, 30, 40):
        assert await found(fresh, "alice", "ok", k) == await exact(store, fresh, "alice", "ok", k), k
