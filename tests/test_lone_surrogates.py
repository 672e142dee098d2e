"""Issue 30, item 1: a lone surrogate in a message never bricks a thread.

``os.fsdecode(b"report-\\xff.txt")`` is ``'report-\\udcff.txt'``: a legal Python string that
UTF-8 cannot hold. The policy: the stored message keeps it exactly (its JSON escapes it, so
recall and the caller's context get back what was sent), and every copy made for something
that speaks UTF-8 (the full-text index, embeddings, OM's own Observer / Reflector prompts)
carries U+FFFD in its place. Checked end to end on every store, with English and Japanese.
"""

from __future__ import annotations

import json
import os
from typing import Any

from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from om_fakes import START, CallableFake, observer_or_reflector
from recall_helpers import result_dict, stamped

from langchain_om import ObservationalMemory
from langchain_om.store import NewMessage, OMStore

ENGLISH_NAME = os.fsdecode(b"report-\xff.txt")
JAPANESE_NAME = os.fsdecode("報告書-".encode() + b"\xfe.csv")


def wire_fn(messages: list[BaseMessage]) -> str:
    """What a provider client does with the prompt first: JSON without ASCII escapes, as UTF-8."""
    json.dumps([m.content for m in messages], ensure_ascii=False).encode("utf-8")
    return observer_or_reflector(messages)


def turns() -> list[BaseMessage]:
    call = AIMessage("", id="a0", tool_calls=[{"name": "list_files", "args": {"dir": "/srv"}, "id": "c0"}])
    return [
        stamped(HumanMessage("Which files are in /srv? ファイル一覧をください", id="h0"), START),
        stamped(call, START),
        stamped(ToolMessage(f"{ENGLISH_NAME}\n{JAPANESE_NAME}", tool_call_id="c0", name="list_files", id="t0"), START),
        stamped(AIMessage(f"Found {ENGLISH_NAME} and {JAPANESE_NAME}.", id="a1"), START),
    ]


async def test_a_lone_surrogate_is_stored_losslessly_and_indexed_and_prompted_as_replacement(
    store: OMStore,
) -> None:
    model = CallableFake(fn=wire_fn)
    om = ObservationalMemory(
        store, model=model, token_counter="estimator",
        observation={"message_tokens": 40, "buffer_tokens": False},
        reflection={"observation_tokens": 60},
        retrieval={"vector": True, "embeddings": DeterministicFakeEmbedding(size=16)},
    )
    history = turns()
    for end in range(1, len(history) + 1):
        await om.aprocess("t1", history[:end], resource_id="alice")
    # later turns go on (nothing is bricked), the Observer and the Reflector ran on the thread
    for index in range(6):
        history.append(stamped(HumanMessage(f"Next question {index}: and the sizes? サイズは?", id=f"h{index + 1}"),
                               START))
        history.append(stamped(AIMessage(f"Both files are small ({index}).", id=f"a{index + 2}"), START))
        ctx = await om.aprocess("t1", history, resource_id="alice")
    assert model.prompts, "the Observer was called"
    assert ctx.record.generation_count >= 1, "the Reflector ran too"
    sent = "".join(str(m.content) for prompt in model.prompts for m in prompt)
    assert "\ufffd" in sent and "report-" in sent and "報告書-" in sent

    stored = {m.id: m for m in await store.aget_messages("alice", "t1")}
    assert stored["t0"].data["data"]["content"] == f"{ENGLISH_NAME}\n{JAPANESE_NAME}", "the row is lossless"

    tool = om.recall_tool(thread_id="t1", resource_id="alice")
    for query in ("report", "報告書"):
        found = result_dict(await tool.ainvoke({"mode": "search", "query": query}))
        assert "t0" in found["results"] and "a1" in found["results"], (query, found)
        json.dumps(found, ensure_ascii=False).encode("utf-8")  # the tool result goes to the agent's model
    page = result_dict(await tool.ainvoke({"mode": "messages", "cursor": "t0", "detail": "high"}))
    assert "report-\ufffd.txt" in page["messages"], page


async def test_a_thread_holding_a_row_with_a_lone_surrogate_recovers(store: OMStore) -> None:
    """A row already stored (by an older version, or written straight to the store) does not stop the thread."""
    await store.aappend_messages("bob", "t2", [NewMessage(id="h0", data={
        "type": "human", "data": {"content": f"upload {ENGLISH_NAME} please", "type": "human", "id": "h0"}})])
    model = CallableFake(fn=wire_fn)
    om = ObservationalMemory(store, model=model, token_counter="estimator",
                             observation={"message_tokens": 30, "buffer_tokens": False}, retrieval=True)
    history: list[Any] = [stamped(HumanMessage(f"upload {ENGLISH_NAME} please", id="h0"), START)]
    for index in range(4):
        history.append(stamped(AIMessage(f"Uploaded part {index} of {JAPANESE_NAME}", id=f"a{index}"), START))
        history.append(stamped(HumanMessage(f"ok, next part {index}", id=f"h{index + 1}"), START))
        await om.aprocess("t2", history, resource_id="bob")
    assert model.prompts and (await om.aget_record("t2", resource_id="bob")).groups
    found = result_dict(await om.recall_tool(thread_id="t2", resource_id="bob").ainvoke(
        {"mode": "search", "query": "upload"}))
    assert "h0" in found["results"]


async def test_every_store_call_accepts_a_lone_surrogate(store: OMStore) -> None:
    """The store API on its own: messages and values keep it, a title (a label) and the index get U+FFFD."""
    data = {"type": "tool", "data": {"content": f"{ENGLISH_NAME} / {JAPANESE_NAME}", "name": "ls"}}
    await store.aappend_messages("carol", "t3", [NewMessage(id="m1", data=data)])
    assert (await store.aget_messages("carol", "t3"))[0].data == data
    info = await store.aupdate_thread("carol", "t3", title=f"Files: {ENGLISH_NAME}")
    assert info.title == "Files: report-\ufffd.txt"
    await store.aput_value("carol", "ns", "k", {"name": ENGLISH_NAME})
    assert await store.aget_value("carol", "ns", "k") == {"name": ENGLISH_NAME}
    for query in ("report", "報告書", f"{ENGLISH_NAME}"):
        hits = await store.asearch_messages("carol", query, limit=5)
        assert [hit.message.id for hit in hits] == ["m1"], query
    assert await store.areplace_message("carol", "t3", "m1", {**data, "data": {"content": f"new {ENGLISH_NAME}"}}, 3)
    assert [hit.message.id for hit in await store.asearch_messages("carol", "new", limit=5)] == ["m1"]
