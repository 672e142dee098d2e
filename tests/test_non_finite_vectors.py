"""Issue 44, item 4: a non-finite embedding never hides semantic recall hits.

One NaN or infinite vector made the index's top-k bound NaN, so recall's semantic search found
nothing while the searched vectors held fewer than k (20 by default) finite ones. The policy,
on every store: a store refuses a non-finite vector (``InvalidStoreInput`` naming
``items[i].vector``; ``encode_vector`` names ``vector``); the index, the one writer, skips it
with a logged reason and stores the batch's other vectors; vectors stored before (a database
written by an older version) are left out of the ranking, from the table and from segments.
Checked end to end through ``ObservationalMemory``'s recall tool as well.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.messages import HumanMessage, message_to_dict

from langchain_om.extensions import vector_index
from langchain_om.extensions.vector_index import StoreVectorIndex
from langchain_om.store import InvalidStoreInput, NewMessage, OMStore, VectorItem, encode_vector
from langchain_om.store import search as store_search

R, T = "res-nan", "t-nan"
BAD = {"nan": [math.nan, 1.0, 0.0], "inf": [math.inf, 0.0, 1.0], "-inf": [0.0, -math.inf, 1.0]}


class Glitchy(Embeddings):
    """A compliant embedder except for texts naming a glitch ("nan", "inf", "-inf"), whose vector
    is what a provider's bad day returns."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        for name, vector in BAD.items():
            if text.endswith(f"[{name}]"):
                return vector
        if any(word in text for word in ("peanut", "ピーナッツ", "legume", "豆")):
            return [1.0, 0.1 * len(text), 0.5]
        return [0.1, 1.0, 0.2]


TEXTS = {
    "m0": "I am allergic to peanuts",
    "m1": "ピーナッツアレルギーがあります",
    "m2": "The meeting moved to Tuesday",
    "m3": "glitch [nan]",
    "m4": "glitch [inf]",
    "m5": "glitch [-inf]",
}


async def seed(store: OMStore) -> None:
    await store.aappend_messages(R, T, [NewMessage(id=mid, data=message_to_dict(HumanMessage(text, id=mid)))
                                        for mid, text in TEXTS.items()])


@pytest.mark.parametrize("name", list(BAD))
def test_encode_vector_refuses_non_finite_values(name: str) -> None:
    with pytest.raises(InvalidStoreInput) as caught:
        encode_vector(BAD[name])
    assert caught.value.field == "vector" and "finite" in str(caught.value)
    with pytest.raises(InvalidStoreInput, match="float32"):
        encode_vector([1e39, 0.0])  # finite, but not as a float32: was a bare OverflowError


async def test_every_store_refuses_a_non_finite_vector_naming_it(store: OMStore) -> None:
    await seed(store)
    good = VectorItem(thread_id=T, message_id="m0", vector=encode_vector([1.0, 0.0, 0.0]))
    for name, values in BAD.items():
        bad = VectorItem(thread_id=T, message_id="m3", vector=b"".join(
            encode_vector([v]) if math.isfinite(v) else _raw(v) for v in values))
        with pytest.raises(InvalidStoreInput) as caught:
            await store.aput_vectors(R, "space", [good, bad])
        assert caught.value.field == "items[1].vector", name
    assert len(await store.aget_vectors(R, "space")) == 0, "a refused call stores nothing"


def _raw(value: float) -> bytes:
    import struct

    return struct.pack("<f", value)


async def test_the_index_skips_a_non_finite_embedding_with_a_reason_and_keeps_the_others(
    store: OMStore, caplog: pytest.LogCaptureFixture
) -> None:
    await seed(store)
    index = StoreVectorIndex(store, Glitchy())
    with caplog.at_level(logging.WARNING, logger="langchain_om"):
        stored = await index.aadd(R, T, list(TEXTS.items()))
    assert stored == 3
    assert {m for m in ("m3", "m4", "m5") if any(repr(m) in r.getMessage() and "finite" in r.getMessage()
                                                  for r in caplog.records)} == {"m3", "m4", "m5"}
    hits = await index.asearch(R, "peanut allergy", k=20)
    assert [h.message_id for h in hits] == ranked("peanut allergy") == ["m1", "m0", "m2"]


@pytest.mark.parametrize("k", [2, 3, 20])
async def test_vectors_stored_before_the_refusal_never_hide_hits(
    store: OMStore, monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    """NaN and infinite rows already in the table (an older version stored them): fewer than ``k``
    finite rows, more than ``k``, and segments (SQLite, PostgreSQL) built over them."""
    await seed(store)
    monkeypatch.setattr(store_search, "finite_vector", lambda blob: True, raising=False)  # what older versions stored
    monkeypatch.setattr(vector_index, "encode_vector", _lenient_encode)
    monkeypatch.setattr(vector_index, "SEGMENT_ROWS", 2)
    writer = StoreVectorIndex(store, Glitchy())
    for mid, text in TEXTS.items():  # one row at a time, so segments of 2 rows mix good and bad rows
        assert await writer.aadd(R, T, [(mid, text)]) == 1
    await writer.asearch(R, "warm up: write the segments", k=k)
    for index in (writer, StoreVectorIndex(store, Glitchy())):  # the live index, and a restart
        hits = await index.asearch(R, "peanut allergy", k=k)
        assert [h.message_id for h in hits] == ranked("peanut allergy")[:k]
        assert all(math.isfinite(h.score) for h in hits)
        thread_hits = await index.asearch(R, "peanut allergy", k=k, thread_id=T)
        assert [h.message_id for h in thread_hits] == ranked("peanut allergy")[:k]


def ranked(query: str) -> list[str]:
    """The finite messages by cosine with ``query``, best first (the reference scan)."""
    embedder = Glitchy()
    q = embedder.embed_query(query)

    def cosine(v: list[float]) -> float:
        return sum(a * b for a, b in zip(v, q, strict=True)) / math.hypot(*v) / math.hypot(*q)

    finite = [mid for mid, text in TEXTS.items() if all(map(math.isfinite, embedder.embed_query(text)))]
    return sorted(finite, key=lambda mid: -cosine(embedder.embed_query(TEXTS[mid])))


def _lenient_encode(values: Any) -> bytes:
    import struct

    return struct.pack(f"<{len(values)}f", *values)


async def test_recall_finds_by_meaning_next_to_a_glitched_embedding(store: OMStore) -> None:
    """End to end: a conversation whose messages are embedded by ``ObservationalMemory`` (one of
    them glitched to NaN), then the recall tool asked in words no message holds: only the
    meaning finds the allergy, in English and in Japanese."""
    from langchain_core.messages import AIMessage
    from recall_helpers import T0, make_om, result_dict, stamped

    om = make_om(store, retrieval={"vector": True, "embeddings": Glitchy()})
    history = [
        stamped(HumanMessage("I am allergic to peanuts", id="h0"), T0),
        stamped(AIMessage("Noted. glitch [nan]", id="a0"), T0),
        stamped(HumanMessage("ピーナッツアレルギーがあります", id="h1"), T0),
        stamped(AIMessage("The meeting moved to Tuesday", id="a1"), T0),
    ]
    await om.aprocess(T, history, resource_id=R)
    tool = om.recall_tool(thread_id=T, resource_id=R)
    for query in ("legume", "豆"):
        found = result_dict(await tool.ainvoke({"mode": "search", "query": query}))
        assert "h0" in found["results"] and "h1" in found["results"], (query, found)
