"""A prompt template with `RunnableWithMessageHistory`: one system message reaches the model.

`RunnableWithObservationalMemory` takes `RunnableWithMessageHistory`'s arguments, builds OM's chat
history for each session (`om=` instead of `get_session_history`) and merges the template's system
message with OM's context by default, the template's text first. Runs offline with the scripted
models of `langchain_om.testing`; set LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and
that provider's API key to use a real model.
"""

import os

from langchain.chat_models import init_chat_model
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder

from langchain_om import InMemoryStore, ObservationalMemory, RunnableWithObservationalMemory
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a concise travel assistant."),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])
chain = RunnableWithObservationalMemory(
    prompt | model, om=om,  # merge_system_messages=False would send two system messages in a row
    input_messages_key="question", history_messages_key="history",
)
config = {"configurable": {"thread_id": "trip-1", "user_id": "user-42"}}
for question in ["Hi! I'm planning a trip to Japan in April.",
                 "I'm vegetarian, and my partner Sam can't do long hikes.",
                 "We want one night in a ryokan in Kyoto.",
                 "What should I keep in mind when booking?"]:
    reply = chain.invoke({"question": question}, config)
    print(f"user: {question}\nassistant: {reply.content}")
calls = getattr(model, "calls", None)  # what the scripted model was given
if calls:
    system = [m for m in calls[-1] if m.type == "system"]
    print(f"system messages in the last call: {len(system)}, starting: {str(system[0].content)[:40]!r}")
om.close()
