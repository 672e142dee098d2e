"""Issue 21: OM's memory follows the LangGraph checkpoint a run starts from.

Five turns ("my favourite colour is red / blue / green / pink / gold"), then runs from earlier
checkpoints the ways LangGraph offers (time travel with new input, replay with ``None``,
``update_state`` on a past checkpoint, resuming an earlier interrupt), through the graph nodes
(``add_observational_memory``) and ``create_agent`` + ``ObservationalMemoryMiddleware``, on
InMemorySaver and durable checkpointers, over OM's memory, SQLite and PostgreSQL stores.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from conftest import require_pg_dsn
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from pydantic import BaseModel, Field

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.branches import BRANCH_MARK, POSITION_KEY, ForeignResourceError
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

COLOURS = ["red", "blue", "green", "pink", "gold"]
FILLER = "and I keep telling you details so the window fills up " * 4


def say(colour: str) -> str:
    return f"My favourite colour is {colour}, {FILLER}"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def make_om(store: OMStore, **options: Any) -> ObservationalMemory:
    settings: dict[str, Any] = {"model": ScriptedObserverModel(), "observation": {"message_tokens": 150},
                                "reflection": {"observation_tokens": 4000}, "token_counter": "estimator"}
    settings.update(options)
    return ObservationalMemory(store, **settings)


@dataclass
class Harness:
    kind: str
    graph: Any
    model: ScriptedAgentModel
    om: ObservationalMemory

    def prompt(self) -> str:
        """Everything the agent's model was given on its latest call."""
        return "\n".join(str(m.content) for m in self.model.calls[-1])

    @property
    def entry(self) -> str:
        return "om_activator" if self.kind == "graph" else "model"


def build(kind: str, om: ObservationalMemory, saver: BaseCheckpointSaver[Any], **compile_kw: Any) -> Harness:
    model = ScriptedAgentModel()
    if kind == "graph":
        async def agent(state: State) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        add_observational_memory(builder, om)
        return Harness(kind, builder.compile(checkpointer=saver, **compile_kw), model, om)
    graph = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver,
                         **compile_kw)
    return Harness(kind, graph, model, om)


@asynccontextmanager
async def saver_of(kind: str, tmp_path: Path) -> AsyncIterator[BaseCheckpointSaver[Any]]:
    if kind == "memory":
        yield InMemorySaver()
    elif kind == "sqlite":
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        async with AsyncSqliteSaver.from_conn_string(str(tmp_path / f"cp-{uuid.uuid4().hex[:6]}.db")) as saver:
            yield saver
    else:
        from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

        async with AsyncPostgresSaver.from_conn_string(require_pg_dsn()) as saver:
            await saver.setup()
            yield saver


def cfg(thread: str, resource: str | None = "u") -> RunnableConfig:
    configurable: dict[str, Any] = {"thread_id": thread}
    if resource is not None:
        configurable["resource_id"] = resource
    return {"configurable": configurable}


async def five_turns(h: Harness, config: RunnableConfig) -> list[RunnableConfig]:
    """The five turns; returns the config of each turn's final checkpoint (as get_state hands it out)."""
    finals: list[RunnableConfig] = []
    for colour in COLOURS:
        await h.graph.ainvoke({"messages": [HumanMessage(say(colour))]}, config)
        finals.append((await h.graph.aget_state(config)).config)
    return finals


def seen(text: str, *colours: str) -> list[str]:
    return [c for c in colours if f"colour is {c}" in text]


async def input_checkpoint(h: Harness, thread: str, colour: str) -> RunnableConfig:
    """The checkpoint just before OM's first step on the turn that said ``colour`` (replay point)."""
    async for snapshot in h.graph.aget_state_history({"configurable": {"thread_id": thread}}):
        messages = snapshot.values.get("messages") or []
        if snapshot.next == (h.entry,) and messages and f"colour is {colour}" in str(messages[-1].content):
            return snapshot.config
    raise AssertionError(f"no input checkpoint for {colour}")


async def branch_of(h: Harness, config: RunnableConfig) -> str:
    return str((await h.graph.aget_state(config)).values[POSITION_KEY]["branch"])


