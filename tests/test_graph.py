"""LangGraph integration (issue 3, items 1, 2, 8): real graphs, real checkpointers, 60-turn runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict

import pytest
from conftest import drop_pg_schema, require_pg_dsn, unique_schema
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from langchain_om.engine import ObservationalMemory, OMAborted
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.integrations.callbacks import OMEventHandler, SyncOMEventHandler
from langchain_om.integrations.graph import (
    OM_NODES,
    TRIPWIRE_KEY,
    add_observational_memory,
    ids_from_config,
    om_pre_model_hook,
    om_tools,
)
from langchain_om.model_calls.models import ModelByInputTokens
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

MESSAGE_TOKENS = 600
OBSERVATION_TOKENS = 900
TURNS = 60


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def make_om(store: OMStore, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "model": ScriptedObserverModel(),
        "observation": {"message_tokens": MESSAGE_TOKENS},
        "reflection": {"observation_tokens": OBSERVATION_TOKENS},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(store, **options)


def user_turn(i: int) -> HumanMessage:
    return HumanMessage(f"Turn {i}: I prefer option {i} and my budget is {i * 10} dollars. " + "context " * 25)


class Recorder:
    """The model node: records exactly what it was given, answers with the scripted agent model."""

    def __init__(self, model: Any = None) -> None:
        self.model = model or ScriptedAgentModel()
        self.seen: list[list[BaseMessage]] = []

    async def anode(self, state: State) -> dict[str, Any]:
        self.seen.append(list(state["messages"]))
        return {"messages": [await self.model.ainvoke(state["messages"])]}

    def node(self, state: State) -> dict[str, Any]:
        self.seen.append(list(state["messages"]))
        return {"messages": [self.model.invoke(state["messages"])]}


def build(om: ObservationalMemory, recorder: Recorder, *, sync: bool = False) -> StateGraph[Any, Any, Any, Any]:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", recorder.node if sync else recorder.anode)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    return add_observational_memory(builder, om)


async def expected_context_ids(om: ObservationalMemory, thread_id: str) -> list[str]:
    """What the model must see: OM system message (once observed) + pinned human + unobserved."""
    record = await om.aget_record(thread_id)
    after = record.last_observed_seq.get(thread_id, 0)
    window = await om.store.aget_messages(implicit_resource(thread_id), thread_id, after_seq=after)
    ids = [m.id for m in window]
    pinned = record.metadata.get("pinned_message_id")
    if isinstance(pinned, str) and not any(m.data.get("type") == "human" for m in window):
        ids.insert(0, pinned)
    return ([OM_CONTEXT_MESSAGE_ID] if record.groups else []) + ids


def check_run(om: ObservationalMemory, recorder: Recorder, record_groups: int, generation: int) -> None:
    """Assertions shared by every 60-turn run."""
    assert len(recorder.seen) >= TURNS
    assert record_groups >= 1 and generation >= 1, "both thresholds were crossed (observed and reflected)"
    for index, seen in enumerate(recorder.seen):
        assert seen[-1].type == "human", f"turn {index}: the newest human message reached the model"
        system = [i for i, m in enumerate(seen) if m.type == "system"]
        assert system in ([], [0]), f"turn {index}: one OM system message, first"
        assert len(seen) < 2 * TURNS // 3, f"turn {index}: state stays bounded"
    later = recorder.seen[-1]
    assert later[0].id == OM_CONTEXT_MESSAGE_ID
    assert "<observations>" in str(later[0].content)


# --------------------------------------------------------------------------- async, 3 checkpointers


@asynccontextmanager
async def async_saver(kind: str, tmp_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        dsn = require_pg_dsn()
        async with AsyncPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
            yield saver


CHECKPOINTERS = [
    pytest.param("memory", id="inmemory-saver"),
    pytest.param("sqlite", id="sqlite-saver"),
    pytest.param("postgres", id="postgres-saver", marks=pytest.mark.postgres),
]


@pytest.mark.parametrize("saver_kind", CHECKPOINTERS)
async def test_async_graph_60_turns_every_checkpointer(saver_kind: str, store: OMStore, tmp_path: Path) -> None:
    om = make_om(store)
    recorder = Recorder()
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config: RunnableConfig = {"configurable": {"thread_id": thread}}
    mismatches: list[tuple[int, list[str | None], list[str]]] = []
    async with async_saver(saver_kind, tmp_path) as saver:
        graph = build(om, recorder).compile(checkpointer=saver)
        for i in range(TURNS):
            await graph.ainvoke({"messages": [user_turn(i)]}, config)
            expected = await expected_context_ids(om, thread)
            seen_ids = [m.id for m in recorder.seen[-1]]
            if seen_ids != expected:
                mismatches.append((i, seen_ids, expected))
            await om.await_background()
        record = await om.aget_record(thread)
        assert not mismatches, f"model context differs from OM's context: {mismatches[:2]}"
        check_run(om, recorder, len(record.groups), record.generation_count)
        # the checkpointed state is exactly the context plus the model's reply
        state = await graph.aget_state(config)
        assert [m.id for m in state.values["messages"][:-1]] == [m.id for m in recorder.seen[-1]]
        assert isinstance(state.values["messages"][-1], AIMessage)
        # raw messages are all still in the store (the last reply is stored by the next step)
        assert len(await store.aget_messages(implicit_resource(thread), thread)) == 2 * TURNS - 1
        # the system message shows the stored log
        # (its Date headers carry their age there: compare the notes under them)
        notes = [line for line in record.groups[-1].text.splitlines() if line.startswith("*")]
        assert notes and notes[0] in str(recorder.seen[-1][0].content)

        # resume: a new OM object and a new graph over the same store and checkpointer
        before = recorder.seen[-1]
        om2 = make_om(store)
        recorder2 = Recorder()
        graph2 = build(om2, recorder2).compile(checkpointer=saver)
        await graph2.ainvoke({"messages": [HumanMessage("What did I tell you about my budget?")]}, config)
        resumed = recorder2.seen[0]
        assert resumed[0].id == OM_CONTEXT_MESSAGE_ID
        record2 = await om2.aget_record(thread)
        if record2.version == record.version:  # nothing new was observed: identical context
            assert resumed[0].content == before[0].content
            assert [m.id for m in resumed[1:-1]] == [m.id for m in state.values["messages"][1:]]
        assert resumed[-1].content == "What did I tell you about my budget?"
        assert [m.id for m in resumed] == await expected_context_ids(om2, thread)
        await om2.await_background()
    await om.await_background()


# --------------------------------------------------------------------------- sync, 3 checkpointers


@contextmanager
def sync_setup(kind: str, tmp_path: Path) -> Iterator[tuple[BaseCheckpointSaver[Any], OMStore]]:
    """A sync checkpointer and a not-yet-opened OM store of the same backend (OM opens it on its loop)."""
    if kind == "memory":
        yield InMemorySaver(), InMemoryStore()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(str(tmp_path / "checkpoints.db")) as saver:
            yield saver, SQLiteStore(tmp_path / "om.db")
    else:
        import asyncio

        from langgraph.checkpoint.postgres import PostgresSaver

        dsn = require_pg_dsn()
        schema = unique_schema()
        try:
            with PostgresSaver.from_conn_string(dsn) as saver:
                saver.setup()
                yield saver, PostgresStore(dsn, schema=schema)
        finally:
            asyncio.run(drop_pg_schema(dsn, schema))


@pytest.mark.parametrize("saver_kind", CHECKPOINTERS)
def test_sync_graph_60_turns_every_checkpointer(saver_kind: str, tmp_path: Path) -> None:
    with sync_setup(saver_kind, tmp_path) as (saver, store):
        om = make_om(store)
        try:
            recorder = Recorder()
            graph = build(om, recorder, sync=True).compile(checkpointer=saver)
            config: RunnableConfig = {"configurable": {"thread_id": "sync-thread", "user_id": "u1"}}
            for i in range(TURNS):
                graph.invoke({"messages": [user_turn(i)]}, config)
            record = om.get_record("sync-thread", resource_id="u1")
            check_run(om, recorder, len(record.groups), record.generation_count)
            state = graph.get_state(config)
            assert [m.id for m in state.values["messages"][:-1]] == [m.id for m in recorder.seen[-1]]
            # user_id was taken as the resource: the thread is stored under u1
            threads = om._loop.run(om.store.alist_threads("u1"))
            assert [t.thread_id for t in threads] == ["sync-thread"]
            # resume with a fresh graph over the same checkpointer
            recorder2 = Recorder()
            graph2 = build(om, recorder2, sync=True).compile(checkpointer=saver)
            graph2.invoke({"messages": [HumanMessage("and now?")]}, config)
            assert recorder2.seen[0][0].id == OM_CONTEXT_MESSAGE_ID
            assert [m.id for m in recorder2.seen[0][1:-1]] == [m.id for m in state.values["messages"][1:]] or \
                om.get_record("sync-thread", resource_id="u1").version != record.version
        finally:
            om.close()


# --------------------------------------------------------------------------- wiring


@tool
def lookup_price(item: str) -> str:
    """Look up the price of an item."""
    return f"{item} costs 42 dollars"


async def test_tool_loop_and_conditional_edges_are_rewired(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"thing{i}"}) for i in range(0, 200, 7)})
    recorder = Recorder(model)

    def route(state: State) -> Literal["tools", "__end__"]:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", recorder.anode)
    builder.add_node("tools", ToolNode([lookup_price]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, {"tools": "tools", "__end__": END})
    builder.add_edge("tools", "agent")
    add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    edges = {(e.source, e.target) for e in graph.get_graph().edges}
    assert ("__start__", "om_activator") in edges and ("tools", "om_activator") in edges
    assert ("om_activator", "om_observer") in edges and ("om_observer", "om_reflector") in edges
    assert ("om_reflector", "agent") in edges
    assert ("__start__", "agent") not in edges and ("tools", "agent") not in edges

    config: RunnableConfig = {"configurable": {"thread_id": "tools-thread"}}
    for i in range(TURNS):
        await graph.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    tool_steps = [seen for seen in recorder.seen if seen[-1].type == "tool"]
    assert tool_steps, "the tool loop ran"
    record = await om.aget_record("tools-thread")
    assert record.groups and record.generation_count >= 1
    for seen in recorder.seen:
        # every tool result reaches the model together with the call that asked for it
        call_ids = {c["id"] for m in seen if isinstance(m, AIMessage) for c in m.tool_calls}
        for m in seen:
            if isinstance(m, ToolMessage):
                assert m.tool_call_id in call_ids
        assert any(m.type == "human" for m in seen), "the newest human turn is always visible"
    # OM ran before every model call: one status per model call
    assert len(recorder.seen) > TURNS


async def test_router_without_path_map_is_wrapped(store: OMStore) -> None:
    om = make_om(store)
    recorder = Recorder()
    calls: list[str] = []

    def pick(state: State) -> str:
        calls.append("pick")
        return "agent"

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("prep", lambda state: {})
    builder.add_node("agent", recorder.anode)
    builder.add_edge(START, "prep")
    builder.add_conditional_edges("prep", pick)
    builder.add_edge("agent", END)
    add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "router"}}
    for i in range(30):
        await graph.ainvoke({"messages": [user_turn(i)]}, config)
    record = await om.aget_record("router")
    assert calls and len(recorder.seen) == 30
    assert record.groups, "OM ran although the router returned 'agent' itself"
    assert recorder.seen[-1][0].id == OM_CONTEXT_MESSAGE_ID


def test_bad_input_names_the_field() -> None:
    om = make_om(InMemoryStore())
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("model", lambda s: {})
    with pytest.raises(ValueError, match="before"):
        add_observational_memory(builder, om)
    with pytest.raises(ValueError, match="messages_key"):
        add_observational_memory(builder, om, before="model", messages_key="history")
    add_observational_memory(builder, om, before="model")
    assert set(OM_NODES) <= set(builder.nodes)
    with pytest.raises(ValueError, match="OM nodes"):
        add_observational_memory(builder, om, before="model")
    with pytest.raises(ValueError, match="thread_id"):
        ids_from_config({"configurable": {}})
    assert ids_from_config({"configurable": {"thread_id": "t", "user_id": "u"}}) == ("t", "u")
    assert ids_from_config({"configurable": {"thread_id": "t", "user_id": "u", "resource_id": "r"}}) == ("t", "r")
    om.close()


async def test_missing_thread_id_fails_clearly(store: OMStore) -> None:
    om = make_om(store)
    graph = build(om, Recorder()).compile()
    with pytest.raises(ValueError, match=r"configurable.*thread_id"):
        await graph.ainvoke({"messages": [HumanMessage("hi")]})


# --------------------------------------------------------------------------- create_react_agent


async def test_pre_model_hook_keeps_history_and_bounds_model_input(store: OMStore) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        om = make_om(store)
        model = ScriptedAgentModel()
        agent = create_react_agent(model, [lookup_price], pre_model_hook=om_pre_model_hook(om),
                                   checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "react"}}
    for i in range(TURNS):
        await agent.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    state = await agent.aget_state(config)
    assert len(state.values["messages"]) == 2 * TURNS, "stored history left intact"
    assert not any(m.id == OM_CONTEXT_MESSAGE_ID for m in state.values["messages"])
    last_input = model.calls[-1]
    assert last_input[0].id == OM_CONTEXT_MESSAGE_ID
    assert len(last_input) < 2 * TURNS // 3
    assert last_input[-1].content == state.values["messages"][-2].content
    record = await om.aget_record("react")
    assert record.groups and record.generation_count >= 1


def test_om_tools_empty_without_retrieval() -> None:
    om = make_om(InMemoryStore())
    assert om_tools(om) == []
    om.close()


async def test_recall_tool_binds_into_a_tool_node(store: OMStore) -> None:
    om = make_om(store, retrieval=True)
    tools = om_tools(om)
    assert [t.name for t in tools] == ["recall"]
    node = ToolNode(tools)
    assert "recall" in node.tools_by_name


def test_pre_model_hook_sync_graph() -> None:
    import warnings

    om = make_om(InMemoryStore())
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from langgraph.prebuilt import create_react_agent

            calls = {i: ("lookup_price", {"item": f"s{i}"}) for i in range(4, 200, 13)}
            model = ScriptedAgentModel(tool_calls_on=calls)
            agent = create_react_agent(model, [lookup_price], pre_model_hook=om_pre_model_hook(om),
                                       checkpointer=InMemorySaver())
        handler = SyncOMEventHandler()
        config: RunnableConfig = {"configurable": {"thread_id": "react-sync", "user_id": "u7"}, "callbacks": [handler]}
        for i in range(TURNS):
            agent.invoke({"messages": [user_turn(i)]}, config)
        messages = agent.get_state(config).values["messages"]
        assert len(messages) >= 2 * TURNS and any(isinstance(m, ToolMessage) for m in messages), \
            "stored history left intact, tool results included"
        assert not any(m.id == OM_CONTEXT_MESSAGE_ID for m in messages)
        last_input = model.calls[-1]
        assert last_input[0].id == OM_CONTEXT_MESSAGE_ID and "<observations>" in str(last_input[0].content)
        assert len(last_input) < 2 * TURNS // 3
        for call in model.calls:
            call_ids = {c["id"] for m in call if isinstance(m, AIMessage) for c in m.tool_calls}
            assert all(m.tool_call_id in call_ids for m in call if isinstance(m, ToolMessage))
        record = om.get_record("react-sync", resource_id="u7")
        assert record.groups and record.generation_count >= 1
        statuses = [e for e in handler.events if e.type == "data-om-status"]
        assert len(statuses) == len(model.calls), "one status per model call on the sync path too"
    finally:
        om.close()


# --------------------------------------------------------------------------- aborted steps (tripwire)


def too_large_for_any_observer(store: OMStore) -> ObservationalMemory:
    """No tier of the Observer's model fits a real batch: every observation attempt aborts the step."""
    return make_om(store, model=ModelByInputTokens(up_to={50: ScriptedObserverModel()}),
                   observation={"message_tokens": MESSAGE_TOKENS, "buffer_tokens": False})


