"""A prompt template's system message and OM's context reach the model as one system message.

``RunnableWithMessageHistory`` puts the template's system message in front of the history OM built;
``one_system_message`` between the template and the model merges the two (docs/context.md).
"""

import os

from langchain.chat_models import init_chat_model
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_om import InMemoryStore, ObservationalChatMessageHistory, ObservationalMemory, one_system_message
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})

prompt = ChatPromptTemplate.from_messages([
    ("system", "You are a helpful travel assistant."),
    MessagesPlaceholder("history"),
    ("human", "{question}"),
])
chain = RunnableWithMessageHistory(
    prompt | one_system_message | model,
    lambda session_id: ObservationalChatMessageHistory(om, session_id),
    input_messages_key="question", history_messages_key="history",
)
for text in ["I'm vegetarian and I fly to Tokyo on April 4.",
             "My budget is 40,000 yen a night for the ryokan.",
             "Sam, my partner, hurt his knee: no long hikes.",
             "Which ryokan would you suggest in Kyoto?"]:
    reply = chain.invoke({"question": text}, {"configurable": {"session_id": "t1"}})
    print(f"user: {text}\nassistant: {reply.content}")
calls = getattr(model, "calls", None)  # what the scripted model was given
if calls:
    print(f"system messages in the last call: {sum(m.type == 'system' for m in calls[-1])}")
om.close()
