"""LongMemEval harness: ingest each question's haystack through OM, answer, judge, report.

Protocol (one question at a time, ``concurrency`` questions in parallel):

1. A fresh thread ``lme-<question_id>`` in **thread scope** (one thread per question). The
   haystack sessions are replayed in their given (chronological) order, each session's turns
   dated from ``haystack_dates`` (one minute apart), one ``aprocess`` call per user turn and
   its reply, so observation, buffering and reflection happen exactly as they would live.
   Background buffering is awaited at each session boundary (the user went away). Thread
   scope keeps each question's memory self-contained; the time gap between sessions is
   visible to the Observer through the message dates.
2. The question goes through ``aprocess`` too; the answer model gets OM's context (the
   observation log plus the unobserved tail) and an instruction stating the question date.
3. An LLM judge grades the answer yes/no with type-specific rules (``prompts.py``);
   abstention questions (``_abs``) are correct only if the model declines.
4. Each finished question is appended to the ``--out`` JSONL at once; a re-run skips
   question ids already there, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ..cli.literal import literal
from ..engine import ObservationalMemory
from ..foundation.messages import TIMESTAMP_KEY
from ..integrations.middleware import merge_system_messages
from ..model_calls.credentials import check_model_string
from ..model_calls.models import normalize_model_string
from ..store.base import implicit_resource
from ..store.sqlite import SQLiteStore
from .prompts import ANSWER_INSTRUCTIONS, JUDGE_SYSTEM, is_abstention, judge_prompt, parse_verdict
from .scripted import is_scripted, scripted_model

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


# ----------------------------------------------------------------------------- data


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


def load_longmemeval(path: str | Path) -> list[LongMemEvalItem]:
    """Read and validate a LongMemEval JSON file (a list of instances)."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"--data: no such file: {source}")
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise LongMemEvalDataError(f"--data: {source} is not valid JSON ({exc})") from exc
    if not isinstance(raw, list):
        raise LongMemEvalDataError(f"--data: {source} must hold a JSON list of questions")
    items: list[LongMemEvalItem] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw):
        try:
            item = LongMemEvalItem.model_validate(entry)
        except ValidationError as exc:
            first = exc.errors()[0]
            raise LongMemEvalDataError(f"data[{index}].{_error_path(first)}: {first['msg']}") from exc
        if item.question_id in seen:
            raise LongMemEvalDataError(f"data[{index}].question_id: duplicate id {item.question_id!r}")
        seen.add(item.question_id)
        items.append(item)
    return items


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


# --------------------------------------------------------------------------- models

ModelSpec = str | BaseChatModel


def resolve_model(spec: ModelSpec, field_name: str, role: str = "answer") -> BaseChatModel:
    """An ``init_chat_model`` string (``provider:model`` or ``provider/model``), ``"scripted"`` (the
    offline stand-in for ``role``, see ``scripted.py``) or a chat model instance."""
    if isinstance(spec, BaseChatModel):
        return spec
    if is_scripted(spec):
        return scripted_model(role)
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"{field_name}: expected a model string like 'openai:gpt-5-mini', got {spec!r}")
    from langchain.chat_models import init_chat_model

    # a missing key or package is named here, in one line, rather than by the provider SDK's own error
    check_model_string(spec, field_name)
    return init_chat_model(normalize_model_string(spec))


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


# -------------------------------------------------------------------------- running


@dataclass
class EvalSettings:
    """Everything ``langchain-om eval longmemeval`` takes (models may also be chat model instances)."""

    data: str | Path
    model: ModelSpec
    judge_model: ModelSpec | None = None
    om_model: ModelSpec | None = None
    out: str | Path = "longmemeval_results.jsonl"
    concurrency: int = 4
    limit: int | None = None
    db: str | Path | None = None
    question_types: Sequence[str] | None = None
    message_tokens: int | None = None
    observation_tokens: int | None = None
    extra_om_options: Mapping[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"concurrency: must be at least 1, got {self.concurrency}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit: must be at least 1, got {self.limit}")
        for name in ("message_tokens", "observation_tokens"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name}: must be positive, got {value}")

    @property
    def db_path(self) -> str:
        return str(self.db) if self.db is not None else str(self.out) + ".om.db"


