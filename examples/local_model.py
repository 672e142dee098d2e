"""OM on a model that runs on your own machine: the settings a slow, small model needs.

Runs offline with the scripted models of `langchain_om.testing`. To use a local model, set
LANGCHAIN_OM_EXAMPLE_MODEL to a GGUF file (llama-cpp-python and langchain-community installed) or
to a model string such as "ollama:qwen2.5:1.5b": same script.
"""

import asyncio
import os

from langchain.chat_models import init_chat_model
from langchain_core.messages import HumanMessage

from langchain_om import InMemoryStore, ObservationalMemory
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

LOCAL_MODEL = os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")
if LOCAL_MODEL and LOCAL_MODEL.endswith(".gguf"):
    from langchain_community.chat_models import ChatLlamaCpp

    # the context must hold OM's instructions, the previous log, a batch and the reply
    model = ChatLlamaCpp(model_path=LOCAL_MODEL, n_ctx=8192, n_threads=4, temperature=0, max_tokens=1024)
    agent_model, om_model = model, model  # one object: llama.cpp must not run two calls at once
elif LOCAL_MODEL:
    agent_model = init_chat_model(LOCAL_MODEL)
    om_model = agent_model
else:
    agent_model, om_model = ScriptedAgentModel(), ScriptedObserverModel()


async def main() -> None:
    om = ObservationalMemory(
        InMemoryStore(),
        model=om_model,                                  # Observer and Reflector
        # buffering off: this script calls the model itself between OM's calls, so OM must not be
        # using it in the background then (with create_agent the middleware takes the model's gate
        # around the agent's call, and buffering can stay on)
        observation={"message_tokens": 60, "previous_observer_tokens": 1_000, "buffer_tokens": False},
        reflection={"observation_tokens": 3_000},
        failure_policy={"turn_budget": "10m", "max_retries": 0},  # a slow model; a server that is down stays down
    )
    history = []
    for text in ["I'm vegetarian and I fly to Tokyo on April 4.",
                 "My budget is 40,000 yen a night for the ryokan.",
                 "Which ryokan would you suggest in Kyoto?"]:
        history.append(HumanMessage(text))
        ctx = await om.aprocess("thread-1", history)
        reply = await agent_model.ainvoke(ctx.to_messages())
        history.append(reply)
        print(f"user: {text}\nassistant: {reply.content}")
        if ctx.status.observation_error:  # a refused reply, a skipped turn: said, never stored
            print(f"  OM: {ctx.status.observation_error}")
    record = await om.aget_record("thread-1")
    print("\nObservation log:\n" + record.observations)
    await om.aclose()


if __name__ == "__main__":
    asyncio.run(main())