async def check_time_travel(h: Harness, store: OMStore, thread: str) -> None:
    finals = await five_turns(h, cfg(thread))
    main_record = await h.om.aget_record(thread, resource_id="u")
    assert main_record.groups, "the thresholds should have observed part of the five turns"

    # 1. time travel with new input, from a config LangGraph hands out (no resource_id in it)
    past = finals[1]
    assert "resource_id" not in past["configurable"]
    await h.graph.ainvoke({"messages": [HumanMessage("Which colours did I mention? (fork one)")]}, past)
    prompt = h.prompt()
    assert seen(prompt, *COLOURS) == ["red", "blue"], prompt
    fork_state = await h.graph.aget_state({"configurable": {"thread_id": thread}})
    fork = str(fork_state.values[POSITION_KEY]["branch"])
    assert fork.startswith(thread + BRANCH_MARK)
    fork_record = await h.om.aget_record(fork, resource_id="u")
    assert not seen(fork_record.observations + str(fork_record.metadata), "green", "pink", "gold")
    # the fork's raw messages: its copies and its new turn, never the abandoned future
    fork_rows = await store.aget_messages("u", fork)
    assert not seen(" ".join(str(r.data) for r in fork_rows), "green", "pink", "gold")
    assert any("fork one" in str(r.data) for r in fork_rows)
    # nothing of the original branch was deleted or changed
    # the middleware stores a turn's final answer at the turn's end; the graph nodes at the next step
    answered = 1 if h.kind == "agent" else 0
    assert await store.acount_messages("u", thread) == 9 + answered
    again = await h.om.aget_record(thread, resource_id="u")
    assert again.observations == main_record.observations

    # 2. the fork continues as its own branch (the thread's latest checkpoint, no resource_id)
    await h.graph.ainvoke({"messages": [HumanMessage("Still on the fork")]}, {"configurable": {"thread_id": thread}})
    prompt = h.prompt()
    assert "fork one" in prompt and not seen(prompt, "green", "pink", "gold"), prompt
    assert await branch_of(h, {"configurable": {"thread_id": thread}}) == fork

    # 3. back to the first branch's latest checkpoint: its own history, nothing of the fork
    await h.graph.ainvoke({"messages": [HumanMessage("Back on the first branch")]}, finals[4])
    prompt = h.prompt()
    assert "fork one" not in prompt and "Still on the fork" not in prompt, prompt
    assert "gold" in prompt, prompt
    assert await branch_of(h, {"configurable": {"thread_id": thread}}) == thread
    assert await store.acount_messages("u", thread) == 11 + answered  # turn 5's answer, the new question

    # 4. a config naming another resource than the thread's is refused; nothing is stored for it
    with pytest.raises(ForeignResourceError, match="resource_id"):
        await h.graph.ainvoke({"messages": [HumanMessage("let me in")]},
                              {"configurable": {**past["configurable"], "resource_id": "intruder"}})
    assert await store.alist_threads("intruder") == []

    # 5. replay with None from the checkpoint before turn 3's first OM step
    replay_from = await input_checkpoint(h, thread, "green")
    await h.graph.ainvoke(None, replay_from)
    prompt = h.prompt()
    assert seen(prompt, *COLOURS) == ["red", "blue", "green"], prompt
    assert "fork one" not in prompt

    # 6. update_state on a past checkpoint: turn 2's question rewritten, then run from there
    turn_two = await input_checkpoint(h, thread, "blue")
    values = (await h.graph.aget_state(turn_two)).values
    rewritten = HumanMessage(say("purple"), id=values["messages"][-1].id)
    updated = await h.graph.aupdate_state(turn_two, {"messages": [rewritten]})
    await h.graph.ainvoke(None, updated)
    prompt = h.prompt()
    assert seen(prompt, *COLOURS, "purple") == ["red", "purple"], prompt


KINDS = ["graph", "agent"]
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "time_travel.py"


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("saver_kind", ["memory", "sqlite"])
async def test_memory_follows_the_checkpoint(kind: str, saver_kind: str, store: OMStore, tmp_path: Path) -> None:
    async with saver_of(saver_kind, tmp_path) as saver:
        om = make_om(store)
        try:
            await check_time_travel(build(kind, om, saver), store, f"t-{uuid.uuid4().hex[:6]}")
        finally:
            await om.aclose()


