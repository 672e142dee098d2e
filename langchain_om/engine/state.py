"""Plain data the engine's modules pass each other: one step, one cycle's result, the public
result types (``OMContext``, ``OMAborted``) and the small helpers over them."""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from langchain_core.messages import BaseMessage, SystemMessage
from langchain_core.runnables import RunnableConfig

from ..foundation.context import with_context
from ..foundation.events import ExtractionFailure, OMEvent, StatusData
from ..foundation.window import Window
from ..store.base import OMRecord, StoredMessage

Phase = Literal["activate", "observe", "reflect"]
PHASES: tuple[Phase, ...] = ("activate", "observe", "reflect")
MAX_COMMIT_RETRIES = 5
_K = TypeVar("_K")
_V = TypeVar("_V")


class OMAborted(RuntimeError):
    """A tripwire: OM cannot build a context for this step (e.g. no model fits the input)."""


@dataclass
class OMContext:
    """What the agent's model should see this step, plus what happened to get there."""

    system_message: SystemMessage | None
    messages: list[BaseMessage]
    status: StatusData
    events: list[OMEvent]
    source_record: OMRecord = field(repr=False)  # OM's own cached copy: read it through ``record``
    observed_message_ids: list[str] = field(default_factory=list)
    aborted: str | None = None
    instructions: list[BaseMessage] = field(default_factory=list)
    """The caller's own system messages (never observed), which lead the model's input."""
    _record_copy: OMRecord | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def record(self) -> OMRecord:
        """The record this context was built from. A private copy, made on first access, so
        changing it can never leak into OM's cache or the store."""
        if self._record_copy is None:
            self._record_copy = self.source_record.model_copy(deep=True)
        return self._record_copy

    def to_messages(self, *, merge_system: bool = True) -> list[BaseMessage]:
        """The model's input: the caller's system messages, OM's system message (once there is a
        log, a task or a section to show), then the unobserved messages.

        ``merge_system`` (default): the caller's system messages and OM's become one system
        message, the caller's text first (``merge_system_messages``); off, they stay apart."""
        if merge_system:
            return [*with_context(self.instructions, self.system_message), *self.messages]
        own = [self.system_message] if self.system_message is not None else []
        return [*self.instructions, *own, *self.messages]


@dataclass
class CycleResult:
    """What one Observer or Reflector call produced, ready to be applied to a record."""

    text: str
    tokens: int
    current_task: str | None
    suggested_response: str | None
    thread_title: str | None
    extracted: dict[str, Any]
    failures: list[ExtractionFailure]
    usage: dict[str, Any] | None
    provider_metadata: dict[str, Any] | None
    cycle_id: str | None = None  # set by the cycle that produced it; follow-up events share it


@dataclass
class StepState:
    """One call into the engine: who, when, and the events it collects."""

    resource_id: str
    thread_id: str
    key: str
    now: datetime
    events: list[OMEvent]
    current_model: str | None
    config: RunnableConfig | None
    # the unobserved window as the step found it (before any activation): idle and provider-change
    # checks of both observation and reflection measure against it
    arrival_window: Window | None = None


def left_window(before: Sequence[StoredMessage], after: Sequence[StoredMessage]) -> list[str]:
    """Ids of ``before`` that are not in ``after``. Both are seq-ordered windows ending at the same
    newest row, so those are exactly the rows below ``after``'s first seq."""
    if not after:
        return [m.id for m in before]
    first = after[0].seq
    out: list[str] = []
    for m in before:
        if m.seq >= first:
            break
        out.append(m.id)
    return out


def check_phases(phases: Collection[str] | None) -> frozenset[str]:
    if phases is None:
        return frozenset(PHASES)
    chosen = frozenset(phases)
    unknown = chosen - set(PHASES)
    if unknown or not chosen:
        raise ValueError(f"phases: expected a non-empty subset of {PHASES}, got {sorted(phases)!r}")
    return chosen


def lru_put(cache: OrderedDict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Store ``key`` as the most recent entry and drop the oldest beyond ``limit``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def editable(record: OMRecord) -> OMRecord:
    """A copy of ``record`` a cycle may edit: fresh containers at its top (groups, chunks,
    watermarks) and a deep copy of ``metadata`` (spend totals and extracted values nest there).
    The groups, chunks and staged reflection themselves are shared: cycles replace them, never
    change one in place. A deep copy of a record with a long log cost ~0.5 ms a commit."""
    return record.model_copy(update={
        "groups": list(record.groups), "buffered_chunks": list(record.buffered_chunks),
        "last_observed_seq": dict(record.last_observed_seq), "last_observed_id": dict(record.last_observed_id),
        "metadata": copied(record.metadata),
    })


_ATOMS = frozenset({str, int, float, bool, type(None)})


def copied(value: Any) -> Any:
    """A deep copy of JSON-shaped data (dicts, lists, strings, numbers), anything else through
    ``copy.deepcopy``: a record's metadata is JSON data, and ``deepcopy``'s memo and dispatch
    cost several times this walk on every cycle's commit."""
    kind = type(value)
    if kind is dict:
        return {key: copied(item) for key, item in value.items()}
    if kind is list:
        return [copied(item) for item in value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)
