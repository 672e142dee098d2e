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
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..cli.literal import literal
from ..engine import ObservationalMemory
from ..foundation.messages import TIMESTAMP_KEY
from ..integrations.middleware import merge_system_messages
from ..model_calls.spend import record_spend
from ..store.base import implicit_resource
from .lme_data import (
    QUESTION_TYPES,
    TURN_SPACING,
    LongMemEvalDataError,
    LongMemEvalItem,
    Turn,
    haystack_steps,
    iter_longmemeval,
    load_longmemeval,
    parse_lme_date,
)
from .prompts import ANSWER_INSTRUCTIONS, JUDGE_SYSTEM, judge_prompt, parse_verdict
from .runner import (
    ModelSpec,
    ResultWriter,
    RunSettings,
    StreamRun,
    ask,
    model_name,
    print_spend,
    read_results,
    resolve_model,
)
from .scripted import is_scripted, scripted_model
from .spend import PriceTable, add_call, add_spend, ordered

__all__ = [
    "QUESTION_TYPES", "TURN_SPACING", "EvalSettings", "EvalSummary", "LongMemEvalDataError", "LongMemEvalItem",
    "Turn", "arun_longmemeval", "evaluate_question", "haystack_steps", "iter_longmemeval", "load_longmemeval",
    "parse_lme_date", "read_results", "resolve_model", "run_longmemeval",
]


@dataclass
class EvalSettings(RunSettings):
    """Everything ``langchain-om eval longmemeval`` takes (models may also be chat model instances)."""

    out: str | Path = "longmemeval_results.jsonl"
    concurrency: int = 4
    judge_model: ModelSpec | None = None
    question_types: Sequence[str] | None = None

    def validate(self) -> None:
        super().validate()
        unknown = set(self.question_types or ()) - set(QUESTION_TYPES)
        if unknown:  # checked before the (possibly long) stream is read
            raise ValueError(f"question_type: {', '.join(sorted(unknown))} is not a LongMemEval question type; "
                             f"the types are: {', '.join(QUESTION_TYPES)}")

    def role_models(self) -> dict[str, str]:
        """The model each paid role runs on, by the name a price table knows it."""
        om = self.om_model if self.om_model is not None else self.model
        judge = self.judge_model if self.judge_model is not None else self.model
        return {"observer": model_name(om), "reflector": model_name(om), "answer": model_name(self.model),
                "judge": model_name(judge)}


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
    spend: dict[str, dict[str, int]] = field(default_factory=dict)
    """Tokens of every scored question (this run and resumed ones), per role."""
    selected: int = 0
    """Questions of the file this run selects (by type), done or not."""
    cost: float | None = None
    """What the scored questions cost at the given prices (None without prices)."""
    unpriced: list[str] = field(default_factory=list)

    @property
    def task_averaged(self) -> float:
        """Mean of per-type accuracies (LongMemEval reports it next to the overall figure)."""
        scores = [s.accuracy for s in self.by_type.values() if s.total]
        return sum(scores) / len(scores) if scores else 0.0

    @property
    def projected_cost(self) -> float | None:
        """The cost of every selected question, at the mean cost of those scored so far."""
        if self.cost is None or not self.overall.total:
            return None
        return self.cost / self.overall.total * self.selected


async def evaluate_question(
    om: ObservationalMemory,
    item: LongMemEvalItem,
    answer_model: BaseChatModel,
    judge_model: BaseChatModel,
    prices: PriceTable | None = None,
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
    # the record is read before the answer: any Observer/Reflector call of the question's own turn is in it
    record = await om.aget_record(thread)
    spend: dict[str, dict[str, int]] = {}
    for role, used in (record_spend(record.metadata) or {}).items():
        add_call(spend, role, int(used.get("input_tokens") or 0), int(used.get("output_tokens") or 0))
        spend[role]["calls"] = int(used.get("calls") or 0)
    hypothesis = (await ask(answer_model, prompt, role="answer", counter=om.counter, spend=spend)).strip()
    answered_s = time.perf_counter() - started

    judge_messages: list[BaseMessage] = [
        SystemMessage(content=JUDGE_SYSTEM),
        HumanMessage(content=judge_prompt(question=item.question, answer=item.answer, response=hypothesis,
                                          question_type=item.question_type, abstention=item.abstention)),
    ]
    verdict_text = await ask(judge_model, judge_messages, role="judge", counter=om.counter, spend=spend)
    verdict = parse_verdict(verdict_text)
    if verdict is None:  # one retry with a blunter reminder, then count it as wrong
        judge_messages.append(AIMessage(content=verdict_text))
        judge_messages.append(HumanMessage(content="Answer with exactly one word: yes or no."))
        verdict_text = await ask(judge_model, judge_messages, role="judge", counter=om.counter, spend=spend)
        verdict = parse_verdict(verdict_text)
    row: dict[str, Any] = {
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
        "spend": {role: spend[role] for role in ordered(spend)},
        "timing_s": {"ingest": round(ingest_s, 3), "total": round(time.perf_counter() - started, 3),
                     "answer": round(answered_s - ingest_s, 3)},
    }
    if prices is not None:
        row["cost_usd"] = round(prices.cost(spend), 6)
    return row


@dataclass(frozen=True)
class _Seen:
    """What the summary needs of a question once its haystack is gone."""

    question_id: str
    question_type: str
    abstention: bool


def summarize(items: Sequence[LongMemEvalItem | _Seen], results: Mapping[str, Mapping[str, Any]],
              prices: PriceTable | None = None, **counts: Any) -> EvalSummary:
    by_type: dict[str, TypeScore] = {}
    overall, abstention = TypeScore(), TypeScore()
    spend: dict[str, dict[str, int]] = {}
    for item in items:
        row = results.get(item.question_id)
        if row is None:
            continue
        score = by_type.setdefault(item.question_type, TypeScore())
        hit = bool(row.get("correct"))
        for bucket in (score, overall) + ((abstention,) if item.abstention else ()):
            bucket.total += 1
            bucket.correct += hit
        add_spend(spend, row.get("spend") or {})
    ordered_types = {t: by_type[t] for t in (*QUESTION_TYPES, *sorted(set(by_type) - set(QUESTION_TYPES)))
                     if t in by_type}
    cost = prices.cost(spend) if prices is not None else None
    unpriced = prices.unpriced(spend) if prices is not None else []
    return EvalSummary(by_type=ordered_types, overall=overall, abstention=abstention, spend=spend,
                       selected=len(items), cost=cost, unpriced=unpriced, **counts)


def _existing(path: str | Path) -> Path:
    """The data file, named as the flag that gave it when missing (before any model is set up)."""
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"--data: no such file: {source}")
    return source