@pytest.mark.postgres
@pytest.mark.parametrize("kind", KINDS)
async def test_memory_follows_the_checkpoint_postgres_saver(kind: str, open_store: Any, tmp_path: Path) -> None:
    store = await open_store("postgres")
    async with saver_of("postgres", tmp_path) as saver:
        om = make_om(store)
        try:
            await check_time_travel(build(kind, om, saver), store, f"t-{uuid.uuid4().hex[:6]}")
        finally:
            await om.aclose()


# ------------------------------------------------------------------ interrupt and resume


@pytest.mark.parametrize("kind", KINDS)
async def test_resuming_an_earlier_interrupt_forks(kind: str, open_store: Any, tmp_path: Path) -> None:
    store = await open_store("sqlite")
    async with saver_of("sqlite", tmp_path) as saver:
        om = make_om(store)
        h = build(kind, om, saver, interrupt_before=["om_activator" if kind == "graph" else "model"])
        config = cfg("t-int")
        paused: list[RunnableConfig] = []
        for colour in COLOURS:
            await h.graph.ainvoke({"messages": [HumanMessage(say(colour))]}, config)
            paused.append((await h.graph.aget_state(config)).config)  # stopped before OM's step
            await h.graph.ainvoke(None, config)  # resume
        assert seen(h.prompt(), *COLOURS)[-1] == "gold"
        # resume turn 3's interrupt again, after turns 4 and 5 happened on the first branch
        await h.graph.ainvoke(None, paused[2])
        assert seen(h.prompt(), *COLOURS) == ["red", "blue", "green"], h.prompt()
        # the latest checkpoint of the first branch still sees its own five turns
        latest_first = paused[4]
        await h.graph.ainvoke(None, latest_first)
        assert seen(h.prompt(), *COLOURS)[-1] == "gold"
        await om.aclose()


# ------------------------------------------------------------------ buffered chunks and working memory


async def test_fork_keeps_the_checkpoints_buffered_chunks(open_store: Any, tmp_path: Path) -> None:
    """Background chunks of the checkpoint's record come along, pointing at the branch's copies."""
    store = await open_store("sqlite")
    om = make_om(store, observation={"message_tokens": 400, "buffer_tokens": 60})
    h = build("graph", om, InMemorySaver())
    config = cfg("t-buf")
    finals = []
    for colour in COLOURS:
        await h.graph.ainvoke({"messages": [HumanMessage(say(colour))]}, config)
        await om.await_background()
        finals.append((await h.graph.aget_state(config)).config)
    position = (await h.graph.aget_state(finals[2])).values[POSITION_KEY]
    snapshot = await store.aget_value("u", "om-branch", f"record:{position['record']}:{position['version']}")
    assert snapshot is not None and snapshot["buffered_chunks"], "the checkpoint should hold buffered chunks"
    await h.graph.ainvoke({"messages": [HumanMessage("fork at turn three")]}, finals[2])
    fork = await branch_of(h, {"configurable": {"thread_id": "t-buf"}})
    record = await om.aget_record(fork, resource_id="u")
    rows = {r.seq: r for r in await store.aget_messages("u", fork)}
    kept = [c for c in record.buffered_chunks if c.observations]
    for chunk in kept:
        assert rows[chunk.start_seq].id == chunk.start_id and rows[chunk.end_seq].id == chunk.end_id
        assert not seen(chunk.observations, "pink", "gold")
    carried = {c["id"] for c in snapshot["buffered_chunks"]}
    assert carried <= {c.id for c in record.buffered_chunks}, "the checkpoint's chunks were not carried over"
    await om.aclose()


