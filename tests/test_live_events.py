"""Background cycles' events reach the run that is streaming when the cycle ends (issue 20).

The Observer here waits for a gate before answering a buffering call, so each test decides
whether the cycle ends during the run (a tool opens the gate and waits for the cycle's end)
or after it (the test opens the gate between two runs). No sleeps, no timing asserts.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Annotated, Any, TypedDict

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, interrupt

from langchain_om import ObservationalMemory
from langchain_om.foundation.events import OMEvent
from langchain_om.integrations.callbacks import OMEventHandler, SyncOMEventHandler
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

END_TYPE = "data-om-buffering-end"
START_TYPE = "data-om-buffering-start"


class GatedObserver(ScriptedObserverModel):
    """The scripted Observer, answering only once ``gate`` is set (a slow provider, on cue)."""

    gate: Any = None

    async def _agenerate(self, messages: list[BaseMessage], stop: list[str] | None = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        await asyncio.get_running_loop().run_in_executor(None, self.gate.wait)
        return await super()._agenerate(messages, stop, run_manager, **kwargs)


class Gates:
    """The Observer's gate, and a flag raised when a buffering cycle has ended (``on_debug_event``)."""

    def __init__(self) -> None:
        self.observer = threading.Event()
        self.cycle_ended = threading.Event()

    def on_debug(self, event: OMEvent) -> None:
        if event.type == END_TYPE:
            self.cycle_ended.set()

    def release_and_wait(self) -> None:
        self.observer.set()
        assert self.cycle_ended.wait(60), "the buffering cycle never ended"


def make_om(gates: Gates) -> ObservationalMemory:
    # a high threshold (no synchronous observation, no activation) and a small buffer interval:
    # the first long message starts one background buffering cycle
    return ObservationalMemory(
        InMemoryStore(), model=GatedObserver(gate=gates.observer), token_counter="estimator",
        observation={"message_tokens": 5000, "buffer_tokens": 300}, reflection={"observation_tokens": 50_000},
        on_debug_event=gates.on_debug)


def long_turn() -> HumanMessage:
    return HumanMessage("I prefer window seats and my budget is 300 dollars. " + "context " * 600)


def memory_tool(gates: Gates) -> BaseTool:
    @tool
    def wait_for_memory() -> str:
        """Let memory catch up."""
        gates.release_and_wait()
        return "memory is up to date"

    @tool("wait_for_memory")
    async def await_memory() -> str:
        """Let memory catch up."""
        await asyncio.to_thread(gates.release_and_wait)
        return "memory is up to date"

    return wait_for_memory.model_copy(update={"coroutine": await_memory.coroutine})


def ids_of(parts: list[dict[str, Any]], kind: str) -> list[str]:
    return [p["id"] for p in parts if p["type"] == kind]


def check_same_run(first: list[dict[str, Any]], second: list[dict[str, Any]], *,
                   before: str = "data-om-status") -> None:
    """The cycle started and ended inside the first run, while the tool ran: its end is in the
    stream before the first run's second ``before`` (the next step's status, or the tools node's
    update); the second run repeats neither part."""
    order = [p.get("type") or p.get("node") for p in first]
    assert order.count(before) >= (2 if before == "data-om-status" else 1), order
    later = [i for i, name in enumerate(order) if name == before][1 if before == "data-om-status" else 0]
    assert END_TYPE in order[:later], f"the end came while the tool ran, not with the next step: {order}"
    first = [p for p in first if "type" in p]
    second = [p for p in second if "type" in p]
    started, ended = ids_of(first, START_TYPE), ids_of(first, END_TYPE)
    assert len(started) == 1 and ended == started, f"the cycle's end reached its own run: {first}"
    assert not set(ids_of(second, START_TYPE) + ids_of(second, END_TYPE)) & set(ended), "no duplicates"


def check_next_run(first: list[dict[str, Any]], second: list[dict[str, Any]]) -> None:
    """The cycle ended after the first run closed: its end comes with the second run's first step."""
    assert ids_of(first, END_TYPE) == [], "the cycle had not ended yet"
    started = ids_of(first, START_TYPE) + ids_of(second, START_TYPE)
    assert len(started) == 1
    assert ids_of(second, END_TYPE) == started, "the end waited for the next run, once"
    # one step in the second run, so the end came with its first step (the graph's activator
    # node dispatches it ahead of the reflector's status; the middleware after its status)
    assert [p["type"] for p in second].count("data-om-status") == 1


