"""The AI SDK UI message stream adapter (issue 18, point 2), checked with the AI SDK's own client.

A ``create_agent`` agent with OM's middleware and a tool is served by Starlette through
``ui_message_response``; ``tests/js/chat_client.mjs`` runs the ``ai`` package's chat engine
(what ``useChat`` uses: DefaultChatTransport, the SSE parser, the chunk schema and
processUIMessageStream) over real HTTP, turn after turn, and reports the messages it kept and
the parts it heard through ``onData``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from ui_client import AI_LANGCHAIN_VERSION, install_ai, require_node, run_chat, run_langchain_adapter, serve

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.integrations.ui import (
    UI_MESSAGE_STREAM_HEADERS,
    last_user_message,
    ui_message_chunks,
    ui_message_response,
)
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


@tool
def lookup_price(item: str) -> str:
    """Look up the price of an item."""
    return f"{item} costs 12 dollars"


def make_agent(**observation: Any) -> Any:
    om = ObservationalMemory(
        InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator",
        observation={"message_tokens": 500, **observation}, reflection={"observation_tokens": 900},
    )
    # every fourth model call asks for the tool, so some turns take two steps (two status parts)
    model = ScriptedAgentModel(stream_tokens=True,
                               tool_calls_on={i: ("lookup_price", {"item": f"item {i}"}) for i in range(0, 200, 4)})
    return create_agent(model, [lookup_price], middleware=[ObservationalMemoryMiddleware(om)],
                        checkpointer=InMemorySaver())


def turn_text(i: int) -> str:
    return f"Turn {i}: I prefer option {i} and my budget is {i * 10} dollars. " + "context " * 25


def chat_app(agents: dict[str, Any], keep_status: dict[str, bool]) -> Starlette:
    """The server a useChat frontend talks to: one POST route per agent."""

    async def chat(request: Request) -> Response:
        name = request.path_params["name"]
        body = await request.json()
        config = {"configurable": {"thread_id": body["id"]}}
        stream = agents[name].astream({"messages": [last_user_message(body)]}, config,
                                      stream_mode=["messages", "custom"])
        return ui_message_response(stream, keep_status=keep_status[name])

    return Starlette(routes=[Route("/api/{name}", chat, methods=["POST"])])


@pytest.fixture(scope="session")
def ai_sdk(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``npm install ai`` once per test session."""
    require_node()
    return install_ai(tmp_path_factory.mktemp("ai-sdk"))


