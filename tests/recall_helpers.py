"""Shared set-up for the recall, resource-scope and isolation tests: dated conversations in a store."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=timezone.utc)


def stamped(message: BaseMessage, moment: datetime) -> BaseMessage:
    message.response_metadata = {**(message.response_metadata or {}), TIMESTAMP_KEY: moment.isoformat()}
    return message


def chat(prefix: str, turns: int, *, start: datetime = T0, step: timedelta = timedelta(minutes=1),
         words: int = 12) -> list[BaseMessage]:
    """``turns`` human/AI pairs with ids ``{prefix}-h{i}`` / ``{prefix}-a{i}`` and timestamps."""
    out: list[BaseMessage] = []
    for i in range(turns):
        moment = start + step * i
        filler = " ".join(f"{prefix}w{i}_{k}" for k in range(words))
        out.append(stamped(HumanMessage(f"{prefix} question {i}: {filler}", id=f"{prefix}-h{i}"), moment))
        out.append(stamped(AIMessage(f"{prefix} answer {i}: {filler}", id=f"{prefix}-a{i}"),
                           moment + timedelta(seconds=20)))
    return out


def tool_exchange(prefix: str, moment: datetime) -> list[BaseMessage]:
    """A human question, an AI tool call with reasoning, the tool's long result, the final answer."""
    call = AIMessage(
        content=[{"type": "reasoning", "reasoning": "I should look the weather up."},
                 {"type": "text", "text": "Let me check the forecast."}],
        tool_calls=[{"name": "get_weather", "args": {"city": "Lisbon", "days": 3}, "id": f"{prefix}-call"}],
        id=f"{prefix}-ai-call",
    )
    result = ToolMessage("Forecast Lisbon: " + "sunny 24C; " * 60, tool_call_id=f"{prefix}-call",
                         name="get_weather", id=f"{prefix}-tool")
    return [
        stamped(HumanMessage("What is the weather in Lisbon?", id=f"{prefix}-q"), moment),
        stamped(call, moment + timedelta(seconds=5)),
        stamped(result, moment + timedelta(seconds=6)),
        stamped(AIMessage("Sunny all week, around 24C.", id=f"{prefix}-final"), moment + timedelta(seconds=9)),
    ]


def make_om(store: OMStore, **kwargs: Any) -> ObservationalMemory:
    options: dict[str, Any] = {"model": ScriptedObserverModel(), "retrieval": True,
                               "observation": {"message_tokens": 100_000, "buffer_tokens": False}}
    options.update(kwargs)
    return ObservationalMemory(store, **options)


async def seed(om: ObservationalMemory, resource_id: str, threads: dict[str, Sequence[BaseMessage]]) -> None:
    """Store each thread's messages through the engine (no observation at these thresholds)."""
    for thread_id, messages in threads.items():
        stamps = [str(m.response_metadata[TIMESTAMP_KEY]) for m in messages if TIMESTAMP_KEY in m.response_metadata]
        now = max(datetime.fromisoformat(s) for s in stamps) if stamps else T0
        await om.aprocess(thread_id, list(messages), resource_id=resource_id, now=now)


def result_dict(value: Any) -> dict[str, Any]:
    assert isinstance(value, dict), f"expected a result dict, got {value!r}"
    return value
