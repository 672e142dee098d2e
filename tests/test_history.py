"""ObservationalChatMessageHistory (issue 3, item 4).

The installed langchain_tests has no chat-history suite, so this file is the full contract:
add / aadd / get / aget / clear / aclear, ordering, every message type round-trips (tool
calls, additional_kwargs, response_metadata), then RunnableWithMessageHistory over 60 turns.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.integrations.history import ObservationalChatMessageHistory, one_system_message
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


def make_om(store: OMStore, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "model": ScriptedObserverModel(),
        "observation": {"message_tokens": 600},
        "reflection": {"observation_tokens": 900},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(store, **options)


def every_kind() -> list[BaseMessage]:
    return [
        SystemMessage("be helpful", additional_kwargs={"cache": {"type": "ephemeral"}}),
        HumanMessage("what's the weather in Paris?", additional_kwargs={"lang": "en"}, name="alice"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Paris", "days": 2}, "id": "call_1",
                                   "type": "tool_call"}],
                  additional_kwargs={"reasoning": "need the tool"}, response_metadata={"model_name": "m1"},
                  usage_metadata={"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}),
        ToolMessage("18°C and sunny", tool_call_id="call_1", name="weather", artifact={"raw": [18, "sun"]}),
        AIMessage([{"type": "text", "text": "It is 18°C and sunny."}]),
        ChatMessage(content="custom role text", role="critic"),
        FunctionMessage(content="legacy function result", name="legacy"),
        HumanMessage([{"type": "text", "text": "thanks"}, {"type": "text", "text": "bye"}]),
    ]


def same(a: BaseMessage, b: BaseMessage) -> bool:
    fields = ("type", "content", "additional_kwargs", "name")
    if any(getattr(a, f) != getattr(b, f) for f in fields):
        return False
    if isinstance(a, AIMessage):
        assert isinstance(b, AIMessage)
        return a.tool_calls == b.tool_calls and a.usage_metadata == b.usage_metadata and \
            a.response_metadata.get("model_name") == b.response_metadata.get("model_name")
    if isinstance(a, ToolMessage):
        assert isinstance(b, ToolMessage)
        return a.tool_call_id == b.tool_call_id and a.artifact == b.artifact
    if isinstance(a, ChatMessage):
        assert isinstance(b, ChatMessage)
        return a.role == b.role
    return True


def unobserved(history: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in history if m.id != OM_CONTEXT_MESSAGE_ID]


async def test_contract_async(store: OMStore) -> None:
    om = make_om(store)
    history = ObservationalChatMessageHistory(om, "h-async", resource_id="bob")
    assert isinstance(history, BaseChatMessageHistory)
    assert await history.aget_messages() == []
    originals = every_kind()
    await history.aadd_messages(originals[:3])
    await history.aadd_messages(originals[3:])
    got = await history.aget_messages()
    assert len(got) == len(originals)
    for original, back in zip(originals, got, strict=True):
        assert same(original, back), (original, back)
    assert all(m.id for m in got), "stored messages get ids"
    assert all(m.id is None for m in originals), "the caller's messages are not modified"
    # adding more keeps order; single-message helpers go through add_messages
    await history.aadd_messages([HumanMessage("one more")])
    got2 = await history.aget_messages()
    assert [m.content for m in got2[-2:]] == [originals[-1].content, "one more"]
    # clear removes the thread; new messages start fresh
    await history.aclear()
    assert await history.aget_messages() == []
    assert await store.aget_messages("bob", "h-async") == []
    record = await om.aget_record("h-async", resource_id="bob")
    assert record.groups == [] and record.version <= 1
    await history.aadd_messages([HumanMessage("fresh start")])
    assert [m.content for m in await history.aget_messages()] == ["fresh start"]


def test_contract_sync() -> None:
    om = make_om(InMemoryStore())
    try:
        history = ObservationalChatMessageHistory(om, "h-sync")
        assert history.messages == []
        history.add_user_message("hello")
        history.add_ai_message("hi there")
        history.add_message(ToolMessage("result", tool_call_id="c9"))
        originals = every_kind()
        history.add_messages(originals)
        got = history.messages
        # a system message is an instruction: it leads the context instead of standing in the
        # conversation where it was added (README, "What the model sees")
        assert [m.content for m in got[:4]] == ["be helpful", "hello", "hi there", "result"]
        assert same(originals[0], got[0])
        for original, back in zip(originals[1:], got[4:], strict=True):
            assert same(original, back)
        history.clear()
        assert history.messages == []
        history.add_user_message("again")
        assert [m.content for m in history.messages] == ["again"]
        # ids already stored are not stored twice (idempotent add)
        kept = history.messages[0]
        history.add_messages([kept])
        assert len(history.messages) == 1
    finally:
        om.close()


def test_bad_input_names_the_field() -> None:
    om = make_om(InMemoryStore())
    with pytest.raises(ValueError, match="thread_id"):
        ObservationalChatMessageHistory(om, "")
    with pytest.raises(ValueError, match="resource_id"):
        ObservationalChatMessageHistory(om, "t", resource_id="")
    history = ObservationalChatMessageHistory(om, "t")
    with pytest.raises(TypeError, match=r"messages\[0\]"):
        history.add_messages(["not a message"])  # type: ignore[list-item]
    om.close()


async def test_messages_become_the_om_context_after_observation(store: OMStore) -> None:
    om = make_om(store, observation={"message_tokens": 600, "buffer_tokens": False})
    history = ObservationalChatMessageHistory(om, "h-long")
    for i in range(60):
        await history.aadd_messages([
            HumanMessage(f"Turn {i}: my favourite number is {i}. " + "words " * 25),
            AIMessage(f"Noted number {i}. " + "reply " * 25),
        ])
        await history.aget_messages()
    context = await history.aget_messages()
    assert context[0].id == OM_CONTEXT_MESSAGE_ID and "<observations>" in str(context[0].content)
    assert len(context) < 40
    record = await om.aget_record("h-long")
    assert record.generation_count >= 1, "the reflection threshold was crossed too"
    assert len(await store.aget_messages(implicit_resource("h-long"), "h-long")) == 120, "raw messages are kept"


@pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")
async def test_runnable_with_message_history_60_turns(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel()
    prompt = ChatPromptTemplate.from_messages([
        ("system", "You are a helpful assistant."),
        MessagesPlaceholder("history"),
        ("human", "{question}"),
    ])
    histories: dict[str, ObservationalChatMessageHistory] = {}

    def get_history(session_id: str) -> ObservationalChatMessageHistory:
        return histories.setdefault(session_id, ObservationalChatMessageHistory(om, session_id))

    chain = RunnableWithMessageHistory(prompt | model, get_history, input_messages_key="question",
                                       history_messages_key="history")
    config: RunnableConfig = {"configurable": {"session_id": "s1"}}
    for i in range(60):
        answer = await chain.ainvoke({"question": f"Turn {i}: I like colour {i}. " + "more " * 25}, config)
        assert isinstance(answer, AIMessage)
        await om.await_background()
    stored = await store.aget_messages(implicit_resource("s1"), "s1")
    assert len(stored) == 120, "every question and answer was stored through OM"
    last = model.calls[-1]
    assert last[0].content == "You are a helpful assistant."
    assert last[1].id == OM_CONTEXT_MESSAGE_ID, "the OM context sits where the history goes"
    assert len(last) < 40 and str(last[-1].content).startswith("Turn 59")
    # the same chain with one_system_message in front of the model: one system message, template first
    one = ScriptedAgentModel()
    merged_chain = RunnableWithMessageHistory(prompt | one_system_message | one, get_history,
                                              input_messages_key="question", history_messages_key="history")
    prefixes: list[str] = []
    for i in range(60, 66):
        await merged_chain.ainvoke({"question": f"ターン{i}: 色{i}が好き。" + "more " * 25}, config)
        call = one.calls[-1]
        assert sum(m.type == "system" for m in call) == 1 and call[0].type == "system"
        text = str(call[0].content)
        assert text.startswith("You are a helpful assistant.\n\n") and "<observations>" in text
        prefixes.append(text[: text.index("<observations>")])
        await om.await_background()
    assert len(set(prefixes)) == 1, "the merged prefix stays byte-stable across turns"
    record = await om.aget_record("s1")
    assert record.groups and record.generation_count >= 1
    assert len(unobserved(last)) < len(stored)


async def test_an_aborted_step_raises_instead_of_returning_an_over_budget_history() -> None:
    from langchain_om.engine import OMAborted
    from langchain_om.model_calls.models import ModelByInputTokens

    om = make_om(InMemoryStore(), model=ModelByInputTokens(up_to={50: ScriptedObserverModel()}),
                 observation={"message_tokens": 200, "buffer_tokens": False})
    history = ObservationalChatMessageHistory(om, "t1")
    filler = " ".join(f"word{i}" for i in range(80))
    await history.aadd_messages([HumanMessage(f"q {filler}", id="h1"), AIMessage(f"a {filler}", id="a1"),
                                 HumanMessage("and now?", id="h2")])
    with pytest.raises(OMAborted, match="chat history"):
        await history.aget_messages()
    with pytest.raises(OMAborted):
        _ = history.messages
    stored = await om.store.aget_messages(implicit_resource("t1"), "t1")
    assert [m.id for m in stored] == ["h1", "a1", "h2"] and not any(m.observed for m in stored)
