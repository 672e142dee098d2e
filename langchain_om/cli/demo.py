"""``langchain-om demo``: replay a bundled multi-day conversation through Observational Memory.

The point is to *watch* OM work: after every step (a user message plus the
assistant's reply, tool calls included) the demo prints both windows, so you see
the message window fill up, buffered observations get activated, and the
observation log get reflected when it grows past its own threshold. The
conversation carries real timestamps, so the Observer sees real dates.

Without an API key it runs on ``ScriptedObserverModel`` (rule-based, offline) and
says so; ``--model provider:model`` uses a real model through ``init_chat_model``.
Progress is persisted in the SQLite file: re-running with the same ``--db`` and
``--thread`` continues the thread where the previous run stopped.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from ..engine import ObservationalMemory
from ..foundation.events import OMEvent
from ..foundation.messages import TIMESTAMP_KEY
from ..model_calls.failure_policy import failure_reason
from ..model_calls.failures import OMObservationError
from ..model_calls.models import normalize_model_string
from ..store.base import implicit_resource, merge_repeated_dates, total_tokens
from ..store.sqlite import SQLiteStore
from ..testing import ScriptedObserverModel
from .hints import inspect_command
from .literal import literal

DEFAULT_THREAD = "demo-trip"
DEFAULT_MESSAGE_TOKENS = 1200
DEFAULT_OBSERVATION_TOKENS = 1500
SCRIPTED_NOTICE = (
    "Using the scripted offline Observer/Reflector (no model API): observations are rule-based summaries, "
    "not LLM output. Run with --model provider:model (e.g. --model openai:gpt-5-mini) for real observations."
)
API_KEY_MODELS: tuple[tuple[str, str], ...] = (
    ("OPENAI_API_KEY", "openai:gpt-5-mini"),
    ("GOOGLE_API_KEY", "google_genai:gemini-2.5-flash"),
)
"""Which real model the demo picks when an API key is set and ``--model`` is not given."""

THRESHOLDS_KEY = "om_thresholds"
"""Thread metadata key holding the thresholds a writer used (read by ``langchain-om inspect``)."""
_ROLES = {"user", "assistant", "tool"}


class DemoModelError(RuntimeError):
    """OM's model calls failed during the replay; the demo stops at that step (one-line reason).

    The steps before it stay stored and observed, so a rerun on the same database continues."""

    def __init__(self, step: int, total: int, reason: str) -> None:
        self.step = step
        self.total = total
        self.reason = reason
        super().__init__(f"OM's model failed at step {step} of {total}: {reason} "
                         "(fix the model or key and rerun to continue)")


class DemoDataError(ValueError):
    """The conversation file is malformed; the message names the entry and field."""


# ------------------------------------------------------------------ conversation


BUNDLED_CONVERSATIONS = {"en": "demo_conversation.json", "ja": "demo_conversation.ja.json"}
"""The conversations shipped with the package, by language (``langchain-om demo --lang ja``): the
same kind of multi-day story, so a user can watch OM (and search) work in their own language."""


def bundled_conversation_path(lang: str = "en") -> Path:
    """Path of a conversation shipped inside the package (works for wheels and editable installs)."""
    return Path(str(resources.files("langchain_om") / "data" / BUNDLED_CONVERSATIONS[lang]))


def _field(entry: Mapping[str, Any], name: str, index: int, kind: type | tuple[type, ...]) -> Any:
    if name not in entry:
        raise DemoDataError(f"conversation[{index}].{name}: missing")
    value = entry[name]
    if not isinstance(value, kind):
        raise DemoDataError(f"conversation[{index}].{name}: expected {kind}, got {type(value).__name__}")
    return value


def messages_from_entries(entries: Sequence[Mapping[str, Any]], *, id_prefix: str) -> list[BaseMessage]:
    """Turn ``{role, content, timestamp, tool_calls?, tool_call_id?, name?}`` dicts into LangChain messages.

    Ids are deterministic (``{id_prefix}:{index}``) so a re-run recognises what is already stored,
    and the timestamp goes into ``response_metadata[TIMESTAMP_KEY]`` where OM reads it.
    """
    out: list[BaseMessage] = []
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping):
            raise DemoDataError(f"conversation[{index}]: expected an object, got {type(entry).__name__}")
        role = _field(entry, "role", index, str)
        if role not in _ROLES:
            raise DemoDataError(f"conversation[{index}].role: must be one of {sorted(_ROLES)}, got {role!r}")
        content = _field(entry, "content", index, str)
        stamp = _field(entry, "timestamp", index, str)
        try:
            datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        except ValueError as exc:
            raise DemoDataError(f"conversation[{index}].timestamp: not ISO 8601: {stamp!r}") from exc
        meta = {TIMESTAMP_KEY: stamp}
        mid = f"{id_prefix}:{index:04d}"
        message: BaseMessage
        if role == "user":
            message = HumanMessage(content=content, id=mid, response_metadata=meta)
        elif role == "assistant":
            calls = entry.get("tool_calls") or []
            if not isinstance(calls, list):
                raise DemoDataError(f"conversation[{index}].tool_calls: expected a list")
            tool_calls = [
                {"id": str(c["id"]), "name": str(c["name"]), "args": dict(c.get("args") or {}), "type": "tool_call"}
                for c in calls
            ]
            message = AIMessage(content=content, id=mid, response_metadata=meta, tool_calls=tool_calls)
        else:
            call_id = _field(entry, "tool_call_id", index, str)
            message = ToolMessage(content=content, id=mid, response_metadata=meta, tool_call_id=call_id,
                                  name=entry.get("name"))
        out.append(message)
    return out


def _read_text(source: Path) -> str:
    """The file's text, every way of failing to read it turned into a one-line ``DemoDataError``."""
    try:
        return source.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DemoDataError(f"{source}: no such file") from exc
    except IsADirectoryError as exc:
        raise DemoDataError(f"{source}: is a directory, not a JSON file") from exc
    except PermissionError as exc:
        raise DemoDataError(f"{source}: not readable (permission denied)") from exc
    except UnicodeDecodeError as exc:
        raise DemoDataError(f"{source}: not UTF-8 text (byte {exc.start}: {exc.reason})") from exc
    except OSError as exc:
        raise DemoDataError(f"{source}: cannot be read ({exc.strerror or exc})") from exc


