"""``RunnableWithObservationalMemory``: ``RunnableWithMessageHistory`` that sends one system message.

With the plain ``RunnableWithMessageHistory(prompt | model, ...)`` and a prompt template that
holds a system message, the model receives two system messages in a row: the template puts its
own in front of the history *after* OM's history object produced its messages (OM's context
first among them). Nothing the history object returns can reach the template's message, and the
model gets only the formatted ``ChatPromptValue``, so the merge has to sit in the chain between
the two. This subclass puts it there itself: right after each prompt template and right before
each language model at the top level of the wrapped runnable (or in front of it, when it is a
model), so the model sees one system message, the template's text first. It also builds OM's
history from the session id when given ``om=`` instead of ``get_session_history``.

A runnable it cannot see into (a lambda, a compiled graph, a parallel map) is wrapped unchanged,
with one warning naming the fix (merge inside it with ``one_system_message``, or say
``merge_system_messages=False``): silently sending two system messages is what this class is for.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core._api.deprecation import LangChainDeprecationWarning
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.language_models import BaseLanguageModel
from langchain_core.prompts import BasePromptTemplate
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSequence
from langchain_core.runnables.base import RunnableBindingBase
from langchain_core.runnables.fallbacks import RunnableWithFallbacks
from langchain_core.runnables.history import RunnableWithMessageHistory
from langchain_core.runnables.utils import ConfigurableFieldSpec

from ..engine import ObservationalMemory
from ..foundation.run_ids import resource_from
from .history import ObservationalChatMessageHistory, one_system_message


class UnmergedSystemMessagesWarning(UserWarning):
    """The wrapped runnable hides where its model is, so its system messages may reach it unmerged."""


class RunnableWithObservationalMemory(RunnableWithMessageHistory):  # type: ignore[no-redef]  # pydantic plugin: field "kwargs"
    """``RunnableWithMessageHistory`` whose model receives one system message, the caller's text first.

    Takes ``RunnableWithMessageHistory``'s arguments. ``get_session_history`` may be left out when
    ``om`` is given: each session then reads ``ObservationalChatMessageHistory(om, session_id,
    resource_id=...)``, the user named by ``config["configurable"]["resource_id"]`` (or
    ``user_id``) when set. The session is ``config["configurable"]["thread_id"]`` (as for every other
    integration) or ``session_id``. ``merge_system_messages=False`` wraps ``runnable`` unchanged.

    Note: ``RunnableWithMessageHistory`` is deprecated upstream in favour of LangGraph persistence
    (``create_agent`` + ``ObservationalMemoryMiddleware``, or the graph nodes); this class exists
    for chains that still use it. Upstream's deprecation warning is said here instead of on every
    construction, where it reads as a fault of the caller's code.
    """

    def __init__(
        self,
        runnable: Runnable[Any, Any],
        get_session_history: Callable[..., BaseChatMessageHistory] | None = None,
        *,
        om: ObservationalMemory | None = None,
        input_messages_key: str | None = None,
        output_messages_key: str | None = None,
        history_messages_key: str | None = None,
        history_factory_config: Sequence[ConfigurableFieldSpec] | None = None,
        merge_system_messages: bool = True,
        **options: Any,
    ) -> None:
        if (get_session_history is None) == (om is None):
            raise TypeError("get_session_history, om: pass exactly one (om builds OM's chat history per session)")
        if om is not None and not isinstance(om, ObservationalMemory):
            raise TypeError(f"om: expected an ObservationalMemory, got {type(om).__name__}")
        if om is not None and history_factory_config is not None:
            raise TypeError("history_factory_config: only with get_session_history (om= reads session_id)")
        if not isinstance(merge_system_messages, bool):
            raise TypeError(f"merge_system_messages: expected a bool, got {type(merge_system_messages).__name__}")
        wrapped = with_merged_system_messages(runnable) if merge_system_messages else runnable
        with warnings.catch_warnings():  # the docstring says it once; a warning per construction reads as a fault
            warnings.filterwarnings("ignore", message="RunnableWithMessageHistory is deprecated",
                                    category=LangChainDeprecationWarning)
            super().__init__(
                wrapped,
                get_session_history if get_session_history is not None else _SessionHistories(om),  # type: ignore[arg-type]
                input_messages_key=input_messages_key,
                output_messages_key=output_messages_key,
                history_messages_key=history_messages_key,
                history_factory_config=history_factory_config,
                **options,
            )

    def _merge_configs(self, *configs: RunnableConfig | None) -> RunnableConfig:
        if any(spec.id == "session_id" for spec in self.history_factory_config):
            configs = tuple(_thread_as_session(c) for c in configs)
        config = super()._merge_configs(*configs)
        factory = self.get_session_history
        configurable = config["configurable"]
        if isinstance(factory, _SessionHistories):  # the user may be named per call: ask the run config
            history = configurable["message_history"]
            resource_id = resource_from(config)
            if resource_id is not None:
                configurable["message_history"] = ObservationalChatMessageHistory(
                    factory.om, history.thread_id, resource_id=resource_id)
        return config


def _thread_as_session(config: RunnableConfig | None) -> RunnableConfig | None:
    """``thread_id`` names the session, as in every other integration; ``session_id`` still works.
    Both given and different is refused: which conversation to read would be a guess."""
    configurable = (config or {}).get("configurable") or {}
    thread_id, session_id = configurable.get("thread_id"), configurable.get("session_id")
    if thread_id is None:
        return config
    if session_id is not None and session_id != thread_id:
        raise ValueError(f"configurable: thread_id {thread_id!r} and session_id {session_id!r} name different "
                         "conversations; pass one of them")
    return {**(config or {}), "configurable": {**configurable, "session_id": thread_id}}


class _SessionHistories:
    """The default ``get_session_history`` for ``om=``: one OM chat history per session id."""

    def __init__(self, om: ObservationalMemory) -> None:
        self.om = om

    def __call__(self, session_id: str) -> ObservationalChatMessageHistory:
        return ObservationalChatMessageHistory(self.om, session_id)


def with_merged_system_messages(runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """``runnable`` with ``one_system_message`` after each top-level prompt template and before each
    top-level language model; a runnable that hides both is returned as is, with a warning."""
    if _is_model(runnable):
        return one_system_message | runnable
    if isinstance(runnable, RunnableSequence):
        steps: list[Runnable[Any, Any]] = []
        for step in runnable.steps:
            if _is_model(step) and not (steps and steps[-1] is one_system_message):
                steps.append(one_system_message)
            steps.append(step)
            if isinstance(step, BasePromptTemplate):
                steps.append(one_system_message)
        if any(step is one_system_message for step in steps):
            return RunnableSequence(*steps, name=runnable.name)
    warnings.warn(
        f"RunnableWithObservationalMemory: cannot see a prompt template or a model at the top level of "
        f"{runnable.get_name()!r}, so a system message it puts before the history reaches the model "
        "beside OM's; put one_system_message before its model, or pass merge_system_messages=False",
        UnmergedSystemMessagesWarning, stacklevel=3)
    return runnable


def _is_model(step: Runnable[Any, Any]) -> bool:
    """A language model, also behind ``bind``/``bind_tools``/``with_config``/``with_retry``/fallbacks."""
    while True:
        if isinstance(step, BaseLanguageModel):
            return True
        if isinstance(step, RunnableBindingBase):
            step = step.bound
        elif isinstance(step, RunnableWithFallbacks):
            step = step.runnable
        else:
            return False
