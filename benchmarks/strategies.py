"""The three memory strategies every benchmark compares, driven step by step the same way.

* ``om``: ``ObservationalMemory.aprocess`` (what the middleware / graph nodes call each step).
* ``summarization``: LangChain v1 ``SummarizationMiddleware.abefore_model`` called on a state
  dict directly, its state update applied as LangGraph's reducer would (remove all, then add).
* ``full``: no memory; the whole history goes to the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

from langchain.agents.middleware import SummarizationMiddleware
from langchain_core.messages import BaseMessage, RemoveMessage
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from langchain_om.testing import ScriptedChatModel


def scripted_summary(messages: list[BaseMessage]) -> str:
    """A deterministic ~150-token summary standing in for a real summarizer's answer."""
    prompt = messages[-1].text if messages else ""
    lines = [line.strip() for line in prompt.splitlines() if line.strip()]
    picked = lines[-12:]
    body = " ".join(" ".join(line.split()[:9]) for line in picked)
    return "Summary of the conversation so far: " + body[:700]


def summarization_middleware(
    *, trigger_tokens: int, keep_tokens: int, delay_s: float = 0.0, max_input_tokens: int | None = None
) -> tuple[SummarizationMiddleware, ScriptedChatModel]:
    """A ``SummarizationMiddleware`` whose summarizer is scripted (optionally slow)."""
    model = ScriptedChatModel(responses=[scripted_summary], delay_s=delay_s)
    if max_input_tokens is not None:
        model.profile = {"max_input_tokens": max_input_tokens}
    middleware = SummarizationMiddleware(model=model, trigger=("tokens", trigger_tokens), keep=("tokens", keep_tokens))
    return middleware, model


def apply_update(messages: list[BaseMessage], update: dict[str, Any] | None) -> tuple[list[BaseMessage], bool]:
    """Apply a middleware state update the way ``add_messages`` does for REMOVE_ALL + new messages."""
    if not update or "messages" not in update:
        return messages, False
    new = list(update["messages"])
    if new and isinstance(new[0], RemoveMessage) and new[0].id == REMOVE_ALL_MESSAGES:
        return cast(list[BaseMessage], new[1:]), True
    return messages + cast(list[BaseMessage], new), False


async def summarization_step(
    middleware: SummarizationMiddleware, messages: Sequence[BaseMessage]
) -> tuple[list[BaseMessage], bool]:
    """One ``abefore_model`` call; returns the state's messages afterwards and whether it summarized."""
    state = {"messages": list(messages)}
    update = await middleware.abefore_model(cast(Any, state), cast(Any, None))
    return apply_update(state["messages"], update)
