"""LoCoMo harness (``langchain-om eval locomo``): each conversation through OM, then its
questions answered from OM's context and scored with LoCoMo's token F1.

Protocol, per sample (``concurrency`` samples at once, the file streamed):

1. A fresh thread ``locomo-<sample_id>`` in thread scope. The sessions are replayed in order,
   each turn dated from its session's stamp (one minute apart): the first speaker's turns as
   the user's messages, the second's as the replies, each prefixed with the speaker's name,
   one ``aprocess`` call per exchange. Background work is awaited at each session's end.
2. OM's context is built once after the last session (dated then); every question is asked
   on top of it, never stored, so one question cannot change another's memory.
3. The answer model replies with a short phrase; the score is LoCoMo's (``locomo_score.py``):
   token F1 per category, adversarial questions apart.
4. A finished sample's rows (one per question, then the sample's own) are appended at once to
   ``--out``; a re-run skips the samples already there.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cli.literal import literal
from ..engine import ObservationalMemory
from ..foundation.messages import TIMESTAMP_KEY
from ..integrations.middleware import merge_system_messages
from ..model_calls.spend import record_spend
from ..store.base import implicit_resource
from .locomo_data import CATEGORIES, LoCoMoSample, iter_locomo
from .locomo_score import LoCoMoScores, score_answer
from .prompts import LOCOMO_ANSWER_INSTRUCTIONS
from .runner import ResultWriter, RunSettings, StreamRun, ask, model_name, print_spend, resolve_model
from .spend import PriceTable, add_call, add_spend

TURN_SPACING = timedelta(minutes=1)


@dataclass
class LoCoMoSettings(RunSettings):
    """Everything ``langchain-om eval locomo`` takes (models may also be chat model instances);
    ``limit`` counts new samples (conversations)."""

    out: str | Path = "locomo_results.jsonl"
    concurrency: int = 2
    categories: Sequence[int] | None = None

    def validate(self) -> None:
        super().validate()
        unknown = set(self.categories or ()) - set(CATEGORIES)
        if unknown:
            raise ValueError(f"category: {sorted(unknown)} is not a LoCoMo category; the categories are "
                             + ", ".join(f"{n} ({name})" for n, name in CATEGORIES.items()))

    def role_models(self) -> dict[str, str]:
        om = model_name(self.om_model if self.om_model is not None else self.model)
        return {"observer": om, "reflector": om, "answer": model_name(self.model)}


def conversation_steps(sample: LoCoMoSample) -> list[list[list[BaseMessage]]]:
    """Sessions -> exchanges -> messages: the first speaker's turns as human messages, the
    other's as AI messages, each named, dated from the session's stamp, with the dialogue id."""
    sessions: list[list[list[BaseMessage]]] = []
    for session in sample.sessions:
        steps: list[list[BaseMessage]] = []
        for t, turn in enumerate(session.turns):
            meta = {TIMESTAMP_KEY: (session.when + t * TURN_SPACING).isoformat()}
            text = f"{turn.speaker}: {turn.text}"
            mid = f"{sample.sample_id}:{turn.dia_id}:{t}"
            first = turn.speaker == sample.speaker_a
            message: BaseMessage = (HumanMessage(content=text, id=mid, response_metadata=meta) if first
                                    else AIMessage(content=text, id=mid, response_metadata=meta))
            if first or not steps:
                steps.append([])
            steps[-1].append(message)
        if steps:
            sessions.append(steps)
    return sessions


async def evaluate_sample(om: ObservationalMemory, sample: LoCoMoSample, answer_model: BaseChatModel,
                          settings: LoCoMoSettings, prices: PriceTable | None = None) -> list[dict[str, Any]]:
    """Ingest one conversation, answer and score its questions; returns its rows (questions, then the sample)."""
    thread = f"locomo-{sample.sample_id}"
    started = time.perf_counter()
    resource = implicit_resource(thread)
    await om.store.adelete_thread(resource, thread)  # a sample cut off mid-ingestion starts over
    await om.store.adelete_record(resource, thread)
    await om.store.aensure_thread(resource, thread, metadata={"sample_id": sample.sample_id})
    steps = 0
    last = None
    for session in conversation_steps(sample):
        for step in session:
            last = step[-1].response_metadata[TIMESTAMP_KEY]
            await om.aprocess(thread, step, now=datetime.fromisoformat(last))
            steps += 1
        await om.await_background(thread)
    context = await om.aprocess(thread, [], now=datetime.fromisoformat(last) if last else None)
    ingest_s = time.perf_counter() - started
    record = await om.aget_record(thread)
    om_spend: dict[str, dict[str, int]] = {}
    for role, used in (record_spend(record.metadata) or {}).items():
        add_call(om_spend, role, int(used.get("input_tokens") or 0), int(used.get("output_tokens") or 0))
        om_spend[role]["calls"] = int(used.get("calls") or 0)
    system = merge_system_messages(SystemMessage(content=LOCOMO_ANSWER_INSTRUCTIONS), context.system_message)
    base: list[BaseMessage] = [*([system] if system is not None else []), *context.messages]
    wanted = set(settings.categories or ())
    questions = [q for q in sample.questions if not wanted or q.category in wanted]

    async def answer(index: int) -> dict[str, Any]:
        q = questions[index]
        spend: dict[str, dict[str, int]] = {}
        prediction = (await ask(answer_model, [*base, HumanMessage(content=q.question)], role="answer",
                                counter=om.counter, spend=spend)).strip()
        return {"kind": "question", "sample_id": sample.sample_id, "question_id": q.question_id,
                "category": q.category, "category_name": q.category_name, "question": q.question,
                "answer": q.answer, "prediction": prediction, "score": round(score_answer(prediction, q.answer,
                                                                                         q.category), 6),
                "evidence": q.evidence, "spend": spend}

    rows = list(await asyncio.gather(*(answer(i) for i in range(len(questions)))))
    answer_spend: dict[str, dict[str, int]] = {}
    for row in rows:
        add_spend(answer_spend, row["spend"])
    sample_row: dict[str, Any] = {
        "kind": "sample", "sample_id": sample.sample_id, "questions": len(questions),
        "om": {"sessions": len(sample.sessions), "steps": steps, "observation_tokens": record.observation_tokens,
               "generation_count": record.generation_count, "prompt_tokens": om.counter.count_messages(base)},
        "spend": om_spend,
        "timing_s": {"ingest": round(ingest_s, 3), "total": round(time.perf_counter() - started, 3)},
    }
    if prices is not None:
        sample_row["cost_usd"] = round(prices.cost({**om_spend, **answer_spend}), 6)
    return [*rows, sample_row]


def read_locomo_results(path: str | Path) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Finished samples (their sample rows) and question rows by id (the latest row wins: a
    sample redone after an interruption rewrote them). A cut-off line is ignored."""
    samples: dict[str, dict[str, Any]] = {}
    questions: dict[str, dict[str, Any]] = {}
    source = Path(path)
    if not source.exists():
        return samples, questions
    with source.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if not isinstance(row, dict):
                continue
            if row.get("kind") == "sample" and isinstance(row.get("sample_id"), str):
                samples[row["sample_id"]] = row
            elif row.get("kind") == "question" and isinstance(row.get("question_id"), str):
                questions[row["question_id"]] = row
    return samples, questions


