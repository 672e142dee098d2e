"""What the model sees mid-turn (issue 14): the unanswered tool round stays verbatim, the caller's
system messages are instructions (never observed), other threads' turns are safe in resource
scope, the pinned human message is looked up by thread, and edits are honoured.

Each test drives a public integration (create_agent + middleware, graph nodes, ``aprocess``)."""

from __future__ import annotations

import base64
import random
import struct
import zlib
from collections.abc import Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from pydantic import Field

from langchain_om import ObservationalMemory
from langchain_om.foundation.tokens import get_token_counter
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

BIG_RESULT = "RESULT-START " + " ".join(f"row{i}=value{i}" for i in range(250)) + " RESULT-END"


class RecordingObserver(ScriptedObserverModel):
    """The scripted Observer, keeping the transcript text of every call it gets."""

    seen: list[str] = Field(default_factory=list)

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        self.seen.append("\n".join(str(m.content) for m in messages))
        return super()._reply(messages, index)


def make_om(store: OMStore, observer: Any = None, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "model": observer or ScriptedObserverModel(),
        "observation": {"message_tokens": 300},
        "reflection": {"observation_tokens": 20_000},
        "token_counter": "estimator",
    }
    options.update(overrides)
    return ObservationalMemory(store, **options)


@tool
def fetch_report(name: str) -> str:
    """Fetch a long report."""
    return BIG_RESULT


def tool_results_in(call: Sequence[BaseMessage]) -> list[str]:
    return [str(m.content) for m in call if isinstance(m, ToolMessage)]


# ------------------------------------------------------------------ the unanswered round


@pytest.mark.parametrize(("buffering", "keep_in_state"), [(True, "unobserved"), (False, "unobserved"),
                                                          (True, "turn")])
async def test_middleware_model_reads_a_big_tool_result_verbatim(store: OMStore, buffering: bool,
                                                                  keep_in_state: Any) -> None:
    observation: dict[str, Any] = {"message_tokens": 300}
    if not buffering:
        observation["buffer_tokens"] = False
    om = make_om(store, observation=observation)
    # every second model call asks for the report; the call after it must read the result
    model = ScriptedAgentModel(tool_calls_on={i: ("fetch_report", {"name": f"r{i}"}) for i in range(0, 40, 2)})
    agent = create_agent(model, [fetch_report], checkpointer=InMemorySaver(),
                         middleware=[ObservationalMemoryMiddleware(om, keep_in_state=keep_in_state)])
    config: RunnableConfig = {"configurable": {"thread_id": "t-tool", "resource_id": "alice"}}
    for i in range(8):
        await agent.ainvoke({"messages": [HumanMessage(f"Turn {i}: please fetch report r{i}. " + "words " * 40)]},
                            config)
        await om.await_background()
    answered = [call for index, call in enumerate(model.calls) if index % 2 == 1]
    assert len(answered) == 8
    for index, call in enumerate(answered):
        results = tool_results_in(call)
        assert results and results[-1] == BIG_RESULT, f"answer call {index}: the tool result is not verbatim"
        calls = [m for m in call if isinstance(m, AIMessage) and m.tool_calls]
        assert calls, f"answer call {index}: the tool call that asked for it is gone"
        assert any(isinstance(m, HumanMessage) and f"Turn {index}:" in str(m.content) for m in call), \
            f"answer call {index}: the user's question is gone"
    record = await om.aget_record("t-tool", resource_id="alice")
    assert record.groups, "older turns were observed all the same"


async def test_recall_results_reach_the_model(store: OMStore) -> None:
    om = make_om(store, retrieval=True)
    asks = {i: ("recall", {"mode": "messages", "limit": 30}) for i in range(4, 40, 2)}
    model = ScriptedAgentModel(tool_calls_on=asks)
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t-recall", "resource_id": "alice"}}
    for i in range(10):
        await agent.ainvoke({"messages": [HumanMessage(f"Turn {i}: my note {i} is about topic {i}. " + "x " * 60)]},
                            config)
        await om.await_background()
    recall_answers = [call for index, call in enumerate(model.calls) if index >= 5 and index % 2 == 1]
    assert recall_answers
    for call in recall_answers:
        assert tool_results_in(call), "the recall result was observed before the model read it"


