"""`create_agent` middleware with a conversation in Japanese: OM builds the model's context on
every model call, and the Observer's log keeps the user's own words.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import os

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel(reply_prefix="承知しました")

om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(), retrieval=True,
                         observation={"message_tokens": 80})
agent = create_agent(agent_model, tools=[], middleware=[ObservationalMemoryMiddleware(om)],
                     checkpointer=InMemorySaver())
config = {"configurable": {"thread_id": "家族旅行", "resource_id": "user-42"}}
for text in ["5月16日から2泊3日で、両親と弟の4人で金沢に行きます。",
             "母は魚アレルギーで、特にサバとアジがだめです。",
             "父は膝が悪いので、階段や坂道は避けたいです。",
             "予算はいくらと言いましたっけ？まだ言っていなければ、36万円です。"]:
    result = agent.invoke({"messages": [("user", text)]}, config)
    print(f"user: {text}\nassistant: {result['messages'][-1].content}")
print("\nObservation log:\n" + om.get_record("家族旅行", resource_id="user-42").observations)
om.close()
