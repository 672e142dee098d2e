"""``stepNumber`` of ``data-om-status`` is the agent loop's step within the current run, from 0
(issue 20, item 3): the run marks read from a step's config, the per-record counter, and the
count seen end to end through ``create_agent``, the graph nodes and ``aprocess``."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from langchain.agents import create_agent
from langchain_core.callbacks import CallbackManager
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_config
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from langgraph.runtime import RunControl, Runtime
from typing_extensions import TypedDict

from langchain_om import ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.foundation.events import OMEvent
from langchain_om.foundation.run_steps import RunMark, RunSteps, run_mark
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

# --------------------------------------------------------------------------- run marks


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def configs_seen_by_nodes(runs: int) -> list[list[RunnableConfig]]:
    """The configs two nodes of a real graph see, for ``runs`` invokes of the same thread."""
    seen: list[RunnableConfig] = []

    def node(state: State) -> dict[str, Any]:
        seen.append(get_config())
        return {}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("a", node)
    builder.add_node("b", node)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    out = []
    for _ in range(runs):
        seen.clear()
        graph.invoke({"messages": []}, {"configurable": {"thread_id": "marks"}})
        out.append(list(seen))
    return out


def test_nodes_of_one_graph_run_share_a_mark_and_the_next_run_has_another() -> None:
    first, second = configs_seen_by_nodes(2)
    marks = [run_mark(c) for c in first]
    assert all(m is not None and m.kind == "graph" for m in marks)
    assert marks[0] is not None and marks[0].same_run(marks[1]), "two nodes, one run"
    later = run_mark(second[0])
    assert later is not None and not later.same_run(marks[0]), "a new invoke is a new run"


def test_run_id_and_callback_parent_marks() -> None:
    run = uuid.uuid4()
    by_id = run_mark({"run_id": run})
    assert by_id == by_id and by_id is not None and by_id.kind == "run_id"
    assert by_id.same_run(run_mark({"run_id": str(run)})), "a run id compares by value"
    assert not by_id.same_run(run_mark({"run_id": uuid.uuid4()}))
    parent = uuid.uuid4()
    inside = run_mark({"callbacks": CallbackManager(handlers=[], parent_run_id=parent)})
    assert inside is not None and inside.kind == "parent_run"
    assert inside.same_run(run_mark({"callbacks": CallbackManager(handlers=[], parent_run_id=parent)}))
    assert not inside.same_run(by_id), "different kinds never match"


def test_no_run_without_any_mark() -> None:
    assert run_mark(None) is None
    assert run_mark({}) is None
    assert run_mark({"configurable": {"thread_id": "t"}, "callbacks": []}) is None, "a handler list has no parent"
    assert run_mark({"callbacks": CallbackManager(handlers=[])}) is None, "a root manager has no parent"


def test_a_graph_run_wins_over_its_run_id() -> None:
    (configs,) = configs_seen_by_nodes(1)
    mark = run_mark({**configs[0], "run_id": uuid.uuid4()})
    assert mark is not None and mark.kind == "graph"


# --------------------------------------------------------------------------- the counter


def test_steps_count_within_a_run_and_restart_with_the_next() -> None:
    steps = RunSteps()
    one, two = RunMark("run_id", "1"), RunMark("run_id", "2")
    assert [steps.close_step("k", one, 10) for _ in range(3)] == [0, 1, 2]
    assert steps.last("k") == 2
    assert steps.close_step("k", two, 10) == 0
    assert steps.close_step("k", two, 10) == 1
    assert steps.close_step("k", one, 10) == 0, "back to an older run: its count is gone"
    assert steps.close_step("other", two, 10) == 0, "each record counts on its own"


def test_a_step_without_a_run_is_always_step_zero() -> None:
    steps = RunSteps()
    assert [steps.close_step("k", None, 10) for _ in range(3)] == [0, 0, 0]
    assert steps.last("k") == 0 and steps.last("never") == 0


def test_one_entry_per_key_and_least_recent_keys_forgotten() -> None:
    steps = RunSteps()
    mark = RunMark("run_id", "r")
    for _ in range(5):
        steps.close_step("a", mark, 3)
    assert len(steps) == 1, "one entry per key, however many steps"
    for key in ("b", "c", "d"):
        steps.close_step(key, mark, 3)
    assert len(steps) == 3 and steps.last("a") == 0, "a was the least recently stepped"
    assert steps.close_step("b", mark, 3) == 1
    steps.forget("b")
    assert len(steps) == 2 and steps.close_step("b", mark, 3) == 0


def test_a_finished_graph_run_cannot_be_mistaken_for_a_new_one() -> None:
    """A run's control object is kept by its mark: CPython hands a new run's control the address
    of a freed one at once, so a mark holding only ``id(control)`` would take run 2 for run 1."""
    steps = RunSteps()
    numbers = [steps.close_step("k", run_mark(graph_config(RunControl())), 10) for _ in range(20)]
    assert numbers == [0] * 20
    control = RunControl()
    same = graph_config(control)
    assert [steps.close_step("k", run_mark(same), 10) for _ in range(3)] == [0, 1, 2]


def graph_config(control: RunControl) -> RunnableConfig:
    """A config as LangGraph hands it to a node (the runtime key ``get_runtime`` reads; the real
    graph test above shows that nodes get it)."""
    return {"configurable": {"__pregel_runtime": Runtime(control=control)}}


# --------------------------------------------------------------------------- end to end


@tool
def lookup_price(item: str) -> str:
    """Look up the price of an item."""
    return f"{item} costs 42 dollars"


class StatusLog:
    def __init__(self) -> None:
        self.numbers: list[int] = []

    def __call__(self, event: OMEvent) -> None:
        if event.type == "data-om-status":
            self.numbers.append(event.data.step_number)  # type: ignore[attr-defined]

    def take(self) -> list[int]:
        numbers, self.numbers = self.numbers, []
        return numbers


def make_om(log: StatusLog) -> ObservationalMemory:
    return ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), observation={"message_tokens": 600},
                               token_counter="estimator", on_debug_event=log)


def tool_rounds(*calls: int) -> ScriptedAgentModel:
    """An agent model whose model calls ``calls`` (0-based, over the whole test) ask for the tool."""
    return ScriptedAgentModel(tool_calls_on={i: ("lookup_price", {"item": f"item{i}"}) for i in calls})


async def test_create_agent_numbers_its_model_calls_from_zero_each_run() -> None:
    log = StatusLog()
    om = make_om(log)
    agent = create_agent(tool_rounds(0, 1, 4), [lookup_price], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "mw"}}
    await agent.ainvoke({"messages": [HumanMessage("price of two things?")]}, config)
    assert log.take() == [0, 1, 2], "three model calls: two tool rounds and the answer"
    await agent.ainvoke({"messages": [HumanMessage("thanks")]}, config)
    assert log.take() == [0]
    async for _ in agent.astream({"messages": [HumanMessage("one more price")]}, config):
        pass
    assert log.take() == [0, 1], "a stream is a run too"
    agent.invoke({"messages": [HumanMessage("sync now")]}, config)
    assert log.take() == [0]
    status = await om.astatus("mw")
    assert status.step_number == 0, "astatus reports the last step's number"


async def test_graph_nodes_number_their_model_steps_from_zero_each_run() -> None:
    log = StatusLog()
    om = make_om(log)
    model = tool_rounds(0, 1, 4)

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    def route(state: State) -> Literal["tools", "__end__"]:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode([lookup_price]))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, {"tools": "tools", "__end__": END})
    builder.add_edge("tools", "agent")
    add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "nodes"}}
    await graph.ainvoke({"messages": [HumanMessage("price of two things?")]}, config)
    assert log.take() == [0, 1, 2], "one status per model step, from the reflector node"
    await graph.ainvoke({"messages": [HumanMessage("thanks")]}, config)
    assert log.take() == [0]
    await graph.ainvoke({"messages": [HumanMessage("one more price")]}, config)
    assert log.take() == [0, 1]


async def test_aprocess_without_a_run_is_step_zero_and_a_run_id_groups_calls() -> None:
    log = StatusLog()
    om = make_om(log)
    history: list[BaseMessage] = [HumanMessage("hello", id="h1")]
    for _ in range(3):
        await om.aprocess("ap", history)
    assert log.take() == [0, 0, 0], "each call without a run is a run of its own"
    run: RunnableConfig = {"run_id": uuid.uuid4()}
    for _ in range(3):
        await om.aprocess("ap", history, config=run)
    assert log.take() == [0, 1, 2]
    await om.aprocess("ap", history, config={"run_id": uuid.uuid4()})
    assert log.take() == [0]
    # the phases of one step number it once, when the reflect phase closes it
    phased: RunnableConfig = {"run_id": uuid.uuid4()}
    for _ in range(2):
        await om.aprocess("ap", history, config=phased, phases=("activate", "observe"))
        await om.aprocess("ap", history, config=phased, phases=("reflect",))
    assert log.take() == [0, 1]


async def test_aprocess_inside_a_langchain_run_counts_that_runs_steps() -> None:
    log = StatusLog()
    om = make_om(log)

    async def my_agent_loop(question: str, config: RunnableConfig) -> str:
        history: list[BaseMessage] = [HumanMessage(question, id=f"q-{question}")]
        for _ in range(3):  # three model calls of one agent run
            await om.aprocess("loop", history, config=config)
        return "done"

    loop = RunnableLambda(my_agent_loop)
    await loop.ainvoke("first")
    assert log.take() == [0, 1, 2]
    await loop.ainvoke("second")
    assert log.take() == [0, 1, 2]
