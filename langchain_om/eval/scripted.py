"""Offline stand-ins for the harness's three models, selected with the model name ``scripted``.

``langchain-om eval longmemeval --model scripted`` runs the whole pipeline (ingestion through
OM, answering, judging, the table) without an API key, so the harness can be tried before a
paid run. The scores mean little: the reader answers with the memory line that shares the
most words with the question, and the judge checks that the reference answer's words appear
in the response. Only the mechanics are real.
"""

from __future__ import annotations

import re
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage

from ..foundation.context import READING_RULES
from ..testing import ScriptedChatModel, ScriptedObserverModel
from .prompts import ANSWER_INSTRUCTIONS

SCRIPTED = "scripted"
"""The model name that selects the offline models (``--model``, ``--judge-model``, ``--om-model``)."""

DONT_KNOW = "I don't know: that was not mentioned."
"""Says 'not mentioned', the phrase LoCoMo's scoring takes as declining an adversarial question."""

_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    "a an and are as at be by can could did do does for from had has have how i in is it its me my "
    "of on or our said say she so that the their them they this to was we were what when where which "
    "who why will with you your user assistant now currently many much".split()
)
_BULLET = re.compile(r"^\s*[*\-•]\s*(?:🔴|🟡|🟢)?\s*(?:\(\d{2}:\d{2}\))?\s*(?:User said:|Assistant)?\s*")
_TAG = re.compile(r"<{name}>\n(.*?)\n</{name}>")


def is_scripted(spec: object) -> bool:
    """Whether a model option asks for the offline stand-in."""
    return isinstance(spec, str) and spec.strip().lower() == SCRIPTED


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS}


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)


def read_answer(messages: list[BaseMessage]) -> str:
    """The memory line (observation or raw message) sharing the most words with the question."""
    humans = [m for m in messages if isinstance(m, HumanMessage)]
    if not humans:
        return DONT_KNOW
    question = humans[-1]
    wanted = _words(_text(question))
    instructions = set(ANSWER_INSTRUCTIONS.splitlines()) | set(READING_RULES.splitlines())
    best, best_score = "", 0
    for message in messages:
        if message is question:
            continue
        for line in _text(message).splitlines():
            if line in instructions or line.startswith("Today is "):
                continue
            score = len(wanted & _words(line))
            if score and score >= best_score:  # ties go to the later line: the latest value wins
                best, best_score = line, score
    if best_score < max(1, (len(wanted) + 1) // 2):
        return DONT_KNOW
    return _BULLET.sub("", best).strip() or DONT_KNOW


def _tagged(prompt: str, name: str) -> str:
    match = re.search(_TAG.pattern.format(name=name), prompt, re.DOTALL)
    return match.group(1) if match else ""


def judge(messages: list[BaseMessage]) -> str:
    """``yes`` when every word of the reference answer is in the response (or, for an
    unanswerable question, when the response declines)."""
    prompt = _text(messages[-1])
    response = _tagged(prompt, "response").lower()
    if "unanswerable question" in prompt:
        return "yes" if any(p in response for p in ("don't know", "never mentioned", "not mentioned")) else "no"
    reference = _words(_tagged(prompt, "reference-answer"))
    return "yes" if reference and reference <= _words(response) else "no"


def scripted_model(role: str) -> BaseChatModel:
    """The offline model for ``role``: ``"answer"``, ``"judge"`` or ``"om"`` (Observer/Reflector)."""
    if role == "om":
        return ScriptedObserverModel()
    responses: list[Any] = [judge if role == "judge" else read_answer]
    return ScriptedChatModel(model_name=f"scripted-{role}", responses=responses)