def load_conversation(path: str | Path | None = None, *, id_prefix: str = DEFAULT_THREAD) -> list[BaseMessage]:
    """The bundled conversation (or ``path``) as LangChain messages, oldest first.

    An unreadable, empty or malformed file raises ``DemoDataError`` naming the file (and the entry and field)."""
    source = Path(path) if path is not None else bundled_conversation_path()
    text = _read_text(source)
    if not text.strip():
        raise DemoDataError(f"{source}: the file is empty (expected a JSON list of {{role, content, timestamp}})")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DemoDataError(f"{source}: not valid JSON ({exc})") from exc
    if not isinstance(data, list):
        raise DemoDataError(f"{source}: expected a JSON list of messages")
    if not data:
        raise DemoDataError(f"{source}: the list is empty, there is no message to replay")
    return messages_from_entries(data, id_prefix=id_prefix)


def conversation_thread_id(path: str | Path) -> str:
    """The thread a ``--conversation`` file replays into when no ``--thread`` is given: its own one.

    The file's name (readable in ``inspect``) plus a digest of its absolute path, so two files never
    share a thread (nor the bundled demo's), while re-running the same file resumes where it stopped."""
    absolute = os.path.abspath(os.path.expanduser(str(path)))
    stem = re.sub(r"[^\w.-]+", "_", Path(absolute).stem)[:60].strip("_") or "conversation"
    return f"{stem}-{hashlib.sha256(absolute.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


def split_steps(messages: Sequence[BaseMessage]) -> list[list[BaseMessage]]:
    """One step per user message: the user message and everything up to the next one."""
    steps: list[list[BaseMessage]] = []
    for message in messages:
        if message.type == "human" or not steps:
            steps.append([])
        steps[-1].append(message)
    return steps


# ------------------------------------------------------------------ model choice


@dataclass(frozen=True)
class ModelChoice:
    model: Any
    label: str
    scripted: bool