def agent_of(om: ObservationalMemory, gates: Gates, *, tool_first: bool) -> Any:
    model = ScriptedAgentModel(tool_calls_on={0: ("wait_for_memory", {})} if tool_first else {})
    return create_agent(model, [memory_tool(gates)], middleware=[ObservationalMemoryMiddleware(om)],
                        checkpointer=InMemorySaver())


# --------------------------------------------------------------------------- create_agent + middleware


async def test_middleware_a_cycle_ending_while_a_tool_runs_streams_into_that_run() -> None:
    gates = Gates()
    om = make_om(gates)
    agent = agent_of(om, gates, tool_first=True)
    handler = OMEventHandler()
    config: RunnableConfig = {"configurable": {"thread_id": "live-mw"}, "callbacks": [handler]}
    first = [c async for c in agent.astream({"messages": [long_turn()]}, config, stream_mode="custom")]
    seen_in_first = [e.to_part() for e in handler.events]
    second = [c async for c in agent.astream({"messages": [HumanMessage("thanks")]}, config, stream_mode="custom")]
    check_same_run(first, second)
    assert seen_in_first == first, "callbacks got the same parts, in the same order, during the run"
    assert [e.to_part() for e in handler.events] == first + second
    await om.aclose()


async def test_middleware_astream_events_carries_the_cycle_end_in_the_same_run() -> None:
    gates = Gates()
    om = make_om(gates)
    agent = agent_of(om, gates, tool_first=True)
    config: RunnableConfig = {"configurable": {"thread_id": "live-mw-events"}}

    async def run(text: str | HumanMessage) -> list[dict[str, Any]]:
        message = text if isinstance(text, HumanMessage) else HumanMessage(text)
        return [e["data"] async for e in agent.astream_events({"messages": [message]}, config, version="v2")
                if e["event"] == "on_custom_event"]

    first = await run(long_turn())
    second = await run("thanks")
    check_same_run(first, second)
    await om.aclose()


async def test_middleware_a_cycle_ending_after_the_run_arrives_with_the_next_step() -> None:
    gates = Gates()
    om = make_om(gates)
    agent = agent_of(om, gates, tool_first=False)
    handler = OMEventHandler()
    config: RunnableConfig = {"configurable": {"thread_id": "live-mw-late"}, "callbacks": [handler]}
    first = [c async for c in agent.astream({"messages": [long_turn()]}, config, stream_mode="custom")]
    gates.observer.set()
    await om.await_background()
    second = [c async for c in agent.astream({"messages": [HumanMessage("thanks")]}, config, stream_mode="custom")]
    check_next_run(first, second)
    assert [e.to_part() for e in handler.events] == first + second
    await om.aclose()


def test_sync_middleware_streams_the_cycle_end_into_the_same_run_and_later_ones_to_the_next() -> None:
    gates = Gates()
    om = make_om(gates)
    try:
        agent = agent_of(om, gates, tool_first=True)
        handler = SyncOMEventHandler()
        config: RunnableConfig = {"configurable": {"thread_id": "live-mw-sync"}, "callbacks": [handler]}
        first = list(agent.stream({"messages": [long_turn()]}, config, stream_mode="custom"))
        second = list(agent.stream({"messages": [HumanMessage("thanks")]}, config, stream_mode="custom"))
        check_same_run(first, second)
        assert sorted(p["id"] for p in (e.to_part() for e in handler.events) if p["type"] == END_TYPE) == \
            ids_of(first, END_TYPE)
    finally:
        om.close()


# --------------------------------------------------------------------------- add_observational_memory


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def graph_of(om: ObservationalMemory, gates: Gates, *, tools: bool, tool_first: bool = False, sync: bool = False,
             ) -> Any:
    """``agent`` (+ ``tools`` behind ``tools_condition``, or a plain ``agent -> END``) with OM in front."""
    model = ScriptedAgentModel(tool_calls_on={0: ("wait_for_memory", {})} if tool_first else {})
    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)

    async def aagent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder.add_node("agent", agent if sync else aagent)
    builder.add_edge(START, "agent")
    if tools:
        builder.add_node("tools", ToolNode([memory_tool(gates)]))
        builder.add_conditional_edges("agent", tools_condition)
        builder.add_edge("tools", "agent")
    else:
        builder.add_edge("agent", END)
    return add_observational_memory(builder, om).compile(checkpointer=InMemorySaver())


async def stream(graph: Any, message: HumanMessage, config: RunnableConfig) -> list[dict[str, Any]]:
    """The run's custom parts, with ``{"node": name}`` where a node's update arrived."""
    out: list[dict[str, Any]] = []
    async for mode, chunk in graph.astream({"messages": [message]}, config, stream_mode=["custom", "updates"]):
        out.extend([chunk] if mode == "custom" else [{"node": name} for name in chunk])
    return out


