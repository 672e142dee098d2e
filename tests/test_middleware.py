"""create_agent middleware (issue 3, items 3 and 8): 60-turn agents, sync and async, tools, tripwire."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.integrations.callbacks import OMEventHandler, SyncOMEventHandler
from langchain_om.integrations.middleware import (
    TRIPWIRE_KEY,
    ObservationalMemoryMiddleware,
    merge_system_messages,
    model_id,
)
from langchain_om.model_calls.models import ModelByInputTokens
from langchain_om.store.base import OMStore, implicit_resource
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
    record = await om.aget_record("mw-async", resource_id="alice")
    assert record.groups and record.generation_count >= 1
    # one status per model call
    assert len(handler.of_type("data-om-status")) == len(model.calls)
    # after_agent stored the final reply; the store keeps every message once, tool results included
    stored = await store.aget_messages("alice", "mw-async")
    assert len(stored) >= 2 * TURNS and len({m.id for m in stored}) == len(stored)
    assert any(m.data.get("type") == "tool" for m in stored)
    check_bounded_state(messages, stored, record.last_observed_seq["mw-async"])


def check_bounded_state(messages: list[BaseMessage], stored: list[Any], last_observed_seq: int) -> None:
    """remove_observed: the checkpointed state is the unobserved tail of the store, tool pairs whole."""
    assert len(messages) < 2 * TURNS // 3, f"observed messages left the state ({len(messages)} remain)"
    ids = [m.id for m in messages]
    assert ids == [m.id for m in stored[len(stored) - len(ids):]], "state is the newest stored messages, in order"
    assert all(m.seq <= last_observed_seq for m in stored[:len(stored) - len(ids)]), "only observed ones left"
    calls = {c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    assert calls == results, "a tool call and its results left (or stayed) together"


async def test_remove_observed_off_keeps_the_whole_conversation_in_state(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"x{i}"}) for i in range(3, 300, 9)})
    agent = create_agent(model, [lookup_price], system_prompt=USER_PROMPT,
                         middleware=[ObservationalMemoryMiddleware(om, remove_observed=False)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "mw-keep", "resource_id": "alice"}}
    for i in range(TURNS):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    messages = (await agent.aget_state(config)).values["messages"]
    check_model_inputs(model.calls, messages)
    assert (await om.aget_record("mw-keep", resource_id="alice")).groups, "it observed all the same"
    stored = await store.aget_messages("alice", "mw-keep")
    assert [m.id for m in stored] == [m.id for m in messages], "full history stays in the checkpoint"
    with pytest.raises(TypeError, match="remove_observed"):
        ObservationalMemoryMiddleware(om, remove_observed="yes")  # type: ignore[arg-type]


def test_sync_agent_60_turns() -> None:
    store = InMemoryStore()
    om = make_om(store)
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
        # the in-memory store has no loop of its own
        stored = asyncio.run(store.aget_messages(implicit_resource("mw-sync"), "mw-sync"))
        check_bounded_state(messages, stored, record.last_observed_seq["mw-sync"])
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
    om = make_om(store, retrieval=True)
    middleware = ObservationalMemoryMiddleware(om)
    assert [t.name for t in middleware.tools] == ["recall"]
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[middleware], checkpointer=InMemorySaver())
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "r"}})
    assert "tools" in agent.get_graph().nodes


# --------------------------------------------------------------------------- OM's tools called by the agent


async def test_agent_calls_recall_and_gets_the_raw_messages(store: OMStore) -> None:
    om = make_om(store, retrieval=True)
    recall_call = 30
    model = ScriptedAgentModel(tool_calls_on={recall_call: ("recall", {"anchor": "start", "limit": 5})})
    agent = create_agent(model, [], system_prompt=USER_PROMPT, middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "recall-mw", "resource_id": "bob"}}
    for i in range(recall_call + 2):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    assert (await om.aget_record("recall-mw", resource_id="bob")).groups, "turn 0 was observed before the recall"
    # the model asked for recall; the tool result came back in the next model call
    after = model.calls[recall_call + 1]
    results = [m for m in after if isinstance(m, ToolMessage)]
    assert results and results[-1].name == "recall" and results[-1].status == "success"
    content = str(results[-1].content)
    raw = "Turn 0: I prefer option 0 and my budget is 0 dollars. context"  # the log shortens it
    assert raw in content and "Turn 1: I prefer option 1 and my budget is 10 dollars." in content, content[:500]
    assert "messages" in content and "has_next_page" in content
    assert raw not in "".join(str(m.content) for m in after if m.type != "tool"), \
        "turn 0 itself is observed: only the recall result brings the raw message back"
    assert str(after[0].content).startswith(USER_PROMPT)
    # the recall round went through the agent's state into OM's store (later turns may observe it)
    stored = await store.aget_messages("bob", "recall-mw")
    assert any(m.data.get("type") == "tool" and m.data["data"].get("name") == "recall" for m in stored)


NEW_MEMORY = "# About the user\n- Name: Aiko\n\n# Preferences and constraints\n- Budget: 300 dollars"


def agent_managed_om(store: OMStore, message_tokens: int = 600) -> ObservationalMemory:
    """Both may write working memory: the agent (tool) and the Observer (extractor)."""
    return make_om(store, working_memory={"agent_managed": True},
                   observation={"message_tokens": message_tokens, "manage_working_memory": True})


def test_middleware_contributes_the_working_memory_tool_when_agent_managed() -> None:
    managed = agent_managed_om(InMemoryStore())
    assert [t.name for t in ObservationalMemoryMiddleware(managed).tools] == ["update_working_memory"]
    both = make_om(InMemoryStore(), working_memory=True, retrieval=True)
    assert [t.name for t in ObservationalMemoryMiddleware(both).tools] == ["recall", "update_working_memory"]
    observer_only = make_om(InMemoryStore(), observation={"message_tokens": 600, "manage_working_memory": True})
    assert list(ObservationalMemoryMiddleware(observer_only).tools) == []
    for om in (managed, both, observer_only):
        om.close()


def check_working_memory_update(model: ScriptedAgentModel) -> None:
    results = [m for m in model.calls[4] if isinstance(m, ToolMessage)]
    assert results and results[-1].name == "update_working_memory"
    assert results[-1].content == "Working memory updated."
    later = str(model.calls[-1][0].content)
    assert later.startswith(USER_PROMPT) and "Name: Aiko" in later, "the new document is in the context"


async def test_agent_updates_working_memory_async(store: OMStore) -> None:
    om = agent_managed_om(store, message_tokens=20_000)  # no Observer cycle: only the agent writes
    model = ScriptedAgentModel(tool_calls_on={3: ("update_working_memory", {"content": NEW_MEMORY})})
    agent = create_agent(model, [lookup_price], system_prompt=USER_PROMPT,
                         middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    # user_id is accepted for resource_id by the middleware: the tool writes where the context reads
    config: RunnableConfig = {"configurable": {"thread_id": "wm-mw", "user_id": "aiko"}}
    assert om.working_memory is not None
    for i in range(6):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
    assert await om.working_memory.aget("wm-mw", resource_id="aiko") == NEW_MEMORY
    check_working_memory_update(model)


def test_agent_updates_working_memory_sync() -> None:
    om = agent_managed_om(InMemoryStore(), message_tokens=20_000)
    try:
        model = ScriptedAgentModel(tool_calls_on={3: ("update_working_memory", {"content": NEW_MEMORY})})
        agent = create_agent(model, [lookup_price], system_prompt=USER_PROMPT,
                             middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "wm-mw-sync", "resource_id": "aiko"}}
        for i in range(6):
            agent.invoke({"messages": [user_turn(i)]}, config)
        assert om.working_memory is not None
        assert om.working_memory.get("wm-mw-sync", resource_id="aiko") == NEW_MEMORY
        check_working_memory_update(model)
    finally:
        om.close()


# --------------------------------------------------------------------------- events through create_agent


async def test_custom_stream_and_callbacks_see_the_same_events(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"x{i}"}) for i in range(2, 200, 7)})
    agent = create_agent(model, [lookup_price], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    handler = OMEventHandler()
    config: RunnableConfig = {"configurable": {"thread_id": "mw-stream"}, "callbacks": [handler]}
    parts: list[dict[str, Any]] = []
    for i in range(TURNS):
        order: list[str] = []
        async for mode, chunk in agent.astream({"messages": [user_turn(i)]}, config,
                                               stream_mode=["custom", "updates"]):
            if mode == "custom":
                parts.append(chunk)
                order.append(chunk["type"])
            else:
                order.extend(f"node:{name}" for name in chunk)
        # every model call is preceded by exactly one status (the middleware runs inside the model node)
        models = [k for k, name in enumerate(order) if name == "node:model"]
        statuses = [k for k, name in enumerate(order) if name == "data-om-status"]
        assert len(statuses) == len(models) >= 1
        assert all(s < m for s, m in zip(statuses, models, strict=True))
        await om.await_background()
    assert parts and all(p["type"].startswith("data-om-") for p in parts)
    assert [e.to_part() for e in handler.events] == parts, "callbacks and the custom stream agree"
    types = {p["type"] for p in parts}
    assert {"data-om-status", "data-om-activation", "data-om-buffering-start", "data-om-buffering-end"} <= types
    assert sum(1 for p in parts if p["type"] == "data-om-status") == len(model.calls)


async def test_astream_events_carries_om_events_through_the_middleware(store: OMStore) -> None:
    om = make_om(store, observation={"message_tokens": 600, "buffer_tokens": False})
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "mw-events"}}
    names: list[str] = []
    for i in range(12):
        async for event in agent.astream_events({"messages": [user_turn(i)]}, config, version="v2"):
            if event["event"] == "on_custom_event":
                names.append(event["name"])
                assert event["data"]["type"] == event["name"]
    assert names.count("data-om-status") == 12 == len(model.calls)
    assert "data-om-observation-start" in names and "data-om-observation-end" in names
    start = names.index("data-om-observation-start")
    assert names.index("data-om-observation-end") > start


def test_sync_stream_custom_through_the_middleware() -> None:
    om = make_om(InMemoryStore(), observation={"message_tokens": 600, "buffer_tokens": False})
    try:
        model = ScriptedAgentModel()
        agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)],
                             checkpointer=InMemorySaver())
        config: RunnableConfig = {"configurable": {"thread_id": "mw-sync-stream"}}
        parts = [chunk for i in range(12)
                 for chunk in agent.stream({"messages": [user_turn(i)]}, config, stream_mode="custom")]
        names = [p["type"] for p in parts]
        assert names.count("data-om-status") == 12 == len(model.calls)
        assert "data-om-observation-start" in names and "data-om-observation-end" in names
    finally:
        om.close()


# --------------------------------------------------------------------------- remove_observed rules


async def test_observed_state_ids_keep_tool_pairs_the_newest_turn_and_unstored_messages(store: OMStore) -> None:
    om = make_om(store, observation={"message_tokens": 100_000})
    call = AIMessage("", id="a0", tool_calls=[{"name": "lookup_price", "args": {"item": "x"}, "id": "c1"}])
    history: list[BaseMessage] = [
        HumanMessage("first", id="h0"), call, ToolMessage("42", tool_call_id="c1", id="t0"),
        AIMessage("it is 42", id="a1"), HumanMessage("second", id="h1"), AIMessage("ok", id="a2"),
        HumanMessage("third", id="h2"), AIMessage("answer in progress", id="a3"),
    ]
    context = await om.aprocess("rules", history)
    assert om.observed_state_ids("rules", history, context) == [], "everything is unobserved yet"
    # pretend OM observed everything but the tool result and the newest turn
    window = [m for m in context.messages if m.id in {"t0", "h2", "a3"}]
    pretend = dataclasses.replace(context, messages=window)
    assert om.observed_state_ids("rules", history, pretend) == ["h0", "a1", "h1", "a2"], \
        "the call stays with its result; the newest human turn stays"
    # a message OM never stored (inserted into state by hand) never leaves
    edited = [*history[:2], HumanMessage("inserted", id="x9"), *history[2:]]
    assert "x9" not in om.observed_state_ids("rules", edited, dataclasses.replace(pretend, messages=[]))
    assert om.observed_state_ids("rules", history, dataclasses.replace(pretend, aborted="no")) == []
    await om.aclose()


async def test_keep_in_state_turn_leaves_only_the_current_turn_while_the_model_sees_the_window(
    store: OMStore,
) -> None:
    """keep_in_state="turn": every stored message before the newest human turn leaves the state,
    observed or not; the model still gets OM's whole unobserved window (built from the store),
    and a restarted agent on the same stores carries on from it."""
    om = make_om(store, observation={"message_tokens": 100_000, "buffer_tokens": False})
    model = ScriptedAgentModel()
    saver = InMemorySaver()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om, keep_in_state="turn")],
                         checkpointer=saver)
    config: RunnableConfig = {"configurable": {"thread_id": "turn"}}
    for i in range(6):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
    state = (await agent.aget_state(config)).values["messages"]
    assert [m.type for m in state] == ["human", "ai"], "the state is the current turn"
    assert state[0].content == user_turn(5).content
    assert not (await om.aget_record("turn")).groups, "nothing was observed: the window held nothing back"
    seen = [m for m in model.calls[-1] if m.type != "system"]
    assert len(seen) == 11, "the model saw all five earlier turns and the new message, from OM's store"
    assert len(await om.store.aget_messages(implicit_resource("turn"), "turn")) == 12, "every message stored once"

    again = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om, keep_in_state="turn")],
                         checkpointer=saver)
    await again.ainvoke({"messages": [user_turn(6)]}, config)
    assert len([m for m in model.calls[-1] if m.type != "system"]) == 13
    assert len((await again.aget_state(config)).values["messages"]) == 2
    await om.aclose()


def test_keep_in_state_rejects_unknown_values_by_name() -> None:
    om = make_om(InMemoryStore())
    try:
        with pytest.raises(ValueError, match="keep_in_state"):
            ObservationalMemoryMiddleware(om, keep_in_state="everything")  # type: ignore[arg-type]
    finally:
        om.close()


async def test_remove_observed_ignores_messages_an_outer_middleware_added(store: OMStore) -> None:
    from langchain.agents.middleware import wrap_model_call

    @wrap_model_call  # type: ignore[arg-type]
    async def add_example(request: Any, handler: Any) -> Any:
        example = HumanMessage("An example question that is not in state. " + "filler " * 200, id="outer-example")
        return await handler(request.override(messages=[example, *request.messages]))

    om = make_om(store)
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[add_example, ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "outer"}}
    for i in range(12):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    assert (await om.aget_record("outer")).groups, "observations happened, with removals"
    messages = (await agent.aget_state(config)).values["messages"]
    assert len(messages) < 24 and messages[-1].type == "ai"
