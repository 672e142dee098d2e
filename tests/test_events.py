"""data-om-* events (issue 3, items 5 and 6): wire names, the three delivery paths, ordering,
cycle ids, and the rich console handler."""

from __future__ import annotations

import io
from typing import Annotated, Any, TypedDict
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AnyMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from rich.console import Console

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.events import (
    EVENT_TYPES,
    ActivationData,
    ActivationEvent,
    ActiveWindows,
    BufferedObservations,
    BufferedReflectionStatus,
    BufferedWindows,
    BufferingEndData,
    BufferingEndEvent,
    BufferingFailedData,
    BufferingFailedEvent,
    BufferingStartData,
    BufferingStartEvent,
    ExtractionFailure,
    ObservationEndData,
    ObservationEndEvent,
    ObservationFailedData,
    ObservationFailedEvent,
    ObservationMarkerConfig,
    ObservationStartData,
    ObservationStartEvent,
    OMEvent,
    StatusData,
    StatusEvent,
    ThreadUpdateData,
    ThreadUpdateEvent,
    Windows,
    WindowUsage,
    parse_event,
)
from langchain_om.integrations.callbacks import OMConsoleHandler, OMEventHandler
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedChatModel, ScriptedObserverModel

# Field names exactly as the reference page prints them (written out by hand, not derived).
MARKER_CONFIG_KEYS = {"messageTokens", "observationTokens", "scope"}
EXPECTED_KEYS: dict[str, set[str]] = {
    "data-om-status": {"windows", "recordId", "threadId", "stepNumber", "generationCount"},
    "data-om-observation-start": {"cycleId", "operationType", "startedAt", "tokensToObserve", "recordId",
                                  "threadId", "threadIds", "config"},
    "data-om-observation-end": {"cycleId", "operationType", "completedAt", "durationMs", "tokensObserved",
                                "observationTokens", "observations", "currentTask", "suggestedResponse",
                                "extractedValues", "extractionFailures", "recordId", "threadId"},
    "data-om-observation-failed": {"cycleId", "operationType", "failedAt", "durationMs", "tokensAttempted",
                                   "error", "observations", "recordId", "threadId"},
    "data-om-buffering-start": {"cycleId", "operationType", "startedAt", "tokensToBuffer", "recordId", "threadId",
                                "threadIds", "config"},
    "data-om-buffering-end": {"cycleId", "operationType", "completedAt", "durationMs", "tokensBuffered",
                              "bufferedTokens", "observations", "extractedValues", "extractionFailures",
                              "recordId", "threadId"},
    "data-om-buffering-failed": {"cycleId", "operationType", "failedAt", "durationMs", "tokensAttempted", "error",
                                 "observations", "recordId", "threadId"},
    "data-om-activation": {"cycleId", "operationType", "activatedAt", "chunksActivated", "tokensActivated",
                           "observationTokens", "messagesActivated", "generationCount", "observations",
                           "triggeredBy", "lastActivityAt", "ttlExpiredMs", "previousModel", "currentModel",
                           "recordId", "threadId", "config"},
    "data-om-thread-update": {"cycleId", "threadId", "oldTitle", "newTitle", "timestamp"},
}
STATUS_EXTENSIONS = {"tokenizer", "instructionTokens"}  # documented extension: which token counter produced the numbers
WINDOWS_KEYS = {"active", "buffered"}
ACTIVE_KEYS = {"messages", "observations"}
USAGE_KEYS = {"tokens", "threshold"}
BUFFERED_OBS_KEYS = {"chunks", "messageTokens", "projectedMessageRemoval", "observationTokens", "status"}
BUFFERED_REFL_KEYS = {"inputObservationTokens", "observationTokens", "status"}

CFG = ObservationMarkerConfig(message_tokens=600, observation_tokens=900, scope="thread")
COMMON: dict[str, Any] = {"cycle_id": "c1", "operation_type": "observation", "record_id": "r1", "thread_id": "t1"}
FAIL = [ExtractionFailure(slug="x", error="bad")]