@dataclass
class TypeScore:
    correct: int = 0
    total: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


@dataclass
class EvalSummary:
    """Scores over every selected question that has a result in the JSONL (this run and earlier ones)."""

    by_type: dict[str, TypeScore]
    overall: TypeScore
    abstention: TypeScore
    answered_this_run: int
    skipped: int
    pending: int
    errors: int
    out: str
    error_messages: list[str] = field(default_factory=list)

    @property
    def task_averaged(self) -> float:
        """Mean of per-type accuracies (LongMemEval reports it next to the overall figure)."""
        scores = [s.accuracy for s in self.by_type.values() if s.total]
        return sum(scores) / len(scores) if scores else 0.0


def read_results(path: str | Path) -> dict[str, dict[str, Any]]:
    """Finished questions by id. A line cut short by an interruption is ignored (and redone)."""
    results: dict[str, dict[str, Any]] = {}
    source = Path(path)
    if not source.exists():
        return results
    for line in source.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("question_id"), str) and "correct" in row:
            results.setdefault(row["question_id"], row)
    return results


class _ResultWriter:
    """Appends one JSON line per finished question, durably, one writer at a time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = asyncio.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and path.stat().st_size:
            with path.open("rb") as handle:
                handle.seek(-1, os.SEEK_END)
                last = handle.read(1)
            if last != b"\n":  # an interrupted write left half a line: start on a fresh one
                with path.open("a", encoding="utf-8") as handle:
                    handle.write("\n")

    async def write(self, row: Mapping[str, Any]) -> None:
        line = json.dumps(row, ensure_ascii=False) + "\n"
        async with self._lock:
            await asyncio.to_thread(self._append, line)

    def _append(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


async def evaluate_question(
    om: ObservationalMemory,
    item: LongMemEvalItem,
    answer_model: BaseChatModel,
    judge_model: BaseChatModel,
) -> dict[str, Any]:
    """Ingest, ask, judge one question; returns its JSONL row."""
    thread = f"lme-{item.question_id}"
    started = time.perf_counter()
    resource = implicit_resource(thread)  # questions run without a resource_id
    await om.store.adelete_thread(resource, thread)  # a question cut off mid-ingestion starts over
    await om.store.adelete_record(resource, thread)
    await om.store.aensure_thread(resource, thread, metadata={"question_id": item.question_id})
    observed_events: dict[str, int] = defaultdict(int)
    steps = 0
    for session in haystack_steps(item):
        for step in session:
            last = step[-1].response_metadata[TIMESTAMP_KEY]
            context = await om.aprocess(thread, step, now=datetime.fromisoformat(last))
            steps += 1
            for event in context.events:
                observed_events[event.type] += 1
        await om.await_background(thread)
    ingest_s = time.perf_counter() - started

    question = HumanMessage(content=item.question, id=f"{item.question_id}:question",
                            response_metadata={TIMESTAMP_KEY: item.asked_at.isoformat()})
    context = await om.aprocess(thread, [question], now=item.asked_at)
    for event in context.events:
        observed_events[event.type] += 1
    # exactly what production sends: the application's instructions merged with OM's context (which
    # states today's date: the question's), then the unobserved messages as they were stored
    system = merge_system_messages(SystemMessage(content=ANSWER_INSTRUCTIONS), context.system_message)
    prompt: list[BaseMessage] = [*([system] if system is not None else []), *context.messages]
    prompt_tokens = om.counter.count_messages(prompt)
    reply = await answer_model.ainvoke(prompt, config={"tags": ["langchain_om_eval", "answer"]})
    hypothesis = _text(reply).strip()
    answered_s = time.perf_counter() - started

    judge_messages: list[BaseMessage] = [
        SystemMessage(content=JUDGE_SYSTEM),
        HumanMessage(content=judge_prompt(question=item.question, answer=item.answer, response=hypothesis,
                                          question_type=item.question_type, abstention=item.abstention)),
    ]
    verdict_text = _text(await judge_model.ainvoke(judge_messages, config={"tags": ["langchain_om_eval", "judge"]}))
    verdict = parse_verdict(verdict_text)
    if verdict is None:  # one retry with a blunter reminder, then count it as wrong
        judge_messages.append(AIMessage(content=verdict_text))
        judge_messages.append(HumanMessage(content="Answer with exactly one word: yes or no."))
        verdict_text = _text(await judge_model.ainvoke(judge_messages))
        verdict = parse_verdict(verdict_text)
    record = await om.aget_record(thread)
    return {
        "question_id": item.question_id,
        "question_type": item.question_type,
        "abstention": item.abstention,
        "question": item.question,
        "answer": item.answer,
        "question_date": item.question_date,
        "hypothesis": hypothesis,
        "correct": bool(verdict),
        "judge_reply": verdict_text.strip()[:500],
        "judge_parsed": verdict is not None,
        "om": {
            "sessions": len(item.haystack_sessions),
            "steps": steps,
            "observation_tokens": record.observation_tokens,
            "generation_count": record.generation_count,
            "groups": len(record.groups),
            "unobserved_tokens": context.status.windows.active.messages.tokens,
            "prompt_tokens": prompt_tokens,
            "events": dict(observed_events),
        },
        "timing_s": {"ingest": round(ingest_s, 3), "total": round(time.perf_counter() - started, 3),
                     "answer": round(answered_s - ingest_s, 3)},
    }


def summarize(items: Sequence[LongMemEvalItem], results: Mapping[str, Mapping[str, Any]], **counts: Any
              ) -> EvalSummary:
    by_type: dict[str, TypeScore] = {}
    overall, abstention = TypeScore(), TypeScore()
    for item in items:
        row = results.get(item.question_id)
        if row is None:
            continue
        score = by_type.setdefault(item.question_type, TypeScore())
        hit = bool(row.get("correct"))
        for bucket in (score, overall) + ((abstention,) if item.abstention else ()):
            bucket.total += 1
            bucket.correct += hit
    ordered = {t: by_type[t] for t in (*QUESTION_TYPES, *sorted(set(by_type) - set(QUESTION_TYPES))) if t in by_type}
    return EvalSummary(by_type=ordered, overall=overall, abstention=abstention, **counts)


async def arun_longmemeval(
    settings: EvalSettings,
    *,
    console: Console | None = None,
    on_result: Callable[[Mapping[str, Any]], Any] | None = None,
) -> EvalSummary:
    """Run (or resume) the evaluation and return the scores; see the module docstring for the protocol."""
    settings.validate()
    out = console or Console()
    items = load_longmemeval(settings.data)
    if settings.question_types:
        wanted = set(settings.question_types)
        unknown = wanted - {i.question_type for i in items}
        if unknown:
            present = ", ".join(sorted({i.question_type for i in items}))
            raise ValueError(f"question_type: no questions of type {', '.join(sorted(unknown))} in "
                             f"{settings.data}; its types are: {present}")
        items = [i for i in items if i.question_type in wanted]
    out_path = Path(settings.out)
    done = read_results(out_path)
    pending = [i for i in items if i.question_id not in done]
    skipped = len(items) - len(pending)
    if settings.limit is not None:
        pending = pending[: settings.limit]

    answer_model = resolve_model(settings.model, "model")
    if settings.judge_model:
        judge_model = resolve_model(settings.judge_model, "judge_model", "judge")
    elif is_scripted(settings.model):
        judge_model = scripted_model("judge")  # the scripted reader cannot grade
    else:
        judge_model = answer_model
    om_spec: Any = settings.om_model if settings.om_model is not None else settings.model
    if is_scripted(om_spec):
        om_spec = scripted_model("om")
    elif isinstance(om_spec, str):
        om_spec = normalize_model_string(om_spec)
    observation: dict[str, Any] = {}
    reflection: dict[str, Any] = {}
    if settings.message_tokens:
        observation["message_tokens"] = settings.message_tokens
    if settings.observation_tokens:
        reflection["observation_tokens"] = settings.observation_tokens
    om = ObservationalMemory(SQLiteStore(settings.db_path), model=om_spec, observation=observation or None,
                             reflection=reflection or None, **dict(settings.extra_om_options))
    await om.store.asetup()
    writer = _ResultWriter(out_path)
    semaphore = asyncio.Semaphore(settings.concurrency)
    errors: list[str] = []
    correct_now = sum(1 for i in items if done.get(i.question_id, {}).get("correct"))
    finished_now = skipped

    out.print(literal(f"LongMemEval: {len(items)} questions in {settings.data}; {skipped} already in {out_path}, "
                      f"{len(pending)} to run (concurrency {settings.concurrency})."))
    progress = Progress(
        TextColumn("[bold blue]LongMemEval"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[accuracy]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=out,
    )

    async def run_one(item: LongMemEvalItem, task: Any) -> None:
        nonlocal correct_now, finished_now
        async with semaphore:
            try:
                row = await evaluate_question(om, item, answer_model, judge_model)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                message = f"{item.question_id}: {type(exc).__name__}: {exc}"
                errors.append(message)
                progress.console.print(Text.assemble(("failed", "red"), " ", literal(message)))  # data's own ids
                progress.advance(task)
                return
            await writer.write(row)
            done[item.question_id] = row
            finished_now += 1
            correct_now += bool(row["correct"])
            if on_result is not None:
                on_result(row)
            progress.update(task, advance=1, accuracy=f"accuracy {correct_now}/{finished_now} "
                                                      f"({100 * correct_now / finished_now:.1f}%)")

    try:
        with progress:
            task = progress.add_task("eval", total=skipped + len(pending), completed=skipped,
                                     accuracy=f"accuracy {correct_now}/{skipped}" if skipped else "")
            await asyncio.gather(*(run_one(item, task) for item in pending))
    finally:
        await om.aclose()

    summary = summarize(items, done, answered_this_run=len(pending) - len(errors), skipped=skipped,
                        pending=len(items) - len([i for i in items if i.question_id in done]), errors=len(errors),
                        out=str(out_path), error_messages=errors)
    print_summary(out, summary)
    return summary


def print_summary(out: Console, summary: EvalSummary) -> None:
    table = Table(title="LongMemEval accuracy")
    table.add_column("question type")
    table.add_column("correct", justify="right")
    table.add_column("total", justify="right")
    table.add_column("accuracy", justify="right")
    for name, score in summary.by_type.items():
        table.add_row(literal(name), str(score.correct), str(score.total), f"{100 * score.accuracy:.1f}%")
    if summary.abstention.total:
        table.add_row("(abstention, across types)", str(summary.abstention.correct), str(summary.abstention.total),
                      f"{100 * summary.abstention.accuracy:.1f}%")
    table.add_row("[bold]overall[/bold]", str(summary.overall.correct), str(summary.overall.total),
                  f"[bold]{100 * summary.overall.accuracy:.1f}%[/bold]")
    table.add_row("task-averaged", "", "", f"{100 * summary.task_averaged:.1f}%")
    out.print(table)
    out.print(literal(f"{summary.answered_this_run} answered this run, {summary.skipped} resumed from {summary.out}, "
                      f"{summary.pending} still pending, {summary.errors} failed."))


def run_longmemeval(settings: EvalSettings, *, console: Console | None = None) -> EvalSummary:
    """Sync wrapper of ``arun_longmemeval``."""
    return asyncio.run(arun_longmemeval(settings, console=console))
