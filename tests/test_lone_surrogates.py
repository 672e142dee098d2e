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


# ---- issue 44, item 8: two lone surrogates that happen to form a pair stay two ----------------

SPLIT_PAIR = "\ud83d\ude00"  # two code points, as surrogatepass / CESU-8 decoding makes them
CESU = b"caf\xc3\xa9 \xed\xa0\xbd\xed\xb8\x80 \xe7\x8c\xab".decode("utf-8", "surrogatepass")
PAIRED_TEXTS = [
    f"joined {SPLIT_PAIR} apart",
    CESU,  # café, the pair, 猫
    f"猫の絵文字 😀 と {SPLIT_PAIR} は別物",  # a real 😀 (one code point) next to the split pair
    f"\udcff{SPLIT_PAIR}\ud800",  # lone ones around it
    f"{SPLIT_PAIR}\x00",
]


def _exactly(value: Any, expected: Any) -> None:
    """Equal, and equal in every string's code points (``==`` on str already compares those)."""
    assert value == expected
    assert json.dumps(value) == json.dumps(expected)


async def test_every_store_returns_split_surrogate_pairs_exactly(store: OMStore) -> None:
    from datetime import datetime, timezone

    from langchain_om.store import ObservationGroup, OMRecord
    from langchain_om.store.step_fast_paths import SupportsHeadAppend

    assert len(SPLIT_PAIR) == 2 and len(CESU) == 9
    for index, text in enumerate(PAIRED_TEXTS):
        data = {"type": "human", "data": {"content": text, "additional_kwargs": {text: [text]}}}
        appended = await store.aappend_messages("dave", "t4", [NewMessage(id=f"m{index}", data=data)])
        _exactly(appended[0].data, data)
    stored = await store.aget_messages("dave", "t4")
    for index, text in enumerate(PAIRED_TEXTS):
        _exactly(stored[index].data["data"]["content"], text)
        _exactly(stored[index].data["data"]["additional_kwargs"], {text: [text]})
    found = await store.aget_messages_by_ids("dave", "t4", ["m0", "m1"])
    _exactly(sorted(m.data["data"]["content"] for m in found), sorted(PAIRED_TEXTS[:2]))
    one = await store.aget_message("dave", "m2")
    assert one is not None
    _exactly(one.data["data"]["content"], PAIRED_TEXTS[2])
    hits = await store.asearch_messages("dave", "joined apart", limit=5)
    _exactly([hit.message.data["data"]["content"] for hit in hits], [PAIRED_TEXTS[0]])

    edited = {"type": "human", "data": {"content": f"edited {SPLIT_PAIR}"}}
    assert await store.areplace_message("dave", "t4", "m4", edited, 3)
    _exactly((await store.aget_messages_by_ids("dave", "t4", ["m4"]))[0].data, edited)

    if isinstance(store, SupportsHeadAppend):  # the warm step's append (SQLite, PostgreSQL)
        thread = await store.aget_thread("dave", "t4")
        assert thread is not None
        data = {"type": "ai", "data": {"content": f"warm {SPLIT_PAIR}"}}
        done = await store.aappend_with_head("dave", "t4", [NewMessage(id="w1", data=data)], thread.created_at, "t4")
        assert done is not None
        _exactly((await store.aget_messages_by_ids("dave", "t4", ["w1"]))[0].data, data)

    meta = {"label": CESU, CESU: SPLIT_PAIR}
    await store.aupdate_thread("dave", "t4", metadata=meta)
    thread = await store.aget_thread("dave", "t4")
    assert thread is not None
    _exactly({k: thread.metadata[k] for k in meta}, meta)

    group = ObservationGroup(thread_id="t4", start_id="m0", end_id="m1", text=f"* 🔴 user sent {SPLIT_PAIR}",
                             created_at=datetime(2026, 12, 1, tzinfo=timezone.utc))
    committed = await store.acommit_record(OMRecord(resource_id="dave", thread_id="t4", scope="thread",
                                                    groups=[group]), expected_version=0)
    _exactly(committed.groups[0].text, group.text)
    record = await store.aget_record("dave", "t4")
    assert record is not None
    _exactly(record.groups[0].text, group.text)

    for value in ({"v": CESU}, [SPLIT_PAIR, 1], SPLIT_PAIR, {"__langchain_om_exact__": "not base64"},
                  {"__langchain_om_b64__": SPLIT_PAIR}):
        await store.aput_value("dave", "ns", "k", value)
        _exactly(await store.aget_value("dave", "ns", "k"), value)
        _exactly(await store.aupdate_value("dave", "ns", "k2", lambda _old, v=value: v), value)
        _exactly(await store.aget_value("dave", "ns", "k2"), value)