def full_events() -> list[OMEvent]:
    """One of each event with every optional field filled in."""
    status = StatusData(
        windows=Windows(
            active=ActiveWindows(messages=WindowUsage(tokens=1, threshold=2),
                                 observations=WindowUsage(tokens=3, threshold=4)),
            buffered=BufferedWindows(
                observations=BufferedObservations(chunks=1, message_tokens=2, projected_message_removal=3,
                                                  observation_tokens=4, status="complete"),
                reflection=BufferedReflectionStatus(input_observation_tokens=5, observation_tokens=6,
                                                    status="running"),
            ),
        ),
        record_id="r1", thread_id="t1", step_number=7, generation_count=8, tokenizer="estimator",
    )
    return [
        StatusEvent(data=status),
        ObservationStartEvent(data=ObservationStartData(**COMMON, started_at="s", tokens_to_observe=1,
                                                        thread_ids=["t1"], config=CFG)),
        ObservationEndEvent(data=ObservationEndData(**COMMON, completed_at="e", duration_ms=1.5, tokens_observed=1,
                                                    observation_tokens=2, observations="o", current_task="ct",
                                                    suggested_response="sr", extracted_values={"x": 1},
                                                    extraction_failures=FAIL)),
        ObservationFailedEvent(data=ObservationFailedData(**COMMON, failed_at="f", duration_ms=1.0,
                                                          tokens_attempted=3, error="boom", observations="part")),
        BufferingStartEvent(data=BufferingStartData(**COMMON, started_at="s", tokens_to_buffer=4,
                                                    thread_ids=["t1"], config=CFG)),
        BufferingEndEvent(data=BufferingEndData(**COMMON, completed_at="e", duration_ms=2.0, tokens_buffered=5,
                                                buffered_tokens=6, observations="o", extracted_values={"y": 2},
                                                extraction_failures=FAIL)),
        BufferingFailedEvent(data=BufferingFailedData(**COMMON, failed_at="f", duration_ms=1.0, tokens_attempted=3,
                                                      error="boom", observations="part")),
        ActivationEvent(data=ActivationData(**COMMON, activated_at="a", chunks_activated=1, tokens_activated=2,
                                            observation_tokens=3, messages_activated=4, generation_count=5,
                                            observations="o", triggered_by="ttl", last_activity_at=1_700_000_000_000,
                                            ttl_expired_ms=12.0, previous_model="openai/gpt-4o",
                                            current_model="anthropic/claude", config=CFG)),
        ThreadUpdateEvent(data=ThreadUpdateData(cycle_id="c1", thread_id="t1", old_title="a", new_title="b",
                                                timestamp="ts")),
    ]


def test_every_event_serialises_with_the_reference_field_names() -> None:
    events = full_events()
    assert {e.type for e in events} == set(EXPECTED_KEYS)
    assert set(EXPECTED_KEYS) <= set(EVENT_TYPES)
    for event in events:
        part = event.to_part()
        assert part["type"] == event.type
        extensions = STATUS_EXTENSIONS if event.type == "data-om-status" else set()
        assert set(part["data"]) == EXPECTED_KEYS[event.type] | extensions, event.type
        if "config" in part["data"]:
            assert set(part["data"]["config"]) == MARKER_CONFIG_KEYS
        if "extractionFailures" in part["data"]:
            assert part["data"]["extractionFailures"] == [{"slug": "x", "error": "bad"}]
        assert parse_event(part) == event, "the wire shape reads back into the same typed event"
    windows = events[0].to_part()["data"]["windows"]
    assert set(windows) == WINDOWS_KEYS and set(windows["active"]) == ACTIVE_KEYS
    assert set(windows["active"]["messages"]) == USAGE_KEYS == set(windows["active"]["observations"])
    assert set(windows["buffered"]["observations"]) == BUFFERED_OBS_KEYS
    assert set(windows["buffered"]["reflection"]) == BUFFERED_REFL_KEYS
    # optional fields are left out of the JSON when unset (undefined on the JS side)
    minimal = ThreadUpdateEvent(data=ThreadUpdateData(cycle_id="c", thread_id="t", new_title="n", timestamp="x"))
    assert "oldTitle" not in minimal.to_part()["data"]


