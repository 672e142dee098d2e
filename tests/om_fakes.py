"""Fakes shared by the engine tests: realistic Observer/Reflector output and a dated conversation."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import Field

from langchain_om.foundation.messages import TIMESTAMP_KEY

START = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)

OBSERVATION = """<observations>
Date: 2026-11-30 (Monday)
* 🔴 (09:00) User said their cat is named Miso and is allergic to chicken.
* 🟡 (09:01) Assistant suggested three fish-based cat foods.
</observations>
<current-task>Help the user pick cat food without chicken.</current-task>
<suggested-response>Ask whether Miso prefers wet or dry food.</suggested-response>"""

REFLECTION = """<observations>
Date: 2026-11-30 (Monday)
* 🔴 User's cat Miso is allergic to chicken.
</observations>"""


def is_reflector_prompt(messages: list[BaseMessage]) -> bool:
    from langchain_om.model_calls.reflector import build_reflector_messages

    marker = build_reflector_messages("x", instruction=None, level=0, target_tokens=None)[0].content
    return str(messages[0].content)[:80] == str(marker)[:80]


def conversation(turns: int, *, start: datetime = START, words: int = 30) -> Iterator[list[BaseMessage]]:
    """Yields the growing history one turn (human + AI) at a time, with timestamps."""
    history: list[BaseMessage] = []
    for turn in range(turns):
        moment = start + timedelta(minutes=2 * turn)
        filler = " ".join(f"detail{turn}_{i}" for i in range(words))
        history.append(HumanMessage(f"Turn {turn}: tell me about food option {turn}. {filler}", id=f"h{turn}",
                                    response_metadata={TIMESTAMP_KEY: moment.isoformat()}))
        yield list(history)
        history.append(AIMessage(f"Answer {turn}: option {turn} is fine. {filler}", id=f"a{turn}",
                                 response_metadata={TIMESTAMP_KEY: (moment + timedelta(seconds=30)).isoformat()}))


class CallableFake(FakeListChatModel):
    """Answers by calling ``fn(messages)``, records every prompt, raises on the call indexes in ``fail_on``."""

    fn: Any = None
    responses: list[str] = Field(default_factory=lambda: ["unused"])
    prompts: list[list[BaseMessage]] = Field(default_factory=list)
    fail_on: list[int] = Field(default_factory=list)

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(list(messages))
        if len(self.prompts) - 1 in self.fail_on:
            raise RuntimeError("provider exploded")
        return str(self.fn(messages))



    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self


def observer_or_reflector(messages: list[BaseMessage]) -> str:
    return REFLECTION if is_reflector_prompt(messages) else OBSERVATION
