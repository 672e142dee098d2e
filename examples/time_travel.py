"""Time travel and forks: OM's memory follows the LangGraph checkpoint a run starts from.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import asyncio
import os
from typing import Any

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
COLOURS = ("red", "blue", "green", "pink", "gold")


def colours_in(messages: list[Any]) -> list[str]:
    text = " ".join(str(m.content) for m in messages)
    return [c for c in COLOURS if f"colour is {c}" in text]


async def main() -> dict[str, list[str]]:
    """Returns which colours the model was shown on each branch (the scripted model records its input)."""
    model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
    om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                             observation={"message_tokens": 150}, token_counter="estimator")
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "chat-1", "resource_id": "user-1"}}
    shown: dict[str, list[str]] = {}

    async def say(text: str, run_config: Any, label: str) -> None:
        result = await agent.ainvoke({"messages": [HumanMessage(text)]}, run_config)
        print(f"user: {text[:60]}\nassistant: {str(result['messages'][-1].content)[:100]}")
        calls = getattr(model, "calls", None)  # what the scripted model was given
        shown[label] = colours_in(calls[-1]) if calls else []

    after_turn = []
    for colour in COLOURS:
        await say(f"My favourite colour is {colour}. " + "More words. " * 20, config, "first branch")
        after_turn.append((await agent.aget_state(config)).config)  # a config as LangGraph hands it out

    # Time travel: run from the checkpoint after turn 2 with new input. The config has no
    # resource_id: OM takes it from the checkpoint, and the model sees turns 1-2 only.
    await say("Which colours did I mention?", after_turn[1], "fork from turn 2")
    # Inspect the fork: given its checkpoint, get_record reads the memory that checkpoint names
    # (the thread id alone names the first branch). Turn 2 is still unobserved there.
    fork = await agent.aget_state(config)  # the thread's latest checkpoint is now the fork's
    fork_log = (await om.aget_record("chat-1", checkpoint=fork)).observations
    shown["fork's log"] = [c for c in COLOURS if f"colour is {c}" in fork_log]
    # Back to the first branch's latest checkpoint: its own five turns, nothing of the fork.
    await say("And now?", after_turn[4], "first branch again")
    # A config naming another user for this thread is refused.
    try:
        await agent.ainvoke({"messages": [HumanMessage("hi")]},
                            {"configurable": {**after_turn[1]["configurable"], "resource_id": "someone-else"}})
    except ValueError as exc:
        shown["refused"] = [type(exc).__name__]
    await om.aclose()
    return shown


if __name__ == "__main__":
    for label, colours in asyncio.run(main()).items():
        print(f"{label:>20}: {', '.join(colours)}")
