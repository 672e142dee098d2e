"""Standalone: OM in front of any chat model, one `aprocess` call per turn.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import asyncio
import os

from langchain.chat_models import init_chat_model
from langchain_core.messages import HumanMessage

from langchain_om import InMemoryStore, ObservationalMemory
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om_model = REAL_MODEL or ScriptedObserverModel()  # the Observer/Reflector


async def main() -> None:
    # InMemoryStore for the example; the default (store=None) is SQLite at ./langchain_om.db
    om = ObservationalMemory(InMemoryStore(), model=om_model, observation={"message_tokens": 60})
    history = []
    for text in ["I'm vegetarian and I fly to Tokyo on April 4.",
                 "My budget is 40,000 yen a night for the ryokan.",
                 "Sam, my partner, hurt his knee: no long hikes.",
                 "Which ryokan would you suggest in Kyoto?"]:
        history.append(HumanMessage(text))
        ctx = await om.aprocess("thread-1", history)  # `om.process(...)` is the sync twin
        # ctx.to_messages(): the OM system message (once something is observed) + unobserved messages
        reply = await agent_model.ainvoke(ctx.to_messages())
        history.append(reply)
        print(f"user: {text}\nassistant: {reply.content}")
        print(f"  messages window: {ctx.status.windows.active.messages.tokens} / "
              f"{ctx.status.windows.active.messages.threshold} tokens")
    record = await om.aget_record("thread-1")
    print("\nObservation log:\n" + record.observations)
    await om.aclose()


if __name__ == "__main__":
    asyncio.run(main())
