"""LangChain v1's runtime context names the user: ``context=Context(user_id=...)`` (docs/context.md)."""

import os
from dataclasses import dataclass

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})


@dataclass
class Context:
    user_id: str


agent = create_agent(model, [], context_schema=Context, middleware=[ObservationalMemoryMiddleware(om)],
                     checkpointer=InMemorySaver())
for text in ["I'm vegetarian and I fly to Tokyo on April 4.",
             "My budget is 40,000 yen a night for the ryokan.",
             "Sam, my partner, hurt his knee: no long hikes.",
             "Which ryokan would you suggest in Kyoto?"]:
    result = agent.invoke({"messages": [("user", text)]}, {"configurable": {"thread_id": "t1"}},
                          context=Context(user_id="alice"))
    print(f"user: {text}\nassistant: {result['messages'][-1].content}")
print("\nObservation log:\n" + om.get_record("t1", resource_id="alice").observations)
om.close()