def tripwire_graph(om: ObservationalMemory, recorder: Recorder, *, sync: bool = False,
                   on_abort: str = "end") -> Any:
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", recorder.node if sync else recorder.anode)
    builder.add_node("after", lambda state: {"messages": [AIMessage("after ran", id=f"after-{uuid.uuid4().hex}")]})
    builder.add_edge(START, "agent")
    builder.add_edge("agent", "after")
    builder.add_edge("after", END)
    add_observational_memory(builder, om, on_abort=on_abort)  # type: ignore[arg-type]
    return builder.compile(checkpointer=InMemorySaver())


async def test_aborted_step_ends_the_run_with_a_tripwire_message(store: OMStore) -> None:
    om = too_large_for_any_observer(store)
    recorder = Recorder()
    graph = tripwire_graph(om, recorder)
    config: RunnableConfig = {"configurable": {"thread_id": "trip-graph"}}
    tripped: AIMessage | None = None
    calls_before = 0
    for i in range(20):
        calls_before = len(recorder.seen)
        chunks: list[dict[str, Any]] = []
        async for chunk in graph.astream({"messages": [user_turn(i)]}, config, stream_mode="updates"):
            chunks.append(chunk)
        last = (await graph.aget_state(config)).values["messages"][-1]
        if TRIPWIRE_KEY in last.response_metadata:
            tripped = last
            ran = [name for chunk in chunks for name in chunk]
            assert "agent" not in ran and "after" not in ran, f"the run ended before the model: {ran}"
            assert ran[-1] == "om_observer"
            break
        assert last.content == "after ran"
    assert tripped is not None, "the step aborted once the observation threshold was crossed"
    assert isinstance(tripped, AIMessage) and tripped.content == "" and not tripped.tool_calls
    assert "model selection" in tripped.response_metadata[TRIPWIRE_KEY]
    assert len(recorder.seen) == calls_before, "the model node was not called"
    state = await graph.aget_state(config)
    assert state.next == (), "the run is finished, not interrupted"
    # the next turn aborts again (the input still fits no tier) and nothing is stored twice
    events = OMEventHandler()
    result = await graph.ainvoke({"messages": [HumanMessage("still there?")]}, {**config, "callbacks": [events]})
    assert TRIPWIRE_KEY in result["messages"][-1].response_metadata
    assert len(events.of_type("data-om-status")) == 1, "an aborted step still reports its status, once"
    stored = [m.id for m in await store.aget_messages(*(["trip-graph"] * 2))]
    assert len(stored) == len(set(stored))