@dataclass
class LoCoMoSummary:
    scores: LoCoMoScores
    samples_done: int
    samples_seen: int
    answered_this_run: int
    errors: list[str]
    spend: dict[str, dict[str, int]]
    cost: float | None
    unpriced: list[str]

    @property
    def projected_cost(self) -> float | None:
        """The cost of every sample of the file, at the mean cost of the samples done."""
        if self.cost is None or not self.samples_done:
            return None
        return self.cost / self.samples_done * self.samples_seen


async def arun_locomo(settings: LoCoMoSettings, *, console: Console | None = None) -> LoCoMoSummary:
    """Run (or resume) the LoCoMo evaluation and return the scores; see the module docstring."""
    settings.validate()
    out = console or Console()
    stream = iter_locomo(_existing(settings.data))
    prices = PriceTable.build(files=settings.price_files, entries=settings.prices, models=settings.role_models())
    out_path = Path(settings.out)
    done, question_rows = read_locomo_results(out_path)
    answer_model = resolve_model(settings.model, "model")
    om = settings.om_memory()
    await om.store.asetup()
    writer = ResultWriter(out_path)
    errors: list[str] = []
    seen: list[str] = []
    out.print(literal(f"LoCoMo: streaming {settings.data}; {len(done)} samples already in {out_path}."))

    async def evaluate(sample: LoCoMoSample) -> dict[str, Any]:
        return {"rows": await evaluate_sample(om, sample, answer_model, settings, prices)}

    async def on_row(sample: LoCoMoSample, result: dict[str, Any]) -> None:
        await writer.write_many(result["rows"])
        for row in result["rows"]:
            if row["kind"] == "sample":
                done[row["sample_id"]] = row
            else:
                question_rows[row["question_id"]] = row
        out.print(literal(f"  {sample.sample_id}: {len(result['rows']) - 1} questions scored"))  # the data's ids

    def on_error(sample: LoCoMoSample, exc: Exception) -> None:
        errors.append(f"{sample.sample_id}: {type(exc).__name__}: {exc}")
        out.print(Text.assemble(("failed", "red"), " ", literal(errors[-1])))

    run = StreamRun(items=stream, key=lambda s: s.sample_id, done=done, evaluate=evaluate, on_row=on_row,
                    on_error=on_error, on_seen=lambda s, _: seen.append(s.sample_id),
                    concurrency=settings.concurrency, limit=settings.limit)
    try:
        await run.run()
    finally:
        await om.aclose()
    scored = [row for row in question_rows.values() if row.get("sample_id") in done and row["sample_id"] in seen]
    spend: dict[str, dict[str, int]] = {}
    for sample_id in seen:
        if sample_id in done:
            add_spend(spend, done[sample_id].get("spend") or {})
    for row in scored:
        add_spend(spend, row.get("spend") or {})
    summary = LoCoMoSummary(scores=LoCoMoScores.of(scored), samples_done=sum(1 for s in seen if s in done),
                            samples_seen=len(seen), answered_this_run=run.started - len(errors), errors=errors,
                            spend=spend, cost=prices.cost(spend) if prices else None,
                            unpriced=prices.unpriced(spend) if prices else [])
    print_locomo(out, summary)
    return summary


