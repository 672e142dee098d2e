"""LongMemEval's data: the published JSON shape, validated, read one question at a time, and
each question's haystack as the dated messages OM is given.

The S and oracle files fit in memory, the M variant (2.7 GB, ~500 sessions a question) does not:
``iter_longmemeval`` validates and yields one question at a time from a stream, so a run holds
only the questions it is working on.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..foundation.messages import TIMESTAMP_KEY
from .json_stream import JSONStreamError, iter_json_array
from .prompts import is_abstention

QUESTION_TYPES = (
    "single-session-user",
    "single-session-assistant",
    "single-session-preference",
    "temporal-reasoning",
    "knowledge-update",
    "multi-session",
)
TURN_SPACING = timedelta(minutes=1)


class LongMemEvalDataError(ValueError):
    """The dataset file is malformed; the message names the item and field."""


class Turn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str
    content: str
    has_answer: bool | None = None

    @field_validator("role")
    @classmethod
    def _role(cls, value: str) -> str:
        if value not in ("user", "assistant"):
            raise ValueError(f"must be 'user' or 'assistant', got {value!r}")
        return value


class LongMemEvalItem(BaseModel):
    """One evaluation instance in the published LongMemEval JSON format."""

    model_config = ConfigDict(extra="allow")

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: str
    haystack_dates: list[str]
    haystack_session_ids: list[str] = Field(default_factory=list)
    haystack_sessions: list[list[Turn]]
    answer_session_ids: list[str] = Field(default_factory=list)

    @field_validator("answer", mode="before")
    @classmethod
    def _answer(cls, value: Any) -> Any:
        # some published answers are numbers
        return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value

    @field_validator("question_date")
    @classmethod
    def _question_date(cls, value: str) -> str:
        parse_lme_date(value)
        return value

    @field_validator("haystack_dates")
    @classmethod
    def _dates(cls, value: list[str]) -> list[str]:
        for stamp in value:
            parse_lme_date(stamp)
        return value

    @model_validator(mode="after")
    def _lengths(self) -> LongMemEvalItem:
        if len(self.haystack_dates) != len(self.haystack_sessions):
            raise ValueError(f"haystack_dates has {len(self.haystack_dates)} entries but haystack_sessions has "
                             f"{len(self.haystack_sessions)}")
        if self.haystack_session_ids and len(self.haystack_session_ids) != len(self.haystack_sessions):
            raise ValueError("haystack_session_ids must have one id per session")
        if not self.haystack_session_ids:
            self.haystack_session_ids = [f"session_{i}" for i in range(len(self.haystack_sessions))]
        return self

    @property
    def abstention(self) -> bool:
        return is_abstention(self.question_id)

    @property
    def asked_at(self) -> datetime:
        return parse_lme_date(self.question_date)


def parse_lme_date(text: str) -> datetime:
    """``"2023/05/30 (Tue) 23:40"`` (the dataset's format) or ISO 8601 -> aware datetime (UTC if naive)."""
    raw = str(text).strip()
    cleaned = raw.split(" (")[0] + (" " + raw.rsplit(") ", 1)[1] if ") " in raw else "")
    for fmt in ("%Y/%m/%d %H:%M", "%Y/%m/%d", "%Y-%m-%d %H:%M"):
        try:
            return datetime.strptime(cleaned, fmt).replace(tzinfo=timezone.utc)
        except ValueError:
            continue
    try:
        parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not a LongMemEval date ('2023/05/30 (Tue) 23:40') or ISO timestamp: {raw!r}") from exc
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def _error_path(error: Any) -> str:
    return ".".join(str(part) for part in error["loc"])


def iter_longmemeval(path: str | Path) -> Iterator[LongMemEvalItem]:
    """Validated questions of a LongMemEval JSON file (``.xz`` / ``.gz`` too), one at a time: the
    M variant (2.7 GB) is never held whole, only the question being read."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"--data: no such file: {source}")
    seen: set[str] = set()
    try:
        for index, entry in enumerate(iter_json_array(source)):
            try:
                item = LongMemEvalItem.model_validate(entry)
            except ValidationError as exc:
                first = exc.errors()[0]
                raise LongMemEvalDataError(f"data[{index}].{_error_path(first)}: {first['msg']}") from exc
            if item.question_id in seen:
                raise LongMemEvalDataError(f"data[{index}].question_id: duplicate id {item.question_id!r}")
            seen.add(item.question_id)
            yield item
    except JSONStreamError as exc:
        raise LongMemEvalDataError(f"--data: {exc}") from exc


def load_longmemeval(path: str | Path) -> list[LongMemEvalItem]:
    """Read and validate a whole LongMemEval JSON file (a list of instances); for the S and oracle
    variants. The harness streams with ``iter_longmemeval`` instead."""
    return list(iter_longmemeval(path))


def haystack_steps(item: LongMemEvalItem) -> list[list[list[BaseMessage]]]:
    """Sessions -> steps -> messages, dated from ``haystack_dates`` with deterministic ids."""
    sessions: list[list[list[BaseMessage]]] = []
    for s_index, (session, stamp) in enumerate(zip(item.haystack_sessions, item.haystack_dates, strict=True)):
        start = parse_lme_date(stamp)
        steps: list[list[BaseMessage]] = []
        for t_index, turn in enumerate(session):
            meta = {TIMESTAMP_KEY: (start + t_index * TURN_SPACING).isoformat()}
            mid = f"{item.question_id}:{s_index}:{t_index}"
            message: BaseMessage = (HumanMessage(content=turn.content, id=mid, response_metadata=meta)
                                    if turn.role == "user"
                                    else AIMessage(content=turn.content, id=mid, response_metadata=meta))
            if turn.role == "user" or not steps:
                steps.append([])
            steps[-1].append(message)
        if steps:
            sessions.append(steps)
    return sessions