def test_aborted_step_sync_graph_and_raise_mode(tmp_path: Path) -> None:
    om = too_large_for_any_observer(InMemoryStore())
    try:
        recorder = Recorder()
        graph = tripwire_graph(om, recorder, sync=True)
        config: RunnableConfig = {"configurable": {"thread_id": "trip-sync"}}
        results = [graph.invoke({"messages": [user_turn(i)]}, config)["messages"][-1] for i in range(20)]
        tripped = [m for m in results if TRIPWIRE_KEY in m.response_metadata]
        assert tripped, "the sync graph aborted too"
        assert len(recorder.seen) == results.index(tripped[0]), "no model call once aborted"

        raising = tripwire_graph(om, Recorder(), sync=True, on_abort="raise")
        with pytest.raises(OMAborted, match="model selection"):
            raising.invoke({"messages": [HumanMessage("again")]}, config)
    finally:
        om.close()
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", Recorder().node)
    other = make_om(InMemoryStore())
    with pytest.raises(ValueError, match="on_abort"):
        add_observational_memory(builder, other, on_abort="ignore")  # type: ignore[arg-type]
    other.close()


async def test_pre_model_hook_raises_when_the_step_aborts(store: OMStore) -> None:
    import warnings

    om = too_large_for_any_observer(store)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from langgraph.prebuilt import create_react_agent

        model = ScriptedAgentModel()
        agent = create_react_agent(model, [], pre_model_hook=om_pre_model_hook(om), checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "trip-react"}}
    with pytest.raises(OMAborted, match="model selection"):
        for i in range(20):
            await agent.ainvoke({"messages": [user_turn(i)]}, config)
    calls = len(model.calls)
    assert 0 < calls < 20
    with pytest.raises(OMAborted):
        await agent.ainvoke({"messages": [HumanMessage("again")]}, config)
    assert len(model.calls) == calls, "the model was not called for an aborted step"