async def test_working_memory_follows_the_checkpoint(open_store: Any) -> None:
    store = await open_store("sqlite")
    om = make_om(store, working_memory={"scope": "thread"})
    tool = "update_working_memory"
    # model calls: turn 1 -> 0; turn 2 -> 1 (tool) and 2; turn 3 -> 3; turn 4 -> 4 (tool) and 5; turn 5 -> 6
    model = ScriptedAgentModel(tool_calls_on={1: (tool, {"content": "Colour: wm-blue"}),
                                              4: (tool, {"content": "Colour: wm-pink"})})
    graph = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    h = Harness("agent", graph, model, om)
    finals = await five_turns(h, cfg("t-wm"))
    assert "wm-pink" in h.prompt()
    await h.graph.ainvoke({"messages": [HumanMessage("fork after turn two")]}, finals[1])
    assert "wm-blue" in h.prompt() and "wm-pink" not in h.prompt(), h.prompt()
    await h.graph.ainvoke({"messages": [HumanMessage("back to the first branch")]}, finals[4])
    assert "wm-pink" in h.prompt() and "wm-blue" not in h.prompt()
    await om.aclose()


# ------------------------------------------------------------------ sync agents and graphs


@pytest.mark.parametrize("kind", KINDS)
def test_sync_time_travel(kind: str, tmp_path: Path) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    from langchain_om.store.sqlite import SQLiteStore

    om = make_om(SQLiteStore(tmp_path / "om.db"))
    model = ScriptedAgentModel()
    with SqliteSaver.from_conn_string(str(tmp_path / "cp.db")) as saver:
        if kind == "graph":
            def agent(state: State) -> dict[str, Any]:
                return {"messages": [model.invoke(state["messages"])]}

            builder = StateGraph(State)
            builder.add_node("agent", agent)
            builder.add_edge(START, "agent")
            builder.add_edge("agent", END)
            graph = add_observational_memory(builder, om).compile(checkpointer=saver)
        else:
            graph = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver)
        h = Harness(kind, graph, model, om)
        config = cfg("t-sync")
        finals = []
        for colour in COLOURS:
            graph.invoke({"messages": [HumanMessage(say(colour))]}, config)
            finals.append(graph.get_state(config).config)
        graph.invoke({"messages": [HumanMessage("fork (sync)")]}, finals[1])
        assert seen(h.prompt(), *COLOURS) == ["red", "blue"], h.prompt()
        graph.invoke({"messages": [HumanMessage("first branch again")]}, finals[4])
        assert "fork (sync)" not in h.prompt() and seen(h.prompt(), *COLOURS)[-1] == "gold"
    om.close()


# ------------------------------------------------------------------ recall on a branch


@pytest.mark.parametrize("kind", KINDS)
async def test_recall_pages_the_branchs_own_history(kind: str, store: OMStore) -> None:
    """On a fork, recall's current thread is the fork's history: the parent's rows up to the fork
    (observed ones included), then the fork's own; the abandoned future stays stored, elsewhere."""
    from langchain_om.extensions.recall import RecallInput

    om = make_om(store, retrieval=True)
    h = build(kind, om, InMemorySaver())
    thread = f"t-rec-{kind}"
    finals = await five_turns(h, cfg(thread))
    await h.graph.ainvoke({"messages": [HumanMessage("fork after turn three")]}, finals[2])
    fork = await branch_of(h, {"configurable": {"thread_id": thread}})
    parent_record = await om.aget_record(thread, resource_id="u")
    assert parent_record.last_observed_seq.get(thread, 0) >= 2, "part of the parent should be observed"

    tool = om.recall_tool()
    run_config: RunnableConfig = {"configurable": {"thread_id": thread}}  # as the agent's tool call gets it
    page = await tool.arecall(RecallInput(mode="messages", anchor="start", limit=50), run_config)
    text = str(page)
    assert seen(text, *COLOURS) == ["red", "blue", "green"], text
    assert "fork after turn three" in text
    assert page["thread_id"] == fork
    newest = await tool.arecall(RecallInput(mode="messages", anchor="end", limit=2), run_config)
    assert "fork after turn three" in str(newest) and newest["has_prev_page"] is True
    # the abandoned future is still stored (nothing deleted), on the first branch
    first = " ".join(str(r.data) for r in await store.aget_messages("u", thread))
    assert seen(first, "pink", "gold") == ["pink", "gold"]
    # back on the first branch, recall pages the first branch again, without the fork
    await h.graph.ainvoke({"messages": [HumanMessage("first branch again")]}, finals[4])
    page = await tool.arecall(RecallInput(mode="messages", anchor="start", limit=50), run_config)
    assert seen(str(page), *COLOURS) == COLOURS and "fork after turn three" not in str(page)
    await om.aclose()


