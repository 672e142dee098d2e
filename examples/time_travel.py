"""Time travel and forks with Observational Memory: memory follows the checkpoint.

Runs offline (scripted models, in-memory checkpointer, OM's in-memory store):

    python examples/time_travel.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory
from langchain_om.middleware import ObservationalMemoryMiddleware
from langchain_om.store import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


def colours_in(messages: list[Any]) -> list[str]:
    text = " ".join(str(m.content) for m in messages)
    return [c for c in ("red", "blue", "green", "pink", "gold") if f"colour is {c}" in text]


async def main() -> dict[str, list[str]]:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(),
                             observation={"message_tokens": 150}, token_counter="estimator")
    model = ScriptedAgentModel()  # records what it is given in model.calls
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "chat-1", "resource_id": "user-1"}}

    after_turn = []
    for colour in ("red", "blue", "green", "pink", "gold"):
        await agent.ainvoke({"messages": [HumanMessage(f"My favourite colour is {colour}. " + "More words. " * 20)]},
                            config)
        after_turn.append((await agent.aget_state(config)).config)  # a config as LangGraph hands it out
    seen = {"first branch": colours_in(model.calls[-1])}

    # Time travel: run from the checkpoint after turn 2 with new input. The config has no
    # resource_id; OM takes it from the checkpoint. The model sees turns 1-2 only.
    await agent.ainvoke({"messages": [HumanMessage("Which colours did I mention?")]}, after_turn[1])
    seen["fork from turn 2"] = colours_in(model.calls[-1])

    # Back to the first branch's latest checkpoint: its own five turns, nothing of the fork.
    await agent.ainvoke({"messages": [HumanMessage("And now?")]}, after_turn[4])
    seen["first branch again"] = colours_in(model.calls[-1])

    # A config naming another user for this thread is refused.
    try:
        await agent.ainvoke({"messages": [HumanMessage("hi")]},
                            {"configurable": {**after_turn[1]["configurable"], "resource_id": "someone-else"}})
    except ValueError as exc:
        seen["refused"] = [type(exc).__name__]
    await om.aclose()
    return seen


if __name__ == "__main__":
    for label, colours in asyncio.run(main()).items():
        print(f"{label:>20}: {', '.join(colours)}")