# --------------------------------------------------------------------------- OM's tools in a graph


def tool_graph(om: ObservationalMemory, model: ScriptedAgentModel, *, sync: bool = False) -> Any:
    tools = om_tools(om)
    recorder = Recorder(model)

    def route(state: State) -> Literal["tools", "__end__"]:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", recorder.node if sync else recorder.anode)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, {"tools": "tools", "__end__": END})
    builder.add_edge("tools", "agent")
    add_observational_memory(builder, om)
    return builder.compile(checkpointer=InMemorySaver())


NEW_MEMORY = "# About the user\n- Name: Aiko\n\n# Preferences and constraints\n- Budget: 300 dollars"


def test_om_tools_include_the_working_memory_tool_when_agent_managed() -> None:
    managed = make_om(InMemoryStore(), working_memory={"agent_managed": True},
                      observation={"message_tokens": MESSAGE_TOKENS, "manage_working_memory": True})
    assert [t.name for t in om_tools(managed)] == ["update_working_memory"]
    both = make_om(InMemoryStore(), working_memory=True, retrieval=True)
    assert [t.name for t in om_tools(both)] == ["recall", "update_working_memory"]
    observer_only = make_om(InMemoryStore(), observation={"message_tokens": MESSAGE_TOKENS,
                                                          "manage_working_memory": True})
    assert om_tools(observer_only) == [], "the Observer manages it: the agent gets no update tool"
    for om in (managed, both, observer_only):
        om.close()