def _existing(path: str | Path) -> Path:
    source = Path(path)
    if not source.exists():
        raise FileNotFoundError(f"--data: no such file: {source}")
    return source


def print_locomo(out: Console, summary: LoCoMoSummary) -> None:
    scores = summary.scores
    table = Table(title="LoCoMo (token F1; adversarial: declined)")
    for column in ("category", "questions", "score"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for name, score in scores.by_category.items():
        table.add_row(literal(name), str(score.count), f"{100 * score.mean:.1f}%")
    table.add_row("[bold]F1, categories 1-4[/bold]", str(scores.overall.count),
                  f"[bold]{100 * scores.overall.mean:.1f}%[/bold]")
    if scores.adversarial.count:
        table.add_row("adversarial (apart)", str(scores.adversarial.count), f"{100 * scores.adversarial.mean:.1f}%")
    out.print(table)
    questions = scores.overall.count + scores.adversarial.count
    print_spend(out, summary.spend, questions, questions, summary.cost, None, summary.unpriced)
    projected = summary.projected_cost
    if projected is not None:
        out.print(f"Projected for all {summary.samples_seen} conversations of the file: ${projected:,.2f}.")
    out.print(f"{summary.samples_done} of {summary.samples_seen} conversations scored, "
              f"{summary.answered_this_run} this run, {len(summary.errors)} failed.")


def run_locomo(settings: LoCoMoSettings, *, console: Console | None = None) -> LoCoMoSummary:
    """Sync wrapper of ``arun_locomo``."""
    return asyncio.run(arun_locomo(settings, console=console))
