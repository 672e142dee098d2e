"""A stateless step's fork check carried by its append (issue 33, item 3).

Without a checkpointed position, every step asks whether the caller runs from the past: does the
branch hold a message of the state below a newer one the state lacks? When the state holds only
messages the step appends, SQLite's ``aappend_new_with_head`` (``SupportsNewAppend``) answers it
in the append's own transaction: it writes nothing when the thread holds any of them, and the
step then runs the full check. These tests hold what that shortcut must keep: the all-or-nothing
append, a caller running from the past still forks when this worker's caches could not know it
(another worker stored the messages), and a continuing stateless conversation stays one thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, message_to_dict

from langchain_om import ObservationalMemory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import BRANCH_MARK, NewMessage, implicit_resource
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.store.step_fast_paths import SupportsNewAppend
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TEXTS = {
    "en": ["My sister Ana lives in Lisbon.", "Noted: Ana, Lisbon.", "She moved to Porto in May.",
           "Noted: Porto since May.", "Where did Ana live before?"],
    "ja": ["妹のアナはリスボンに住んでいます。", "了解です：アナ、リスボン。", "5月にポルトへ引っ越しました。",
           "了解です：5月からポルト。", "アナは以前どこに住んでいましたか？"],
}


def _row(mid: str, text: str) -> NewMessage:
    return NewMessage(id=mid, data=message_to_dict(HumanMessage(text, id=mid)), tokens=4)


@pytest.mark.parametrize("lang", TEXTS)
async def test_an_append_of_new_messages_writes_nothing_when_one_is_held(sqlite_path: Path, lang: str) -> None:
    store = SQLiteStore(sqlite_path)
    assert isinstance(store, SupportsNewAppend)
    texts = TEXTS[lang]
    info = await store.aensure_thread("alice", "t1")
    first = await store.aappend_new_with_head("alice", "t1", [_row("m1", texts[0])], info.created_at, "t1")
    assert first is not None and [r.seq for r in first[0]] == [1] and first[1] == (1, None)
    # m1 is held: neither m2 nor m3 is written, and the head is the thread's as it was
    held = await store.aappend_new_with_head(
        "alice", "t1", [_row("m2", texts[1]), _row("m1", texts[0]), _row("m3", texts[2] + " 🙂\x00")],
        info.created_at, "t1")
    assert held == ([], (1, None))
    assert [r.id for r in await store.aget_messages("alice", "t1")] == ["m1"]
    # the plain append still skips the held id and writes the rest
    both = await store.aappend_with_head("alice", "t1", [_row("m1", texts[0]), _row("m2", texts[1])],
                                         info.created_at, "t1")
    assert both is not None and [(r.id, r.seq) for r in both[0]] == [("m2", 2)]
    # another incarnation: None, nothing written
    assert await store.aappend_new_with_head("alice", "t1", [_row("m9", texts[3])], info.created_at.replace(
        year=2001), "t1") is None
    assert [r.id for r in await store.aget_messages("alice", "t1")] == ["m1", "m2"]
    await store.aclose()


def _om(store: SQLiteStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": 100_000, "buffer_tokens": False})


@pytest.mark.parametrize("resent", ["exchange", "reply"])
@pytest.mark.parametrize("lang", TEXTS)
async def test_a_stateless_caller_running_from_the_past_forks_though_this_worker_never_saw_it(
    tmp_path: Path, lang: str, resent: str,
) -> None:
    """Worker B's caches are warm on the thread but do not know the messages worker A stored. B's
    caller sends A's first exchange (or only its reply) again with a new question: it runs from
    before A's second exchange, so the step must fork, not append the question to the thread A
    wrote. (With the reply alone, only the append's all-or-nothing write stands in the way.)"""
    texts = TEXTS[lang]
    path = tmp_path / "shared.db"
    store_a, store_b = SQLiteStore(path), SQLiteStore(path)
    om_a, om_b = _om(store_a), _om(store_b)
    model_b = ScriptedAgentModel()
    agent_b = create_agent(model_b, [], middleware=[ObservationalMemoryMiddleware(om_b)])
    config: Any = {"configurable": {"thread_id": "chat"}}
    try:
        await agent_b.ainvoke({"messages": [HumanMessage("hello / こんにちは", id="h0")]}, config)  # B is warm
        history: list[BaseMessage] = [HumanMessage("hello / こんにちは", id="h0"), HumanMessage(texts[0], id="h1"),
                                      AIMessage(texts[1], id="a1"), HumanMessage(texts[2], id="h2"),
                                      AIMessage(texts[3], id="a2")]
        await om_a.aprocess("chat", history)
        resource = implicit_resource("chat")
        stored_before = [r.id for r in await store_a.aget_messages(resource, "chat")]
        assert stored_before[-4:] == ["h1", "a1", "h2", "a2"]
        past: list[BaseMessage] = [AIMessage(texts[1], id="a1"), HumanMessage(texts[4], id="h3")]
        if resent == "exchange":
            past.insert(0, HumanMessage(texts[0], id="h1"))
        result = await agent_b.ainvoke({"messages": past}, config)
        assert result["messages"][-1].content  # the agent answered
        # the thread A wrote is untouched; the question went to a branch forked at a1
        assert [r.id for r in await store_a.aget_messages(resource, "chat")] == stored_before
        threads = await store_b.alist_thread_ids(resource)
        branches = [t for t in threads if BRANCH_MARK in t]
        assert len(branches) == 1, threads
        on_branch = [r.id for r in await store_b.aget_messages(resource, branches[0])]
        assert on_branch.index("a1") < on_branch.index("h3") and not {"h2", "a2"} & set(on_branch), on_branch
        # the model saw the past it was sent, not A's later exchange
        seen = "\n".join(str(m.content) for m in model_b.calls[-1])
        assert texts[4] in seen and texts[2] not in seen
    finally:
        for om in (om_a, om_b):
            await om.aclose()
        for store in (store_a, store_b):
            await store.aclose()


@pytest.mark.parametrize("lang", TEXTS)
async def test_a_stateless_conversation_stays_one_thread(sqlite_path: Path, lang: str) -> None:
    """Each turn sends only its new message: the append proves it new, no fork probe runs, and
    every message lands once, in order, in the caller's own thread."""
    texts = TEXTS[lang]
    store = SQLiteStore(sqlite_path)
    om = _om(store)
    probes: list[str] = []
    probe = store.afork_probe

    async def counted(*args: Any, **kwargs: Any) -> Any:
        probes.append(args[1])
        return await probe(*args, **kwargs)

    store.afork_probe = counted  # type: ignore[method-assign]
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)])
    config: Any = {"configurable": {"thread_id": "solo"}}
    try:
        for i, text in enumerate(texts):
            await agent.ainvoke({"messages": [HumanMessage(text, id=f"h{i}")]}, config)
        resource = implicit_resource("solo")
        rows = await store.aget_messages(resource, "solo")
        assert [r.id for r in rows if r.data["type"] == "human"] == [f"h{i}" for i in range(len(texts))]
        assert await store.alist_thread_ids(resource) == ["solo"]
        assert len(probes) == 1  # only the first step (cold caches) probes
        assert texts[0] in "\n".join(str(m.content) for m in model.calls[-1])  # memory continues
    finally:
        await om.aclose()
        await store.aclose()