def agent_managed_om(store: OMStore, message_tokens: int = MESSAGE_TOKENS) -> ObservationalMemory:
    """Both may write working memory: the agent (tool) and the Observer (extractor)."""
    return make_om(store, working_memory={"agent_managed": True},
                   observation={"message_tokens": message_tokens, "manage_working_memory": True})


def check_working_memory_update(model: ScriptedAgentModel) -> None:
    results = [m for m in model.calls[4] if isinstance(m, ToolMessage)]
    assert results and results[-1].content == "Working memory updated.", results
    later = model.calls[-1]
    assert later[0].type == "system" and "Name: Aiko" in str(later[0].content), \
        "the updated document reaches the model in the OM context"


async def test_agent_updates_working_memory_through_a_tool_node(store: OMStore) -> None:
    om = agent_managed_om(store, message_tokens=20_000)  # no Observer cycle: only the agent writes
    model = ScriptedAgentModel(tool_calls_on={3: ("update_working_memory", {"content": NEW_MEMORY})})
    graph = tool_graph(om, model)
    # user_id, as the OM nodes accept it: the tool must write where the context reads
    config: RunnableConfig = {"configurable": {"thread_id": "wm-async", "user_id": "aiko"}}
    assert om.working_memory is not None
    assert await om.working_memory.aget("wm-async", resource_id="aiko") is None
    for i in range(6):
        await graph.ainvoke({"messages": [user_turn(i)]}, config)
    assert await om.working_memory.aget("wm-async", resource_id="aiko") == NEW_MEMORY
    check_working_memory_update(model)


