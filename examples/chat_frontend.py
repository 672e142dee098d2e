"""A chat frontend's server: the route a React app using the AI SDK's ``useChat`` posts to.

Serve it with ``uvicorn chat_frontend:app --port 8000`` (from this folder; ``pip install
"langchain-om[ui]"`` brings FastAPI and uvicorn); ``/`` is the memory inspector over the same store
(the page of ``langchain-om serve``). Run as a script, it posts four turns the way ``useChat`` does
and prints the reply and OM's parts of each, then the threads the inspector lists.
"""

import json
import os

from fastapi import FastAPI, Request
from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import InMemoryStore, ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.integrations.inspector import create_inspector_app
from langchain_om.integrations.ui import last_user_message, ui_message_response
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

REAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
model = init_chat_model(REAL_MODEL) if REAL_MODEL else ScriptedAgentModel(stream_tokens=True)
om = ObservationalMemory(InMemoryStore(), model=REAL_MODEL or ScriptedObserverModel(),
                         observation={"message_tokens": 60})
agent = create_agent(model, tools=[], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
app = FastAPI()


@app.post("/api/chat")
async def chat(request: Request):
    body = await request.json()  # what useChat posts: {id, messages, ...}
    stream = agent.astream(
        {"messages": [last_user_message(body)]},  # the checkpointer holds the earlier turns
        # resource_id: your signed-in user, never a value the client sends
        {"configurable": {"thread_id": body["id"], "resource_id": "user-42"}},
        stream_mode=["messages", "custom"],
    )
    return ui_message_response(stream)  # keep_status=True keeps one status part per message


# the memory inspector at / (read-only), after the chat route; it must not close OM's store
app.mount("/", create_inspector_app(om.store, close_store=False))


if __name__ == "__main__":
    from fastapi.testclient import TestClient

    with TestClient(app) as client:
        for i, text in enumerate(["I'm vegetarian and I fly to Tokyo on April 4.",
                                  "My budget is 40,000 yen a night for the ryokan.",
                                  "Sam, my partner, hurt his knee: no long hikes.",
                                  "Which ryokan would you suggest in Kyoto?"]):
            body = {"id": "chat-1", "messages": [{"id": f"u{i}", "role": "user",
                                                  "parts": [{"type": "text", "text": text}]}]}
            with client.stream("POST", "/api/chat", json=body) as response:
                parts = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]
            reply = "".join(part["delta"] for part in parts if part["type"] == "text-delta")
            om_parts = sorted({part["type"] for part in parts if part["type"].startswith("data-om-")})
            print(f"user: {text}\nassistant: {reply}\n  OM parts: {', '.join(om_parts)}")
        threads = client.get("/api/threads", params={"resource": "user-42"}).json()["threads"]
        print(f"inspector at /: {[t['threadId'] for t in threads]}")
    om.close()
