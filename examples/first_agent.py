"""Getting started (docs/index.md): a first agent with memory, on a SQLite file you can inspect.

Runs offline with the scripted models of `langchain_om.testing` and a small threshold, so notes
appear after two turns. To use a real model, set LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini",
with the [openai] extra and OPENAI_API_KEY): same script.
"""

import os
import tempfile

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory, ObservationalMemoryMiddleware, SQLiteStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()

db = os.path.join(tempfile.mkdtemp(), "memory.db")  # ObservationalMemory() alone uses ./langchain_om.db
om = ObservationalMemory(SQLiteStore(db), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})
agent = create_agent(agent_model, middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "trip", "resource_id": "user-42"}}
for text in ["My budget is 2,500 CAD for the whole trip.",
             "We land in Tokyo on April 4 and leave on April 14.",
             "I'm vegetarian and Sam can't do long hikes.",
             "What did I say about my budget?"]:
    reply = agent.invoke({"messages": [("user", text)]}, config)["messages"][-1]
    print(f"user: {text}\nassistant: {reply.content}")

print("\nObservation log:\n" + om.get_record("trip", resource_id="user-42").observations)
print(f"\nLook at it: langchain-om inspect trip --resource user-42 --db {db}")
om.close()
