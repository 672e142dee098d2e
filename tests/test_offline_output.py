"""Issue 31, item 8: what the offline pieces print reads right. The scripted agent keeps counting turns
after OM takes observed messages out of its input, and a record's log shows one ``Date:`` header per day
however many observation cycles wrote that day."""

from __future__ import annotations

import re

from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TURNS = ["京都で旅館を一泊予約したいです。", "My budget is 2,500 CAD for the whole trip.",
         "We land in Tokyo on April 4 and leave on April 14.", "私はベジタリアンです。",
         "Sam can't do long hikes.", "What did I say about my budget?"]


def test_scripted_agent_counts_turns_across_observations_and_the_log_has_one_header_per_day() -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), observation={"message_tokens": 60})
    agent = create_agent(ScriptedAgentModel(), tools=[], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1", "resource_id": "user-42"}}
    replies = []
    for text in TURNS:
        replies.append(str(agent.invoke({"messages": [("user", text)]}, config)["messages"][-1].content))
    record = om.get_record("t1", resource_id="user-42")
    om.close()

    assert len(record.groups) >= 3, "the thresholds are small: several observation cycles ran"
    turns = [int(re.match(r"Noted \(turn (\d+)", reply).group(1)) for reply in replies]  # type: ignore[union-attr]
    assert turns == list(range(1, len(TURNS) + 1)), replies
    assert "notes in memory" in replies[-1], "the reply shows that the model was given the log"
    headers = [line for line in record.observations.splitlines() if line.startswith("Date: ")]
    assert headers and len(headers) == len(set(headers)), record.observations
    assert sum(group.text.count("Date: ") for group in record.groups) > len(headers), "groups carry their own"
    for text in TURNS[:3]:
        assert text in record.observations  # merging dropped headers only, never an observation