def build_graph(om: ObservationalMemory, model: ScriptedAgentModel) -> Any:
    def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def tools(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        return {"messages": [ToolMessage(BIG_RESULT, tool_call_id=c["id"], name=c["name"]) for c in last.tool_calls]}

    def route(state: MessagesState) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else "__end__"

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", "__end__"])
    builder.add_edge("tools", "agent")
    add_observational_memory(builder, om, before="agent")
    return builder.compile(checkpointer=InMemorySaver())


async def test_graph_nodes_keep_the_tool_round(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel(tool_calls_on={i: ("fetch_report", {"name": f"r{i}"}) for i in range(0, 40, 2)})
    graph = build_graph(om, model)
    config: RunnableConfig = {"configurable": {"thread_id": "t-graph", "resource_id": "alice"}}
    for i in range(6):
        await graph.ainvoke({"messages": [HumanMessage(f"Turn {i}: fetch r{i}. " + "words " * 40)]}, config)
        await om.await_background()
    for index, call in enumerate(model.calls):
        if index % 2 == 1:
            assert tool_results_in(call)[-1:] == [BIG_RESULT], f"call {index}: the tool result is gone"


async def test_process_keeps_a_long_tool_loop_readable(store: OMStore) -> None:
    """No human message left in the window (a long tool loop): the newest round still stays."""
    om = make_om(store, observation={"message_tokens": 300, "buffer_tokens": False})
    history: list[BaseMessage] = [HumanMessage("Fetch every report, one at a time. " + "please " * 20, id="h0")]
    for i in range(8):
        history.append(AIMessage("", id=f"a{i}", tool_calls=[{"name": "fetch_report", "args": {"name": f"r{i}"},
                                                               "id": f"c{i}", "type": "tool_call"}]))
        history.append(ToolMessage(BIG_RESULT, tool_call_id=f"c{i}", id=f"t{i}"))
        ctx = await om.aprocess("t-loop", history, resource_id="alice")
        ids = [m.id for m in ctx.messages]
        assert ids[-2:] == [f"a{i}", f"t{i}"], f"step {i}: the newest tool round left the context"
        assert ids[0] == "h0", f"step {i}: the user's request is not in the context"
        assert str(ctx.messages[-1].content) == BIG_RESULT


# ------------------------------------------------------------------ system messages


async def test_system_messages_are_instructions_not_conversation(store: OMStore) -> None:
    observer = RecordingObserver()
    om = make_om(store, observer=observer, observation={"message_tokens": 300, "buffer_tokens": False})
    persona = SystemMessage("You are Captain Pirate. Always answer like a pirate. " + "arr " * 200, id="persona")
    history: list[BaseMessage] = [persona]
    tokens_seen: list[int] = []
    for i in range(10):
        history.append(HumanMessage(f"Turn {i}: tell me about island {i}. " + "sand " * 40, id=f"h{i}"))
        ctx = await om.aprocess("t-sys", history, resource_id="alice")
        model_input = ctx.to_messages(merge_system=False)
        assert model_input[0] is not None and model_input[0].id == "persona", f"step {i}: persona not first"
        assert model_input[0].content == persona.content, f"step {i}: persona changed"
        # by default the persona and OM's context are one system message, the persona's text first
        merged = ctx.to_messages()
        assert sum(m.type == "system" for m in merged) == 1 and merged[0].type == "system"
        assert str(merged[0].content).startswith(str(persona.content)), f"step {i}: persona not first"
        assert all(m.id != "persona" for m in ctx.messages), "the persona is not part of the window"
        tokens_seen.append(ctx.status.windows.active.messages.tokens)
        history.append(AIMessage(f"Arr, island {i} be fine. " + "yo " * 30, id=f"a{i}"))
    record = await om.aget_record("t-sys", resource_id="alice")
    assert record.groups, "the conversation was observed"
    assert observer.seen and not any("Captain Pirate" in text for text in observer.seen), \
        "the system prompt was sent to the Observer"
    assert all("Captain Pirate" not in g.text for g in record.groups)
    assert max(tokens_seen) < 600, "the system prompt is not counted in the message window"
    status = await om.astatus("t-sys", resource_id="alice")
    assert status.instruction_tokens >= get_token_counter("estimator").count_message(persona) - 5


async def test_system_messages_survive_in_graph_state(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel()
    graph = build_graph(om, model)
    config: RunnableConfig = {"configurable": {"thread_id": "t-gsys", "resource_id": "alice"}}
    await graph.ainvoke({"messages": [("system", "You are Captain Pirate."), ("user", "hello " * 50)]}, config)
    for i in range(8):
        await graph.ainvoke({"messages": [("user", f"Turn {i}: " + "more words " * 40)]}, config)
        await om.await_background()
    assert (await om.aget_record("t-gsys", resource_id="alice")).groups
    merged = 0
    for index, call in enumerate(model.calls):
        assert call[0].type == "system" and str(call[0].content).startswith("You are Captain Pirate."), \
            f"call {index}: the caller's system message does not lead"
        assert sum(m.type == "system" for m in call) == 1, f"call {index}: one system message"
        merged += "<observations>" in str(call[0].content)
    assert merged, "OM's context joined the caller's system message once there was a log"


async def test_history_style_caller_keeps_its_system_message(store: OMStore) -> None:
    """A caller that sends only new messages (chat-history style) keeps its system prompt."""
    om = make_om(store, observation={"message_tokens": 300, "buffer_tokens": False})
    await om.aprocess("t-once", [SystemMessage("Be brief.", id="brief"), HumanMessage("hi", id="h")],
                      resource_id="alice")
    for i in range(6):
        ctx = await om.aprocess("t-once", [HumanMessage(f"Turn {i}: " + "talk " * 80, id=f"h{i}"),
                                           AIMessage("ok " * 40, id=f"a{i}")], resource_id="alice")
        assert str(ctx.to_messages()[0].content).startswith("Be brief.")
        assert ctx.to_messages(merge_system=False)[0].content == "Be brief."


# ------------------------------------------------------------------ resource scope


async def test_resource_sweep_leaves_other_threads_unanswered_turn(store: OMStore) -> None:
    om = make_om(store, scope="resource", observation={"message_tokens": 300, "buffer_tokens": False})
    b_history: list[BaseMessage] = [
        HumanMessage("B: what is the capital of Peru? " + "please " * 10, id="b-h0"),
        AIMessage("", id="b-a0", tool_calls=[{"name": "fetch_report", "args": {"name": "peru"}, "id": "bc0",
                                               "type": "tool_call"}]),
        ToolMessage("Lima is the capital. " + "fact " * 20, tool_call_id="bc0", id="b-t0"),
    ]
    await om.aprocess("thread-b", b_history, resource_id="alice")
    a_history: list[BaseMessage] = []
    for i in range(6):
        a_history.append(HumanMessage(f"A turn {i}: " + "chatter " * 60, id=f"a-h{i}"))
        await om.aprocess("thread-a", a_history, resource_id="alice")
        a_history.append(AIMessage(f"A reply {i} " + "ok " * 30, id=f"a-a{i}"))
    record = await om.aget_record("thread-a", resource_id="alice")
    assert record.groups, "thread A was observed"
    ctx_b = await om.aprocess("thread-b", b_history, resource_id="alice")
    ids = [m.id for m in ctx_b.messages]
    assert ids == ["b-h0", "b-a0", "b-t0"], f"thread B lost its unanswered turn: {ids}"


async def test_pinned_human_found_by_thread_when_another_thread_has_its_id(store: OMStore) -> None:
    """A forked conversation copies message ids into a second thread of the same resource."""
    om = make_om(store, scope="resource", observation={"message_tokens": 300, "buffer_tokens": False})
    shared = HumanMessage("Plan a trip to Kyoto for me. " + "details " * 10, id="shared-h")
    await om.aprocess("fork-1", [shared, AIMessage("Sure.", id="f1-a")], resource_id="alice")
    history: list[BaseMessage] = [HumanMessage("Plan a trip to Kyoto for me. " + "details " * 10, id="shared-h")]
    for i in range(6):
        history.append(AIMessage("", id=f"f2-a{i}", tool_calls=[{"name": "fetch_report", "args": {"name": f"k{i}"},
                                                                  "id": f"k{i}", "type": "tool_call"}]))
        history.append(ToolMessage("Kyoto fact " + "temple " * 80, tool_call_id=f"k{i}", id=f"f2-t{i}"))
        ctx = await om.aprocess("fork-2", history, resource_id="alice")
        assert any(m.type == "human" and m.id == "shared-h" for m in ctx.messages), \
            f"step {i}: the user's request vanished from fork-2's context"


# ------------------------------------------------------------------ edits


async def test_edit_of_an_unobserved_message_replaces_it(store: OMStore) -> None:
    observer = RecordingObserver()
    om = make_om(store, observer=observer, observation={"message_tokens": 300, "buffer_tokens": False})
    history: list[BaseMessage] = [HumanMessage("My budget is 100 dollars.", id="h-budget"),
                                  AIMessage("Noted.", id="a-budget")]
    await om.aprocess("t-edit", history, resource_id="alice")
    history[0] = HumanMessage("My budget is 900 dollars.", id="h-budget")  # add_messages replaces by id
    history.append(HumanMessage("What can I buy?", id="h-q"))
    ctx = await om.aprocess("t-edit", history, resource_id="alice")
    assert str(ctx.messages[0].content) == "My budget is 900 dollars."
    for i in range(6):
        history.append(AIMessage(f"Reply {i} " + "words " * 50, id=f"a{i}"))
        history.append(HumanMessage(f"Turn {i} " + "more " * 50, id=f"h{i}"))
        await om.aprocess("t-edit", history, resource_id="alice")
    assert observer.seen
    assert any("900 dollars" in text for text in observer.seen)
    assert not any("100 dollars" in text for text in observer.seen), "the Observer saw the stale version"


async def test_update_state_edit_reaches_the_model(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel()
    graph = build_graph(om, model)
    config: RunnableConfig = {"configurable": {"thread_id": "t-upd", "resource_id": "alice"}}
    await graph.ainvoke({"messages": [HumanMessage("My budget is 100 dollars.", id="h-budget")]}, config)
    await graph.aupdate_state(config, {"messages": [HumanMessage("My budget is 900 dollars.", id="h-budget")]})
    await graph.ainvoke({"messages": [HumanMessage("What can I buy?", id="h-q")]}, config)
    last = model.calls[-1]
    texts = [str(m.content) for m in last]
    assert "My budget is 900 dollars." in texts and "My budget is 100 dollars." not in texts


async def test_middleware_state_system_message_leads_every_call(store: OMStore) -> None:
    om = make_om(store)
    model = ScriptedAgentModel()
    agent = create_agent(model, [], system_prompt="Agent prompt.", middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t-mwsys", "resource_id": "alice"}}
    await agent.ainvoke({"messages": [SystemMessage("You are Captain Pirate.", id="persona"),
                                      HumanMessage("hello " * 50)]}, config)
    for i in range(8):
        await agent.ainvoke({"messages": [HumanMessage(f"Turn {i}: " + "more words " * 40)]}, config)
        await om.await_background()
    assert (await om.aget_record("t-mwsys", resource_id="alice")).groups
    for index, call in enumerate(model.calls):
        first = str(call[0].content)
        assert call[0].type == "system" and first.startswith("Agent prompt.\n\nYou are Captain Pirate."), index
        assert sum(1 for m in call if m.type == "system") == 1, f"call {index}: one system message"
    stored = await store.aget_messages("alice", "t-mwsys")
    assert not any(m.data.get("type") == "system" for m in stored), "the persona was stored as conversation"


async def test_edit_of_an_observed_message_is_a_correction(store: OMStore) -> None:
    observer = RecordingObserver()
    om = make_om(store, observer=observer, observation={"message_tokens": 300, "buffer_tokens": False})
    history: list[BaseMessage] = [HumanMessage("My passport number is X123. " + "pad " * 60, id="h-pass"),
                                  AIMessage("Saved. " + "ok " * 60, id="a-pass")]
    for i in range(4):
        history.append(HumanMessage(f"Turn {i} " + "more " * 60, id=f"h{i}"))
        await om.aprocess("t-corr", history, resource_id="alice")
        history.append(AIMessage(f"Reply {i} " + "words " * 60, id=f"a{i}"))
    record = await om.aget_record("t-corr", resource_id="alice")
    stored = await store.aget_messages("alice", "t-corr")
    first_seq = next(m.seq for m in stored if m.id == "h-pass")
    assert record.last_observed_seq["t-corr"] >= first_seq, "precondition: the message was observed"
    calls_before = len(observer.seen)
    history[0] = HumanMessage("My passport number is Y987. " + "pad " * 60, id="h-pass")
    for i in range(4, 8):
        history.append(HumanMessage(f"Turn {i} " + "more " * 60, id=f"h{i}"))
        await om.aprocess("t-corr", history, resource_id="alice")
        history.append(AIMessage(f"Reply {i} " + "words " * 60, id=f"a{i}"))
    later = observer.seen[calls_before:]
    assert any("edited" in text and "Y987" in text for text in later), "the Observer never saw the correction"
    versions = [m for m in await store.aget_messages("alice", "t-corr") if "passport number" in str(m.data)]
    texts = " ".join(str(m.data) for m in versions)
    assert "X123" in texts and "Y987" in texts, "the raw history keeps both versions"


async def test_unchanged_resend_is_not_an_edit(store: OMStore) -> None:
    om = make_om(store, observation={"message_tokens": 300, "buffer_tokens": False})
    history: list[BaseMessage] = []
    for i in range(6):
        history.append(HumanMessage(f"Turn {i} " + "more " * 60, id=f"h{i}"))
        await om.aprocess("t-same", history, resource_id="alice")
        history.append(AIMessage(f"Reply {i} " + "words " * 60, id=f"a{i}"))
    stored = await store.aget_messages("alice", "t-same")
    assert len(stored) == len({m.id for m in stored}) == 11, "re-sent messages were stored again"


# ------------------------------------------------------------------ token counting of big parts


def _png(width: int, height: int, *, noisy: bool = False) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = [b"\x00" + (random.randbytes(width * 3) if noisy else b"\x7f" * (width * 3)) for _ in range(height)]
    raw = b"".join(rows)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def test_tool_result_counts_at_full_size_and_images_as_images() -> None:
    counter = get_token_counter("estimator")
    full = ToolMessage(BIG_RESULT * 20, tool_call_id="c")
    assert counter.count_message(full) >= 20 * counter.count_text(BIG_RESULT) * 0.9
    counts = []
    for noisy in (False, True):
        png = base64.b64encode(_png(512, 512, noisy=noisy)).decode()
        image = HumanMessage(content=[{"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}}])
        counts.append((counter.count_message(image), counter.count_text(png)))
    (plain, plain_text), (noisy_tokens, noisy_text) = counts
    assert noisy_text > 100 * plain_text / 10, "precondition: the noisy image is much longer as text"
    assert plain == noisy_tokens, "an image's tokens depend on its size in pixels, not its bytes"
    assert noisy_tokens < noisy_text / 100


class FlakyAppendStore(InMemoryStore):
    """Fails the next append once when ``fail_next`` is set, whichever append the engine uses
    (a warm step appends through ``aappend_to_incarnation``, which checks the thread as it writes)."""

    fail_next = False

    def _maybe_fail(self) -> None:
        if self.fail_next:
            self.fail_next = False
            raise RuntimeError("disk full")

    async def aappend_messages(self, resource_id: str, thread_id: str, messages: Any) -> Any:
        self._maybe_fail()
        return await super().aappend_messages(resource_id, thread_id, messages)

    async def aappend_to_incarnation(self, resource_id: str, thread_id: str, messages: Any, born: Any) -> Any:
        self._maybe_fail()
        return await super().aappend_to_incarnation(resource_id, thread_id, messages, born)


async def test_a_failed_step_does_not_hide_its_messages_from_the_next() -> None:
    """The same list handed over again after a failed step: its new messages are still stored."""
    store = FlakyAppendStore()
    om = make_om(store)
    history: list[BaseMessage] = [HumanMessage("first", id="h1"), AIMessage("ok", id="a1")]
    await om.aprocess("t-flaky", history, resource_id="alice")
    history.append(HumanMessage("second", id="h2"))
    store.fail_next = True
    with pytest.raises(RuntimeError, match="disk full"):
        await om.aprocess("t-flaky", history, resource_id="alice")
    ctx = await om.aprocess("t-flaky", history, resource_id="alice")
    assert [m.id for m in ctx.messages] == ["h1", "a1", "h2"]
    assert [m.id for m in await store.aget_messages("alice", "t-flaky")] == ["h1", "a1", "h2"]
