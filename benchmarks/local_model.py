"""OM on a local chat model: Observer, Reflector and agent, over the demo conversation.

    python -m benchmarks.local_model --model ~/.cache/om-local-model/qwen2.5-coder-0.5b.gguf
    python -m benchmarks.local_model --model ollama:qwen2.5:1.5b --messages 12

Not part of ``python -m benchmarks``: it needs a model, and on two cores one Observer call of a
0.5B model takes minutes. This is a robustness instrument, not a score: it reports how many
replies OM refused, repaired or found looping, the log it produced, the oracle questions the
agent answered from memory, and the wall time. ``--model`` is a ``.gguf`` path (llama-cpp-python's
``ChatLlamaCpp``, from langchain-community) or any ``init_chat_model`` string; ``run`` takes any
LangChain chat model object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.cli.demo import load_conversation
from langchain_om.model_calls.model_gate import held
from langchain_om.model_calls.replies import REPLY_TALLY
from langchain_om.store.memory import InMemoryStore

ORACLE = (
    ("Which city do we fly out of?", ("toronto",)),
    ("What is our total budget for the trip?", ("9,000", "9000")),
    ("What can't I eat?", ("fish",)),
)
"""Questions the first messages of the demo conversation answer, and words a right answer holds."""


def local_model(spec: str, *, n_ctx: int = 8192, max_tokens: int = 1024, threads: int = 2) -> Any:
    """A chat model from a ``.gguf`` path (llama-cpp-python) or an ``init_chat_model`` string."""
    if spec.endswith(".gguf"):
        from langchain_community.chat_models import ChatLlamaCpp

        return ChatLlamaCpp(model_path=spec, n_ctx=n_ctx, n_threads=threads, temperature=0,
                            max_tokens=max_tokens, verbose=False)
    from langchain.chat_models import init_chat_model

    return init_chat_model(spec.replace("/", ":", 1) if ":" not in spec else spec, temperature=0)


def options(model: Any, *, message_tokens: int, turn_budget: str) -> dict[str, Any]:
    """OM's settings for a slow local model (docs/local-models.md explains each)."""
    return {
        "observation": {"model": model, "message_tokens": message_tokens, "buffer_tokens": False,
                        "previous_observer_tokens": 1_000},
        "reflection": {"model": model, "observation_tokens": 3_000},
        "failure_policy": {"turn_budget": turn_budget, "max_retries": 0},
        "token_counter": "estimator",
    }


async def arun(model: Any, *, messages: int = 24, message_tokens: int = 600,
               turn_budget: str = "20m") -> dict[str, Any]:
    """Replay ``messages`` demo messages through OM with ``model`` in every role; ask the oracle."""
    REPLY_TALLY.clear()
    om = ObservationalMemory(InMemoryStore(), **options(model, message_tokens=message_tokens,
                                                        turn_budget=turn_budget))
    history = load_conversation(id_prefix="local")[:messages]
    started = time.perf_counter()
    turns: list[float] = []
    failures: list[str] = []
    for end in range(1, len(history) + 1):
        if not isinstance(history[end - 1], HumanMessage):
            continue
        begun = time.perf_counter()
        ctx = await om.aprocess("local", history[:end])
        turns.append(time.perf_counter() - begun)
        failures += [e.data.error for e in ctx.events if e.type == "data-om-observation-failed"]
    await om.aobserve("local")
    answers = []
    for question, expected in ORACLE:
        ctx = await om.aprocess("local", [*history, HumanMessage(question)])
        prompt: list[BaseMessage] = [*([ctx.system_message] if ctx.system_message else []), *ctx.messages]
        with held(model):  # the agent's call takes the same gate as OM's own calls on this model
            reply = await asyncio.to_thread(model.invoke, prompt)
        text = str(reply.content)
        answers.append({"question": question, "answer": text, "right": any(w in text.lower() for w in expected)})
    record = await om.aget_record("local")
    await om.aclose()
    return {
        "messages": len(history), "wall_s": round(time.perf_counter() - started, 1),
        "turn_s": {"max": round(max(turns, default=0.0), 1), "total": round(sum(turns), 1)},
        "replies": {key: value for key, value in sorted(REPLY_TALLY.items())},
        "failures": failures, "observation_log": record.observations, "oracle": answers,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.local_model", description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True, help="a .gguf path or an init_chat_model string")
    parser.add_argument("--messages", type=int, default=24, help="demo messages to replay")
    parser.add_argument("--message-tokens", type=int, default=600)
    parser.add_argument("--turn-budget", default="20m")
    parser.add_argument("--n-ctx", type=int, default=8192)
    parser.add_argument("--max-tokens", type=int, default=1024)
    args = parser.parse_args(argv)
    model = local_model(args.model, n_ctx=args.n_ctx, max_tokens=args.max_tokens)
    result = asyncio.run(arun(model, messages=args.messages, message_tokens=args.message_tokens,
                              turn_budget=args.turn_budget))
    print(json.dumps(result, ensure_ascii=False, indent=2))


if __name__ == "__main__":
    main()