def choose_model(model: str | None, *, env: Mapping[str, str] | None = None, scripted: bool = False) -> ModelChoice:
    """``--model`` wins; else an API key in the environment picks a real model; else the scripted one."""
    environ = os.environ if env is None else env
    if model and not scripted:
        normalized = normalize_model_string(model)
        return ModelChoice(normalized, normalized, False)
    if not scripted:
        for key, default in API_KEY_MODELS:
            if environ.get(key):
                return ModelChoice(default, f"{default} (found {key})", False)
    return ModelChoice(ScriptedObserverModel(), "scripted offline Observer/Reflector", True)


# ------------------------------------------------------------------ result types


@dataclass
class DemoStep:
    """The windows right after one step, plus the cycles that step triggered."""

    index: int
    messages_tokens: int
    messages_threshold: int
    observation_tokens: int
    observation_threshold: int
    generation_count: int
    cycles: list[str] = field(default_factory=list)


@dataclass
class DemoResult:
    thread_id: str
    db_path: str
    model_label: str
    scripted: bool
    total_steps: int
    resumed_from: int
    steps: list[DemoStep]
    observations: int = 0
    reflections: int = 0
    activations: int = 0
    buffered: int = 0
    buffered_reflections: int = 0
    failures: int = 0
    generation_count: int = 0
    final_log: str = ""
    current_task: str | None = None
    suggested_response: str | None = None
    context_tokens: int = 0
    pending_reflection: str | None = None
    history_tokens: int = 0
    stored_messages: int = 0
    elapsed_s: float = 0.0

    @property
    def complete(self) -> bool:
        return self.resumed_from + len(self.steps) >= self.total_steps

    @property
    def message_threshold_crossings(self) -> int:
        """Times the message window crossed its threshold and was observed (sync or activation)."""
        return self.observations + self.activations

    @property
    def observation_threshold_crossings(self) -> int:
        """Times the observation log crossed its threshold and was reflected."""
        return self.reflections


def _describe(event: OMEvent) -> tuple[str, str] | None:
    """(counter name, human-readable line) for cycle events; None for status and others."""
    data: Any = event.data
    kind = getattr(data, "operation_type", None)
    if event.type == "data-om-observation-end":
        if kind == "reflection":
            return "reflections", f"reflected the log: now {data.observation_tokens} tokens"
        return "observations", f"observed {data.tokens_observed} message tokens -> {data.observation_tokens} " \
                               "observation tokens (blocking)"
    if event.type == "data-om-activation":
        if kind == "reflection":
            # the reflection covered the log as it was when buffering began; notes activated since
            # stay beside it, so say both numbers or the log seems not to have shrunk
            return "reflections", (f"activated a buffered reflection: the older notes condensed to "
                                   f"{data.tokens_activated} tokens; log now {data.observation_tokens} tokens "
                                   "with the notes added since")
        return "activations", f"activated {data.chunks_activated} buffered chunk(s), " \
                              f"{data.tokens_activated} message tokens out of the window"
    if event.type == "data-om-buffering-end":
        counter = "buffered_reflections" if kind == "reflection" else "buffered"
        return counter, f"buffered {kind} in the background ({data.tokens_buffered} tokens)"
    if event.type in ("data-om-observation-failed", "data-om-buffering-failed"):
        return "failures", f"{event.type.removeprefix('data-om-')}: {data.error}"
    return None


# ------------------------------------------------------------------ the replay


async def arun_demo(
    *,
    db: str | Path = "./langchain_om.db",
    model: str | None = None,
    thread_id: str = DEFAULT_THREAD,
    message_tokens: int = DEFAULT_MESSAGE_TOKENS,
    observation_tokens: int = DEFAULT_OBSERVATION_TOKENS,
    fast: bool = False,
    max_steps: int | None = None,
    scripted: bool = False,
    conversation: str | Path | None = None,
    console: Console | None = None,
    env: Mapping[str, str] | None = None,
    step_delay_s: float = 0.04,
) -> DemoResult:
    """Replay the conversation step by step (resuming a partly replayed thread) and report what OM did.

    ``fast`` skips the per-step pause that keeps the live display readable and prints no per-step lines.
    """
    if message_tokens <= 0:
        raise ValueError(f"message_tokens: must be positive, got {message_tokens}")
    if observation_tokens <= 0:
        raise ValueError(f"observation_tokens: must be positive, got {observation_tokens}")
    if max_steps is not None and max_steps < 0:
        raise ValueError(f"max_steps: must not be negative, got {max_steps}")
    out = console or Console()
    choice = choose_model(model, env=env, scripted=scripted)
    seen: list[OMEvent] = []
    om = ObservationalMemory(
        SQLiteStore(str(db)),
        model=choice.model,
        observation={"message_tokens": message_tokens},
        reflection={"observation_tokens": observation_tokens},
        on_debug_event=seen.append,
        failure_policy="raise",  # a demo that cannot observe has nothing to show: stop at the first failure
    )
    started = time.perf_counter()
    try:
        return await _replay(om, out, choice, seen, db=str(db), thread_id=thread_id, fast=fast,
                             max_steps=max_steps, conversation=conversation, step_delay_s=step_delay_s,
                             started=started)
    finally:
        await om.aclose()