@pytest.fixture(scope="session")
def ai_sdk_langchain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``npm install ai @ai-sdk/langchain`` and its peers once per test session."""
    require_node()
    return install_ai(tmp_path_factory.mktemp("ai-sdk-langchain"), f"@ai-sdk/langchain@{AI_LANGCHAIN_VERSION}",
                      "@langchain/core", "@langchain/langgraph")


# --------------------------------------------------------------------------- without a client


async def test_chunks_of_a_create_agent_run_follow_the_protocol() -> None:
    agent = make_agent()
    config = {"configurable": {"thread_id": "py"}}
    chunks = [c async for c in ui_message_chunks(
        agent.astream({"messages": [HumanMessage("What does a lamp cost?")]}, config,
                      stream_mode=["messages", "custom"]), message_id="m1")]
    types = [c["type"] for c in chunks]
    assert chunks[0] == {"type": "start", "messageId": "m1"}
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    assert types.count("start-step") == types.count("finish-step") == 2, "tool call step, answer step"
    call = next(c for c in chunks if c["type"] == "tool-input-available")
    assert call["toolName"] == "lookup_price" and call["input"] == {"item": "item 0"}
    output = next(c for c in chunks if c["type"] == "tool-output-available")
    assert output["toolCallId"] == call["toolCallId"] and output["output"] == "item 0 costs 12 dollars"
    deltas = [c["delta"] for c in chunks if c["type"] == "text-delta"]
    assert len(deltas) > 3, "the model's tokens stream one by one"
    assert "".join(deltas).startswith("Based on lookup_price: item 0 costs 12 dollars")
    text_ids = {c["id"] for c in chunks if c["type"].startswith("text-")}
    assert len(text_ids) == 1
    statuses = [c for c in chunks if c["type"] == "data-om-status"]
    assert len(statuses) == 2 and {s["id"] for s in statuses} == {"om-status:py"}
    assert all(s["transient"] is True for s in statuses)
    assert set(statuses[0]) == {"type", "id", "data", "transient"}
    assert {"windows", "recordId", "threadId", "stepNumber", "generationCount"} <= set(statuses[0]["data"])


async def test_chunks_of_a_graph_with_om_nodes() -> None:
    """A StateGraph wired with add_observational_memory: only the agent's tokens become text,
    whatever OM's nodes write to the state; OM's parts arrive in between."""
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 400, "buffer_tokens": False})
    model = ScriptedAgentModel(stream_tokens=True)

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    add_observational_memory(builder, om)
    graph = builder.compile(checkpointer=InMemorySaver())
    seen: set[str] = set()
    for i in range(10):
        chunks = [c async for c in ui_message_chunks(graph.astream(
            {"messages": [HumanMessage(turn_text(i))]}, {"configurable": {"thread_id": "g"}},
            stream_mode=["messages", "custom"]))]
        text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
        assert text.startswith("Noted (turn") and f'you said "Turn {i}:' in text, text
        assert [c["type"] for c in chunks].count("text-start") == 1
        assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
        seen.update(c["type"] for c in chunks if c["type"].startswith("data-om-"))
    assert {"data-om-status", "data-om-observation-start", "data-om-observation-end"} <= seen, seen


async def test_a_failing_run_ends_with_an_error_chunk_and_sse_framing() -> None:
    from langchain_om.integrations.ui import ui_message_sse

    async def broken() -> Any:
        yield ("custom", {"type": "progress", "id": "p1", "value": 1})
        raise RuntimeError("model unreachable")

    events = [e async for e in ui_message_sse(broken(), message_id="m")]
    assert all(e.startswith("data: ") and e.endswith("\n\n") for e in events)
    assert events[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[1] == {"type": "data-progress", "id": "p1", "data": {"type": "progress", "id": "p1", "value": 1}}
    assert chunks[-1] == {"type": "error", "errorText": "An error occurred."}, "masked by default (issue 30)"


def test_last_user_message_reads_a_use_chat_body() -> None:
    body = {"id": "chat", "messages": [
        {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]},
        {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "hello"}]},
        {"id": "u2", "role": "user", "parts": [{"type": "text", "text": "price "}, {"type": "text", "text": "?"}]},
    ]}
    message = last_user_message(body)
    assert message.content == "price ?" and message.id == "u2"
    with pytest.raises(ValueError, match="messages"):
        last_user_message({"messages": "nope"})
    with pytest.raises(ValueError, match="no user message"):
        last_user_message({"messages": []})


# --------------------------------------------------------------------------- the AI SDK's own client


def data_parts(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [p for p in message["parts"] if p["type"] == kind]


def test_the_ai_sdk_chat_client_reads_text_status_and_cycle_parts(ai_sdk: Path) -> None:
    turns = [turn_text(i) for i in range(16)]
    agents = {"buffered": make_agent(), "kept": make_agent(), "sync": make_agent(buffer_tokens=False)}
    app = chat_app(agents, {"buffered": False, "kept": True, "sync": False})
    with serve(app) as base:
        buffered = run_chat(ai_sdk, f"{base}/api/buffered", "chat-buffered", turns)
        kept = run_chat(ai_sdk, f"{base}/api/kept", "chat-kept", turns)
        sync = run_chat(ai_sdk, f"{base}/api/sync", "chat-sync", turns)

    for result in (buffered, kept, sync):
        assert result["errors"] == [] and result["status"] == "ready", result["errors"]
        assert result["contentTypes"][0] == ["text/event-stream",
                                             UI_MESSAGE_STREAM_HEADERS["x-vercel-ai-ui-message-stream"]]
        messages = result["messages"]
        assert [m["role"] for m in messages] == ["user", "assistant"] * len(turns)
        for i, answer in enumerate(messages[1::2]):
            text = "".join(p["text"] for p in answer["parts"] if p["type"] == "text")
            assert f'you said "Turn {i}:' in text or text.startswith("Based on lookup_price"), text
            assert all(p.get("state") == "done" for p in answer["parts"] if p["type"] == "text")

    # default: status is transient, so the client hears every one through onData and keeps none
    heard = [p for p in buffered["onData"] if p["type"] == "data-om-status"]
    assert len(heard) >= len(turns) + 4, "one per step, tool turns have two"
    assert {p["id"] for p in heard} == {"om-status:chat-buffered"}
    # each chat request is one agent run: its steps count 0, 1, ... and the next request starts at 0
    numbers = [p["data"]["stepNumber"] for p in heard]
    assert numbers.count(0) == len(turns)
    assert all(n == 0 or n == before + 1 for before, n in zip([-1, *numbers], numbers, strict=False))
    assert not any(data_parts(m, "data-om-status") for m in buffered["messages"])

    # keep_status=True: exactly one status part per answer, replaced in place by the newest step
    kept_heard = [p for p in kept["onData"] if p["type"] == "data-om-status"]
    answers = kept["messages"][1::2]
    for answer in answers:
        statuses = data_parts(answer, "data-om-status")
        assert len(statuses) == 1 and statuses[0]["id"] == "om-status:chat-kept"
    tool_turn = answers[0]  # the first call asks for the tool: two steps, two statuses, one part
    assert [p["type"] for p in tool_turn["parts"] if p["type"].startswith("dynamic-tool")] == ["dynamic-tool"]
    assert [p["data"]["stepNumber"] for p in kept_heard[:2]] == [0, 1], "the tool turn's two steps"
    assert data_parts(tool_turn, "data-om-status")[0]["data"] == kept_heard[1]["data"], "the second replaced the first"
    assert data_parts(answers[-1], "data-om-status")[0]["data"] == kept_heard[-1]["data"]

    # cycle parts are kept, keyed by their cycleId, with the reference fields in data
    kept_parts = [p for m in buffered["messages"] for p in m["parts"] if p["type"].startswith("data-om-")]
    kinds = {p["type"] for p in kept_parts}
    assert {"data-om-buffering-start", "data-om-buffering-end", "data-om-activation"} <= kinds, kinds
    for part in kept_parts:
        assert part["id"] == part["data"]["cycleId"]
    activation = next(p for p in kept_parts if p["type"] == "data-om-activation")
    assert activation["data"]["chunksActivated"] >= 1 and activation["data"]["observations"]
    sync_parts = [p for m in sync["messages"] for p in m["parts"] if p["type"].startswith("data-om-observation")]
    starts = {p["id"] for p in sync_parts if p["type"] == "data-om-observation-start"}
    ends = [p for p in sync_parts if p["type"] == "data-om-observation-end"]
    assert ends and {p["id"] for p in ends} <= starts, "end keyed like its start"
    assert ends[0]["data"]["tokensObserved"] > 0 and "Date:" in ends[0]["data"]["observations"]


async def test_ai_sdk_langchain_gets_data_om_parts_with_the_reference_fields(ai_sdk_langchain: Path) -> None:
    """``@ai-sdk/langchain`` names a custom payload's part ``data-`` + payload.type and sends the
    whole payload as data. With ``configurable.om_stream_format="ai-sdk-langchain"`` its users get
    ``data-om-*`` parts holding the reference fields, keyed by OM's ids (status replaced in place)."""
    agent = make_agent()
    events: list[Any] = []
    plain: list[Any] = []
    for i in range(12):
        config = {"configurable": {"thread_id": "lc", "om_stream_format": "ai-sdk-langchain"}}
        async for mode, chunk in agent.astream({"messages": [HumanMessage(turn_text(i))]}, config,
                                               stream_mode=["custom"]):
            events.append([mode, chunk])
    async for mode, chunk in agent.astream({"messages": [HumanMessage(turn_text(0))]},
                                           {"configurable": {"thread_id": "lc-plain"}}, stream_mode=["custom"]):
        plain.append([mode, chunk])

    result = run_langchain_adapter(ai_sdk_langchain, events)
    assert result["errors"] == []
    parts = [p for p in result["message"]["parts"] if p["type"].startswith("data-")]
    assert all(p["type"].startswith("data-om-") for p in parts), {p["type"] for p in parts}
    statuses = [p for p in parts if p["type"] == "data-om-status"]
    assert len(statuses) == 1 and statuses[0]["id"] == "om-status:lc", "one status part, replaced in place"
    status = statuses[0]["data"]
    assert {"windows", "recordId", "threadId", "stepNumber", "generationCount"} <= set(status)
    assert status == [c for _, c in events if c["type"] == "om-status"][-1], "the newest one"
    assert {"data-om-buffering-start", "data-om-buffering-end", "data-om-activation"} <= {p["type"] for p in parts}
    for part in parts:
        if part["type"] != "data-om-status":
            assert part["id"] == part["data"]["cycleId"]
            assert part["data"]["type"] == part["type"].removeprefix("data-"), "the payload's own name rides along"

    # without the option the same package nests the part one level down, as the issue observed
    nested = run_langchain_adapter(ai_sdk_langchain, plain)
    types = {p["type"] for p in nested["message"]["parts"] if p["type"].startswith("data-")}
    assert "data-data-om-status" in types


