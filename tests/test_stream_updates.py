"""``stream_mode="updates"`` keeps LangGraph's shape with OM wired in (issue 31, item 1).

Every node's update is one dict (or None for a hook with nothing to write), and the model
node's update carries the reply last under ``"messages"`` in every turn, also in the turns where
OM removes observed messages from the state."""

from __future__ import annotations

from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, RemoveMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TURNS = 16


def make_om() -> ObservationalMemory:
    return ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": 600}, reflection={"observation_tokens": 900})


def turn(i: int) -> HumanMessage:
    text = f"Turn {i}: I like option {i}. " if i % 2 else f"ターン{i}: 選択肢{i}が好きです。"
    return HumanMessage(text + "context " * 25)


def check_updates(chunks: list[dict[str, Any]], replies: list[str], removed: list[int], model_node: str) -> None:
    """One dict per node; the model node's ``messages`` ends with the reply."""
    answered = 0
    for chunk in chunks:
        assert isinstance(chunk, dict)
        for node, update in chunk.items():
            assert update is None or isinstance(update, dict), f"{node}: {type(update).__name__}, not one dict"
            if node == model_node:
                assert update is not None
                reply = update["messages"][-1]
                assert isinstance(reply, AIMessage), f"{node}: the reply is last under 'messages'"
                replies.append(str(reply.content))
                removed.append(sum(isinstance(m, RemoveMessage) for m in update["messages"]))
                answered += 1
    assert answered == 1, "one model update per turn"


def agent_with_om(om: ObservationalMemory) -> Any:
    return create_agent(ScriptedAgentModel(), [], system_prompt="Be brief.", checkpointer=InMemorySaver(),
                        middleware=[ObservationalMemoryMiddleware(om)])


def test_sync_agent_updates_keep_their_shape_while_observation_removes_messages() -> None:
    om = make_om()
    try:
        agent = agent_with_om(om)
        config: RunnableConfig = {"configurable": {"thread_id": "updates-sync"}}
        replies: list[str] = []
        removed: list[int] = []
        for i in range(TURNS):
            chunks = list(agent.stream({"messages": [turn(i)]}, config, stream_mode="updates"))
            check_updates(chunks, replies, removed, "model")
        assert len(replies) == TURNS and all(replies), "a reply in every turn"
        assert sum(removed) > 0, "observation removed messages from the state in some turn"
        state = agent.get_state(config).values["messages"]
        assert len(state) < 2 * TURNS
        stored = om._loop.run(om.store.aget_messages(implicit_resource("updates-sync"), "updates-sync"))
        assert len(stored) == 2 * TURNS, "every question and reply stored once"
    finally:
        om.close()


async def test_async_agent_updates_keep_their_shape_and_the_reply_is_stored_with_it() -> None:
    om = make_om()
    agent = agent_with_om(om)
    config: RunnableConfig = {"configurable": {"thread_id": "updates-async"}}
    replies: list[str] = []
    removed: list[int] = []
    for i in range(TURNS):
        chunks = [c async for c in agent.astream({"messages": [turn(i)]}, config, stream_mode="updates")]
        check_updates(chunks, replies, removed, "model")
        # the turn's end already happened in the model node: the final reply is stored
        stored = await om.store.aget_messages(implicit_resource("updates-async"), "updates-async")
        assert stored[-1].data["data"]["content"] == replies[-1]
        assert len(stored) == 2 * (i + 1)
    assert sum(removed) > 0
    await om.aclose()


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def test_graph_node_updates_keep_their_shape() -> None:
    om = make_om()
    model = ScriptedAgentModel()

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = add_observational_memory(builder, om).compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "updates-graph"}}
    replies: list[str] = []
    removed: list[int] = []
    om_removed = 0
    for i in range(TURNS):
        chunks = [c async for c in graph.astream({"messages": [turn(i)]}, config, stream_mode="updates")]
        check_updates(chunks, replies, removed, "agent")
        for chunk in chunks:
            for node, update in chunk.items():
                if node.startswith("om_") and update and "messages" in update:
                    om_removed += sum(isinstance(m, RemoveMessage) for m in update["messages"])
    assert len(replies) == TURNS and all(replies)
    assert om_removed > 0, "the OM nodes removed observed messages, each in one dict"
    await om.aclose()
