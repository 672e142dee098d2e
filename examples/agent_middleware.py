"""`create_agent` middleware: OM builds the model's context on every model call.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import os

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()


@tool
def exchange_rate(currency: str) -> str:
    """Yen per unit of `currency`."""
    return {"EUR": "162.4", "USD": "149.8", "CAD": "109.9"}.get(currency.upper(), "unknown")


om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(), retrieval=True,
                         observation={"message_tokens": 60})
agent = create_agent(agent_model, tools=[exchange_rate], middleware=[ObservationalMemoryMiddleware(om)],
                     checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "t1", "resource_id": "user-42"}}
for text in ["My budget is 2,500 CAD for the whole trip.",
             "We land in Tokyo on April 4 and leave on April 14.",
             "I'm vegetarian and Sam can't do long hikes.",
             "What did I say about my budget?"]:
    result = agent.invoke({"messages": [("user", text)]}, config)
    print(f"user: {text}\nassistant: {result['messages'][-1].content}")
print("\nObservation log:\n" + om.get_record("t1", resource_id="user-42").observations)
om.close()