async def test_graph_a_cycle_ending_while_a_tool_runs_streams_into_that_run() -> None:
    gates = Gates()
    om = make_om(gates)
    graph = graph_of(om, gates, tools=True, tool_first=True)
    config: RunnableConfig = {"configurable": {"thread_id": "live-graph"}}
    first = await stream(graph, long_turn(), config)
    second = await stream(graph, HumanMessage("thanks"), config)
    check_same_run(first, second, before="tools")
    await om.aclose()


async def test_graph_a_cycle_ending_after_the_run_arrives_with_the_next_step() -> None:
    gates = Gates()
    om = make_om(gates)
    graph = graph_of(om, gates, tools=True)
    config: RunnableConfig = {"configurable": {"thread_id": "live-graph-late"}}
    first = [p for p in await stream(graph, long_turn(), config) if "type" in p]
    gates.observer.set()
    await om.await_background()
    second = [p for p in await stream(graph, HumanMessage("thanks"), config) if "type" in p]
    check_next_run(first, second)
    await om.aclose()


def test_sync_graph_with_a_plain_exit_closes_the_run_there() -> None:
    """``agent -> END`` as a plain edge: the run closes where the agent leaves for END."""
    gates = Gates()
    om = make_om(gates)
    try:
        graph = graph_of(om, gates, tools=False, sync=True)
        assert "om_turn_end" not in graph.get_graph().nodes, "no extra node for it"
        config: RunnableConfig = {"configurable": {"thread_id": "live-graph-sync"}}
        first = list(graph.stream({"messages": [long_turn()]}, config, stream_mode="custom"))
        gates.release_and_wait()  # the cycle ends between the runs
        second = list(graph.stream({"messages": [HumanMessage("thanks")]}, config, stream_mode="custom"))
        check_next_run(first, second)
    finally:
        om.close()



# --------------------------------------------------------------------------- the end of the run


class ReleaseAfterModel(AgentMiddleware):  # type: ignore[type-arg]
    """Opens the Observer's gate after the model answered and waits for the cycle's end: the cycle
    ends after the run's last OM step, before its end of turn."""

    def __init__(self, gates: Gates) -> None:
        self.gates = gates

    async def aafter_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
        await asyncio.to_thread(self.gates.release_and_wait)
        return None


async def test_a_cycle_ending_after_the_last_step_but_before_the_end_of_turn_is_sent_once() -> None:
    gates = Gates()
    om = make_om(gates)
    agent = create_agent(ScriptedAgentModel(), [], checkpointer=InMemorySaver(),
                         middleware=[ObservationalMemoryMiddleware(om), ReleaseAfterModel(gates)])
    config: RunnableConfig = {"configurable": {"thread_id": "live-tail"}}
    first = [c async for c in agent.astream({"messages": [long_turn()]}, config, stream_mode="custom")]
    second = [c async for c in agent.astream({"messages": [HumanMessage("thanks")]}, config, stream_mode="custom")]
    ended = ids_of(first, END_TYPE)
    assert len(ended) == 1, "the run was still open: the end went into it"
    assert ids_of(second, END_TYPE) == [], "its end of turn closed it, so nothing comes back"
    await om.aclose()


async def test_a_run_stopped_by_an_interrupt_gets_its_events_again_in_the_resumed_run() -> None:
    """An interrupt ends the run without its end of turn; a cycle ending while the run waits for
    the human is written into a stream nobody reads, so it comes again with the resumed run."""
    gates = Gates()
    om = make_om(gates)

    @tool
    def ask_human() -> str:
        """Ask the user to confirm."""
        return str(interrupt("confirm?"))

    model = ScriptedAgentModel(tool_calls_on={0: ("ask_human", {})})
    agent = create_agent(model, [ask_human], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "live-interrupt"}}
    first = [c async for c in agent.astream({"messages": [long_turn()]}, config, stream_mode="custom")]
    assert (await agent.aget_state(config)).interrupts, "the run stopped at the interrupt"
    await asyncio.to_thread(gates.release_and_wait)
    second = [c async for c in agent.astream(Command(resume="yes"), config, stream_mode="custom")]
    cycles = set(ids_of(first, START_TYPE) + ids_of(second, START_TYPE))
    assert len(cycles) == 1 and ids_of(first, END_TYPE) == []
    assert ids_of(second, END_TYPE) == list(cycles), "the resumed run carries the end, once"
    # the start went into the first run while it was alive, but nothing confirmed it (no later
    # step, no end of turn): it may come again, as the same part (same id)
    assert len(ids_of(second, START_TYPE)) <= 1
    await om.aclose()