async def _replay(
    om: ObservationalMemory,
    out: Console,
    choice: ModelChoice,
    seen: list[OMEvent],
    *,
    db: str,
    thread_id: str,
    fast: bool,
    max_steps: int | None,
    conversation: str | Path | None,
    step_delay_s: float,
    started: float,
) -> DemoResult:
    messages = load_conversation(conversation, id_prefix=thread_id)
    steps = split_steps(messages)
    await om.astatus(thread_id)  # creates the schema if the file is new
    resource = implicit_resource(thread_id)  # the demo runs without a resource_id
    await om.store.aensure_thread(resource, thread_id)
    # Thresholds are configuration, not state; record them so ``langchain-om inspect`` shows the same windows.
    await om.store.aupdate_thread(resource, thread_id, metadata={THRESHOLDS_KEY: {
        "message_tokens": om.config.observation.message_tokens,
        "observation_tokens": om.config.reflection.observation_tokens}})
    stored = await om.store.aget_messages(resource, thread_id)
    stored_ids = {m.id for m in stored}
    resume = next((i for i, step in enumerate(steps) if any(m.id not in stored_ids for m in step)), len(steps))
    end = len(steps) if max_steps is None else min(len(steps), resume + max_steps)

    if choice.scripted:
        out.print(Panel(SCRIPTED_NOTICE, title="SCRIPTED Observer/Reflector", style="yellow"))
    else:
        out.print(Text.assemble(("Observer/Reflector model:", "bold"), " ", literal(choice.label)))
    cfg = om.config
    out.print(Text.assemble("Thread ", literal(thread_id, style="bold"), literal(
        f" in {db}: {len(messages)} messages in {len(steps)} steps; thresholds: messages "
        f"{cfg.observation.message_tokens}, observations {cfg.reflection.observation_tokens}; "
        f"buffering {'on' if cfg.buffering_enabled else 'off'}.")))
    if resume:
        out.print(f"Resuming: steps 1-{resume} are already stored in this database.")
    if resume >= len(steps):
        out.print("The whole conversation is already replayed on this thread; showing the final state.")

    result = DemoResult(thread_id=thread_id, db_path=db, model_label=choice.label, scripted=choice.scripted,
                        total_steps=len(steps), resumed_from=resume, steps=[])
    progress = Progress(
        TextColumn("[bold blue]step {task.completed}/{task.total}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[windows]}"),
        TimeElapsedColumn(),
        console=out,
        transient=False,
    )
    with progress:
        task = progress.add_task("replay", total=len(steps), completed=resume, windows="")
        for index in range(resume, end):
            step_messages = steps[index]
            moment = _timestamp(step_messages[-1])
            try:
                await om.aprocess(thread_id, step_messages, now=moment)
            except OMObservationError as exc:
                raise DemoModelError(index + 1, len(steps), failure_reason(exc.cause or exc)) from exc
            # The agent's own model call would take a while here; let background buffering finish.
            await om.await_background(thread_id)
            failed = next((e for e in seen if e.type == "data-om-buffering-failed"), None)
            if failed is not None:
                raise DemoModelError(index + 1, len(steps), str(getattr(failed.data, "error", "buffering failed")))
            status = await om.astatus(thread_id)
            active = status.windows.active
            row = DemoStep(index=index + 1, messages_tokens=active.messages.tokens,
                           messages_threshold=active.messages.threshold,
                           observation_tokens=active.observations.tokens,
                           observation_threshold=active.observations.threshold,
                           generation_count=status.generation_count)
            for event in seen:
                described = _describe(event)
                if described is not None:
                    counter, line = described
                    setattr(result, counter, getattr(result, counter) + 1)
                    row.cycles.append(line)
            seen.clear()
            result.steps.append(row)
            windows = (f"messages {row.messages_tokens}/{row.messages_threshold}  "
                       f"observations {row.observation_tokens}/{row.observation_threshold}  "
                       f"gen {row.generation_count}")
            progress.update(task, completed=index + 1, windows=windows)
            if not fast:
                progress.console.print(f"step {row.index:3d}  {windows}")
                for line in row.cycles:
                    progress.console.print(literal(f"          ↳ {line}", style="green"))  # may quote an error
                if step_delay_s:
                    await asyncio.sleep(step_delay_s)

    record = await om.aget_record(thread_id)
    status = await om.astatus(thread_id)
    window = await om.store.aget_messages(implicit_resource(thread_id), thread_id)
    result.generation_count = record.generation_count
    result.final_log = record.observations
    result.current_task = record.current_task
    result.suggested_response = record.suggested_response
    result.stored_messages = len(window)
    result.history_tokens = total_tokens(window)
    # from the stored state, so a rerun that replays nothing reports the same figure
    result.context_tokens = status.windows.active.messages.tokens + record.observation_tokens
    result.pending_reflection = _pending_reflection(status)
    result.elapsed_s = time.perf_counter() - started
    _print_summary(out, result)
    return result


