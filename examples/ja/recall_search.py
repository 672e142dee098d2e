"""The `recall` tool's keyword search in Japanese: the agent finds the raw message behind an
observation by a word of it (魚アレルギー), with no embedder, in text written without spaces.

Runs offline with the scripted models of `langchain_om.testing` (the scripted agent searches on
its last turn). To use a real model, set LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini")
and that provider's API key: same script, and the model decides when to search.
"""

import os

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
questions = ["京都の旅館は嵐山 翠月庵が第一候補です。露天風呂付きで2泊248,000円。",
             "やっぱり行き先は金沢に変えます。宿は湯涌温泉 月見の宿にしました。",
             "母は魚アレルギーなので、夕食は母だけ肉料理にしてもらいます。",
             "最初に京都で見ていた旅館の名前を、元のメッセージから正確に調べてください。"]
# scripted: model call 3 (the fourth question) searches the stored messages for 旅館
agent_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel(
    reply_prefix="承知しました", tool_calls_on={3: ("recall", {"mode": "search", "query": "京都 旅館"})})

om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(), retrieval=True,
                         observation={"message_tokens": 320})
agent = create_agent(agent_model, tools=[], middleware=[ObservationalMemoryMiddleware(om)])
config = {"configurable": {"thread_id": "家族旅行", "resource_id": "user-42"}}
messages = []
for text in questions:
    messages = agent.invoke({"messages": [*messages, ("user", text)]}, config)["messages"]
    print(f"user: {text}\nassistant: {messages[-1].content}")
recalled = [m for m in messages if m.type == "tool" and m.name == "recall"]
print("\nrecall returned:\n" + (str(recalled[-1].content)[:600] if recalled else "(not called)"))
om.close()
