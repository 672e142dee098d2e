"""Issue 30, item 4: a message edited in place is searched by its new words.

Editing an unobserved message (``add_messages`` replacing by id, ``update_state``) rewrites the
stored row; the keyword index (SQLite FTS5, PostgreSQL tsvector) and the stored embeddings must
follow it: the corrected word is found, the retracted one is not. English and Japanese.
"""

from __future__ import annotations

from typing import Any

from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import START
from recall_helpers import make_om, result_dict, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall.indexing import stored_index
from langchain_om.store import OMStore, encode_vector

ORIGINAL = "My door code is 7731, 玄関の暗証番号は 七七三一 です"
CORRECTED = "Sorry, my door code is 4406, 玄関の暗証番号は 四四〇六 です"


async def edit_the_code(om: ObservationalMemory) -> None:
    """Store a message, then send it again under its id with the corrected text."""
    history: list[BaseMessage] = [stamped(HumanMessage(ORIGINAL, id="h-code"), START),
                                  stamped(AIMessage("Noted your door code.", id="a-code"), START)]
    await om.aprocess("t-edit", history, resource_id="alice")
    history[0] = stamped(HumanMessage(CORRECTED, id="h-code"), START)
    history.append(stamped(HumanMessage("Thanks", id="h-next"), START))
    await om.aprocess("t-edit", history, resource_id="alice")


async def search(om: ObservationalMemory, query: str) -> str:
    result: dict[str, Any] = result_dict(await om.recall_tool(thread_id="t-edit", resource_id="alice").ainvoke(
        {"mode": "search", "query": query}))
    return str(result["results"])


async def test_an_edited_message_is_found_by_its_new_words_only(store: OMStore) -> None:
    om = make_om(store)
    await edit_the_code(om)
    stored = await store.aget_messages("alice", "t-edit")
    assert [m.id for m in stored] == ["h-code", "a-code", "h-next"], "edited in place, not appended"
    for word in ("4406", "四四〇六", "sorry"):
        assert "cursor: h-code" in await search(om, word), word
    for word in ("7731", "七七三一"):
        assert "cursor: h-code" not in await search(om, word), f"the retracted {word} still finds the message"


async def test_an_edited_message_gets_the_vector_of_its_new_text(store: OMStore) -> None:
    embedder = DeterministicFakeEmbedding(size=16)
    om = make_om(store, retrieval={"vector": True, "embeddings": embedder})
    index = stored_index(om)
    assert index is not None
    history = [stamped(HumanMessage(ORIGINAL, id="h-code"), START)]
    await om.aprocess("t-edit", history, resource_id="alice")
    assert [hit.message_id for hit in await index.asearch("alice", ORIGINAL, k=1)] == ["h-code"]  # cache warm
    await edit_the_code(om)
    batch = await store.aget_vectors("alice", index.space)
    vectors = [vector for mid, vector in zip(batch.message_ids, batch.vectors, strict=True) if mid == "h-code"]
    assert vectors == [encode_vector(embedder.embed_query(CORRECTED))], "one vector, the corrected text's"
    hits = await index.asearch("alice", CORRECTED, k=3)
    assert hits[0].message_id == "h-code" and hits[0].score > 0.999
    assert [hit.message_id for hit in hits].count("h-code") == 1