# --------------------------------------------------------------------------- a real graph


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


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


def graph_for(om: ObservationalMemory) -> Any:
    model = ScriptedAgentModel()

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    add_observational_memory(builder, om)
    return builder.compile(checkpointer=InMemorySaver())


class PlainHandler(BaseCallbackHandler):
    """A user's ordinary sync callback handler."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.payloads: list[dict[str, Any]] = []

    def on_custom_event(self, name: str, data: Any, *, run_id: UUID, tags: list[str] | None = None,
                        metadata: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.names.append(name)
        self.payloads.append(data)


def check_cycles(events: list[OMEvent]) -> set[str]:
    """start/end/failed share a cycle id; returns the kinds of cycles seen."""
    starts: dict[str, str] = {}
    kinds: set[str] = set()
    for event in events:
        data: Any = event.data
        if event.type.endswith("-start"):
            starts[data.cycle_id] = event.type
        elif event.type.endswith("-end") or event.type.endswith("-failed"):
            family = event.type.rsplit("-", 1)[0]
            assert starts.get(data.cycle_id) == family + "-start", f"{event.type} without its start"
            kinds.add(f"{family}:{data.operation_type}:{event.type.rsplit('-', 1)[1]}")
    return kinds


async def test_events_reach_callbacks_custom_stream_and_context(store: OMStore) -> None:
    om = make_om(store)
    graph = graph_for(om)
    plain = PlainHandler()
    typed = OMEventHandler()
    config: RunnableConfig = {"configurable": {"thread_id": "ev"}, "callbacks": [plain, typed]}
    custom_parts: list[dict[str, Any]] = []
    steps: list[list[str]] = []
    for i in range(60):
        order: list[str] = []
        async for mode, chunk in graph.astream({"messages": [user_turn(i)]}, config,
                                               stream_mode=["custom", "updates"]):
            if mode == "custom":
                custom_parts.append(chunk)
                order.append(chunk["type"])
            else:
                order.extend(f"node:{name}" for name in chunk)
        steps.append(order)
        await om.await_background()
    # (b) callback handlers and (c) the custom stream saw the same events, as wire parts
    assert plain.names == [p["type"] for p in custom_parts]
    assert plain.payloads == custom_parts
    assert [e.to_part() for e in typed.events] == custom_parts
    # exactly one status per agent step, before the model node runs
    for order in steps:
        assert order.count("data-om-status") == 1
        assert order.index("data-om-status") < order.index("node:agent")
        assert order.index("node:om_reflector") < order.index("node:agent")
    kinds = check_cycles(typed.events)
    assert {"data-om-buffering:observation:end"} <= kinds
    assert any(k.startswith("data-om-observation:reflection") or k.startswith("data-om-buffering:reflection")
               for k in kinds), kinds
    assert typed.of_type("data-om-activation"), "buffered observations were activated"
    record = await om.aget_record("ev")
    assert record.generation_count >= 1
    last_status: Any = typed.of_type("data-om-status")[-1].data
    assert last_status.record_id == record.id
    # each turn is a run of one model call: its one step is step 0 of that run
    assert {e.data.step_number for e in typed.of_type("data-om-status")} == {0}  # type: ignore[attr-defined]


async def test_astream_events_v2_carries_custom_events(store: OMStore) -> None:
    om = make_om(store, observation={"message_tokens": 600, "buffer_tokens": False})
    graph = graph_for(om)
    config: RunnableConfig = {"configurable": {"thread_id": "v2"}}
    names: list[str] = []
    for i in range(12):
        async for event in graph.astream_events({"messages": [user_turn(i)]}, config, version="v2"):
            if event["event"] == "on_custom_event":
                names.append(event["name"])
                assert event["data"]["type"] == event["name"]
    assert names.count("data-om-status") == 12
    assert "data-om-observation-start" in names and "data-om-observation-end" in names


async def test_events_outside_a_run_skip_langchain_and_inside_a_plain_runnable_reach_handlers(
    store: OMStore, monkeypatch: Any
) -> None:
    """Outside any run nobody can hear a custom event, so OM does not ask LangChain to build a
    callback manager for it; inside a plain runnable (no LangGraph stream) handlers get them."""
    from langchain_core.runnables import RunnableLambda

    import langchain_om.foundation.dispatch as callbacks_mod

    calls: list[str] = []
    real = callbacks_mod.adispatch_custom_event

    async def counting(name: str, data: Any, *, config: RunnableConfig | None = None) -> None:
        calls.append(name)
        await real(name, data, config=config)

    monkeypatch.setattr(callbacks_mod, "adispatch_custom_event", counting)
    om = make_om(store)
    ctx = await om.aprocess("out", [HumanMessage("hello", id="h0")])
    assert [e.type for e in ctx.events] == ["data-om-status"], "the caller still gets the events"
    assert calls == [], "no run, no callback manager"
    ctx = await om.aprocess("out", [HumanMessage("hello", id="h0")], config={"callbacks": [PlainHandler()]})
    assert calls == [], "handlers without a run: LangChain would refuse the event too"

    handler = PlainHandler()

    async def step(_: Any) -> None:
        await om.aprocess("in", [HumanMessage("hello", id="h1")])

    await RunnableLambda(step).ainvoke(None, {"callbacks": [handler]})
    assert handler.names == ["data-om-status"] and calls == ["data-om-status"]
    await om.aclose()


async def test_context_events_and_failed_cycles_share_ids(store: OMStore) -> None:
    failing = ScriptedChatModel(responses=[RuntimeError("provider down")])
    om = make_om(store, model=failing, observation={"message_tokens": 300, "buffer_tokens": False})
    history: list[Any] = []
    collected: list[OMEvent] = []
    for i in range(8):
        history.append(user_turn(i))
        context = await om.aprocess("fail", history)
        assert [e.type for e in context.events].count("data-om-status") == 1
        assert context.events[0].type == "data-om-status"
        collected.extend(context.events)
        history.append(await ScriptedAgentModel().ainvoke(history))
    kinds = check_cycles(collected)
    assert "data-om-observation:observation:failed" in kinds
    failed: Any = next(e for e in collected if e.type == "data-om-observation-failed")
    assert "provider down" in failed.data.error


# --------------------------------------------------------------------------- console handler


def status_event(msg: int, msg_limit: int, obs: int, obs_limit: int, chunks: int, step: int) -> StatusEvent:
    return StatusEvent(data=StatusData(
        windows=Windows(
            active=ActiveWindows(messages=WindowUsage(tokens=msg, threshold=msg_limit),
                                 observations=WindowUsage(tokens=obs, threshold=obs_limit)),
            buffered=BufferedWindows(observations=BufferedObservations(chunks=chunks, message_tokens=40 * chunks,
                                                                       observation_tokens=9 * chunks,
                                                                       status="complete" if chunks else "idle")),
        ),
        record_id="r", thread_id="t", step_number=step, generation_count=2))


def test_console_handler_prints_numbers_without_a_terminal() -> None:
    out = io.StringIO()
    handler = OMConsoleHandler(Console(file=out, width=160, color_system=None))
    assert handler.live is False
    handler.on_custom_event("data-om-status", status_event(123, 600, 45, 900, 2, 3).to_part(), run_id=UUID(int=1))
    start = ObservationStartEvent(data=ObservationStartData(**COMMON, started_at="s", tokens_to_observe=321,
                                                            config=CFG))
    end = ObservationEndEvent(data=ObservationEndData(**COMMON, completed_at="e", duration_ms=12.0,
                                                      tokens_observed=321, observation_tokens=40, observations="o"))
    handler.on_custom_event(start.type, start.to_part(), run_id=UUID(int=1))
    handler.on_custom_event(end.type, end.to_part(), run_id=UUID(int=1))
    handler.on_custom_event("not-om", {"x": 1}, run_id=UUID(int=1))
    text = out.getvalue()
    assert "step 3" in text and "messages 123/600" in text and "observations 45/900" in text
    assert "buffered 2 chunk(s), 80 tokens" in text
    assert "observation (sync) started on 321 tokens" in text
    assert "321 → 40 tokens" in text
    assert "not-om" not in text


def test_console_handler_live_panel_renders_both_bars() -> None:
    console = Console(file=io.StringIO(), width=120, force_terminal=True, record=True, color_system=None)
    with OMConsoleHandler(console) as handler:
        assert handler.live is True
        handler.handle(status_event(300, 600, 450, 900, 1, 5))
        handler.handle(status_event(480, 600, 700, 900, 0, 6))
        activation = ActivationEvent(data=ActivationData(
            **COMMON, activated_at="a", chunks_activated=1, tokens_activated=200, observation_tokens=700,
            messages_activated=6, generation_count=2, observations="o", triggered_by="threshold", config=CFG))
        handler.handle(activation)
    console.print(handler.render())
    text = console.export_text()
    assert "step 6" in text and "480/600" in text and "700/900" in text
    assert "300/600" in text, "the live display drew the earlier state too"
    assert "activated 1 observation chunk(s), 200 tokens (threshold)" in text
    assert "messages" in text and "observations" in text and "buffered" in text
    # the bar is proportional: 480/600 = 80% of a 30-cell bar
    bar_line = next(line for line in text.splitlines()[::-1] if "480/600" in line)
    assert bar_line.count("━") >= 20


async def test_console_handler_in_a_real_run(store: OMStore) -> None:
    om = make_om(store)
    graph = graph_for(om)
    out = io.StringIO()
    handler = OMConsoleHandler(Console(file=out, width=200, color_system=None))
    config: RunnableConfig = {"configurable": {"thread_id": "console"}, "callbacks": [handler]}
    for i in range(20):
        await graph.ainvoke({"messages": [user_turn(i)]}, config)
        await om.await_background()
    status = await om.astatus("console")
    assert handler.status is not None and handler.status.step_number == 0, "each invoke is a run of one step"
    lines = [line for line in out.getvalue().splitlines() if line.startswith("OM step 0 ")]
    assert len(lines) == 20, "one status line per run"
    lines = lines[-1:]
    assert lines and f"messages {handler.status.windows.active.messages.tokens}/600" in lines[0]
    assert status.windows.active.messages.threshold == 600


# --------------------------------------------------------------------------- parts a client can keep


def test_wire_parts_carry_a_stable_id_and_status_is_transient() -> None:
    """The AI SDK keys a data part by (type, id) and keeps a transient one out of the message:
    the status gauge is one transient part per thread; every cycle part is keyed by its cycleId."""
    for event in full_events():
        part = event.to_part()
        data = part["data"]
        if event.type == "data-om-status":
            assert set(part) == {"type", "id", "data", "transient"}
            assert part["id"] == "om-status:t1" and part["transient"] is True
        else:
            assert set(part) == {"type", "id", "data"}, "no transient key: the client keeps the part"
            assert part["id"] == data["cycleId"] == "c1"
        assert set(data) == EXPECTED_KEYS[event.type] | (STATUS_EXTENSIONS if event.type == "data-om-status"
                                                         else set()), "reference fields unchanged"
        assert parse_event(part) == event
        flat = event.to_langchain_js_payload()
        assert flat == {"type": event.type.removeprefix("data-"), "id": part["id"], **data}


async def test_custom_stream_ids_in_a_real_run_and_the_ai_sdk_langchain_shape(store: OMStore) -> None:
    om = make_om(store)
    graph = graph_for(om)
    parts: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    for thread in ("a", "b"):
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        for i in range(25):
            async for chunk in graph.astream({"messages": [user_turn(i)]}, config, stream_mode="custom"):
                parts[thread].append(chunk)
            await om.await_background()
    for thread, seen in parts.items():
        statuses = [p for p in seen if p["type"] == "data-om-status"]
        assert len(statuses) == 25
        assert {p["id"] for p in statuses} == {f"om-status:{thread}"}, "one status part per thread"
        assert all(p["transient"] is True for p in statuses)
        cycles = [p for p in seen if p["type"] != "data-om-status"]
        assert {p["type"] for p in cycles} >= {"data-om-buffering-start", "data-om-buffering-end",
                                               "data-om-activation"}
        for part in cycles:
            assert part["id"] == part["data"]["cycleId"] and "transient" not in part
        ends = {p["id"] for p in cycles if p["type"].endswith(("-end", "-failed"))}
        starts = {p["id"] for p in cycles if p["type"].endswith("-start")}
        assert ends <= starts, "an end or failure is keyed like the start of its cycle"

    # configurable.om_stream_format="ai-sdk-langchain": the payload @ai-sdk/langchain maps to data-om-*
    flat_config: RunnableConfig = {"configurable": {"thread_id": "flat", "om_stream_format": "ai-sdk-langchain"}}
    flat: list[dict[str, Any]] = []
    async for chunk in graph.astream({"messages": [user_turn(0)]}, flat_config, stream_mode="custom"):
        flat.append(chunk)
    assert flat and flat[0]["type"] == "om-status" and flat[0]["id"] == "om-status:flat"
    assert {"windows", "recordId", "threadId", "stepNumber", "generationCount"} <= set(flat[0])
    assert "data" not in flat[0]

    bad: RunnableConfig = {"configurable": {"thread_id": "bad", "om_stream_format": "xml"}}
    try:
        async for _ in graph.astream({"messages": [user_turn(0)]}, bad, stream_mode="custom"):
            pass
    except ValueError as exc:
        assert "om_stream_format" in str(exc)
    else:
        raise AssertionError("an unknown stream format must be refused")


def _snake_keys(value: Any, path: str = "") -> list[str]:
    """Every key (with its path) holding an underscore, anywhere in a wire payload."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if "_" in str(key):
                found.append(f"{path}.{key}")
            found.extend(_snake_keys(item, f"{path}.{key}"))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(_snake_keys(item, f"{path}[{index}]"))
    return found


