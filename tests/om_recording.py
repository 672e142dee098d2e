"""A chat model that records what OM sends it (messages and call kwargs) — for issue 6's tests.

It answers through ``fn(messages)``; when OM binds tools for structured output it answers with a
tool call built by ``structured(schema_name, messages)``. ``usage`` / ``provider_metadata`` are
attached to every answer so hook tests can check they are passed on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.messages.ai import UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field


class RecordingModel(BaseChatModel):
    fn: Any = None
    structured: Any = None
    calls: list[dict[str, Any]] = Field(default_factory=list)
    usage: dict[str, int] | None = None
    provider_metadata: dict[str, Any] = Field(default_factory=dict)
    fail_times: int = 0
    temperature: float | None = None
    max_tokens: int | None = None

    @property
    def _llm_type(self) -> str:
        return "recording"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append({"messages": list(messages), "kwargs": dict(kwargs), "temperature": self.temperature,
                           "max_tokens": self.max_tokens})
        if self.fail_times > 0:
            self.fail_times -= 1
            raise RuntimeError("provider exploded")
        tools = kwargs.get("tools")
        if tools:
            name = tools[0]["function"]["name"] if "function" in tools[0] else tools[0].get("name", "tool")
            args = self.structured(name, messages) if self.structured else {}
            message = AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": "call_1",
                                                         "type": "tool_call"}])
        else:
            message = AIMessage(content=str(self.fn(messages)) if self.fn else "")
        if self.usage is not None:
            message.usage_metadata = cast(UsageMetadata, {"input_tokens": self.usage.get("input_tokens", 0),
                                                          "output_tokens": self.usage.get("output_tokens", 0),
                                                          "total_tokens": self.usage.get("total_tokens", 0)})
        message.response_metadata = dict(self.provider_metadata)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Runnable[Any, Any]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    # helpers for assertions -------------------------------------------------------------
    def prompts(self) -> list[list[BaseMessage]]:
        return [c["messages"] for c in self.calls]

    def text_prompts(self) -> list[str]:
        return ["\n".join(str(m.content) for m in c["messages"]) for c in self.calls if not c["kwargs"].get("tools")]

    def structured_calls(self) -> list[dict[str, Any]]:
        return [c for c in self.calls if c["kwargs"].get("tools")]


def observer_reply(extra: str = "", *, task: str = "Pick cat food.", title: str | None = None) -> str:
    text = ("<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 (09:00) User's cat Miso is allergic to chicken.\n"
            "* 🟡 (09:01) Assistant listed fish-based foods.\n</observations>\n"
            f"<current-task>{task}</current-task>\n<suggested-response>Ask about wet or dry food."
            "</suggested-response>")
    if title:
        text += f"\n<thread-title>{title}</thread-title>"
    return text + ("\n" + extra if extra else "")


Fn = Callable[[list[BaseMessage]], str]
