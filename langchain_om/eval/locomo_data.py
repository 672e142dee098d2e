"""LoCoMo's data (``data/locomo10.json`` of snap-research/LoCoMo): long dated conversations between
two speakers, and questions with a category and the dialogue ids of their evidence.

LoCoMo is licensed for non-commercial use, so the project ships none of it: a user points the
harness at their own copy. Each sample holds ``conversation`` (``speaker_a``, ``speaker_b``,
``session_<n>`` turn lists, ``session_<n>_date_time`` stamps such as ``"1:56 pm on 8 May, 2023"``;
a turn has ``speaker``, ``dia_id`` like ``"D1:3"``, ``text`` and, for a shared photo, a
``blip_caption``) and ``qa`` (``question``, ``answer`` or, for adversarial questions,
``adversarial_answer``, ``evidence`` dialogue ids and ``category``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from .json_stream import JSONStreamError, iter_json_array

CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
"""LoCoMo's category numbers as its evaluation code scores them (1: answers split on commas,
3: only the part before ';', 5: correct only when the answer says the information is missing)."""
ADVERSARIAL = 5

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DIA_ID = re.compile(r"^D(\d+):(\d+)$")


class LoCoMoDataError(ValueError):
    """The file is not in LoCoMo's shape; the message names the sample and field."""


@dataclass(frozen=True)
class LoCoMoTurn:
    speaker: str
    dia_id: str
    text: str
    """The turn's words, and a shared photo's caption as ``[shares a photo: ...]``."""


@dataclass(frozen=True)
class LoCoMoSession:
    number: int
    when: datetime
    turns: list[LoCoMoTurn]


@dataclass(frozen=True)
class LoCoMoQuestion:
    question_id: str
    question: str
    answer: str
    category: int
    evidence: list[str]

    @property
    def category_name(self) -> str:
        return CATEGORIES.get(self.category, f"category-{self.category}")

    @property
    def adversarial(self) -> bool:
        return self.category == ADVERSARIAL

    @property
    def evidence_sessions(self) -> set[int]:
        """Session numbers the evidence ids point at (``"D3:5"`` -> 3)."""
        return {int(m.group(1)) for e in self.evidence if (m := _DIA_ID.match(e.strip()))}


@dataclass(frozen=True)
class LoCoMoSample:
    sample_id: str
    speaker_a: str
    speaker_b: str
    sessions: list[LoCoMoSession]
    questions: list[LoCoMoQuestion]


def parse_locomo_date(text: str) -> datetime:
    """``"1:56 pm on 8 May, 2023"`` -> an aware datetime (UTC)."""
    cleaned = " ".join(str(text).replace(",", " ").split())
    for fmt in ("%I:%M %p on %d %B %Y", "%I:%M %p on %d %b %Y", "%d %B %Y"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    raise ValueError(f"not a LoCoMo date ('1:56 pm on 8 May, 2023'): {text!r}")


def _text(value: Any, where: str) -> str:
    if isinstance(value, bool) or value is None:
        raise LoCoMoDataError(f"{where}: expected text, got {value!r}")
    if isinstance(value, (int, float)):
        return str(value)  # some answers are years or counts
    if not isinstance(value, str):
        raise LoCoMoDataError(f"{where}: expected text, got {type(value).__name__}")
    return value


def parse_sample(raw: Any, index: int) -> LoCoMoSample:
    """One element of the file, checked; errors name ``data[i].field``."""
    where = f"data[{index}]"
    if not isinstance(raw, dict) or not isinstance(raw.get("conversation"), dict):
        raise LoCoMoDataError(f"{where}.conversation: expected an object with session_<n> lists")
    conversation = raw["conversation"]
    sessions: list[LoCoMoSession] = []
    for key, turns in conversation.items():
        match = _SESSION_KEY.match(key)
        if match is None or not isinstance(turns, list):
            continue
        number = int(match.group(1))
        stamp = conversation.get(f"{key}_date_time")
        try:
            when = parse_locomo_date(_text(stamp, f"{where}.conversation.{key}_date_time"))
        except ValueError as exc:
            raise LoCoMoDataError(f"{where}.conversation.{key}_date_time: {exc}") from exc
        parsed: list[LoCoMoTurn] = []
        for t, turn in enumerate(turns):
            at = f"{where}.conversation.{key}[{t}]"
            if not isinstance(turn, dict):
                raise LoCoMoDataError(f"{at}: expected an object")
            text = _text(turn.get("text", ""), f"{at}.text")
            caption = turn.get("blip_caption")
            if isinstance(caption, str) and caption.strip():
                text = f"{text} [shares a photo: {caption.strip()}]".strip()
            parsed.append(LoCoMoTurn(speaker=_text(turn.get("speaker"), f"{at}.speaker"),
                                     dia_id=_text(turn.get("dia_id"), f"{at}.dia_id"), text=text))
        sessions.append(LoCoMoSession(number=number, when=when, turns=parsed))
    if not sessions:
        raise LoCoMoDataError(f"{where}.conversation: no session_<n> lists")
    sessions.sort(key=lambda s: s.number)
    sample_id = _text(raw.get("sample_id", f"sample-{index}"), f"{where}.sample_id")
    questions: list[LoCoMoQuestion] = []
    for q, qa in enumerate(raw.get("qa") or []):
        at = f"{where}.qa[{q}]"
        if not isinstance(qa, dict):
            raise LoCoMoDataError(f"{at}: expected an object")
        category = qa.get("category")
        if not isinstance(category, int) or isinstance(category, bool):
            raise LoCoMoDataError(f"{at}.category: expected a number 1-5, got {category!r}")
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        evidence = qa.get("evidence") or []
        if not isinstance(evidence, list):
            raise LoCoMoDataError(f"{at}.evidence: expected a list of dialogue ids")
        questions.append(LoCoMoQuestion(
            question_id=f"{sample_id}:{q}", question=_text(qa.get("question"), f"{at}.question"),
            answer="" if category == ADVERSARIAL else _text(answer, f"{at}.answer"), category=category,
            evidence=[str(e) for e in evidence]))
    return LoCoMoSample(sample_id=sample_id, speaker_a=_text(conversation.get("speaker_a"), f"{where}.speaker_a"),
                        speaker_b=_text(conversation.get("speaker_b"), f"{where}.speaker_b"),
                        sessions=sessions, questions=questions)


def iter_locomo(path: str | Path) -> Iterator[LoCoMoSample]:
    """The samples of a LoCoMo file (``.xz`` / ``.gz`` too), checked, one at a time."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"--data: no such file: {source}")
    try:
        for index, raw in enumerate(iter_json_array(source)):
            yield parse_sample(raw, index)
    except JSONStreamError as exc:
        raise LoCoMoDataError(f"--data: {exc}") from exc


def is_locomo(first: Any) -> bool:
    """Whether a file's first element has LoCoMo's shape (rather than LongMemEval's)."""
    return isinstance(first, dict) and "conversation" in first and "qa" in first