async def test_every_key_on_the_wire_is_camel_case_spend_included(store: OMStore) -> None:
    """Issue 30 item 10: the status part's spend totals arrived as ``spend.observer.input_tokens``."""
    from langchain_om.foundation.events import parse_event

    om = make_om(store)
    graph = graph_for(om)
    parts: list[dict[str, Any]] = []
    flat: list[dict[str, Any]] = []
    for i in range(14):
        async for chunk in graph.astream({"messages": [user_turn(i)]}, {"configurable": {"thread_id": "camel"}},
                                         stream_mode="custom"):
            parts.append(chunk)
        async for chunk in graph.astream({"messages": [user_turn(i)]}, {"configurable": {
                "thread_id": "camel-flat", "om_stream_format": "ai-sdk-langchain"}}, stream_mode="custom"):
            flat.append(chunk)
        await om.await_background()
    spent = [p for p in parts if p["type"] == "data-om-status" and p["data"].get("spend")]
    assert spent, "the Observer was paid for, so the status carries spend"
    observer = spent[-1]["data"]["spend"]["observer"]
    assert observer["calls"] >= 1 and observer["inputTokens"] > 0 and observer["outputTokens"] > 0
    assert _snake_keys(parts) == [] and _snake_keys(flat) == []
    # Python keeps snake_case, and a part read back from the wire gives the same model
    event: Any = parse_event(spent[-1])
    assert event.data.spend["observer"]["input_tokens"] == observer["inputTokens"]
    assert event.to_part() == spent[-1]