def test_agent_updates_working_memory_sync_graph() -> None:
    om = agent_managed_om(InMemoryStore(), message_tokens=20_000)
    try:
        model = ScriptedAgentModel(tool_calls_on={3: ("update_working_memory", {"content": NEW_MEMORY})})
        graph = tool_graph(om, model, sync=True)
        config: RunnableConfig = {"configurable": {"thread_id": "wm-sync", "resource_id": "aiko"}}
        for i in range(6):
            graph.invoke({"messages": [user_turn(i)]}, config)
        assert om.working_memory is not None
        assert om.working_memory.get("wm-sync", resource_id="aiko") == NEW_MEMORY
        check_working_memory_update(model)
    finally:
        om.close()


@pytest.mark.parametrize("how", ["argument", "configurable"])
async def test_provider_change_activates_buffered_chunks_through_the_nodes(how: str) -> None:
    """The nodes learn which model ``agent`` calls next, so a provider switch activates staged chunks."""
    om = make_om(InMemoryStore(), activate_on_provider_change=True,
                 observation={"message_tokens": 5000, "buffer_tokens": 300})

    async def agent(state: State) -> dict[str, Any]:
        reply = await ScriptedAgentModel().ainvoke(state["messages"])
        reply.response_metadata = {"model_name": "gpt-4o", "model_provider": "openai"}
        return {"messages": [reply]}

    model_box = {"id": "openai:gpt-4o"}
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    if how == "argument":
        add_observational_memory(builder, om, current_model=lambda _config: model_box["id"])
    else:
        add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    events = OMEventHandler()

    def config() -> dict[str, Any]:
        configurable: dict[str, Any] = {"thread_id": "switch"}
        if how == "configurable":
            configurable["model"] = model_box["id"]
        return {"configurable": configurable, "callbacks": [events]}

    for turn in range(6):
        await graph.ainvoke({"messages": [user_turn(turn)]}, config())
        await om.await_background()
    assert (await om.aget_record("switch")).buffered_chunks, "chunks were staged"
    assert not events.of_type("data-om-activation"), "same provider: nothing activates below the threshold"
    model_box["id"] = "anthropic:claude-sonnet-4-5"
    await graph.ainvoke({"messages": [user_turn(6)]}, config())
    activations = events.of_type("data-om-activation")
    assert activations and activations[0].data.triggered_by == "provider_change"
    assert activations[0].data.current_model == "anthropic:claude-sonnet-4-5"
    assert (await om.aget_record("switch")).groups, "the staged chunks are now the observation log"


