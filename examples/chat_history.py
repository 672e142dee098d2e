"""`ObservationalChatMessageHistory`: a `BaseChatMessageHistory` whose `messages` is OM's context.

Runs offline with the scripted models of `langchain_om.testing`. To use a real model, set
LANGCHAIN_OM_EXAMPLE_MODEL (e.g. "openai:gpt-5-mini") and that provider's API key: same script.
"""

import os

from langchain.chat_models import init_chat_model
from langchain_core.messages import HumanMessage

from langchain_om import InMemoryStore, ObservationalChatMessageHistory, ObservationalMemory
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
chat_model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel()
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})

history = ObservationalChatMessageHistory(om, thread_id="t1", resource_id="user-42")
for text in ["Hi! I'm planning a trip to Japan in April.",
             "I'm vegetarian, and my partner Sam can't do long hikes.",
             "We want one night in a ryokan in Kyoto.",
             "What should I keep in mind when booking?"]:
    history.add_messages([HumanMessage(text)])
    prompt = history.messages  # the OM context: system message (once observed) + unobserved messages
    reply = chat_model.invoke(prompt)
    history.add_messages([reply])
    print(f"user: {text}\nassistant: {reply.content}  ({len(prompt)} messages sent)")
om.close()