async def test_reasoning_blocks_become_reasoning_parts_before_the_text() -> None:
    from langchain_core.messages import AIMessageChunk

    async def run() -> Any:
        meta = {"langgraph_node": "model", "tags": []}
        yield ("messages", (AIMessageChunk(content=[{"type": "thinking", "thinking": "The user "}], id="r1"), meta))
        yield ("messages", (AIMessageChunk(content=[{"type": "reasoning", "reasoning": "wants a price."}],
                                           id="r1"), meta))
        yield ("messages", (AIMessageChunk(content="", additional_kwargs={"reasoning_content": " Check."},
                                           id="r1"), meta))
        yield ("messages", (AIMessageChunk(content=[{"type": "text", "text": "12 dollars."}], id="r1"), meta))
        yield ("messages", (AIMessageChunk(content="observer", id="om"), {"tags": ["nostream", "langchain_om"]}))

    chunks = [c async for c in ui_message_chunks(run(), message_id="m")]
    assert [c["type"] for c in chunks] == [
        "start", "start-step", "reasoning-start", "reasoning-delta", "reasoning-delta", "reasoning-delta",
        "reasoning-end", "text-start", "text-delta", "text-end", "finish-step", "finish"]
    assert "".join(c["delta"] for c in chunks if c["type"] == "reasoning-delta") == "The user wants a price. Check."
    assert {c["id"] for c in chunks if c["type"].startswith("reasoning-")} == {"r1-reasoning"}