# ------------------------------------------------------------------ the README's example


async def test_readme_example_runs() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("time_travel_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    seen = await module.main()
    assert seen == {"first branch": COLOURS, "fork from turn 2": ["red", "blue"], "fork's log": ["red"],
                    "first branch again": COLOURS, "refused": ["ForeignResourceError"]}


# ------------------------------------------------------------------ deleting a thread


async def test_deleting_a_thread_deletes_its_branches_and_snapshots(store: OMStore) -> None:
    om = make_om(store, working_memory={"scope": "thread"})
    h = build("graph", om, InMemorySaver())
    finals = await five_turns(h, cfg("t-del"))
    await om.working_memory.aset("t-del", "Colour: wm-gold", resource_id="u")  # type: ignore[union-attr]
    await h.graph.ainvoke({"messages": [HumanMessage("one more")]}, finals[4])
    first = (await h.graph.aget_state({"configurable": {"thread_id": "t-del"}})).values[POSITION_KEY]
    await h.graph.ainvoke({"messages": [HumanMessage("fork")]}, finals[1])
    position = (await h.graph.aget_state({"configurable": {"thread_id": "t-del"}})).values[POSITION_KEY]
    fork = position["branch"]
    assert fork != first["branch"]
    snapshot_key = f"record:{first['record']}:{first['version']}"
    assert await store.aget_value("u", "om-branch", snapshot_key) is not None
    assert await store.aget_thread("u", fork) is not None
    documents = [first["working_memory"]]
    assert documents[0] and await store.aget_value("u", "om-branch", f"wm:{documents[0]}") is not None

    await om.adelete_thread("t-del", resource_id="u")
    assert await store.aget_thread("u", "t-del") is None
    assert await store.aget_thread("u", fork) is None
    assert await store.aget_messages("u", fork) == []
    assert await store.aget_value("u", "om-branch", snapshot_key) is None
    assert await store.aget_value("u", "om-branch", f"record:{position['record']}:{position['version']}") is None
    assert await store.aget_value("u", "om-branch", f"wm:{documents[0]}") is None
    await om.aclose()


async def test_recall_threads_mode_names_branches(open_store: Any) -> None:
    from langchain_om.extensions.recall import RecallInput

    store = await open_store("memory")
    om = make_om(store, retrieval=True)
    h = build("agent", om, InMemorySaver())
    finals = await five_turns(h, cfg("t-list"))
    await h.graph.ainvoke({"messages": [HumanMessage("fork")]}, finals[1])
    listing = await om.recall_tool().arecall(RecallInput(mode="threads"), {"configurable": {"thread_id": "t-list"}})
    lines = listing["threads"].split("\n")  # (splitlines would also split at the branch mark \x1e)
    assert len(lines) == 2
    fork_line = next(line for line in lines if BRANCH_MARK in line)
    assert "another branch of thread t-list" in fork_line and fork_line.endswith("← current")
    await om.aclose()


async def test_resource_scope_forks_the_raw_messages(open_store: Any) -> None:
    """Resource scope: the shared observation log is the user's across threads and does not roll
    back (documented), but the fork's own messages are the checkpoint's, and both branches run."""
    store = await open_store("sqlite")
    om = make_om(store, scope="resource")
    h = build("agent", om, InMemorySaver())
    finals = await five_turns(h, cfg("t-res"))
    await h.graph.ainvoke({"messages": [HumanMessage("fork in resource scope")]}, finals[1])
    fork = await branch_of(h, {"configurable": {"thread_id": "t-res"}})
    rows = " ".join(str(r.data) for r in await store.aget_messages("u", fork))
    assert "fork in resource scope" in rows and not seen(rows, "green", "pink", "gold")
    record = await om.aget_record("t-res", resource_id="u")
    unobserved_on_fork = await store.aget_messages("u", fork, after_seq=record.last_observed_seq.get(fork, 0))
    assert not seen(" ".join(str(r.data) for r in unobserved_on_fork), "green", "pink", "gold")
    await h.graph.ainvoke({"messages": [HumanMessage("first branch, resource scope")]}, finals[4])
    conversation = " ".join(str(m.content) for m in h.model.calls[-1] if m.type != "system")
    assert "fork in resource scope" not in conversation and "first branch, resource scope" in conversation
    await om.aclose()


class FlakyAgentModel(ScriptedAgentModel):
    """Fails on the call indexes in ``fail_on`` (after recording them), else answers as scripted."""

    fail_on: list[int] = Field(default_factory=list)

    def _reply(self, messages: list[Any], index: int) -> Any:
        if index in self.fail_on:
            raise RuntimeError("provider exploded")
        return super()._reply(messages, index)


@pytest.mark.parametrize("kind", KINDS)
async def test_a_retried_step_is_not_a_fork(kind: str, open_store: Any) -> None:
    """OM stored the step's messages, then the model failed: retrying from the same checkpoint
    continues the branch (the stored rows are the state's own), it does not fork."""
    store = await open_store("sqlite")
    om = make_om(store)
    model = FlakyAgentModel(fail_on=[2])
    if kind == "graph":
        async def agent(state: State) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        graph = add_observational_memory(builder, om).compile(checkpointer=InMemorySaver())
    else:
        graph = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config = cfg("t-retry")
    await graph.ainvoke({"messages": [HumanMessage(say("red"))]}, config)
    await graph.ainvoke({"messages": [HumanMessage(say("blue"))]}, config)
    with pytest.raises(RuntimeError, match="provider exploded"):
        await graph.ainvoke({"messages": [HumanMessage(say("green"))]}, config)
    stored = await store.acount_messages("u", "t-retry")
    await graph.ainvoke(None, config)  # retry from the latest checkpoint
    assert seen(" ".join(str(m.content) for m in model.calls[-1]), *COLOURS) == ["red", "blue", "green"]
    assert (await graph.aget_state(config)).values[POSITION_KEY]["branch"] == "t-retry"
    assert [t.thread_id for t in await store.alist_threads("u")] == ["t-retry"]
    assert await store.acount_messages("u", "t-retry") >= stored
    await om.aclose()


# ------------------------------------------------------------------ other state schemas, om_turn_end


class PydanticState(BaseModel):
    messages: Annotated[list[AnyMessage], add_messages] = []
    turns: int = 0


async def test_graph_nodes_add_the_position_to_a_pydantic_state(open_store: Any) -> None:
    """The OM nodes add ``om_position`` to whatever state schema the graph has, and time travel works."""
    store = await open_store("memory")
    om = make_om(store)
    model = ScriptedAgentModel()

    async def agent(state: PydanticState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state.messages)], "turns": state.turns + 1}

    builder = StateGraph(PydanticState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    graph = add_observational_memory(builder, om).compile(checkpointer=InMemorySaver())
    h = Harness("graph", graph, model, om)
    finals = await five_turns(h, cfg("t-pyd"))
    assert (await graph.aget_state(finals[4])).values["turns"] == 5
    await graph.ainvoke({"messages": [HumanMessage("fork")]}, finals[1])
    assert seen(h.prompt(), *COLOURS) == ["red", "blue"]
    await om.aclose()


async def test_turn_end_node_writes_the_position(open_store: Any) -> None:
    """With buffer_on_idle, ``om_turn_end`` stores the final answer: its position keeps the next
    step from mistaking that row for a fork."""
    store = await open_store("memory")
    om = make_om(store, observation={"message_tokens": 150, "buffer_on_idle": True})
    h = build("graph", om, InMemorySaver())
    assert "om_turn_end" in h.graph.nodes
    finals = await five_turns(h, cfg("t-idle"))
    assert await store.acount_messages("u", "t-idle") == 10  # the final answer is stored at the turn's end
    assert (await h.graph.aget_state(finals[4])).values[POSITION_KEY]["branch"] == "t-idle"
    await h.graph.ainvoke({"messages": [HumanMessage("fork")]}, finals[2])
    assert seen(h.prompt(), *COLOURS) == ["red", "blue", "green"]
    await om.aclose()
