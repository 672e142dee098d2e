"""The user named in LangChain v1's runtime context: `create_agent(..., context_schema=Context)`.

OM reads `user_id` (or `resource_id`) from the runtime context as well as from
`config["configurable"]`; when both name a user they must agree. Runs offline with the scripted
models of `langchain_om.testing`; set LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and
that provider's API key to use a real model.
"""

import os
from dataclasses import dataclass

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ConflictingResourceError, InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")


@dataclass
class Context:
    user_id: str


model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(), scope="resource",
                         observation={"message_tokens": 60})
agent = create_agent(model, [], context_schema=Context, middleware=[ObservationalMemoryMiddleware(om)],
                     checkpointer=InMemorySaver())
alice = Context(user_id="alice")
for text in ["Hi! I'm planning a trip to Japan in April.",
             "I'm vegetarian, and my partner Sam can't do long hikes.",
             "We want one night in a ryokan in Kyoto.",
             "What should I keep in mind when booking?"]:
    result = agent.invoke({"messages": [HumanMessage(text)]}, {"configurable": {"thread_id": "trip"}}, context=alice)
    print(f"user: {text}\nassistant: {result['messages'][-1].content}")

# scope="resource": a new thread of alice's starts with what OM remembers of her
print("alice's memory in a new thread:\n" + om.get_record("packing-list", resource_id="alice").observations)
try:  # the config and the context name different users: refused, never a silent pick
    agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "trip", "user_id": "bob"}},
                 context=alice)
except ConflictingResourceError as exc:
    print(f"refused: {exc}")
om.close()
