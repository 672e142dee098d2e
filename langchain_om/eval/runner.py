"""What every benchmark harness shares: models by name, the resumable results file, paid calls
counted per role, and a loop running questions from a stream a few at a time.

The loop pulls the next question from the stream only when a worker is free, so a run holds
at most ``concurrency`` questions in memory, however large the file (LongMemEval M).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage
from rich.console import Console
from rich.table import Table

from ..engine import ObservationalMemory
from ..foundation.tokens import TokenCounter
from ..model_calls.credentials import check_model_string
from ..model_calls.models import normalize_model_string
from ..store.sqlite import SQLiteStore
from .scripted import is_scripted, scripted_model
from .spend import add_call, ordered

ModelSpec = str | BaseChatModel

Item = TypeVar("Item")


@dataclass
class RunSettings:
    """What every harness run takes (models may also be chat model instances); each benchmark's
    settings add their own selection and defaults."""

    data: str | Path
    model: ModelSpec
    om_model: ModelSpec | None = None
    out: str | Path = "results.jsonl"
    concurrency: int = 4
    limit: int | None = None
    db: str | Path | None = None
    message_tokens: int | None = None
    observation_tokens: int | None = None
    extra_om_options: Mapping[str, Any] = field(default_factory=dict)
    prices: Sequence[str] = ()
    """``MODEL_OR_ROLE=INPUT,OUTPUT`` entries (dollars per million tokens); see ``spend.py``."""
    price_files: Sequence[str | Path] = ()

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

    def om_memory(self) -> ObservationalMemory:
        """The OM the run ingests through: its state in ``db_path``, the Observer and Reflector on
        ``om_model`` (else the answer model; ``"scripted"`` the offline stand-in)."""
        spec: Any = self.om_model if self.om_model is not None else self.model
        if is_scripted(spec):
            spec = scripted_model("om")
        elif isinstance(spec, str):
            spec = normalize_model_string(spec)
        observation = {"message_tokens": self.message_tokens} if self.message_tokens else None
        reflection = {"observation_tokens": self.observation_tokens} if self.observation_tokens else None
        return ObservationalMemory(SQLiteStore(self.db_path), model=spec, observation=observation,
                                   reflection=reflection, **dict(self.extra_om_options))


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


def model_name(spec: ModelSpec | None) -> str:
    """The name a price table knows a model by: its string, or a chat model's own name."""
    if spec is None:
        return ""
    if isinstance(spec, str):
        return spec.strip()
    for attribute in ("model_name", "model"):
        value = getattr(spec, attribute, None)
        if isinstance(value, str) and value:
            return value
    return type(spec).__name__


def message_text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)


async def ask(model: BaseChatModel, messages: list[BaseMessage], *, role: str, counter: TokenCounter,
              spend: dict[str, dict[str, int]], tags: list[str] | None = None) -> str:
    """One paid call: its reply's text, its tokens counted under ``role`` (the provider's usage,
    else counted here so a model that reports none still gets a projected cost)."""
    reply = await model.ainvoke(messages, config={"tags": tags or ["langchain_om_eval", role]})
    text = message_text(reply)
    usage = getattr(reply, "usage_metadata", None)
    if usage and (usage.get("input_tokens") or usage.get("output_tokens")):
        add_call(spend, role, int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0))
    else:
        add_call(spend, role, counter.count_messages(messages), counter.count_text(text))
    return text


# ---------------------------------------------------------------------------- results file


def read_results(path: str | Path, key: str = "question_id") -> dict[str, dict[str, Any]]:
    """Finished questions by id. A line cut short by an interruption is ignored (and redone)."""
    results: dict[str, dict[str, Any]] = {}
    source = Path(path)
    if not source.exists():
        return results
    with source.open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(row, dict) and isinstance(row.get(key), str) and "correct" in row:
                results.setdefault(row[key], row)
    return results


class ResultWriter:
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
        await self.write_many([row])

    async def write_many(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Several rows in one append and one fsync (a sample's questions land together)."""
        text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        async with self._lock:
            await asyncio.to_thread(self._append, text)

    def _append(self, line: str) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


# ---------------------------------------------------------------------------- the loop


@dataclass
class StreamRun(Generic[Item]):
    """Runs ``evaluate`` on every item of a stream not already done, ``concurrency`` at a time,
    at most ``limit`` of them; items are read from the stream only as workers free up."""

    items: Iterable[Item]
    key: Callable[[Item], str]
    done: Mapping[str, Any]
    evaluate: Callable[[Item], Awaitable[dict[str, Any]]]
    on_row: Callable[[Item, dict[str, Any]], Awaitable[None]]
    on_error: Callable[[Item, Exception], None]
    on_seen: Callable[[Item, bool], None]
    concurrency: int = 4
    limit: int | None = None
    started: int = field(default=0, init=False)

    async def run(self) -> None:
        stream: Iterator[Item] = iter(self.items)
        lock = asyncio.Lock()

        async def next_item() -> Item | None:
            """The next item to run (skipping done ones), or None: read under a lock, off the loop."""
            async with lock:
                while True:
                    item = await asyncio.to_thread(next, stream, None)
                    if item is None:
                        return None
                    already = self.key(item) in self.done
                    over = self.limit is not None and self.started >= self.limit
                    self.on_seen(item, already or over)
                    if already or over:
                        continue
                    self.started += 1
                    return item

        async def worker() -> None:
            while (item := await next_item()) is not None:
                try:
                    row = await self.evaluate(item)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self.on_error(item, exc)
                    continue
                await self.on_row(item, row)

        await asyncio.gather(*(worker() for _ in range(self.concurrency)))


def print_spend(out: Console, spend: Mapping[str, Mapping[str, int]], scored: int, selected: int,
                cost: float | None, projected: float | None, unpriced: Sequence[str]) -> None:
    """Tokens per role over the scored questions, per question, and the cost when priced."""
    if not spend or not scored:
        return
    table = Table(title=f"Tokens spent ({scored} questions)")
    for column in ("role", "calls", "input", "output", "input / question", "output / question"):
        table.add_column(column, justify="left" if column == "role" else "right")
    for role in ordered(spend):
        used = spend[role]
        table.add_row(role, f"{used['calls']:,}", f"{used['input_tokens']:,}", f"{used['output_tokens']:,}",
                      f"{used['input_tokens'] / scored:,.0f}", f"{used['output_tokens'] / scored:,.0f}")
    out.print(table)
    if cost is not None:
        line = f"Cost at the given prices: ${cost:,.4f} for {scored} questions (${cost / scored:,.4f} a question)"
        if projected is not None:
            line += f"; projected for all {selected} questions: ${projected:,.2f}"
        out.print(line + ".")
        if unpriced:
            out.print(f"[yellow]No price for {', '.join(unpriced)}: left out of the cost.[/yellow]")
