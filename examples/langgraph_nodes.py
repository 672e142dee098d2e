"""LangGraph nodes: `add_observational_memory` puts OM's nodes in front of your agent node.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import os

from langchain.chat_models import init_chat_model
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langchain_om import InMemoryStore, ObservationalMemory, add_observational_memory
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})


def agent(state: MessagesState) -> dict:
    return {"messages": [model.invoke(state["messages"])]}


builder = StateGraph(MessagesState)
builder.add_node("agent", agent)
builder.add_edge(START, "agent")
add_observational_memory(builder, om, before="agent")  # om_activator -> om_observer -> om_reflector -> agent
graph = builder.compile(checkpointer=InMemorySaver())

config = {"configurable": {"thread_id": "t1", "resource_id": "user-42"}}
for text in ["Book the ryokan by Friday, please.",
             "I'm vegetarian, remember that for the dinners.",
             "My partner Sam can't do long hikes.",
             "What do I still need to book?"]:
    result = graph.invoke({"messages": [("user", text)]}, config)
    print(f"user: {text}\nassistant: {result['messages'][-1].content}")
print("\nObservation log:\n" + om.get_record("t1", resource_id="user-42").observations)
om.close()
