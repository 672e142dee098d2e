"""Issue 47, item 6: OM's own model calls are LangChain internal calls, the messages OM adds carry
notification metadata, and OM's hook spans keep the log out of their payloads.

End to end through ``create_agent`` + ``ObservationalMemoryMiddleware``: the agent's ``run.messages``
of the v3 event stream (``stream_events(version="v3")``), and a LangSmith-style tracer (a
``BaseTracer``, which is what LangSmith's tracer is) reading every span's metadata and payloads.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware.internal_call_transformer import InternalCallTransformer, internal_call_metadata
from langchain_core.messages import AIMessage, HumanMessage, get_notification_metadata
from langchain_core.runnables import RunnableLambda
from langchain_core.tracers.base import BaseTracer
from langchain_core.tracers.schemas import Run
from langgraph.checkpoint.memory import InMemorySaver
from recall_helpers import T0, stamped

from langchain_om import Extractor, InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.foundation.internal_calls import LC_SOURCE
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

pytestmark = pytest.mark.filterwarnings("ignore::langchain_core._api.beta_decorator.LangChainBetaWarning")

TURNS = ["My budget is 2,500 CAD for the whole trip.", "We land in Tokyo on April 4 and leave on April 14.",
         "私はベジタリアンで、サムは長いハイキングが苦手です。", "What did I say about my budget?"]


class Spans(BaseTracer):
    """Keeps every run, as LangSmith's tracer would send them."""

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[Run] = []

    def _persist_run(self, run: Run) -> None:
        pass

    def _start_trace(self, run: Run) -> None:
        super()._start_trace(run)
        self.runs.append(run)


def _agent(**middleware: Any) -> tuple[Any, ObservationalMemory]:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(),
                             observation={"message_tokens": 60, "buffer_tokens": False})
    agent = create_agent(ScriptedAgentModel(), middleware=[ObservationalMemoryMiddleware(om, **middleware)],
                         checkpointer=InMemorySaver())
    return agent, om


def _text(message: Any) -> str:
    output = getattr(message, "output", message)
    return str(getattr(output, "text", output))


def test_om_calls_are_internal_and_stay_out_of_the_agents_messages_and_hook_spans() -> None:
    agent, om = _agent()
    spans = Spans()
    seen: list[str] = []
    for text in TURNS:
        run = agent.stream_events({"messages": [("user", text)]},
                                  {"configurable": {"thread_id": "t", "resource_id": "u"}, "callbacks": [spans]},
                                  version="v3")
        seen += [_text(message) for message in run.messages]
    assert om.get_record("t", resource_id="u").groups, "the Observer ran during the turns"

    observer = [r for r in spans.runs if r.name == "om_observer"]
    assert observer, [r.name for r in spans.runs]
    marker = internal_call_metadata()
    for span in observer:
        metadata = span.extra["metadata"]
        assert metadata["lc_source"] == LC_SOURCE and metadata["langchain_om_role"] == "observer"
        assert all(metadata[key] == value for key, value in marker.items()), "LangChain's own internal marker"
    # the agent's v3 message stream holds the agent's replies, one per turn, and nothing OM's models wrote
    assert len(seen) == len(TURNS) and all(text.startswith("Noted (turn") for text in seen), seen
    assert not any("User said:" in text or "<observations>" in text for text in seen)

    # hook spans keep their timing but record no payload; the agent's model span still holds the log
    hooks = [r for r in spans.runs if r.name.startswith("ObservationalMemoryMiddleware.")]
    assert hooks and all(r.inputs == {} for r in hooks), [(r.name, str(r.inputs)[:80]) for r in hooks]
    agent_calls = [r for r in spans.runs if r.name == "ScriptedAgentModel"]
    assert any("<observations>" in json.dumps(r.inputs, ensure_ascii=False) for r in agent_calls)
    assert InternalCallTransformer in ObservationalMemoryMiddleware.transformers


def test_hook_payloads_can_be_traced_on_request() -> None:
    agent, _ = _agent(trace_hook_payloads=True)
    spans = Spans()
    agent.invoke({"messages": [("user", TURNS[0])]}, {"configurable": {"thread_id": "t"}, "callbacks": [spans]})
    hooks = [r for r in spans.runs if r.name.startswith("ObservationalMemoryMiddleware.")]
    assert hooks and TURNS[0] in json.dumps(hooks[0].inputs, default=str, ensure_ascii=False)


async def test_an_extractors_call_is_internal_too() -> None:
    from test_extractors import Profile, RecordingModel, conversation, make_om, observer_reply, structured_answer

    spans = Spans()
    model = RecordingModel(fn=lambda _m: observer_reply(), structured=structured_answer)
    om = make_om(model, observation={"extract": [Extractor("User profile", "Stable profile facts.", schema=Profile)]})

    async def steps(_: Any) -> None:  # OM's calls join the caller's run (and its tracer) as child runs
        for history in conversation(14):
            await om.aprocess("t1", history)

    await RunnableLambda(steps).ainvoke(None, {"callbacks": [spans]})
    extracting = [r for r in spans.runs if r.name.startswith("om_extract_")]
    assert extracting, [r.name for r in spans.runs]
    assert all(r.extra["metadata"]["lc_source"] == LC_SOURCE for r in extracting)
    assert all(r.extra["metadata"].items() >= internal_call_metadata().items() for r in extracting)
    await om.aclose()


async def test_a_time_gap_marker_is_a_notification_not_a_user_message() -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), temporal_markers=True,
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    history = [stamped(HumanMessage("こんにちは", id="h1"), T0), stamped(AIMessage("hello", id="a1"), T0)]
    await om.aprocess("t", history, now=T0)
    late = T0 + timedelta(hours=5)
    history.append(stamped(HumanMessage("I'm back", id="h2"), late))
    ctx = await om.aprocess("t", history, now=late)
    marker, back = ctx.messages[-2:]
    assert back.id == "h2" and get_notification_metadata(back) is None
    assert get_notification_metadata(marker) == {"source": LC_SOURCE, "data": {"kind": "time-gap"}}
    assert "time-gap" in str(marker.content)
    await om.aclose()
