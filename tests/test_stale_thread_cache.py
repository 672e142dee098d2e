"""A worker's in-process caches notice a thread another worker deleted and re-created
(issue 15, item 6).

Two ``ObservationalMemory`` instances share one store, like two server workers. Worker A has
seen thread ``t`` (it caches the ids ``msg-1``, ``msg-2``); worker B deletes the thread; the
client starts the conversation again and reuses its ids. Worker A must store the new
messages and show them to the model, never the deleted ones.
"""

from __future__ import annotations

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel


def make_om(store: OMStore, scope: str = "thread") -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), scope=scope,  # type: ignore[arg-type]
                               observation={"message_tokens": 10_000, "buffer_tokens": False},
                               reflection={"observation_tokens": 40_000}, token_counter="estimator")


def chat(*texts: str) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for index, text in enumerate(texts, start=1):
        kind = HumanMessage if index % 2 else AIMessage
        out.append(kind(text, id=f"msg-{index}"))
    return out


def contents(messages: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in messages]


async def _run(store: OMStore, scope: str, resource: str | None) -> None:
    worker_a, worker_b = make_om(store, scope), make_om(store, scope)
    old = chat("my passport number is X123", "noted")
    await worker_a.aprocess("t", old, resource_id=resource)
    await worker_b.aprocess("t", old, resource_id=resource)

    await worker_b.adelete_thread("t", resource_id=resource)

    new = chat("hello again, new topic", "hi! what's up?")
    context = await worker_a.aprocess("t", new, resource_id=resource)
    assert contents(context.messages) == ["hello again, new topic", "hi! what's up?"]
    owner = worker_a._resource_for("t", resource)
    stored = await store.aget_messages(owner, "t")
    assert [m.id for m in stored] == ["msg-1", "msg-2"]
    assert "new topic" in str(stored[0].data)

    # the next step goes on normally from the new incarnation
    more = [*new, HumanMessage("and a third", id="msg-3")]
    context = await worker_a.aprocess("t", more, resource_id=resource)
    assert contents(context.messages)[-1] == "and a third"
    assert len(await store.aget_messages(owner, "t")) == 3


async def test_a_thread_recreated_by_another_worker_stores_reused_ids(store: OMStore) -> None:
    await _run(store, "thread", None)


async def test_a_thread_recreated_by_another_worker_in_resource_scope(store: OMStore) -> None:
    await _run(store, "resource", "user-1")


async def test_on_turn_end_also_notices_the_recreated_thread(store: OMStore) -> None:
    worker_a, worker_b = make_om(store), make_om(store)
    await worker_a.aon_turn_end("t", chat("old question", "old answer"))
    await worker_b.adelete_thread("t")
    await worker_a.aon_turn_end("t", chat("new question", "new answer"))
    stored = await store.aget_messages(worker_a._resource_for("t", None), "t")
    assert [str(m.data["data"]["content"]) for m in stored] == ["new question", "new answer"]


async def test_a_step_with_new_messages_notices_a_thread_recreated_with_them(store: OMStore) -> None:
    """The incarnation check rides on the append (``SupportsIncarnationAppend``): when worker B
    re-created the thread, worker A's append writes nothing, A drops its stale caches and stores
    the caller's messages in the new incarnation, reused ids included."""
    worker_a, worker_b = make_om(store), make_om(store)
    await worker_a.aprocess("t", chat("旅券番号は X123 です", "承知しました"))
    await worker_a.aprocess("t", chat("旅券番号は X123 です", "承知しました", "and the hotel?"))
    await worker_b.adelete_thread("t")
    await worker_b.aprocess("t", [HumanMessage("新しい話題です", id="msg-1")])

    again = [HumanMessage("新しい話題です", id="msg-1"), AIMessage("どうぞ / go ahead", id="msg-2"),
             HumanMessage("Lisbon trains, please", id="msg-3"), AIMessage("了解 / sure", id="msg-4")]
    context = await worker_a.aprocess("t", again)  # msg-4 is new to A too: the append finds B's thread
    assert contents(context.messages) == ["新しい話題です", "どうぞ / go ahead", "Lisbon trains, please", "了解 / sure"]
    stored = await store.aget_messages(worker_a._resource_for("t", None), "t")
    assert [(m.id, m.data["data"]["content"]) for m in stored] == [
        ("msg-1", "新しい話題です"), ("msg-2", "どうぞ / go ahead"), ("msg-3", "Lisbon trains, please"),
        ("msg-4", "了解 / sure")]


async def test_an_incarnation_append_writes_only_into_the_expected_incarnation(store: OMStore) -> None:
    from langchain_core.messages import message_to_dict

    from langchain_om.store.base import NewMessage
    from langchain_om.store.step_fast_paths import SupportsIncarnationAppend

    if not isinstance(store, SupportsIncarnationAppend):
        return  # a store without the fast path keeps the separate read
    row = [NewMessage(id="m1", data=message_to_dict(HumanMessage("こんにちは")), tokens=3)]
    first = await store.aensure_thread("r1", "t")
    appended = await store.aappend_to_incarnation("r1", "t", row, first.created_at)
    assert appended is not None and [m.seq for m in appended] == [1]
    await store.adelete_thread("r1", "t")
    assert await store.aappend_to_incarnation("r1", "t", row, first.created_at) is None  # gone
    assert await store.aget_thread("r1", "t") is None  # and not created
    second = await store.aensure_thread("r1", "t")
    assert second.created_at != first.created_at
    assert await store.aappend_to_incarnation("r1", "t", row, first.created_at) is None  # another one
    assert await store.aappend_to_incarnation("r2", "t", row, second.created_at) is None  # another resource
    assert await store.aget_messages("r1", "t") == []
    appended = await store.aappend_to_incarnation("r1", "t", row, second.created_at)
    assert appended is not None and [m.id for m in appended] == ["m1"]
