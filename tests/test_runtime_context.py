"""LangChain v1's runtime context names the user (issue 31, item 10).

``create_agent(..., context_schema=Context)`` + ``agent.invoke(..., context=Context(user_id=...))``:
the middleware, the graph nodes and the ``recall`` tool read the user from the runtime context
(dataclass, TypedDict / dict, pydantic model) as well as from ``config["configurable"]``; when
both name a user they must agree, else the error names both sources."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.runtime import Runtime
from pydantic import BaseModel
from typing_extensions import TypedDict

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.run_ids import ConflictingResourceError
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


@dataclasses.dataclass
class DataContext:
    user_id: str


class DictContext(TypedDict):
    user_id: str


class ModelContext(BaseModel):
    resource_id: str


def make_om(**overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {"model": ScriptedObserverModel(), "token_counter": "estimator",
                               "observation": {"message_tokens": 400}}
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), **options)


def fact(i: int, user: str) -> str:
    said = f"{user}: my favourite city is city-{user}-{i}. " if i % 2 else f"{user}: 好きな街は街{i}です。"
    return said + "more " * 30


@pytest.mark.parametrize(("schema", "context_of"), [
    (DataContext, lambda user: DataContext(user_id=user)),
    (DictContext, lambda user: {"user_id": user}),
    (ModelContext, lambda user: ModelContext(resource_id=user)),
])
def test_resource_scope_agent_takes_the_user_from_the_runtime_context(schema: Any, context_of: Any) -> None:
    om = make_om(scope="resource")
    try:
        agent = create_agent(ScriptedAgentModel(), [], context_schema=schema, checkpointer=InMemorySaver(),
                             middleware=[ObservationalMemoryMiddleware(om)])
        for user, thread in (("alice", "a-1"), ("bob", "b-1")):
            config: RunnableConfig = {"configurable": {"thread_id": thread}}
            for i in range(8):
                agent.invoke({"messages": [HumanMessage(fact(i, user))]}, config, context=context_of(user))
        alice = om.get_record("a-1", resource_id="alice")
        bob = om.get_record("b-1", resource_id="bob")
        assert alice.groups and bob.groups, "each user's memory was observed under their own resource"
        assert "alice" in alice.observations and "bob" not in alice.observations
        assert "bob" in bob.observations and "alice" not in bob.observations
        # a second thread of alice's sees her memory (resource scope), named only by the context
        agent.invoke({"messages": [HumanMessage("where do I like to go?")]},
                     {"configurable": {"thread_id": "a-2"}}, context=context_of("alice"))
        assert om.get_record("a-2", resource_id="alice").observations == om.get_record(
            "a-1", resource_id="alice").observations
    finally:
        om.close()


def test_conflicting_config_and_context_name_both_sources() -> None:
    om = make_om()
    try:
        agent = create_agent(ScriptedAgentModel(), [], context_schema=DataContext,
                             middleware=[ObservationalMemoryMiddleware(om)])
        config: RunnableConfig = {"configurable": {"thread_id": "t", "resource_id": "bob"}}
        with pytest.raises(ConflictingResourceError) as caught:
            agent.invoke({"messages": [HumanMessage("hi")]}, config, context=DataContext(user_id="alice"))
        message = str(caught.value)
        assert 'config["configurable"]["resource_id"]' in message and "'bob'" in message
        assert "runtime context's user_id" in message and "'alice'" in message
        # agreeing sources are fine
        agreed: RunnableConfig = {"configurable": {"thread_id": "t2", "user_id": "alice"}}
        agent.invoke({"messages": [HumanMessage("hi")]}, agreed, context=DataContext(user_id="alice"))
        assert om.store is not None
        assert om._loop.run(om.store.aget_messages("alice", "t2")), "stored under the named user"
    finally:
        om.close()


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def test_graph_nodes_read_the_runtime_context() -> None:
    om = make_om(scope="resource")

    async def agent(state: State, runtime: Runtime[DataContext]) -> dict[str, Any]:
        return {"messages": [AIMessage(f"ok {runtime.context.user_id} {len(state['messages'])}")]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State, context_schema=DataContext)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    graph = add_observational_memory(builder, om).compile(checkpointer=InMemorySaver())
    for i in range(8):
        await graph.ainvoke({"messages": [HumanMessage(fact(i, "carol"))]},
                            {"configurable": {"thread_id": "c-1"}}, context=DataContext(user_id="carol"))
    record = await om.aget_record("c-1", resource_id="carol")
    assert record.groups and "carol" in record.observations
    with pytest.raises(ConflictingResourceError, match="carol"):
        await graph.ainvoke({"messages": [HumanMessage("hi")]},
                            {"configurable": {"thread_id": "c-1", "user_id": "mallory"}},
                            context=DataContext(user_id="carol"))
    await om.aclose()


def test_recall_tool_reads_the_user_through_tool_runtime() -> None:
    om = make_om(scope="resource", retrieval=True)
    try:
        calls = {i: ("recall", {"query": "city"}) for i in (9,)}
        model = ScriptedAgentModel(tool_calls_on=calls)
        agent = create_agent(model, [], context_schema=DataContext, checkpointer=InMemorySaver(),
                             middleware=[ObservationalMemoryMiddleware(om)])
        # dave's memory, then erin's thread on another user: recall must only see erin's
        for i in range(4):
            agent.invoke({"messages": [HumanMessage(fact(i, "dave"))]},
                         {"configurable": {"thread_id": "d-1"}}, context=DataContext(user_id="dave"))
        results: list[str] = []
        for i in range(6):
            out = agent.invoke({"messages": [HumanMessage(fact(i, "erin"))]},
                               {"configurable": {"thread_id": "e-1"}}, context=DataContext(user_id="erin"))
            results += [str(m.content) for m in out["messages"] if isinstance(m, ToolMessage)]
        assert results, "the scripted model called recall"
        joined = "\n".join(results)
        assert "erin" in joined and "dave" not in joined, joined[:500]
    finally:
        om.close()