# --------------------------------------------------------------------------- hostile payloads and errors (issue 30)


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque thing>"


def _hostile_custom_stream() -> Any:
    """A custom stream whose payloads JSON cannot hold as they are."""
    import datetime as dt
    from decimal import Decimal

    circular: dict[str, Any] = {"name": "loop"}
    circular["self"] = circular
    yield ("custom", {"type": "progress", "at": dt.datetime(2026, 12, 5, 9, 30, tzinfo=dt.timezone.utc)})
    yield ("custom", {"type": "file", "name": "report-\udcff.txt", "日本語": "東京\udc80", "emoji": "\ud83d\ude00"})
    yield ("custom", {"type": "odd", "nan": float("nan"), "inf": float("inf"), "set": {3}, "bytes": b"\xff\x00",
                      "price": Decimal("1.50"), "obj": _Opaque(), (1, 2): "tuple key", "nul": "a\x00b"})
    yield ("custom", circular)
    yield ("custom", {"type": "data-om-status", "id": "s", "data": {"at": dt.date(2026, 12, 5)}})


async def test_every_payload_reaches_the_wire_as_valid_utf8_json_and_the_stream_ends() -> None:
    """Issue 30 item 6: a datetime or a lone surrogate in a payload broke the response mid-stream."""
    from langchain_om.integrations.ui import ui_message_sse

    async def run() -> Any:
        for item in _hostile_custom_stream():
            yield item

    events = [e async for e in ui_message_sse(run(), message_id="m")]
    assert events[-1] == "data: [DONE]\n\n"
    for event in events:
        event.encode("utf-8")  # what Starlette does with each event: must not raise
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}, "no error: every payload was serialisable"
    data = [c["data"] for c in chunks if c["type"].startswith("data-")]
    assert data[0]["at"] == "2026-12-05T09:30:00+00:00"
    assert data[1]["name"] == "report-\udcff.txt", "a lone surrogate travels as a JSON escape, unchanged"
    assert data[1]["日本語"] == "東京\udc80" and data[1]["emoji"] == "😀", "a split pair joins again"
    assert data[2]["nan"] is None and data[2]["inf"] is None and data[2]["set"] == [3]
    assert data[2]["price"] == "1.50" and data[2]["obj"] == "<opaque thing>" and data[2]["nul"] == "a\x00b"
    assert data[2]["(1, 2)"] == "tuple key" and isinstance(data[2]["bytes"], str)
    assert data[3]["name"] == "loop" and data[3]["self"] == "[circular]"
    assert data[4] == {"at": "2026-12-05"}


async def test_a_failure_anywhere_in_the_generator_ends_with_an_error_part_and_done(
        caplog: pytest.LogCaptureFixture) -> None:
    """Issue 30 item 6: a stream that raises, and a payload the translator cannot read, both end
    with one ``error`` part and ``[DONE]``; the real error goes to the server's log."""
    from langchain_core.messages import AIMessageChunk

    from langchain_om.integrations.ui import ui_message_sse

    async def raises_mid_text() -> Any:
        yield ("messages", (AIMessageChunk(content="Hello ", id="r1"), {"tags": []}))
        raise RuntimeError("RateLimitError: rate limit in organization org-SECRET123")

    async def wrong_mode() -> Any:
        yield {"messages": []}

    async def broken_chunk() -> Any:
        yield ("messages", "not a (message, metadata) pair")

    for stream in (raises_mid_text(), wrong_mode(), broken_chunk()):
        with caplog.at_level("ERROR", logger="langchain_om.integrations.ui"):
            events = [e async for e in ui_message_sse(stream, message_id="m")]
        assert events[-1] == "data: [DONE]\n\n"
        chunks = [json.loads(e[6:]) for e in events[:-1]]
        assert chunks[-1] == {"type": "error", "errorText": "An error occurred."}
        assert sum(c["type"] == "error" for c in chunks) == 1
    assert [c["type"] for c in chunks] == ["start", "error"]
    assert "org-SECRET123" in caplog.text, "the server's log has the real error"