async def arun_longmemeval(
    settings: EvalSettings,
    *,
    console: Console | None = None,
    on_result: Callable[[Mapping[str, Any]], Any] | None = None,
) -> EvalSummary:
    """Run (or resume) the evaluation and return the scores; see the module docstring for the protocol.

    The file is streamed: questions are read one at a time as a worker frees up, so memory holds
    ``concurrency`` questions whatever the file's size (LongMemEval M included)."""
    settings.validate()
    out = console or Console()
    source = _existing(settings.data)
    prices = PriceTable.build(files=settings.price_files, entries=settings.prices, models=settings.role_models())
    wanted = set(settings.question_types or ())
    stream = (item for item in iter_longmemeval(source) if not wanted or item.question_type in wanted)
    out_path = Path(settings.out)
    done = read_results(out_path)

    answer_model = resolve_model(settings.model, "model")
    if settings.judge_model:
        judge_model = resolve_model(settings.judge_model, "judge_model", "judge")
    elif is_scripted(settings.model):
        judge_model = scripted_model("judge")  # the scripted reader cannot grade
    else:
        judge_model = answer_model
    om = settings.om_memory()
    await om.store.asetup()
    writer = ResultWriter(out_path)
    errors: list[str] = []
    seen: list[_Seen] = []
    counts = {"correct": 0, "finished": 0, "skipped": 0}

    out.print(literal(f"LongMemEval: streaming {settings.data}; {len(done)} questions already in {out_path} "
                      f"(concurrency {settings.concurrency}"
                      f"{f', at most {settings.limit} new' if settings.limit else ''})."))
    progress = Progress(TextColumn("[bold blue]LongMemEval"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("{task.fields[accuracy]}"), TimeElapsedColumn(), console=out)
    task = progress.add_task("eval", total=None, accuracy="")

    def on_seen(item: LongMemEvalItem, skipped: bool) -> None:
        seen.append(_Seen(item.question_id, item.question_type, item.abstention))
        if item.question_id in done:
            counts["skipped"] += 1
            counts["finished"] += 1
            counts["correct"] += bool(done[item.question_id].get("correct"))
            progress.update(task, advance=1)

    def on_error(item: LongMemEvalItem, exc: Exception) -> None:
        message = f"{item.question_id}: {type(exc).__name__}: {exc}"
        errors.append(message)
        progress.console.print(Text.assemble(("failed", "red"), " ", literal(message)))  # data's own ids

    async def on_row(item: LongMemEvalItem, row: dict[str, Any]) -> None:
        await writer.write(row)
        done[item.question_id] = row
        counts["finished"] += 1
        counts["correct"] += bool(row["correct"])
        if on_result is not None:
            on_result(row)
        progress.update(task, advance=1, accuracy=f"accuracy {counts['correct']}/{counts['finished']} "
                                                  f"({100 * counts['correct'] / counts['finished']:.1f}%)")

    async def evaluate(item: LongMemEvalItem) -> dict[str, Any]:
        return await evaluate_question(om, item, answer_model, judge_model, prices)

    run = StreamRun(items=stream, key=lambda item: item.question_id, done=done, evaluate=evaluate, on_row=on_row,
                    on_error=on_error, on_seen=on_seen, concurrency=settings.concurrency, limit=settings.limit)
    try:
        with progress:
            await run.run()
    finally:
        await om.aclose()

    summary = summarize(seen, done, prices, answered_this_run=run.started - len(errors), skipped=counts["skipped"],
                        pending=sum(1 for s in seen if s.question_id not in done), errors=len(errors),
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
    print_spend(out, summary.spend, summary.overall.total, summary.selected, summary.cost, summary.projected_cost,
                summary.unpriced)
    out.print(literal(f"{summary.answered_this_run} answered this run, {summary.skipped} resumed from {summary.out}, "
                      f"{summary.pending} still pending, {summary.errors} failed."))


def run_longmemeval(settings: EvalSettings, *, console: Console | None = None) -> EvalSummary:
    """Sync wrapper of ``arun_longmemeval``."""
    return asyncio.run(arun_longmemeval(settings, console=console))