@pytest.mark.parametrize("sync", [False, True])
async def test_buffer_on_idle_buffers_at_the_end_of_each_turn(sync: bool) -> None:
    """With buffer_on_idle the turn's exit to END runs om_turn_end: the final reply is stored and
    what is pending is buffered while the user is away, below the buffer_tokens interval."""
    om = make_om(InMemoryStore(), retrieval=True,
                 observation={"message_tokens": 5000, "buffer_tokens": 4000, "buffer_on_idle": True})
    model = ScriptedAgentModel(tool_calls_on={1: ("recall", {"mode": "messages"})})
    graph = tool_graph(om, model, sync=sync)
    assert "om_turn_end" in graph.get_graph().nodes
    config: RunnableConfig = {"configurable": {"thread_id": "idle"}}
    for turn in range(3):
        if sync:
            result = graph.invoke({"messages": [user_turn(turn)]}, config)
        else:
            result = await graph.ainvoke({"messages": [user_turn(turn)]}, config)
        await om.await_background()
        record = await om.aget_record("idle")
        stored = await om.store.aget_messages(implicit_resource("idle"), "idle")
        final = result["messages"][-1]
        assert stored[-1].id == final.id, "the turn's final reply is stored at turn end"
        assert record.buffered_chunks and record.buffered_chunks[-1].end_id == final.id, "pending work buffered"
    assert not (await om.aget_record("idle")).groups, "buffering only: nothing activated below the threshold"


def test_without_buffer_on_idle_there_is_no_turn_end_node() -> None:
    om = make_om(InMemoryStore())
    graph = tool_graph(om, ScriptedAgentModel())
    assert "om_turn_end" not in graph.get_graph().nodes
    om.close()