async def test_error_text_is_masked_by_default_and_can_be_exposed_or_mapped() -> None:
    """Issue 30 item 7: raw exception text (an organization id, a key prefix) never reaches the
    browser unless the server says so, as the AI SDK's ``onError`` decides."""
    from langchain_om.integrations.ui import expose_error, ui_message_sse

    async def failing() -> Any:
        yield ("custom", {"type": "progress"})
        raise RuntimeError("rate limit reached in organization org-SECRET123")

    async def error_of(**options: Any) -> str:
        events = [e async for e in ui_message_sse(failing(), **options)]
        assert events[-1] == "data: [DONE]\n\n"
        last = json.loads(events[-2][6:])
        assert last["type"] == "error"
        return str(last["errorText"])

    assert await error_of() == "An error occurred."
    assert await error_of(on_error=expose_error) == "RuntimeError: rate limit reached in organization org-SECRET123"
    busy = "混雑しています。後でもう一度どうぞ。"
    assert await error_of(on_error=lambda exc: busy) == busy

    def mapper_that_fails(exc: BaseException) -> str:
        raise KeyError("mapper bug")

    assert await error_of(on_error=mapper_that_fails) == "An error occurred.", "a failing mapper still masks"
    assert await error_of(on_error=lambda exc: "bad \udcff text") == "bad \udcff text"


@tool
def list_reports() -> str:
    """List the report files in the shared folder."""
    import os

    return "found " + os.fsdecode(b"report-\xff.txt")  # a file name that is not UTF-8


def test_the_ai_sdk_client_reads_a_hostile_tool_result_a_datetime_part_and_a_masked_error(ai_sdk: Path) -> None:
    """Issue 30 items 6 and 7 through the AI SDK's own client: a tool result holding a lone
    surrogate and a custom part holding a datetime arrive whole, and a run that fails part way
    ends the message with the masked error instead of hanging the client."""
    import datetime as dt

    from langgraph.config import get_stream_writer

    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 500})
    model = ScriptedAgentModel(stream_tokens=True, tool_calls_on={0: ("list_reports", {})})
    reports = create_agent(model, [list_reports], middleware=[ObservationalMemoryMiddleware(om)],
                           checkpointer=InMemorySaver())

    def graph(fail: bool) -> Any:
        async def agent(state: State) -> dict[str, Any]:
            get_stream_writer()({"type": "progress", "at": dt.datetime(2026, 12, 5, 9, 30, tzinfo=dt.timezone.utc)})
            if fail:
                raise RuntimeError("rate limit reached in organization org-SECRET123")
            return {"messages": [await ScriptedAgentModel().ainvoke(state["messages"])]}

        builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
        builder.add_node("agent", agent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        return builder.compile(checkpointer=InMemorySaver())

    agents = {"reports": reports, "dated": graph(False), "failing": graph(True)}
    app = chat_app(agents, dict.fromkeys(agents, False))
    with serve(app) as base:
        hostile = run_chat(ai_sdk, f"{base}/api/reports", "chat-reports", ["どのレポートがある? which reports?"])
        dated = run_chat(ai_sdk, f"{base}/api/dated", "chat-dated", ["hello"])
        failing = run_chat(ai_sdk, f"{base}/api/failing", "chat-failing", ["hello"])

    assert hostile["errors"] == [] and hostile["status"] == "ready"
    answer = hostile["messages"][-1]
    tool_part = next(p for p in answer["parts"] if p["type"] == "dynamic-tool")
    assert tool_part["state"] == "output-available" and tool_part["output"] == "found report-\udcff.txt"
    assert "".join(p["text"] for p in answer["parts"] if p["type"] == "text").startswith("Based on list_reports")

    assert dated["errors"] == [] and dated["status"] == "ready"
    progress = [p for p in dated["onData"] if p["type"] == "data-progress"]
    assert progress and progress[0]["data"]["at"] == "2026-12-05T09:30:00+00:00"

    assert failing["status"] == "error", "the client saw the stream end with an error, not a hang"
    assert len(failing["errors"]) == 1 and "An error occurred." in failing["errors"][0]
    assert "org-SECRET123" not in json.dumps(failing)
