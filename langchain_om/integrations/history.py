"""``ObservationalChatMessageHistory``: a ``BaseChatMessageHistory`` backed by OM.

For code that keeps a chat history itself (LangChain's ``RunnableWithMessageHistory`` is
deprecated in favour of LangGraph persistence; new agents should use the middleware or the
graph nodes): added messages are stored through the engine, and reading ``messages`` runs
one OM step and returns the bounded context (the OM system message once there is something
observed, then the unobserved messages) instead of the whole conversation. The raw messages
stay in the store for recall.

One system message: when the thread has system messages of its own, ``messages`` holds them
merged with OM's context (their text first). A prompt template's system message is outside
OM's reach (the template puts it in front of the history after OM has answered), so a chain
``prompt | model`` would send two system messages in a row: wrap the chain in
``RunnableWithObservationalMemory`` (``integrations.runnable_history``), which puts
``one_system_message`` between them by default, or write ``prompt | one_system_message | model``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage
from langchain_core.prompt_values import ChatPromptValue, PromptValue
from langchain_core.runnables import RunnableLambda

from ..engine import ObservationalMemory, OMContext
from ..foundation.context import merge_leading_system_messages
from ..foundation.tokens import CACHE_KEY
from ..store.base import check_id, check_thread_id
from .turn import require_context


class ObservationalChatMessageHistory(BaseChatMessageHistory):
    """Chat history of one thread, seen through Observational Memory.

    ``messages`` / ``aget_messages()`` run an OM step (observing or reflecting if the
    thresholds say so) and return the context to send to the model. ``clear()`` deletes
    the thread's messages and its record. Messages added without an id get one (on a copy;
    the caller's objects are not modified). When OM cannot build a context (no tier of a
    ``ModelByInputTokens`` fits the Observer's input), reading raises ``OMAborted`` rather
    than handing an over-budget history to the model; the stored messages are untouched.
    """

    def __init__(self, om: ObservationalMemory, thread_id: str, resource_id: str | None = None) -> None:
        if not isinstance(om, ObservationalMemory):
            raise TypeError(f"om: expected an ObservationalMemory, got {type(om).__name__}")
        self.om = om
        self.thread_id = check_thread_id(thread_id)
        self.resource_id = check_id(resource_id, "resource_id") if resource_id is not None else None

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        return _checked(self.om._loop.run(self.om.aprocess(self.thread_id, [], resource_id=self.resource_id),
                                          twin="history.aget_messages()"))

    async def aget_messages(self) -> list[BaseMessage]:
        return _checked(await self.om.aprocess(self.thread_id, [], resource_id=self.resource_id))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        self.om._loop.run(self.om.aon_turn_end(self.thread_id, _copies(messages), resource_id=self.resource_id),
                          twin="history.aadd_messages(...)")

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await self.om.aon_turn_end(self.thread_id, _copies(messages), resource_id=self.resource_id)

    def clear(self) -> None:
        """Sync twin of ``aclear``; raises at once inside a running event loop that runs this thread's
        OM background work (it would wait for it forever), naming ``aclear``."""
        om = self.om
        om._loop.run(om.adelete_thread(self.thread_id, resource_id=self.resource_id), twin="history.aclear()",
                     waits_on=om._background_of(self.thread_id, self.resource_id))

    async def aclear(self) -> None:
        await self.om.adelete_thread(self.thread_id, resource_id=self.resource_id)


def _checked(context: OMContext) -> list[BaseMessage]:
    return [_without_bookkeeping(m) for m in require_context(context, "chat history").to_messages()]


def _without_bookkeeping(message: BaseMessage) -> BaseMessage:
    """A copy without OM's token-count cache in ``response_metadata``: it is OM's internal state,
    not part of the conversation handed out (and would otherwise travel into the caller's records)."""
    metadata = message.response_metadata or {}
    if CACHE_KEY not in metadata:
        return message
    return message.model_copy(update={"response_metadata": {k: v for k, v in metadata.items() if k != CACHE_KEY}})


def _copies(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for index, message in enumerate(messages):
        if not isinstance(message, BaseMessage):
            raise TypeError(f"messages[{index}]: expected a BaseMessage, got {type(message).__name__}")
        out.append(message.model_copy(deep=True))
    return out


def _one_system_message(value: Any) -> Any:
    if isinstance(value, PromptValue):  # stays a prompt value, for steps that read one (``.to_string()``)
        messages = value.to_messages()
        merged = merge_leading_system_messages(messages)
        return value if len(merged) == len(messages) else ChatPromptValue(messages=merged)
    if isinstance(value, list) and all(isinstance(m, BaseMessage) for m in value):
        return merge_leading_system_messages(value)
    return value


one_system_message: RunnableLambda[Any, Any] = RunnableLambda(_one_system_message, name="one_system_message")
"""A chain step for ``prompt | one_system_message | model``: a prompt template's system message
and the history's OM context become one system message (the template's text first, so the
prefix stays byte-identical across turns for prompt caches). Other inputs pass through."""
