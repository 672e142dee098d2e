"""The extractor context carries ``request_context`` (the run config) and ``main_agent`` (the
agent's model id when known), issue 20 item 3: through ``create_agent`` + the middleware, the
graph nodes, ``om.aprocess(config=..., current_model=...)``, and background buffering cycles,
which carry the config of the step that scheduled them."""

from __future__ import annotations

from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from om_fakes import conversation
from typing_extensions import TypedDict

from langchain_om import ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.extensions.extractors import Extractor
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


class Seen:
    """What an extractor's instructions function and ``on_extracted`` were given."""

    def __init__(self) -> None:
        self.instructions: list[dict[str, Any]] = []
        self.extracted: list[dict[str, Any]] = []
        self.phase = "step"  # the test marks when background work is being awaited

    def extractor(self) -> Extractor:
        def instructions(ctx: dict[str, Any]) -> str:
            self.instructions.append({**ctx, "phase": self.phase})
            return "The topic the user is on, in a few words."

        def on_extracted(ctx: dict[str, Any]) -> None:
            self.extracted.append({**ctx, "phase": self.phase})

        return Extractor("Topic", instructions, on_extracted=on_extracted)

    def all(self) -> list[dict[str, Any]]:
        return [*self.instructions, *self.extracted]


def make_om(seen: Seen, **observation: Any) -> ObservationalMemory:
    obs: dict[str, Any] = {"message_tokens": 300, "buffer_tokens": False, "extract": [seen.extractor()],
                           **observation}
    return ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), observation=obs,
                               token_counter="estimator")


def words(i: int) -> str:
    return f"Turn {i}: I am planning a trip to Lisbon in May with a budget of {i * 100} euros. " + "detail " * 30


async def test_create_agent_extractors_see_the_run_config_and_the_agent_model() -> None:
    seen = Seen()
    om = make_om(seen)
    agent = create_agent(ScriptedAgentModel(model_name="agent-x"), [],
                         middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "mw", "tier": "gold"}, "tags": ["nightly"]}
    for i in range(6):
        await agent.ainvoke({"messages": [HumanMessage(words(i))]}, config)
    assert seen.instructions and seen.extracted, "an observation ran the extractor"
    for ctx in seen.all():
        assert ctx["request_context"]["configurable"]["tier"] == "gold"
        assert ctx["request_context"]["configurable"]["thread_id"] == "mw"
        assert "nightly" in ctx["request_context"]["tags"]
        assert ctx["main_agent"] == "scripted/agent-x"
    assert seen.extracted[0]["value"], "on_extracted got the value too"
    # the sync agent path (OM's private loop) hands over the same context
    seen.instructions.clear()
    seen.extracted.clear()
    for i in range(6, 12):
        agent.invoke({"messages": [HumanMessage(words(i))]}, {"configurable": {"thread_id": "mw", "tier": "silver"}})
    assert seen.extracted
    assert {ctx["request_context"]["configurable"]["tier"] for ctx in seen.all()} == {"silver"}
    assert {ctx["main_agent"] for ctx in seen.all()} == {"scripted/agent-x"}


async def test_aprocess_passes_its_config_and_current_model() -> None:
    seen = Seen()
    om = make_om(seen)
    for i, history in enumerate(conversation(14)):
        config: RunnableConfig = {"configurable": {"thread_id": "ap", "turn": i}, "metadata": {"user": "ana"}}
        await om.aprocess("ap", history, config=config, current_model="openai/gpt-5-mini")
    assert seen.extracted
    for ctx in seen.all():
        assert ctx["request_context"]["metadata"] == {"user": "ana"}
        assert ctx["main_agent"] == "openai/gpt-5-mini"
    # the observing step's own config, not an earlier one
    assert len({ctx["request_context"]["configurable"]["turn"] for ctx in seen.extracted}) == len(seen.extracted)


async def test_without_a_config_or_model_the_fields_are_none() -> None:
    seen = Seen()
    om = make_om(seen)
    for history in conversation(14):
        await om.aprocess("bare", history)
    assert seen.extracted
    for ctx in seen.all():
        assert ctx["request_context"] is None and ctx["main_agent"] is None
        assert ctx["thread_id"] == "bare"


async def test_buffering_cycles_carry_the_config_of_the_step_that_scheduled_them() -> None:
    seen = Seen()
    om = make_om(seen, message_tokens=2000, buffer_tokens=300)
    for i, history in enumerate(conversation(12)):
        seen.phase = f"step {i}"
        await om.aprocess("buf", history, config={"configurable": {"thread_id": "buf", "turn": i}},
                          current_model=f"scripted/agent-{i}")
        seen.phase = f"background after step {i}"
        await om.await_background()
    background = [ctx for ctx in seen.all() if ctx["phase"].startswith("background")]
    assert background, "buffering ran the extractor in the background"
    for ctx in background:
        step = int(ctx["phase"].rsplit(" ", 1)[1])  # awaited right after this step: it scheduled the cycle
        assert ctx["request_context"]["configurable"]["turn"] == step
        assert ctx["main_agent"] == f"scripted/agent-{step}"


async def test_turn_end_buffering_carries_the_run_config() -> None:
    seen = Seen()
    # an interval the steps never reach, so only the turn end (buffer_on_idle) buffers
    om = make_om(seen, message_tokens=4000, buffer_tokens=3500, buffer_on_idle=True)
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    await agent.ainvoke({"messages": [HumanMessage(words(1))]}, {"configurable": {"thread_id": "idle", "turn": 1}})
    await om.await_background()
    assert seen.extracted, "the turn end buffered the turn"
    assert {ctx["request_context"]["configurable"]["turn"] for ctx in seen.all()} == {1}


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def test_graph_nodes_pass_the_run_config_and_the_configured_model() -> None:
    seen = Seen()
    om = make_om(seen)
    model = ScriptedAgentModel()

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "g", "model": "openai:gpt-5-mini", "tier": "gold"}}
    for i in range(6):
        await graph.ainvoke({"messages": [HumanMessage(words(i))]}, config)
    assert seen.extracted
    for ctx in seen.all():
        assert ctx["request_context"]["configurable"]["tier"] == "gold"
        assert ctx["main_agent"] == "openai:gpt-5-mini"