def _pending_reflection(status: Any) -> str | None:
    """What happens next when the run ends with the log over its reflection threshold."""
    log = status.windows.active.observations
    if log.tokens <= log.threshold:
        return None
    ready = status.windows.buffered.reflection.status == "complete"
    how = "a buffered reflection is ready and is swapped in" if ready else "the Reflector runs"
    return (f"The observation log ({log.tokens} tokens) is over its reflection threshold ({log.threshold}): "
            f"{how} at the next step.")


def _timestamp(message: BaseMessage) -> datetime:
    from ..foundation.messages import message_timestamp

    stamp = message_timestamp(message)
    if stamp is None:
        raise DemoDataError(f"message {message.id}: no timestamp")
    return stamp


def _print_summary(out: Console, result: DemoResult) -> None:
    table = Table(title="What OM did", show_header=False)
    resumed = f"; resumed after step {result.resumed_from}" if result.resumed_from else ""
    table.add_row("steps replayed this run", f"{len(result.steps)} (of {result.total_steps}{resumed})")
    table.add_row("observations", f"{result.observations} blocking; {result.buffered} chunk(s) buffered in the "
                                  f"background, {result.activations} activation(s) swapping them in")
    table.add_row("reflections", f"{result.reflections} applied ({result.buffered_reflections} buffered in the "
                                 f"background); generation {result.generation_count}")
    table.add_row("failures", str(result.failures))
    table.add_row("stored messages (never deleted)", f"{result.stored_messages}, {result.history_tokens} tokens")
    table.add_row("context for the next model call",
                  f"~{result.context_tokens} tokens (unobserved messages + observation log)")
    table.add_row("wall time", f"{result.elapsed_s:.1f} s")
    out.print(table)
    if result.pending_reflection:
        out.print(f"[yellow]{result.pending_reflection}[/yellow]")
    # the log and the hints are a model's words: printed as they are, never as markup or raw controls
    out.print(Panel(literal(merge_repeated_dates(result.final_log) or "(empty: no observation yet)", keep_lines=True),
                    title="Final observation log"))
    if result.current_task:
        out.print(Text.assemble(("Current task:", "bold"), " ", literal(result.current_task)))
    if result.suggested_response:
        out.print(Text.assemble(("Suggested response:", "bold"), " ", literal(result.suggested_response)))
    if result.scripted:
        out.print(f"[yellow]{SCRIPTED_NOTICE}[/yellow]")
    out.print(literal(f"Inspect it any time: {inspect_command(result.thread_id, result.db_path)}"), soft_wrap=True)


def run_demo(**kwargs: Any) -> DemoResult:
    """Sync wrapper of ``arun_demo`` (same keyword arguments)."""
    return asyncio.run(arun_demo(**kwargs))
