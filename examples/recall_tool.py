"""The `recall` tool: the agent pages back through the raw messages behind its observations.

Runs offline with the scripted models of `langchain_om.testing` (the scripted agent calls `recall`
on its last turn). To use a real model, set LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini")
and that provider's API key: same script, and the model decides when to recall.
"""

import os

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
questions = ["My passport number ends in 4471, keep that in mind.",
             "We fly Air Canada from Toronto on April 4 at 13:10.",
             "Sam's knee: no long hikes, few stairs.",
             "Look up exactly what I said about my passport, please."]
# scripted: model call 3 (the fourth question) asks recall for the thread's first messages
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel(
    tool_calls_on={3: ("recall", {"mode": "messages", "anchor": "start", "limit": 2})})

om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(), retrieval=True,
                         observation={"message_tokens": 200})  # {"scope": "thread"} limits recall to one thread
# the middleware adds `recall` for you; outside an agent, om.recall_tool(thread_id=..., resource_id=...)
agent = create_agent(agent_model, tools=[], middleware=[ObservationalMemoryMiddleware(om)])
config = {"configurable": {"thread_id": "t1", "resource_id": "user-42"}}
messages = []
for text in questions:
    messages = agent.invoke({"messages": [*messages, ("user", text)]}, config)["messages"]
    print(f"user: {text}\nassistant: {messages[-1].content}")
recalled = [m for m in messages if m.type == "tool" and m.name == "recall"]
print("\nrecall returned:\n" + (str(recalled[-1].content)[:600] if recalled else "(not called)"))
om.close()
