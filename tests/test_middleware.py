"""create_agent middleware (issue 3, items 3 and 8): 60-turn agents, sync and async, tools, tripwire."""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.callbacks import OMEventHandler, SyncOMEventHandler
from langchain_om.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.engine import ObservationalMemory
from langchain_om.middleware import TRIPWIRE_KEY, ObservationalMemoryMiddleware, merge_system_messages, model_id
from langchain_om.models import ModelByInputTokens
from langchain_om.store.base import OMStore
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TURNS = 60
USER_PROMPT = "You are a concise shopping assistant."


def make_om(store: OMStore, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "model": ScriptedObserverModel(),
        "observation": {"message_tokens": 600},
        "reflection": {"observation_tokens": 900},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(store, **options)


def user_turn(i: int) -> HumanMessage:
    return HumanMessage(f"Turn {i}: I prefer option {i} and my budget is {i * 10} dollars. " + "context " * 25)


@tool
def lookup_price(item: str) -> str:
    """Look up the price of an item."""
    return f"{item} costs 42 dollars"


def check_model_inputs(calls: list[list[BaseMessage]], state_messages: list[BaseMessage]) -> None:
    assert len(calls) >= TURNS
    for index, call in enumerate(calls):
        assert isinstance(call[0], SystemMessage), f"call {index}: system message first"
        assert str(call[0].content).startswith(USER_PROMPT), f"call {index}: user's prompt leads"
        assert sum(1 for m in call if m.type == "system") == 1
        assert any(m.type == "human" for m in call)
        assert len(call) < 2 * TURNS // 3, f"call {index}: bounded context"
        call_ids = {c["id"] for m in call if isinstance(m, AIMessage) for c in m.tool_calls}
        for m in call:
            if isinstance(m, ToolMessage):
                assert m.tool_call_id in call_ids, f"call {index}: tool result without its call"
    last = str(calls[-1][0].content)
    assert "<observations>" in last, "OM context merged after the user's prompt"
    assert last.index(USER_PROMPT) < last.index("<observations>")
    # the context was never written into the agent's state
    assert not any(m.id == OM_CONTEXT_MESSAGE_ID for m in state_messages)
    assert not any(isinstance(m, SystemMessage) for m in state_messages)


async def test_async_agent_60_turns(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"x{i}"}) for i in range(3, 300, 9)})
    agent = create_agent(model, [lookup_price], system_prompt=USER_PROMPT,
                         middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    handler = OMEventHandler()
    config: RunnableConfig = {"configurable": {"thread_id": "mw-async", "resource_id": "alice"},
                              "callbacks": [handler]}
    for i in range(TURNS):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    state = await agent.aget_state(config)
    messages = state.values["messages"]
    check_model_inputs(model.calls, messages)
    assert len(messages) >= 2 * TURNS, "full history stays in the checkpoint"
    assert any(isinstance(m, ToolMessage) for m in messages)
    record = await om.aget_record("mw-async", resource_id="alice")
    assert record.groups and record.generation_count >= 1
    # one status per model call
    assert len(handler.of_type("data-om-status")) == len(model.calls)
    # after_agent stored the final reply: everything in state is in the store
    stored = await store.aget_messages("alice", "mw-async")
    assert [m.id for m in stored] == [m.id for m in messages]


def test_sync_agent_60_turns() -> None:
    om = make_om(InMemoryStore())
    try:
        model = ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"x{i}"}) for i in range(5, 300, 11)})
        agent = create_agent(model, [lookup_price], system_prompt=USER_PROMPT,
                             middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
        handler = SyncOMEventHandler()
        config: RunnableConfig = {"configurable": {"thread_id": "mw-sync"}, "callbacks": [handler]}
        for i in range(TURNS):
            agent.invoke({"messages": [user_turn(i)]}, config)
        messages = agent.get_state(config).values["messages"]
        check_model_inputs(model.calls, messages)
        record = om.get_record("mw-sync")
        assert record.groups and record.generation_count >= 1
        statuses = [e for e in handler.events if e.type == "data-om-status"]
        assert len(statuses) == len(model.calls)
        assert statuses[-1].data.generation_count == record.generation_count  # type: ignore[attr-defined]
    finally:
        om.close()


async def test_tripwire_returns_empty_message_without_calling_the_model(store: OMStore) -> None:
    # no observer model fits an input this large: OM cannot build the context
    om = make_om(store, model=ModelByInputTokens(up_to={50: ScriptedObserverModel()}),
                 observation={"message_tokens": 600, "buffer_tokens": False})
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "trip"}}
    tripped: AIMessage | None = None
    calls_before = 0
    for i in range(20):
        calls_before = len(model.calls)
        result = await agent.ainvoke({"messages": [user_turn(i)]}, config)
        last = result["messages"][-1]
        if TRIPWIRE_KEY in last.response_metadata:
            tripped = last
            break
    assert tripped is not None, "the tripwire fired once the message threshold was crossed"
    assert tripped.content == ""
    assert "model selection" in tripped.response_metadata[TRIPWIRE_KEY]
    assert len(model.calls) == calls_before, "the agent model was not called"


async def test_provider_change_activation_gets_current_model(store: OMStore) -> None:
    om = make_om(store, activate_on_provider_change=True,
                 observation={"message_tokens": 600, "buffer_tokens": 0.2})
    saver = InMemorySaver()
    first = ScriptedAgentModel()
    agent = create_agent(first, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "switch"}}
    for i in range(4):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    status = await om.astatus("switch")
    assert status.windows.buffered.observations.chunks >= 1, "something is buffered to activate"
    second = ScriptedAgentModel(model_name="another-agent")
    assert model_id(second) == "scripted/another-agent" != model_id(first)
    agent2 = create_agent(second, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver)
    handler = OMEventHandler()
    await agent2.ainvoke({"messages": [HumanMessage("switching models now")]}, {**config, "callbacks": [handler]})
    activations = handler.of_type("data-om-activation")
    assert activations and activations[0].data.triggered_by == "provider_change"  # type: ignore[attr-defined]
    assert activations[0].data.current_model == "scripted/another-agent"  # type: ignore[attr-defined]


def test_merge_system_messages_orders_user_first() -> None:
    user = SystemMessage("be brief")
    om_msg = SystemMessage("<observations>x</observations>", id=OM_CONTEXT_MESSAGE_ID)
    merged = merge_system_messages(user, om_msg)
    assert merged is not None and merged.content == "be brief\n\n<observations>x</observations>"
    assert merge_system_messages(None, om_msg) is om_msg
    assert merge_system_messages(user, None) is user
    blocks = merge_system_messages(SystemMessage([{"type": "text", "text": "a"}]), om_msg)
    assert blocks is not None and blocks.content == [{"type": "text", "text": "a"},
                                                     {"type": "text", "text": "<observations>x</observations>"}]


def test_middleware_contributes_tools_only_with_retrieval() -> None:
    om = make_om(InMemoryStore())
    assert list(ObservationalMemoryMiddleware(om).tools) == []
    with pytest.raises(TypeError, match="om"):
        ObservationalMemoryMiddleware("not om")  # type: ignore[arg-type]
    om.close()


async def test_recall_tool_is_contributed_with_retrieval(store: OMStore) -> None:
    pytest.importorskip("langchain_om.recall", reason="langchain_om.recall not written yet")
    om = make_om(store, retrieval=True)
    middleware = ObservationalMemoryMiddleware(om)
    assert [t.name for t in middleware.tools] == ["recall"]
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "r"}})
    assert "tools" in agent.get_graph().nodes
