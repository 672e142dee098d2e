"""Rough edges a newcomer met outside the CLI: a ``True`` token threshold, OM's token cache leaking
out of ``history.messages``, the log and ``recall`` dating one message differently, and a huge
user message (silently over budget, slow to count)."""

from __future__ import annotations

import logging

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_om import ObservationalChatMessageHistory, ObservationalMemory, OMConfigError
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.foundation.oversize import SAMPLED_COUNT_CHARS, sampled_count
from langchain_om.foundation.tokens import CACHE_KEY, EstimatorCounter, get_token_counter
from langchain_om.store import InMemoryStore, implicit_resource
from langchain_om.testing import ScriptedObserverModel


@pytest.mark.parametrize("options", [
    {"observation": {"message_tokens": True}},
    {"observation": {"max_tokens_per_batch": True}},
    {"reflection": {"observation_tokens": False}},
])
def test_a_boolean_token_threshold_is_refused(options: dict[str, dict[str, object]]) -> None:
    section, values = next(iter(options.items()))
    field = next(iter(values))
    with pytest.raises(OMConfigError, match=f"{section}.{field}: must be a number of tokens"):
        ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), **options)  # type: ignore[arg-type]


def test_history_messages_carry_no_token_bookkeeping() -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(),
                             observation={"message_tokens": 60, "buffer_tokens": False})
    history = ObservationalChatMessageHistory(om, thread_id="t1", resource_id="u1")
    for i in range(6):
        history.add_messages([HumanMessage(f"I'm vegetarian and I fly to Tokyo on April {i + 1}."),
                              AIMessage(f"Noted, April {i + 1}.")])
    messages = history.messages
    assert messages and any(m.type == "system" for m in messages)  # observed: the log is there
    for message in messages:
        assert CACHE_KEY not in (message.response_metadata or {}), message
    # OM still has its cache internally: reading again is served from it, with the same result
    assert [m.content for m in history.messages] == [m.content for m in messages]
    om.close()


async def test_log_and_recall_date_a_message_the_same_way() -> None:
    """A message sent at 19:05 in New York (00:05 UTC the next day) is dated 2026-03-02 19:05 in both."""
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), retrieval=True,
                             observation={"message_tokens": 40, "buffer_tokens": False})
    evening = HumanMessage("My budget for the ryokan is 40000 yen per night, please remember it.",
                           id="m1", response_metadata={TIMESTAMP_KEY: "2026-03-02T19:05:00-05:00"})
    reply = AIMessage("Noted: 40000 yen per night.", id="m2",
                      response_metadata={TIMESTAMP_KEY: "2026-03-02T19:06:00-05:00"})
    await om.aprocess("t1", [evening, reply], resource_id="u1")
    record = await om.aobserve("t1", resource_id="u1")
    assert "Date: 2026-03-02" in record.observations and "(19:05)" in record.observations
    assert "2026-03-03" not in record.observations
    recall = om.recall_tool(thread_id="t1", resource_id="u1")
    shown = await recall.ainvoke({"mode": "messages", "cursor": "m1", "limit": 1})
    text = shown if isinstance(shown, str) else str(shown)
    assert "2026-03-02 19:05 UTC-05:00" in text, text
    assert "2026-03-03 00:05" not in text
    await om.aclose()


def test_sampled_counting_is_bounded_and_close() -> None:
    counter = get_token_counter("auto")
    prose = "The ryokan in Kyoto has a cypress bath and serves kaiseki dinners. " * 20_000  # 1.4M chars
    assert len(prose) > SAMPLED_COUNT_CHARS
    exact = len(counter.encoding.encode_ordinary(prose)) if hasattr(counter, "encoding") else None
    estimate = counter.count_text(prose)
    if exact is not None:
        assert abs(estimate - exact) / exact < 0.02, (estimate, exact)
    # the bound: however long the text, only SAMPLED_COUNT_CHARS characters are tokenized
    seen: list[int] = []
    sampled_count(prose, lambda part: seen.append(len(part)) or 1)
    assert sum(seen) <= SAMPLED_COUNT_CHARS
    assert EstimatorCounter().count_text("x" * (SAMPLED_COUNT_CHARS * 3)) > 0


async def test_a_message_larger_than_the_window_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(),
                             observation={"message_tokens": 2000})
    huge = HumanMessage("please summarise this log line " * 40_000, id="huge")  # ~1.2M characters
    with caplog.at_level(logging.WARNING, logger="langchain_om"):
        context = await om.aprocess("t1", [HumanMessage("hi", id="small"), huge])
    warnings = [r.getMessage() for r in caplog.records if "huge" in r.getMessage()]
    assert len(warnings) == 1 and "more than the whole message window" in warnings[0]
    assert "observation.message_tokens=2000" in warnings[0]
    assert context.messages  # nothing lost: the store has both messages
    assert [m.id for m in await om.store.aget_messages(implicit_resource("t1"), "t1")] == ["small", "huge"]
    with caplog.at_level(logging.WARNING, logger="langchain_om"):
        caplog.clear()
        await om.aprocess("t1", [HumanMessage("hi", id="small"), huge])  # already stored: no second warning
    assert not [r for r in caplog.records if "huge" in r.getMessage()]
    await om.aclose()
