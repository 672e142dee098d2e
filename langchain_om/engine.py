"""``ObservationalMemory``: the per-step state machine.

Each agent step calls ``aprocess``. It stores the new messages, then decides,
from token counts alone, whether to activate buffered observations, run a
synchronous observation, reflect, or start background work; finally it
returns the bounded context for the agent's model. Every change of the record
goes through the store's compare-and-swap together with the messages it marks,
so a crash or a concurrent worker can only make a step redo work, never apply
it twice or half-way.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from . import failure_policy
from . import observer as observer_mod
from . import reflector as reflector_mod
from ._loop import LoopThread
from .backlog import split_backlog
from .branches import adelete_branches, branch_root
from .buffering import BackgroundTasks, idle_ttl_ms, ms_between, projected_removal, select_chunks
from .config import OMConfig, OMConfigError
from .context import context_message, render_context
from .credentials import check_model_strings
from .events import (
    ActivationData,
    ActivationEvent,
    ActiveWindows,
    BufferedObservations,
    BufferedReflectionStatus,
    BufferedWindows,
    BufferingEndData,
    BufferingEndEvent,
    BufferingFailedData,
    BufferingFailedEvent,
    BufferingStartData,
    BufferingStartEvent,
    ExtractionFailure,
    ObservationEndData,
    ObservationEndEvent,
    ObservationFailedData,
    ObservationFailedEvent,
    ObservationMarkerConfig,
    ObservationStartData,
    ObservationStartEvent,
    OMEvent,
    StatusData,
    StatusEvent,
    ThreadUpdateData,
    ThreadUpdateEvent,
    Windows,
    WindowUsage,
    iso_now,
)
from .failures import remaining_budget, turn_budget
from .hooks import HookContext, ObserveHooks, Trigger
from .inputs import (
    Instructions,
    KnownMessage,
    edit_row,
    is_edit_message,
    known_from_rows,
    message_fingerprint,
    sort_inputs,
)
from .leases import is_free, lease_name, try_lease, wait_for_lease, wait_until_free
from .messages import (
    dump_message,
    ensure_id,
    load_message,
    message_timestamp,
    model_identity,
    safe_cut_at_or_before,
    same_model,
)
from .models import ModelSelectionError, OMModelError, acall_om_model, model_supports_images
from .oversize import warn_oversized
from .run_steps import RunSteps, run_mark
from .spend import add_to_record as add_spend
from .spend import record_spend
from .store.base import (
    BufferedChunk,
    BufferedReflection,
    NewMessage,
    ObservationGroup,
    OMRecord,
    OMStore,
    RecordConflictError,
    StoredMessage,
    SupportsLoopBinding,
    SupportsRecordStamp,
    check_id,
    check_thread_id,
    implicit_resource,
    new_id,
    record_key,
    total_tokens,
    utcnow,
)
from .tokens import TokenCounter, get_token_counter
from .turns import pin_message, pinned_row, removable_prefix, sync_cut
from .window import Window

logger = logging.getLogger("langchain_om")

SectionProvider = Callable[["ObservationalMemory", OMRecord, str, str], Awaitable[str | None]]
"""Called with ``(om, record, resource_id, thread_id)`` to add a section to the context; the
record is OM's cached one, shared across steps: read it, never change it."""
MessageListener = Callable[["ObservationalMemory", str, str, list[StoredMessage]], Awaitable[None]]
"""Called with ``(om, resource_id, thread_id, inserted_rows)`` after new messages are stored."""
_MESSAGE_CACHE_PER_THREAD = 2048
# In-process caches (known ids, parsed messages, windows) are kept for this many recently used
# threads, so a long-lived server with many conversations does not grow without bound.
_THREAD_CACHE_LIMIT = 512
_MAX_COMMIT_RETRIES = 5
_PENDING_EVENTS_LIMIT = 200
# record.metadata flags set when background work failed: the next threshold crossing then runs the
# synchronous cycle at once instead of waiting for block_after (the page's fallback)
_OBSERVATION_FAILED = "buffering_failed"
_REFLECTION_FAILED = "reflection_buffering_failed"
Phase = Literal["activate", "observe", "reflect"]
PHASES: tuple[Phase, ...] = ("activate", "observe", "reflect")
_K = TypeVar("_K")
_V = TypeVar("_V")


def _lru_put(cache: OrderedDict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Store ``key`` as the most recent entry and drop the oldest beyond ``limit``."""
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > limit:
        cache.popitem(last=False)


def _check_phases(phases: Collection[str] | None) -> frozenset[str]:
    if phases is None:
        return frozenset(PHASES)
    chosen = frozenset(phases)
    unknown = chosen - set(PHASES)
    if unknown or not chosen:
        raise ValueError(f"phases: expected a non-empty subset of {PHASES}, got {sorted(phases)!r}")
    return chosen


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

    def to_messages(self) -> list[BaseMessage]:
        """The model's input: the caller's system messages, OM's system message (once there is a
        log, a task or a section to show), then the unobserved messages."""
        own = [self.system_message] if self.system_message is not None else []
        return [*self.instructions, *own, *self.messages]


@dataclass
class _CycleResult:
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


def _left_window(before: Sequence[StoredMessage], after: Sequence[StoredMessage]) -> list[str]:
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


@dataclass
class _WindowCache:
    """The unobserved rows of one thread as last read (see ``ObservationalMemory._window``)."""

    record_id: str
    after: int
    newest: int
    rows: Window


@dataclass
class _StepInputs:
    """What ``_persist`` found in the caller's messages."""

    instructions: list[BaseMessage] = field(default_factory=list)
    edited: list[BaseMessage] = field(default_factory=list)
    inserted: list[StoredMessage] = field(default_factory=list)
    caller_list: list[BaseMessage] = field(default_factory=list)


@dataclass
class _StepState:
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


class ObservationalMemory:
    """Observational Memory for one store; thread-safe across threads and asyncio tasks.

    See DESIGN.md for the options; they mirror the reference page in snake_case.
    """

    def __init__(
        self,
        store: OMStore | None = None,
        *,
        model: Any = None,
        scope: Literal["thread", "resource"] = "thread",
        observation: Any = None,
        reflection: Any = None,
        share_token_budget: bool = False,
        temporal_markers: bool = False,
        retrieval: Any = False,
        activate_after_idle: Any = None,
        activate_on_provider_change: bool = False,
        hooks: Any = None,
        token_counter: Any = "auto",
        obscure_thread_ids: bool = False,
        on_debug_event: Callable[[OMEvent], Any] | None = None,
        enabled: bool = True,
        clock: Callable[[], datetime] | None = None,
        working_memory: Any = None,
        failure_policy: Any = None,
    ) -> None:
        self.config = OMConfig.build(
            enabled=enabled,
            model=model,
            scope=scope,
            observation=observation,
            reflection=reflection,
            share_token_budget=share_token_budget,
            temporal_markers=temporal_markers,
            retrieval=retrieval,
            activate_after_idle=activate_after_idle,
            activate_on_provider_change=activate_on_provider_change,
            obscure_thread_ids=obscure_thread_ids,
            token_counter=token_counter,
            on_debug_event=on_debug_event,
            failure_policy=failure_policy,
        )
        check_model_strings(self.config)  # a missing key or package fails here, not on every step
        self.hooks = ObserveHooks.coerce(hooks)
        if store is None:
            from .store import default_store

            store = default_store()
        self.store: OMStore = store
        self.counter: TokenCounter = get_token_counter(token_counter)
        self._clock = clock or utcnow
        self._tasks = BackgroundTasks()
        self._loop = LoopThread(refuse_in=self._store_bound_to)
        self._setup_lock: asyncio.Lock | None = None
        self._setup_loop: asyncio.AbstractEventLoop | None = None
        self._is_setup = False
        self._locks: dict[tuple[int, str], asyncio.Lock] = {}
        self._known_ids: dict[str, dict[str, KnownMessage]] = {}  # thread -> stored id -> fingerprint, seq
        self._caller_lists: OrderedDict[str, list[BaseMessage]] = OrderedDict()  # thread -> caller's last list
        self._thread_born: OrderedDict[str, datetime] = OrderedDict()  # thread incarnation seen by the caches
        self._message_cache: dict[str, OrderedDict[str, BaseMessage]] = {}
        self._windows: dict[str, _WindowCache] = {}
        self._records: OrderedDict[str, OMRecord] = OrderedDict()  # record key -> last record read
        self._rendered: OrderedDict[str, tuple[Any, str | None]] = OrderedDict()  # record key -> (stamp, text)
        # thread -> (fingerprints, the caller's system messages, their tokens)
        self._instruction_cache: OrderedDict[str, tuple[Any, list[BaseMessage], int]] = OrderedDict()
        self.cache_limit = _THREAD_CACHE_LIMIT
        """How many threads (and records) keep in-process state; the least recently used beyond it
        are forgotten and start their next step cold (README, "In-process caches")."""
        self._recent_threads: OrderedDict[str, None] = OrderedDict()
        self._recent_records: OrderedDict[str, None] = OrderedDict()
        self._reflection_failed_at: dict[str, int] = {}  # record key -> log tokens at a failed sync reflection
        self._pending_events: dict[str, list[OMEvent]] = {}
        self._step_numbers = RunSteps()  # record key -> the run of its last step, that step's number
        self.section_providers: list[SectionProvider] = []
        self.message_listeners: list[MessageListener] = []
        if self.config.retrieval is not None:
            from .recall import install_retrieval

            install_retrieval(self)
        from .extractors import ExtractionPipeline
        from .working_memory import WorkingMemory

        self.working_memory: WorkingMemory | None = WorkingMemory.from_option(self, working_memory)
        """Working memory (``working_memory=`` option / ``observation.manage_working_memory``), or None."""
        self.extraction_pipeline: ExtractionPipeline | None = ExtractionPipeline.from_config(self)
        """Built-in and custom extractors (``observation.extract`` / ``reflection.extract``)."""

    # ------------------------------------------------------------------ setup

    async def _ensure_setup(self) -> None:
        if self._is_setup:
            return
        loop = asyncio.get_running_loop()
        if self._setup_lock is None or self._setup_loop is not loop:
            self._setup_lock, self._setup_loop = asyncio.Lock(), loop
        async with self._setup_lock:
            if not self._is_setup:
                await self.store.asetup()
                self._is_setup = True

    def _lock(self, key: str) -> asyncio.Lock:
        loop_id = id(asyncio.get_running_loop())
        lock = self._locks.get((loop_id, key))
        if lock is None:
            lock = self._locks[(loop_id, key)] = asyncio.Lock()
        return lock

    def _resource_for(self, thread_id: str, resource_id: str | None) -> str:
        check_thread_id(thread_id)
        if resource_id is None:
            root = branch_root(thread_id)
            if root != thread_id:  # a branch of a thread (see branches.py) lives under that thread's resource
                return self._resource_for(root, None)
            if self.config.scope == "resource":
                raise OMConfigError("resource_id", "is required when scope='resource'")
            return implicit_resource(thread_id)  # private to the thread: no explicit id can name it
        if resource_id == implicit_resource(thread_id):
            return resource_id  # resolved already (hooks and section providers pass it back): the same thread's
        return check_id(resource_id, "resource_id")

    def _record_thread(self, thread_id: str) -> str | None:
        return thread_id if self.config.scope == "thread" else None

    # ------------------------------------------------------------ persistence

    async def _ensure_thread(self, resource_id: str, thread_id: str) -> None:
        """Create the thread on its first step here; on later steps check, with a one-row read,
        that it is still the incarnation this worker's caches describe. Another worker may have
        deleted and re-created it, and clients reuse message ids (``msg-1``): matched against the
        old incarnation's ids, the new messages would silently never be stored."""
        cache_key = record_key(resource_id, thread_id)
        born = self._thread_born.get(cache_key)
        if born is not None and cache_key in self._known_ids:
            thread = await self.store.aget_thread(resource_id, thread_id)
            if thread is not None and thread.created_at == born:
                return
        for cache in (self._known_ids, self._caller_lists, self._message_cache, self._windows):
            cache.pop(cache_key, None)
        thread = await self.store.aensure_thread(resource_id, thread_id)
        _lru_put(self._thread_born, cache_key, thread.created_at, self.cache_limit)

    async def _persist(
        self, resource_id: str, thread_id: str, messages: Sequence[BaseMessage], now: datetime
    ) -> _StepInputs:
        """Store the messages not stored yet; report the caller's instructions and edits.

        New messages are found from the fingerprints of the ids already stored (see
        ``inputs.sort_inputs``), so a step costs O(new messages), not O(history)."""
        cache_key = record_key(resource_id, thread_id)
        self._touch_thread(cache_key)
        known = self._known_ids.get(cache_key)
        if known is None:
            # a process's first step on the thread: look up only the ids the caller passes (the
            # store skips an id it holds, so a message another worker stored is never doubled)
            ids = [m.id for m in messages if isinstance(m, BaseMessage) and m.id]
            found = await self.store.aget_messages_by_ids(resource_id, thread_id, ids) if ids else []
            known = known_from_rows(sorted(found, key=lambda row: row.seq))
            self._known_ids[cache_key] = known
        cache = self._message_cache.setdefault(cache_key, OrderedDict())
        # the caller's list of the last step is taken out until this step has stored and settled
        # everything in it: a step that fails half-way makes the next one look at the whole list
        caller_list = self._caller_lists.pop(cache_key, [])
        sorted_inputs = sort_inputs(messages, known, cache, caller_list)
        fresh = sorted_inputs.fresh
        for instruction in sorted_inputs.instructions:
            ensure_id(instruction)
        inputs = _StepInputs(instructions=sorted_inputs.instructions, edited=sorted_inputs.edited,
                             caller_list=caller_list)
        if not fresh:
            return inputs
        rows: list[NewMessage] = []
        for message in fresh:
            ensure_id(message)
            created = message_timestamp(message) or now
            tokens = self.counter.count_message(message)
            rows.append(NewMessage(id=message.id or new_id("msg_"), data=dump_message(message), tokens=tokens,
                                   created_at=created))
        rows = await self._before_store(resource_id, thread_id, rows)
        inserted = await self.store.aappend_messages(resource_id, thread_id, rows)
        self._extend_window(cache_key, inserted)
        for listener in self.message_listeners:
            await listener(self, resource_id, thread_id, inserted)
        known.update(known_from_rows(inserted))  # fingerprints the counter just stored in each row
        by_id = {m.id: m for m in fresh if m.id}
        for row in inserted:
            sent = by_id.get(row.id)
            if sent is not None:
                cache[row.id] = sent
        while len(cache) > _MESSAGE_CACHE_PER_THREAD:
            cache.popitem(last=False)
        inputs.inserted = inserted
        return inputs

    async def _settle_inputs(self, step: _StepState, record: OMRecord, inputs: _StepInputs) -> OMRecord:
        """Under the thread lock: keep the caller's instructions, apply edits of known messages."""
        if inputs.instructions:
            prints = Instructions.fingerprints(inputs.instructions)  # once a step, for every check below
            if Instructions.changed(record.metadata, step.thread_id, prints):
                for _attempt in range(_MAX_COMMIT_RETRIES):
                    updated = record.model_copy(deep=True)
                    Instructions.put(updated.metadata, step.thread_id, inputs.instructions, prints)
                    try:
                        record = await self.store.acommit_record(updated, expected_version=record.version)
                        break
                    except RecordConflictError:
                        record = await self._load_record(step.resource_id, step.thread_id)
                        if not Instructions.changed(record.metadata, step.thread_id, prints):
                            break
            # this step's own objects stand for the stored copy (same content): the caller's state
            # keeps its ids, and nothing is parsed again
            tokens = sum(self.counter.count_message(m) for m in inputs.instructions)
            _lru_put(self._instruction_cache, record_key(step.resource_id, step.thread_id),
                     (tuple(prints), list(inputs.instructions), tokens), self.cache_limit)
        if inputs.edited:
            await self._apply_edits(step, record, inputs.edited)
        self._settled(step.resource_id, step.thread_id, inputs)
        return record

    def _settled(self, resource_id: str, thread_id: str, inputs: _StepInputs) -> None:
        """Everything the caller passed is stored: its list is the baseline of the next step."""
        _lru_put(self._caller_lists, record_key(resource_id, thread_id), inputs.caller_list, self.cache_limit)

    async def _apply_edits(self, step: _StepState, record: OMRecord, edited: Sequence[BaseMessage]) -> None:
        """An unobserved message takes its new content in place; an observed one gets an ``edit``
        row after the newest message, which the Observer reads as a correction."""
        cache_key = record_key(step.resource_id, step.thread_id)
        known = self._known_ids.setdefault(cache_key, {})
        cache = self._message_cache.setdefault(cache_key, OrderedDict())
        watermark = record.last_observed_seq.get(step.thread_id, 0)
        corrections: list[NewMessage] = []
        for message in edited:
            mid = str(message.id)
            entry = known.get(mid)
            if entry is None:
                continue
            tokens = self.counter.count_message(message)
            fingerprint = message_fingerprint(message)
            replaced = entry.seq > watermark and await self.store.areplace_message(
                step.resource_id, step.thread_id, mid, dump_message(message), tokens)
            if not replaced:
                corrections.append(edit_row(message, tokens, step.now))
            known[mid] = KnownMessage(fingerprint, entry.seq)
            cache[mid] = message
        self._windows.pop(cache_key, None)  # re-read the (bounded) unobserved window with the edits
        if corrections:
            inserted = await self.store.aappend_messages(step.resource_id, step.thread_id, corrections)
            for listener in self.message_listeners:
                await listener(self, step.resource_id, step.thread_id, inserted)

    def _extend_window(self, cache_key: str, inserted: list[StoredMessage]) -> None:
        """Add just-stored rows to the cached window when they follow its newest row directly;
        after a gap (another worker stored rows in between) the next refresh reads them all."""
        window = self._windows.get(cache_key)
        if window is None or not inserted:
            return
        first, last = inserted[0].seq, inserted[-1].seq
        if first == window.newest + 1 and last - first == len(inserted) - 1:
            window.rows = window.rows.plus(inserted)
            window.newest = last

    def _touch_thread(self, cache_key: str) -> None:
        """Mark a thread as recently used; drop the caches of the least recently used beyond the limit."""
        self._recent_threads[cache_key] = None
        self._recent_threads.move_to_end(cache_key)
        while len(self._recent_threads) > self.cache_limit:
            old, _ = self._recent_threads.popitem(last=False)
            self._known_ids.pop(old, None)
            self._caller_lists.pop(old, None)
            self._thread_born.pop(old, None)
            self._message_cache.pop(old, None)
            self._windows.pop(old, None)

    def _touch_record(self, key: str) -> None:
        """Mark a record as recently used; forget the per-record state of the least recently used
        beyond the limit: step numbers, undelivered background events, failure marks, cached
        record and rendered log, and its locks when no one holds or waits for them."""
        self._recent_records[key] = None
        self._recent_records.move_to_end(key)
        excess = len(self._recent_records) - self.cache_limit
        if excess <= 0:
            return
        # oldest first; a record with background work running stays until a later step
        idle = [k for k in self._recent_records if k != key and not self._tasks.running_any(k)][:excess]
        for old in idle:
            del self._recent_records[old]
            self._step_numbers.forget(old)
            self._pending_events.pop(old, None)
            self._reflection_failed_at.pop(old, None)
            self._records.pop(old, None)
            self._rendered.pop(old, None)
            for lock_key in [k for k in self._locks if k[1] == old]:
                if _idle(self._locks[lock_key]):
                    del self._locks[lock_key]

    async def _before_store(self, resource_id: str, thread_id: str, rows: list[NewMessage]) -> list[NewMessage]:
        """Extension point before rows are written (temporal markers insert rows here)."""
        if not self.config.temporal_markers:
            return rows
        from .temporal import insert_temporal_markers

        return await insert_temporal_markers(self, resource_id, thread_id, rows)

    def _as_langchain(self, resource_id: str, stored: StoredMessage) -> BaseMessage:
        cache = self._message_cache.get(record_key(resource_id, stored.thread_id))
        if cache is not None and stored.id in cache:
            return cache[stored.id]
        message = load_message(stored.data)
        if not message.id:
            message.id = stored.id
        if cache is None:
            key = record_key(resource_id, stored.thread_id)
            if key not in self._recent_threads:
                return message  # a thread this process no longer keeps (e.g. a late background cycle)
            cache = self._message_cache.setdefault(key, OrderedDict())
        _lru_put(cache, stored.id, message, _MESSAGE_CACHE_PER_THREAD)  # parse each stored row once
        return message

    def _window_messages(self, resource_id: str, thread_id: str, window: Window) -> list[BaseMessage]:
        """The window's rows as LangChain messages. Rows parsed for an earlier step's context
        travel with the window (``Window.parsed``), so a step looks up only its new rows."""
        parsed = window.parsed
        if len(parsed) < len(window):
            cache = self._message_cache.get(record_key(resource_id, thread_id))
            rest = window[len(parsed):]
            if cache is None:
                parsed += tuple(self._as_langchain(resource_id, m) for m in rest)
            else:
                hit = cache.get
                parsed += tuple(hit(m.id) or self._as_langchain(resource_id, m) for m in rest)
            window.parsed = parsed
        return list(parsed)

    async def _load_record(self, resource_id: str, thread_id: str) -> OMRecord:
        """The stored record, parsed only when its stamp changed since the last read.

        The returned object is shared with the cache: engine code changes records only on a
        ``model_copy(deep=True)``, and public methods hand out copies.
        """
        record_thread = self._record_thread(thread_id)
        key = record_key(resource_id, record_thread)
        cached = self._records.get(key)
        if cached is not None and isinstance(self.store, SupportsRecordStamp):
            stamp = await self.store.aget_record_stamp(resource_id, record_thread)
            if stamp is not None and stamp == (cached.version, cached.updated_at):
                self._records.move_to_end(key)
                return cached
        record = await self.store.aget_record(resource_id, record_thread)
        if record is not None:
            self._remember_record(key, record)
            return record
        fresh = OMRecord(resource_id=resource_id, thread_id=self._record_thread(thread_id), scope=self.config.scope)
        try:
            return await self.store.acommit_record(fresh, expected_version=0)
        except RecordConflictError:
            existing = await self.store.aget_record(resource_id, self._record_thread(thread_id))
            if existing is None:
                raise
            return existing

    def _remember_record(self, key: str, record: OMRecord) -> None:
        _lru_put(self._records, key, record, self.cache_limit)

    async def _window(self, record: OMRecord, resource_id: str, thread_id: str, *, refresh: bool = True) -> Window:
        """Unobserved messages of the thread, oldest first, with their token total.

        Messages are append-only and ``seq`` grows under the store's per-thread lock, so the
        window is the cached rows past ``last_observed_seq`` plus whatever was stored after the
        newest cached row (by this or another worker). A step reads only its new rows: its cost
        stays flat in the history length. The cache is keyed by record id, so a deleted and
        recreated thread starts over.
        """
        after = record.last_observed_seq.get(thread_id, 0)
        key = record_key(resource_id, thread_id)
        cached = self._windows.get(key)
        if cached is None or cached.record_id != record.id or cached.after > after:
            rows = Window(await self.store.aget_messages(resource_id, thread_id, after_seq=after))
            newest = rows[-1].seq if rows else after
        else:
            # refresh=False: later in the same step, under the thread lock, nothing new to read
            newest = max(cached.newest, after)
            rows = cached.rows.after(after)
            # the step's own rows are in the cache already (see _persist): read rows only when
            # another worker stored some, which the thread's last seq tells in one small read
            if refresh and await self.store.alast_seq(resource_id, thread_id) > newest:
                rows = rows.plus(await self.store.aget_messages(resource_id, thread_id, after_seq=newest))
            newest = rows[-1].seq if rows else newest
        self._windows[key] = _WindowCache(record.id, after, newest, rows)
        return rows

    # ------------------------------------------------------------- main step

    async def aprocess(
        self,
        thread_id: str,
        messages: Sequence[BaseMessage],
        *,
        resource_id: str | None = None,
        config: RunnableConfig | None = None,
        current_model: str | None = None,
        now: datetime | None = None,
        phases: Collection[Phase] | None = None,
    ) -> OMContext:
        """Store new messages, run whatever the thresholds call for, return the model's context.

        ``phases`` (default: all) limits the threshold work to some of ``"activate"``, ``"observe"``,
        ``"reflect"``, so graph nodes can run one phase each. The call that includes ``"reflect"``
        closes the agent step: only it emits ``data-om-status`` and starts background buffering.
        """
        resource = self._resource_for(thread_id, resource_id)
        run = _check_phases(phases)
        await self._ensure_setup()
        moment = now or self._clock()
        await self._ensure_thread(resource, thread_id)
        inputs = await self._persist(resource, thread_id, messages, moment)
        warn_oversized(inputs.inserted, self.config.observation.message_tokens)
        key = record_key(resource, self._record_thread(thread_id))
        self._touch_record(key)
        step = _StepState(resource, thread_id, key, moment, [], current_model, config)
        aborted: str | None = None
        async with self._lock(key):
            step.events.extend(self._pending_events.pop(key, []))
            record = await self._load_record(resource, thread_id)
            record = await self._settle_inputs(step, record, inputs)
            window_before = await self._window(record, resource, thread_id)
            if self.config.enabled:
                try:
                    with turn_budget(self.config.failure_policy.turn_budget_s()):
                        record = await self._run_thresholds(step, record, run)
                except OMAborted as exc:
                    aborted = str(exc)
                    record = await self._load_record(resource, thread_id)
            window = await self._window(record, resource, thread_id, refresh=False)
            # the reflect phase closes an agent step; so does an abort, after which no model runs
            closes_step = "reflect" in run or aborted is not None
            if closes_step:
                self._step_numbers.close_step(key, run_mark(config), self.cache_limit)
            status = self._status(record, window, thread_id, self._step_numbers.last(key))
            if closes_step:
                step.events.insert(0, StatusEvent(data=status))
            context = await self._build_context(record, window, resource, thread_id, status)
            if closes_step:
                failure_policy.apply_to_context(self, context, step.events)
                step.events[0] = StatusEvent(data=context.status)
            if self.config.enabled and closes_step and aborted is None:
                self._schedule_background(step, record, window)
        context.events = step.events
        context.observed_message_ids = _left_window(window_before, window)
        context.aborted = aborted
        await self._dispatch(step.events, config)
        return context

    def process(self, thread_id: str, messages: Sequence[BaseMessage], **kwargs: Any) -> OMContext:
        """Sync twin of ``aprocess`` (runs on OM's private loop so background buffering survives)."""
        return self._loop.run(self.aprocess(thread_id, messages, **kwargs), twin="om.aprocess(...)")

    async def _run_thresholds(
        self, step: _StepState, record: OMRecord, phases: frozenset[str] = frozenset(PHASES)
    ) -> OMRecord:
        cfg = self.config
        obs = cfg.observation
        window = await self._window(record, step.resource_id, step.thread_id, refresh=False)
        if step.arrival_window is None:
            step.arrival_window = window
        tokens = window.tokens
        if cfg.buffering_enabled and "activate" in phases:
            record = await self._maybe_activate(step, record, window, tokens)
            window = await self._window(record, step.resource_id, step.thread_id, refresh=False)
            tokens = window.tokens
        limit = self._message_limit(record)
        failed_before = bool(record.metadata.get(_OBSERVATION_FAILED))
        must_block = tokens > limit and (
            not cfg.buffering_enabled or tokens > obs.block_after_tokens() or failed_before
        )
        if must_block and "observe" in phases:
            record = await self._observe_sync(step, record, window, trigger="turn-sync")
        if "reflect" in phases:
            record = await self._maybe_reflect(step, record, window)
        return record

    def _message_limit(self, record: OMRecord) -> int:
        """The message window's threshold; under a shared budget it grows into unused observation room."""
        message_tokens = self.config.observation.message_tokens
        if not self.config.share_token_budget:
            return message_tokens
        total = message_tokens + self.config.reflection.observation_tokens
        return max(message_tokens, total - record.observation_tokens)

    def _reflection_limit(self, unobserved_tokens: int) -> int:
        observation_tokens = self.config.reflection.observation_tokens
        if not self.config.share_token_budget:
            return observation_tokens
        total = self.config.observation.message_tokens + observation_tokens
        return max(observation_tokens, total - unobserved_tokens)

    # ------------------------------------------------------- observation

    def _sync_cut(self, messages: Sequence[BaseMessage], tokens: Sequence[int]) -> int:
        """How many of the window's messages a synchronous observation takes (``turns.sync_cut``):
        everything before the current turn; the turn's answered tool rounds only when the turn alone
        is over ``block_after``; never the newest tool round."""
        obs = self.config.observation
        return sync_cut(messages, tokens, message_limit=obs.message_tokens, turn_limit=obs.block_after_tokens(),
                        keep=obs.tokens_to_keep_after_activation())

    def _activatable(self, resource_id: str, thread_id: str, window: Window,
                     chunks: Sequence[BufferedChunk]) -> list[BufferedChunk]:
        """The oldest chunks whose messages may leave the context now (``turns.removable_prefix``):
        a chunk may cover the unanswered round, but it is not activated before the model answered."""
        if not chunks or not window:
            return list(chunks)
        lc = self._window_messages(resource_id, thread_id, window)
        limit = removable_prefix(lc, [m.tokens for m in window],
                                 turn_limit=self.config.observation.block_after_tokens())
        through = window[limit - 1].seq if limit > 0 else window[0].seq - 1
        out: list[BufferedChunk] = []
        for chunk in sorted(chunks, key=lambda c: c.start_seq):
            if chunk.end_seq > through:
                break
            out.append(chunk)
        return out

    async def _observe_sync(
        self, step: _StepState, record: OMRecord, window: Window, *, trigger: Trigger
    ) -> OMRecord:
        """Observe under the record's ``observe`` lease: one worker at a time pays the Observer."""
        ttl = float(self.config.failure_policy.lease_ttl) / 1000.0
        if self.config.buffering_enabled and not self._tasks.running(step.key, "observe"):
            await wait_until_free(self.store, lease_name(step.key, "buffer"), ttl)  # another worker's chunk
        async with wait_for_lease(self.store, lease_name(step.key, "observe"), ttl):
            latest = await self._load_record(step.resource_id, step.thread_id)
            if latest.version != record.version:  # another worker observed meanwhile: decide on what is left
                record, window = latest, await self._window(latest, step.resource_id, step.thread_id)
                if trigger == "turn-sync" and window.tokens <= self._message_limit(record):
                    return record
            return await self._observe_sync_held(step, record, window, trigger=trigger)

    async def _observe_sync_held(
        self, step: _StepState, record: OMRecord, window: Window, *, trigger: Trigger
    ) -> OMRecord:
        if self.config.buffering_enabled and record.buffered_chunks:
            ready = self._activatable(step.resource_id, step.thread_id, window, record.buffered_chunks)
            record = await self._activate_chunks(step, record, window, ready, "threshold")
            window = await self._window(record, step.resource_id, step.thread_id)
        if self.config.scope == "resource":
            from .resource import observe_resource

            return await observe_resource(self, step, record, trigger=trigger)
        lc = [self._as_langchain(step.resource_id, m) for m in window]
        cut = self._sync_cut(lc, [m.tokens for m in window])
        if cut <= 0:
            return record
        # a backlog larger than one Observer call is observed in several, oldest first; the newest
        # human message is pinned by the part that takes it
        human = pinned_row(lc, window, cut)
        parts = split_backlog(self, step.resource_id, window[:cut], step.thread_id)
        for index, part in enumerate(parts):
            if index and remaining_budget() == 0:
                break  # the turn's budget is spent: the rest waits for the next step
            pinned = human if human is not None and part[0].seq <= human.seq <= part[-1].seq else None
            record, observed = await self._observe_part(step, record, part, pinned, trigger)
            if not observed:
                break
        return record

    async def _observe_part(
        self, step: _StepState, record: OMRecord, chosen: Sequence[StoredMessage], pinned: StoredMessage | None,
        trigger: Trigger,
    ) -> tuple[OMRecord, bool]:
        """Observe and commit ``chosen``; returns the latest record and whether the Observer succeeded."""
        for _attempt in range(_MAX_COMMIT_RETRIES):
            result = await self._observe_messages(step, record, {step.thread_id: chosen}, trigger=trigger)
            if result is None:
                return record, False
            updated = self._apply_observation(record, step.thread_id, chosen, result, human_pinned=pinned)
            updated.metadata.pop(_OBSERVATION_FAILED, None)
            try:
                committed = await self.store.acommit_record(
                    updated, expected_version=record.version, mark_observed={step.thread_id: chosen[-1].seq}
                )
            except RecordConflictError:
                record = await self._load_record(step.resource_id, step.thread_id)
                await self._window(record, step.resource_id, step.thread_id)
                chosen = [m for m in chosen if m.seq > record.last_observed_seq.get(step.thread_id, 0)]
                if not chosen:
                    return record, True
                continue
            await self._after_observation(step, committed, result)
            return committed, True
        return record, True

    def _apply_observation(
        self,
        record: OMRecord,
        thread_id: str,
        chosen: Sequence[StoredMessage],
        result: _CycleResult,
        *,
        human_pinned: StoredMessage | None,
        source: Literal["observation", "buffered"] = "observation",
    ) -> OMRecord:
        updated = record.model_copy(deep=True)
        updated.groups.append(
            ObservationGroup(
                thread_id=thread_id,
                start_id=chosen[0].id,
                end_id=chosen[-1].id,
                text=result.text,
                tokens=result.tokens,
                generation=record.generation_count,
                source=source,
            )
        )
        updated.last_observed_seq[thread_id] = chosen[-1].seq
        updated.last_observed_id[thread_id] = chosen[-1].id
        updated.last_observed_at = chosen[-1].created_at
        # staged chunks overlapping what was just observed can never be activated
        updated.buffered_chunks = [
            c for c in updated.buffered_chunks if c.thread_id != thread_id or c.start_seq > chosen[-1].seq
        ]
        self._apply_hints(updated, result.current_task, result.suggested_response, result.extracted)
        add_spend(updated.metadata, "observer", result.usage, result.provider_metadata)
        if human_pinned is not None:
            pin_message(updated.metadata, human_pinned)
        updated.updated_at = utcnow()
        return updated

    def _apply_hints(
        self, record: OMRecord, current_task: str | None, suggested: str | None, extracted: Mapping[str, Any]
    ) -> None:
        if current_task:
            record.metadata["current_task"] = current_task
        if suggested:
            record.metadata["suggested_response"] = suggested
        if extracted and self.extraction_pipeline is not None:
            self.extraction_pipeline.persist(record, extracted)
        elif extracted:
            store = record.metadata.setdefault("om", {}).setdefault("extracted", {})
            store.update(extracted)

    async def _after_observation(self, step: _StepState, record: OMRecord, result: _CycleResult) -> None:
        """Side effects that follow a committed observation (thread title)."""
        if self.config.observation.thread_title and result.thread_title:
            thread = await self.store.aget_thread(step.resource_id, step.thread_id)
            old = thread.title if thread else None
            if result.thread_title != old:
                await self.store.aupdate_thread(step.resource_id, step.thread_id, title=result.thread_title)
                step.events.append(
                    ThreadUpdateEvent(
                        data=ThreadUpdateData(
                            cycle_id=result.cycle_id or new_id("cycle_"),
                            thread_id=step.thread_id,
                            old_title=old,
                            new_title=result.thread_title,
                            timestamp=iso_now(),
                        )
                    )
                )

    def thread_label(self, thread_id: str) -> str:
        return observer_mod.thread_label(thread_id, self.config.obscure_ids)

    async def _observe_messages(
        self,
        step: _StepState,
        record: OMRecord,
        batch: Mapping[str, Sequence[StoredMessage]],
        *,
        trigger: Trigger,
        buffering: bool = False,
        emit: Callable[[OMEvent], None] | None = None,
    ) -> _CycleResult | None:
        """Run the Observer over ``batch`` (thread id -> messages). Returns None on failure (after
        emitting the failure event); raises ``OMAborted`` when no model fits the input."""
        push = emit or step.events.append
        cycle_id = new_id("cycle_")
        tokens_in = sum(total_tokens(msgs) for msgs in batch.values())
        started = time.perf_counter()
        marker = ObservationMarkerConfig(**self.config.marker_config())
        thread_ids = list(batch)
        if buffering:
            push(BufferingStartEvent(data=BufferingStartData(
                cycle_id=cycle_id, operation_type="observation", started_at=iso_now(), tokens_to_buffer=tokens_in,
                record_id=record.id, thread_id=step.thread_id,
                thread_ids=thread_ids if self.config.scope == "resource" else None, config=marker)))
        else:
            push(ObservationStartEvent(data=ObservationStartData(
                cycle_id=cycle_id, operation_type="observation", started_at=iso_now(), tokens_to_observe=tokens_in,
                record_id=record.id, thread_id=step.thread_id,
                thread_ids=thread_ids if self.config.scope == "resource" else None, config=marker)))
        hook_ctx = HookContext(step.thread_id, step.resource_id, trigger, "observation", cycle_id)
        await self.hooks.call("on_observation_start", hook_ctx)
        try:
            result = await self._call_observer(step, record, batch, trigger=trigger)
        except ModelSelectionError as exc:
            await self._cycle_failed(push, hook_ctx, record, step, cycle_id, started, tokens_in, str(exc), buffering)
            raise OMAborted(f"observer model selection failed: {exc}") from exc
        except Exception as exc:
            # a model failure was logged where it happened (once, if permanent); others say it here
            (logger.debug if isinstance(exc, OMModelError) else logger.warning)(
                "langchain-om observation failed: %s", failure_policy.failure_reason(exc))
            await self._cycle_failed(push, hook_ctx, record, step, cycle_id, started, tokens_in,
                                     failure_policy.failure_reason(exc), buffering)
            if not buffering:
                failure_policy.raise_if_configured(self, exc)
            return None
        result.cycle_id = cycle_id
        duration = (time.perf_counter() - started) * 1000
        failures = result.failures or None
        values = result.extracted or None
        if buffering:
            push(BufferingEndEvent(data=BufferingEndData(
                cycle_id=cycle_id, operation_type="observation", completed_at=iso_now(), duration_ms=duration,
                tokens_buffered=tokens_in, buffered_tokens=result.tokens, observations=result.text,
                extracted_values=values, extraction_failures=failures, record_id=record.id,
                thread_id=step.thread_id)))
        else:
            push(ObservationEndEvent(data=ObservationEndData(
                cycle_id=cycle_id, operation_type="observation", completed_at=iso_now(), duration_ms=duration,
                tokens_observed=tokens_in, observation_tokens=result.tokens, observations=result.text,
                current_task=result.current_task, suggested_response=result.suggested_response,
                extracted_values=values, extraction_failures=failures, record_id=record.id,
                thread_id=step.thread_id)))
        await self.hooks.call("on_observation_end", HookContext(
            step.thread_id, step.resource_id, trigger, "observation", cycle_id, usage=result.usage,
            provider_metadata=result.provider_metadata))
        return result

    async def _cycle_failed(
        self,
        push: Callable[[OMEvent], None],
        hook_ctx: HookContext,
        record: OMRecord,
        step: _StepState,
        cycle_id: str,
        started: float,
        tokens: int,
        error: str,
        buffering: bool,
        operation: Literal["observation", "reflection"] = "observation",
    ) -> None:
        duration = (time.perf_counter() - started) * 1000
        if buffering:
            push(BufferingFailedEvent(data=BufferingFailedData(
                cycle_id=cycle_id, operation_type=operation, failed_at=iso_now(), duration_ms=duration,
                tokens_attempted=tokens, error=error, record_id=record.id, thread_id=step.thread_id)))
        else:
            push(ObservationFailedEvent(data=ObservationFailedData(
                cycle_id=cycle_id, operation_type=operation, failed_at=iso_now(), duration_ms=duration,
                tokens_attempted=tokens, error=error, record_id=record.id, thread_id=step.thread_id)))
        name = "on_observation_end" if operation == "observation" else "on_reflection_end"
        await self.hooks.call(name, HookContext(
            hook_ctx.thread_id, hook_ctx.resource_id, hook_ctx.trigger, operation, cycle_id, error=error))

    def _previous_observations(self, record: OMRecord) -> str:
        text = record.observations
        pending = record.buffered_reflection
        if pending is not None:
            covered = set(pending.covered_group_ids)
            kept = [g.text for g in record.groups if g.id not in covered]
            text = "\n\n".join([pending.text, *kept])
        return observer_mod.truncate_previous_observations(
            text, self.config.observation.previous_observer_tokens, self.counter.count_text
        )

    async def _inline_extractors(
        self, source: Literal["observation", "reflection"], step: _StepState, record: OMRecord
    ) -> list[Any]:
        if self.extraction_pipeline is not None:
            return list(await self.extraction_pipeline.ainline_specs(
                source, record, memory=self, thread_id=step.thread_id, resource_id=step.resource_id,
                request_context=step.config, main_agent=step.current_model))
        return []

    def recall_tool(self, *, thread_id: str | None = None, resource_id: str | None = None) -> Any:
        """The ``recall`` tool (needs ``retrieval``). Without ids it reads ``thread_id`` /
        ``resource_id`` from ``config["configurable"]`` at call time, so one tool serves every thread."""
        from .recall import make_recall_tool

        return make_recall_tool(self, thread_id=thread_id, resource_id=resource_id)

    def working_memory_tools(self, *, thread_id: str | None = None, resource_id: str | None = None) -> list[Any]:
        """Extra tools for the main agent: ``update_working_memory`` when working memory is agent-managed.

        Integrations (middleware, graph helpers) add these to the agent's tools; without ids the
        tool reads ``thread_id`` / ``resource_id`` from ``config["configurable"]``."""
        if self.working_memory is None:
            return []
        return list(self.working_memory.tools(thread_id=thread_id, resource_id=resource_id))

    async def _call_observer(
        self, step: _StepState, record: OMRecord, batch: Mapping[str, Sequence[StoredMessage]], *, trigger: Trigger
    ) -> _CycleResult:
        spec = self.config.model_spec("observation")
        supports_images = model_supports_images(spec) is not False  # unknown capability: forward (page)
        texts: list[str] = []
        attachments: list[Any] = []
        for thread_id, msgs in batch.items():
            label = self.thread_label(thread_id) if (self.config.scope == "resource" or len(batch) > 1) else None
            transcript = observer_mod.format_transcript(
                list(msgs),
                thread_label=label,
                observe_attachments=self.config.observation.observe_attachments,
                model_supports_images=supports_images,
            )
            texts.append(transcript.text)
            attachments.extend(transcript.attachments)
        transcript_all = observer_mod.Transcript(text="\n\n".join(texts), attachments=attachments)
        inline = await self._inline_extractors("observation", step, record)
        current_title: str | None = None
        if self.config.observation.thread_title:
            thread = await self.store.aget_thread(step.resource_id, step.thread_id)
            current_title = thread.title if thread is not None else None
        prompt = observer_mod.build_observer_messages(
            transcript_all,
            previous_observations=self._previous_observations(record),
            instruction=self.config.observation.instruction,
            now=step.now,
            want_thread_title=self.config.observation.thread_title,
            inline_extractors=inline,
            current_title=current_title,
        )
        input_tokens = self.counter.count_messages(prompt)
        call = await acall_om_model(
            spec if spec is not None else "default",
            prompt,
            role="observer",
            input_tokens=input_tokens,
            settings=self.config.model_settings("observation"),
            provider_options=self.config.observation.provider_options,
            timeout_s=self.config.observation.model_timeout_s(),
            default_retries=self.config.failure_policy.max_retries,
            backoff_s=float(self.config.failure_policy.backoff) / 1000.0,
            max_backoff_s=float(self.config.failure_policy.max_backoff) / 1000.0,
            context={"thread_id": step.thread_id, "resource_id": step.resource_id, "trigger": trigger,
                     "input_tokens": input_tokens, "memory": self, "role": "observer"},
        )
        parsed = observer_mod.parse_observer_output(call.text, inline_slugs=[spec_.slug for spec_ in inline])
        extracted, failures = await self._extract("observation", step, record, parsed, transcript_all.text)
        return _CycleResult(
            text=parsed.observations,
            tokens=self.counter.count_text(parsed.observations),
            current_task=parsed.current_task,
            suggested_response=parsed.suggested_response,
            thread_title=parsed.thread_title,
            extracted=extracted,
            failures=failures,
            usage=call.usage,
            provider_metadata=call.provider_metadata,
        )

    async def _extract(
        self,
        source: Literal["observation", "reflection"],
        step: _StepState,
        record: OMRecord,
        parsed: Any,
        input_text: str,
    ) -> tuple[dict[str, Any], list[ExtractionFailure]]:
        """Built-in and custom values, all through the extraction pipeline when there is one."""
        if self.extraction_pipeline is not None:
            return await self.extraction_pipeline.run(
                source=source, memory=self, record=record, parsed=parsed, input_text=input_text,
                thread_id=step.thread_id, resource_id=step.resource_id,
                request_context=step.config, main_agent=step.current_model,
            )
        values: dict[str, Any] = {}
        if getattr(parsed, "current_task", None):
            values["current-task"] = parsed.current_task
        if getattr(parsed, "suggested_response", None):
            values["suggested-response"] = parsed.suggested_response
        if getattr(parsed, "thread_title", None) and self.config.observation.thread_title:
            values["thread-title"] = parsed.thread_title
        if self.extraction_pipeline is None:
            return values, []
        custom, failures = await self.extraction_pipeline.run(
            source=source, memory=self, record=record, parsed=parsed, input_text=input_text,
            thread_id=step.thread_id, resource_id=step.resource_id,
            request_context=step.config, main_agent=step.current_model,
        )
        values.update(custom)
        return values, failures

    # -------------------------------------------------------------- buffering

    def _schedule_background(self, step: _StepState, record: OMRecord, window: Window) -> None:
        if not self.config.buffering_enabled:
            return
        interval = self.config.observation.buffer_interval_tokens()
        buffered_to = max([c.end_seq for c in record.buffered_chunks], default=0)
        pending = window.after(buffered_to)
        if pending and pending.tokens >= interval:
            self._tasks.start(step.key, "observe", self._buffer_observation(step, pending))
        obs_tokens = record.observation_tokens
        ref = self.config.reflection
        if (
            record.groups
            and record.buffered_reflection is None
            and obs_tokens >= ref.buffer_start_tokens()
            and not self._tasks.running(step.key, "reflect")
        ):
            self._tasks.start(step.key, "reflect", self._buffer_reflection(step, [g.id for g in record.groups]))

    async def aon_turn_end(
        self, thread_id: str, messages: Sequence[BaseMessage] = (), *, resource_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> None:
        """Store the turn's final messages; with ``buffer_on_idle`` buffer whatever is pending now
        (its extractors see ``config`` as their ``request_context``)."""
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        await self._ensure_thread(resource, thread_id)
        inputs = await self._persist(resource, thread_id, messages, self._clock())
        key = record_key(resource, self._record_thread(thread_id))
        self._touch_record(key)
        step = _StepState(resource, thread_id, key, self._clock(), [], None, config)
        idle_buffering = self.config.buffering_enabled and self.config.observation.buffer_on_idle
        if not (idle_buffering or inputs.instructions or inputs.edited):
            self._settled(resource, thread_id, inputs)
            return
        async with self._lock(key):
            record = await self._load_record(resource, thread_id)
            record = await self._settle_inputs(step, record, inputs)
            if not idle_buffering:
                return
            window = await self._window(record, resource, thread_id)
        buffered_to = max([c.end_seq for c in record.buffered_chunks], default=0)
        pending = window.after(buffered_to)
        if pending:
            self._tasks.start(key, "observe", self._buffer_observation(step, pending))

    def _background_emit(self, key: str) -> Callable[[OMEvent], None]:
        def push(event: OMEvent) -> None:
            self._debug(event)
            if key not in self._recent_records:
                return  # a record this process no longer keeps: its next step starts afresh
            pending = self._pending_events.setdefault(key, [])
            pending.append(event)
            del pending[:-_PENDING_EVENTS_LIMIT]  # a thread nobody steps keeps only its newest events

        return push

    async def _buffer_observation(self, step: _StepState, pending: Sequence[StoredMessage]) -> None:
        """Observe ``pending`` in the background and stage the result as a chunk (unless another
        worker holds the record's ``buffer`` lease: it is buffering the same messages)."""
        ttl = float(self.config.failure_policy.lease_ttl) / 1000.0
        async with try_lease(self.store, lease_name(step.key, "buffer"), ttl) as held:
            # a synchronous observation running elsewhere takes these messages: do not pay twice
            if held and await is_free(self.store, lease_name(step.key, "observe")):
                record = await self._load_record(step.resource_id, step.thread_id)
                done = max([record.last_observed_seq.get(step.thread_id, 0),
                            *[c.end_seq for c in record.buffered_chunks]])
                pending = [m for m in pending if m.seq > done]
                if pending:
                    await self._buffer_observation_held(step, pending)

    async def _buffer_observation_held(self, step: _StepState, pending: Sequence[StoredMessage]) -> None:
        emit = self._background_emit(step.key)
        lc = [self._as_langchain(step.resource_id, m) for m in pending]
        cut = safe_cut_at_or_before(lc, len(lc))
        chosen = pending[:cut]
        if not chosen:
            return
        record = await self._load_record(step.resource_id, step.thread_id)
        try:
            result = await self._observe_messages(step, record, {step.thread_id: chosen}, trigger="async-buffer",
                                                   buffering=True, emit=emit)
        except OMAborted as exc:
            logger.warning("langchain-om buffering aborted: %s", exc)
            result = None
        if result is None:
            await self._flag_failure(step, _OBSERVATION_FAILED)
            return
        async with self._lock(step.key):
            record = await self._load_record(step.resource_id, step.thread_id)
            start_after = max(
                [record.last_observed_seq.get(step.thread_id, 0), *[c.end_seq for c in record.buffered_chunks]]
            )
            if chosen[0].seq <= start_after:
                return  # overtaken by a synchronous observation or another buffer: discard, never double-observe
            chunk = BufferedChunk(
                thread_id=step.thread_id, start_seq=chosen[0].seq, end_seq=chosen[-1].seq, start_id=chosen[0].id,
                end_id=chosen[-1].id, message_count=len(chosen), message_tokens=total_tokens(chosen),
                observations=result.text, observation_tokens=result.tokens, current_task=result.current_task,
                suggested_response=result.suggested_response, extracted=result.extracted,
            )
            updated = record.model_copy(deep=True)
            if self.extraction_pipeline is not None:
                # custom values are persisted when buffered (the buffering-end event reports them as
                # stored); only the continuation hints wait for the chunk's activation
                from .extractors import BUILTIN_SLUGS

                custom = {k: v for k, v in result.extracted.items() if k not in BUILTIN_SLUGS}
                self.extraction_pipeline.persist(updated, custom)
                chunk.extracted = {k: v for k, v in result.extracted.items() if k in BUILTIN_SLUGS}
            updated.buffered_chunks.append(chunk)
            add_spend(updated.metadata, "observer", result.usage, result.provider_metadata)
            updated.metadata.pop(_OBSERVATION_FAILED, None)
            await self._commit_quietly(updated, record.version)

    async def _flag_failure(self, step: _StepState, flag: str) -> None:
        """Record that background work failed (retried on a concurrent commit, so it is not lost)."""
        async with self._lock(step.key):
            for _attempt in range(_MAX_COMMIT_RETRIES):
                record = await self._load_record(step.resource_id, step.thread_id)
                if record.metadata.get(flag) is True:
                    return
                updated = record.model_copy(deep=True)
                updated.metadata[flag] = True
                if await self._commit_quietly(updated, record.version):
                    return

    async def _commit_quietly(self, record: OMRecord, version: int) -> bool:
        try:
            await self.store.acommit_record(record, expected_version=version)
            return True
        except RecordConflictError:
            return False

    async def _maybe_activate(
        self, step: _StepState, record: OMRecord, window: Window, tokens: int
    ) -> OMRecord:
        staged = [c for c in record.buffered_chunks if c.start_seq > record.last_observed_seq.get(step.thread_id, 0)]
        if not staged:
            return record

        def ready() -> list[BufferedChunk]:  # the window walk, only once an activation is due
            return self._activatable(step.resource_id, step.thread_id, window, staged)

        obs = self.config.observation
        if tokens > self._message_limit(record):
            chunks = ready()
            return await self._activate_chunks(step, record, window, select_chunks(chunks, tokens, obs),
                                               "threshold") if chunks else record
        expired = self._idle_expired(step, self.config.observation_idle_ms())
        if expired is not None:
            last_activity, over_ms = expired
            return await self._activate_chunks(step, record, window, ready(), "ttl",
                                               last_activity=last_activity, ttl_expired_ms=over_ms)
        if self.config.observation_activates_on_provider_change():
            previous = self._changed_provider(step)
            if previous is not None:
                return await self._activate_chunks(step, record, window, ready(), "provider_change",
                                                   previous_model=previous)
        return record

    def _last_ai(self, step: _StepState) -> StoredMessage | None:
        window = step.arrival_window or Window()
        return next((m for m in reversed(window) if m.data.get("type") == "ai"), None)

    def _idle_expired(self, step: _StepState, setting: Any) -> tuple[datetime, float] | None:
        """``(last activity, ms past the TTL)`` when the idle TTL of ``setting`` has expired, else None.

        Idle is the gap between the last AI message and the message that arrives now; a replayed or
        imported message carries its own timestamp, which beats the wall clock.
        """
        ttl = idle_ttl_ms(setting, _provider_of(step.current_model))
        last_ai = self._last_ai(step)
        if ttl is None or last_ai is None or not step.arrival_window:
            return None
        newest = step.arrival_window[-1]
        arrival = newest.created_at if newest is not last_ai else step.now
        idle = ms_between(last_ai.created_at, arrival)
        return (last_ai.created_at, idle - ttl) if idle >= ttl else None

    def _changed_provider(self, step: _StepState) -> str | None:
        """The previous model (``provider/model``) when the step's model differs from the one that
        wrote the last AI message, else None."""
        last_ai = self._last_ai(step)
        if not step.current_model or last_ai is None:
            return None
        previous = model_identity(self._as_langchain(step.resource_id, last_ai))
        if previous and not same_model(previous, step.current_model):
            return previous
        return None

    async def _activate_chunks(
        self,
        step: _StepState,
        record: OMRecord,
        window: Window,
        chunks: list[BufferedChunk],
        triggered_by: Literal["threshold", "ttl", "provider_change"],
        *,
        last_activity: datetime | None = None,
        ttl_expired_ms: float | None = None,
        previous_model: str | None = None,
    ) -> OMRecord:
        """Swap buffered chunks into the log instantly (no model call) and mark their messages observed."""
        if not chunks:
            return record
        chunks = sorted(chunks, key=lambda c: c.start_seq)
        updated = record.model_copy(deep=True)
        chosen_ids = {c.id for c in chunks}
        updated.buffered_chunks = [c for c in updated.buffered_chunks if c.id not in chosen_ids]
        for chunk in chunks:
            updated.groups.append(ObservationGroup(
                thread_id=chunk.thread_id, start_id=chunk.start_id, end_id=chunk.end_id, text=chunk.observations,
                tokens=chunk.observation_tokens, generation=record.generation_count, source="buffered"))
            self._apply_hints(updated, chunk.current_task, chunk.suggested_response, chunk.extracted)
        last = chunks[-1]
        updated.last_observed_seq[step.thread_id] = last.end_seq
        updated.last_observed_id[step.thread_id] = last.end_id
        updated.last_observed_at = step.now
        lc_window = [self._as_langchain(step.resource_id, m) for m in window]
        cut = sum(1 for m in window if m.seq <= last.end_seq)
        pinned = pinned_row(lc_window, window, cut)
        if pinned is not None:
            pin_message(updated.metadata, pinned)
        # chunks that no longer start after the observed point can never be activated
        updated.buffered_chunks = [c for c in updated.buffered_chunks if c.start_seq > last.end_seq]
        try:
            committed = await self.store.acommit_record(
                updated, expected_version=record.version, mark_observed={step.thread_id: last.end_seq}
            )
        except RecordConflictError:
            return await self._load_record(step.resource_id, step.thread_id)
        text = "\n\n".join(c.observations for c in chunks)
        step.events.append(ActivationEvent(data=ActivationData(
            cycle_id=new_id("cycle_"), operation_type="observation", activated_at=iso_now(),
            chunks_activated=len(chunks), tokens_activated=sum(c.message_tokens for c in chunks),
            observation_tokens=committed.observation_tokens, messages_activated=sum(c.message_count for c in chunks),
            generation_count=committed.generation_count, observations=text, triggered_by=triggered_by,
            last_activity_at=int(last_activity.timestamp() * 1000) if last_activity else None,
            ttl_expired_ms=ttl_expired_ms, previous_model=previous_model,
            current_model=step.current_model if triggered_by == "provider_change" else None,
            record_id=committed.id, thread_id=step.thread_id,
            config=ObservationMarkerConfig(**self.config.marker_config()))))
        return committed

    # ------------------------------------------------------------- reflection

    async def _maybe_reflect(self, step: _StepState, record: OMRecord, window: Window) -> OMRecord:
        ref = self.config.reflection
        obs_tokens = record.observation_tokens
        limit = self._reflection_limit(window.tokens)
        if not record.groups:
            return record
        pending = record.buffered_reflection if self.config.reflection_buffering_enabled else None
        if obs_tokens <= limit:
            if pending is None:
                return record
            # standalone-only options; reflection never inherits the top-level ones (page)
            expired = self._idle_expired(step, self.config.reflection_idle_ms())
            if expired is not None:
                last_activity, over_ms = expired
                return await self._activate_reflection(step, record, pending, "ttl", last_activity=last_activity,
                                                        ttl_expired_ms=over_ms)
            if self.config.reflection_activates_on_provider_change():
                previous = self._changed_provider(step)
                if previous is not None:
                    return await self._activate_reflection(step, record, pending, "provider_change",
                                                           previous_model=previous)
            return record
        if self.config.reflection_buffering_enabled:
            if pending is not None:
                return await self._activate_reflection(step, record, pending, "threshold")
            # between observation_tokens and block_after only background reflection runs, unless
            # the last one failed: then this crossing reflects synchronously
            if obs_tokens <= ref.block_after_tokens() and not record.metadata.get(_REFLECTION_FAILED):
                return record
        failed_at = self._reflection_failed_at.get(step.key)
        if failed_at is not None and failed_at <= obs_tokens < failed_at + max(1, ref.observation_tokens // 10):
            # the last synchronous reflection failed (error or no compression) at failed_at tokens:
            # wait for the log to grow by a tenth of the threshold instead of paying the whole
            # retry ladder again on every step (a log that shrank since, reflected by another
            # worker or started afresh, is not held back)
            return record
        return await self._reflect_sync(step, record, trigger="turn-sync")

    async def _reflect_sync(self, step: _StepState, record: OMRecord, *, trigger: Trigger) -> OMRecord:
        group_ids = [g.id for g in record.groups]
        for _attempt in range(_MAX_COMMIT_RETRIES):
            outcome = await self._run_reflection(step, record, group_ids, trigger=trigger, buffering=False)
            if outcome is None:
                if trigger == "turn-sync":
                    self._reflection_failed_at[step.key] = record.observation_tokens
                return record
            self._reflection_failed_at.pop(step.key, None)
            text, _in_tokens, out_tokens, result = outcome
            updated = self._apply_reflection(record, group_ids, text, out_tokens, result)
            if updated is None:
                return record
            try:
                return await self.store.acommit_record(updated, expected_version=record.version)
            except RecordConflictError:
                record = await self._load_record(step.resource_id, step.thread_id)
                group_ids = [g.id for g in record.groups]
        return record

    def _apply_reflection(
        self, record: OMRecord, covered: Sequence[str], text: str, tokens: int, result: _CycleResult | None
    ) -> OMRecord | None:
        """Replace exactly the covered groups (a prefix of the log) with one reflected group."""
        ids = [g.id for g in record.groups]
        if ids[: len(covered)] != list(covered) or not covered:
            return None
        old = record.groups[: len(covered)]
        updated = record.model_copy(deep=True)
        updated.generation_count += 1
        threads = sorted({g.thread_id for g in old})
        reflected = ObservationGroup(
            thread_id=old[-1].thread_id, start_id=old[0].start_id, end_id=old[-1].end_id, text=text, tokens=tokens,
            generation=updated.generation_count, source="reflection", thread_ids=threads if len(threads) > 1 else [],
        )
        updated.groups = [reflected, *updated.groups[len(covered):]]
        updated.buffered_reflection = None
        updated.metadata.pop(_REFLECTION_FAILED, None)
        if result is not None:
            self._apply_hints(updated, result.current_task, result.suggested_response, result.extracted)
            add_spend(updated.metadata, "reflector", result.usage, result.provider_metadata)
        updated.updated_at = utcnow()
        return updated

    async def _run_reflection(
        self,
        step: _StepState,
        record: OMRecord,
        group_ids: Sequence[str],
        *,
        trigger: Trigger,
        buffering: bool,
        emit: Callable[[OMEvent], None] | None = None,
    ) -> tuple[str, int, int, _CycleResult] | None:
        """Call the Reflector with growing compression pressure until its output is smaller."""
        push = emit or step.events.append
        groups = [g for g in record.groups if g.id in set(group_ids)]
        source_text = "\n\n".join(g.text for g in groups)
        in_tokens = sum(g.tokens for g in groups)
        cycle_id = new_id("cycle_")
        started = time.perf_counter()
        marker = ObservationMarkerConfig(**self.config.marker_config())
        if buffering:
            push(BufferingStartEvent(data=BufferingStartData(
                cycle_id=cycle_id, operation_type="reflection", started_at=iso_now(), tokens_to_buffer=in_tokens,
                record_id=record.id, thread_id=step.thread_id, config=marker)))
        else:
            push(ObservationStartEvent(data=ObservationStartData(
                cycle_id=cycle_id, operation_type="reflection", started_at=iso_now(), tokens_to_observe=in_tokens,
                record_id=record.id, thread_id=step.thread_id, config=marker)))
        hook_ctx = HookContext(step.thread_id, step.resource_id, trigger, "reflection", cycle_id)
        await self.hooks.call("on_reflection_start", hook_ctx)
        spec = self.config.model_spec("reflection")
        inline = await self._inline_extractors("reflection", step, record)
        last_error = "reflection did not compress the observations"
        usage: dict[str, Any] | None = None
        provider_metadata: dict[str, Any] | None = None
        for level in range(reflector_mod.MAX_COMPRESSION_LEVEL + 1):
            prompt = reflector_mod.build_reflector_messages(
                source_text, instruction=self.config.reflection.instruction, level=level,
                target_tokens=self.config.reflection.observation_tokens // 2, inline_extractors=inline,
            )
            input_tokens = self.counter.count_messages(prompt)
            try:
                call = await acall_om_model(
                    spec if spec is not None else "default", prompt, role="reflector", input_tokens=input_tokens,
                    settings=self.config.model_settings("reflection"),
                    provider_options=self.config.reflection.provider_options,
                    timeout_s=self.config.reflection.model_timeout_s(),
                    default_retries=self.config.failure_policy.max_retries,
                    backoff_s=float(self.config.failure_policy.backoff) / 1000.0,
                    max_backoff_s=float(self.config.failure_policy.max_backoff) / 1000.0,
                    context={"thread_id": step.thread_id, "resource_id": step.resource_id, "trigger": trigger,
                             "input_tokens": input_tokens, "memory": self, "role": "reflector"},
                )
                usage, provider_metadata = call.usage, call.provider_metadata
                parsed = reflector_mod.parse_reflector_output(call.text, inline_slugs=[s.slug for s in inline])
            except ModelSelectionError as exc:
                await self._cycle_failed(push, hook_ctx, record, step, cycle_id, started, in_tokens, str(exc),
                                         buffering, "reflection")
                raise OMAborted(f"reflector model selection failed: {exc}") from exc
            except Exception as exc:
                last_error = failure_policy.failure_reason(exc)
                (logger.debug if isinstance(exc, OMModelError) else logger.warning)(
                    "langchain-om reflection attempt %d failed: %s", level, last_error)
                if isinstance(exc, OMModelError):
                    break  # the model itself failed (retries are spent): another level would pay again
                continue
            out_tokens = self.counter.count_text(parsed.observations)
            if not reflector_mod.is_compressed(in_tokens, out_tokens):
                last_error = f"reflection output ({out_tokens} tokens) not smaller than input ({in_tokens})"
                continue
            extracted, failures = await self._extract("reflection", step, record, parsed, source_text)
            result = _CycleResult(parsed.observations, out_tokens, parsed.current_task, parsed.suggested_response,
                                  None, extracted, failures, usage, provider_metadata, cycle_id=cycle_id)
            duration = (time.perf_counter() - started) * 1000
            if buffering:
                push(BufferingEndEvent(data=BufferingEndData(
                    cycle_id=cycle_id, operation_type="reflection", completed_at=iso_now(), duration_ms=duration,
                    tokens_buffered=in_tokens, buffered_tokens=out_tokens, observations=parsed.observations,
                    extracted_values=extracted or None, extraction_failures=failures or None, record_id=record.id,
                    thread_id=step.thread_id)))
            else:
                push(ObservationEndEvent(data=ObservationEndData(
                    cycle_id=cycle_id, operation_type="reflection", completed_at=iso_now(), duration_ms=duration,
                    tokens_observed=in_tokens, observation_tokens=out_tokens, observations=parsed.observations,
                    current_task=parsed.current_task, suggested_response=parsed.suggested_response,
                    extracted_values=extracted or None, extraction_failures=failures or None,
                    record_id=record.id, thread_id=step.thread_id)))
            await self.hooks.call("on_reflection_end", HookContext(
                step.thread_id, step.resource_id, trigger, "reflection", cycle_id, usage=usage,
                provider_metadata=provider_metadata))
            return parsed.observations, in_tokens, out_tokens, result
        await self._cycle_failed(push, hook_ctx, record, step, cycle_id, started, in_tokens, last_error, buffering,
                                 "reflection")
        return None

    async def _buffer_reflection(self, step: _StepState, group_ids: list[str]) -> None:
        emit = self._background_emit(step.key)
        record = await self._load_record(step.resource_id, step.thread_id)
        try:
            outcome = await self._run_reflection(step, record, group_ids, trigger="async-buffer", buffering=True,
                                                 emit=emit)
        except OMAborted as exc:
            logger.warning("langchain-om reflection buffering aborted: %s", exc)
            outcome = None
        if outcome is None:
            # the buffering-failed event is out; the observations are untouched
            await self._flag_failure(step, _REFLECTION_FAILED)
            return
        text, in_tokens, out_tokens, result = outcome
        async with self._lock(step.key):
            record = await self._load_record(step.resource_id, step.thread_id)
            ids = [g.id for g in record.groups]
            if ids[: len(group_ids)] != group_ids or record.buffered_reflection is not None:
                return
            updated = record.model_copy(deep=True)
            extracted = dict(result.extracted)
            if self.extraction_pipeline is not None:
                from .extractors import BUILTIN_SLUGS

                self.extraction_pipeline.persist(updated, {k: v for k, v in extracted.items()
                                                           if k not in BUILTIN_SLUGS})
                extracted = {k: v for k, v in extracted.items() if k in BUILTIN_SLUGS}
            updated.buffered_reflection = BufferedReflection(
                covered_group_ids=group_ids, text=text, input_tokens=in_tokens, output_tokens=out_tokens,
                extracted=extracted, cycle_id=result.cycle_id,
            )
            updated.metadata.pop(_REFLECTION_FAILED, None)
            add_spend(updated.metadata, "reflector", result.usage, result.provider_metadata)
            await self._commit_quietly(updated, record.version)

    async def _activate_reflection(
        self, step: _StepState, record: OMRecord, pending: BufferedReflection,
        triggered_by: Literal["threshold", "ttl", "provider_change"],
        *,
        last_activity: datetime | None = None,
        ttl_expired_ms: float | None = None,
        previous_model: str | None = None,
    ) -> OMRecord:
        updated = self._apply_reflection(record, pending.covered_group_ids, pending.text, pending.output_tokens, None)
        if updated is not None and pending.extracted:
            hints = pending.extracted
            self._apply_hints(updated, hints.get("current-task"), hints.get("suggested-response"), hints)
        if updated is None:
            stale = record.model_copy(deep=True)
            stale.buffered_reflection = None
            await self._commit_quietly(stale, record.version)
            return await self._load_record(step.resource_id, step.thread_id)
        try:
            committed = await self.store.acommit_record(updated, expected_version=record.version)
        except RecordConflictError:
            return await self._load_record(step.resource_id, step.thread_id)
        step.events.append(ActivationEvent(data=ActivationData(
            cycle_id=new_id("cycle_"), operation_type="reflection", activated_at=iso_now(), chunks_activated=1,
            tokens_activated=pending.output_tokens, observation_tokens=committed.observation_tokens,
            messages_activated=0, generation_count=committed.generation_count, observations=pending.text,
            triggered_by=triggered_by,
            last_activity_at=int(last_activity.timestamp() * 1000) if last_activity else None,
            ttl_expired_ms=ttl_expired_ms, previous_model=previous_model,
            current_model=step.current_model if triggered_by == "provider_change" else None,
            record_id=committed.id, thread_id=step.thread_id,
            config=ObservationMarkerConfig(**self.config.marker_config()))))
        return committed

    # ----------------------------------------------------------- manual API

    async def aobserve(self, thread_id: str, *, resource_id: str | None = None,
                       config: RunnableConfig | None = None) -> OMRecord:
        """Observe every unobserved message now (trigger ``manual``)."""
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        key = record_key(resource, self._record_thread(thread_id))
        step = _StepState(resource, thread_id, key, self._clock(), [], None, config)
        async with self._lock(key):
            record = await self._load_record(resource, thread_id)
            if self.config.scope == "resource":
                from .resource import observe_resource

                record = await observe_resource(self, step, record, trigger="manual")
            else:
                window = await self._window(record, resource, thread_id)
                lc = [self._as_langchain(resource, m) for m in window]
                cut = safe_cut_at_or_before(lc, len(lc))
                if cut > 0:
                    chosen = window[:cut]
                    result = await self._observe_messages(step, record, {thread_id: chosen}, trigger="manual")
                    if result is not None:
                        updated = self._apply_observation(record, thread_id, chosen, result,
                                                          human_pinned=pinned_row(lc, window, cut))
                        record = await self.store.acommit_record(
                            updated, expected_version=record.version, mark_observed={thread_id: chosen[-1].seq})
                        await self._after_observation(step, record, result)
        await self._dispatch(step.events, config)
        return record.model_copy(deep=True)

    async def areflect(self, thread_id: str, *, resource_id: str | None = None,
                       config: RunnableConfig | None = None) -> OMRecord:
        """Reflect the whole observation log now (trigger ``manual``)."""
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        key = record_key(resource, self._record_thread(thread_id))
        step = _StepState(resource, thread_id, key, self._clock(), [], None, config)
        async with self._lock(key):
            record = await self._load_record(resource, thread_id)
            if record.groups:
                record = await self._reflect_sync(step, record, trigger="manual")
        await self._dispatch(step.events, config)
        return record.model_copy(deep=True)

    def observe(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self._loop.run(self.aobserve(thread_id, **kwargs), twin="om.aobserve(...)")

    def reflect(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self._loop.run(self.areflect(thread_id, **kwargs), twin="om.areflect(...)")

    async def aget_record(self, thread_id: str, *, resource_id: str | None = None) -> OMRecord:
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        return (await self._load_record(resource, thread_id)).model_copy(deep=True)

    def get_record(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self._loop.run(self.aget_record(thread_id, **kwargs), twin="om.aget_record(...)")

    def observed_state_ids(
        self, thread_id: str, messages: Sequence[BaseMessage], context: OMContext, *, resource_id: str | None = None,
        keep_unobserved: bool = True,
    ) -> list[str]:
        """Ids of ``messages`` (a caller's own state, as passed to the step that returned
        ``context``) that may leave that state: OM has stored them and they are out of the
        unobserved window. So a checkpointed state stays as bounded as OM's context.
        With ``keep_unobserved=False`` the window does not hold them back either: the model's
        context comes from OM's store, so the state can shrink to the current turn.

        Kept whatever the window says: messages OM never stored, the newest human turn
        (that message and everything after it), and a tool call and its results, which
        leave together or stay together.
        """
        if context.aborted is not None:
            return []
        resource = self._resource_for(thread_id, resource_id)
        known: Mapping[str, KnownMessage] = self._known_ids.get(record_key(resource, thread_id), {})
        in_window = {m.id for m in context.messages} if keep_unobserved else set()
        newest_human = max((i for i, m in enumerate(messages) if m.type == "human"), default=-1)
        if newest_human <= 0:
            return []
        eligible = {m.id for m in messages[:newest_human] if m.id and m.id in known and m.id not in in_window}
        caller = {call["id"]: m.id for m in messages if isinstance(m, AIMessage) for call in m.tool_calls}
        units: dict[str | None, list[str | None]] = {}  # a tool call and its results form one unit
        for message in messages:
            unit = caller.get(message.tool_call_id, message.id) if isinstance(message, ToolMessage) else message.id
            units.setdefault(unit, []).append(message.id)
        leaving = {mid for members in units.values() if all(m in eligible for m in members) for mid in members}
        return [m.id for m in messages if m.id is not None and m.id in leaving]

    async def adelete_thread(self, thread_id: str, *, resource_id: str | None = None) -> None:
        """Forget a thread: wait for its background work, delete its messages and thread-scope
        record from the store, and drop OM's in-process caches so new messages start fresh."""
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        await adelete_branches(self, thread_id, resource_id)  # forks made by time travel go with it
        key = record_key(resource, self._record_thread(thread_id))
        await self._tasks.wait(key)
        async with self._lock(key):
            await self.store.adelete_thread(resource, thread_id)  # also forgets it in the resource record
            cache_key = record_key(resource, thread_id)
            self._known_ids.pop(cache_key, None)
            self._caller_lists.pop(cache_key, None)
            self._message_cache.pop(cache_key, None)
            self._windows.pop(cache_key, None)
            self._records.pop(key, None)
            self._rendered.pop(key, None)
            self._instruction_cache.pop(cache_key, None)
            self._pending_events.pop(key, None)
            self._step_numbers.forget(key)
            self._reflection_failed_at.pop(key, None)

    def delete_thread(self, thread_id: str, **kwargs: Any) -> None:
        """Sync twin of ``adelete_thread``. It waits for the thread's background work, so from inside a
        running event loop where that work runs it raises at once (await ``adelete_thread`` there)."""
        self._loop.run(self.adelete_thread(thread_id, **kwargs), twin="om.adelete_thread(...)",
                       waits_on=self._background_of(thread_id, kwargs.get("resource_id")))

    def _store_bound_to(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the store's connections belong to ``loop`` (a sync twin there would deadlock)."""
        return isinstance(self.store, SupportsLoopBinding) and self.store.bound_loop() is loop

    def _background_of(self, thread_id: str, resource_id: str | None) -> Callable[[asyncio.AbstractEventLoop], bool]:
        """Whether a loop runs background work of this thread's record (what ``adelete_thread`` waits for)."""
        key = record_key(self._resource_for(thread_id, resource_id), self._record_thread(thread_id))
        return lambda loop: self._tasks.on_loop(loop, key)

    def on_turn_end(self, thread_id: str, messages: Sequence[BaseMessage] = (), **kwargs: Any) -> None:
        """Sync twin of ``aon_turn_end``."""
        self._loop.run(self.aon_turn_end(thread_id, messages, **kwargs), twin="om.aon_turn_end(...)")

    async def astatus(self, thread_id: str, *, resource_id: str | None = None) -> StatusData:
        """The ``data-om-status`` payload for a thread, without running a step."""
        resource = self._resource_for(thread_id, resource_id)
        await self._ensure_setup()
        record = await self._load_record(resource, thread_id)
        window = await self._window(record, resource, thread_id)
        key = record_key(resource, self._record_thread(thread_id))
        return self._status(record, window, thread_id, self._step_numbers.last(key))

    def status(self, thread_id: str, **kwargs: Any) -> StatusData:
        return self._loop.run(self.astatus(thread_id, **kwargs), twin="om.astatus(...)")

    async def await_background(self, thread_id: str | None = None, *, resource_id: str | None = None) -> None:
        """Wait for running background buffering (all, or one thread's). Handy in tests and scripts."""
        if thread_id is None:
            await self._tasks.wait()
            return
        resource = self._resource_for(thread_id, resource_id)
        await self._tasks.wait(record_key(resource, self._record_thread(thread_id)))

    async def aclose(self, *, cancel: bool = False, timeout: float | None = 30.0) -> None:
        """Finish (or cancel) background work, then close the store. Records stay consistent either way."""
        await self._tasks.aclose(timeout=timeout, cancel=cancel)
        await self.store.aclose()

    def close(self) -> None:
        """Sync twin of ``aclose``. Inside a running event loop it raises at once, closing nothing:
        background work and the store's connections (a PostgreSQL pool) may belong to that loop,
        and close would wait for them while blocking it (await ``aclose`` there)."""
        self._loop.run(self._tasks.aclose(), twin="om.aclose()", waits_on=lambda _loop: True)
        self._loop.run(self.store.aclose(), twin="om.aclose()")
        self._loop.stop()

    # ---------------------------------------------------------- context

    async def _build_context(
        self, record: OMRecord, window: Window, resource_id: str, thread_id: str, status: StatusData
    ) -> OMContext:
        sections: list[str] = []
        for provider in self.section_providers:
            section = await provider(self, record, resource_id, thread_id)
            if section:
                sections.append(section)
        text = self._render(record, sections)
        messages = self._window_messages(resource_id, thread_id, window)
        if window.has_edits:  # corrections are for the Observer, not the model
            messages = [m for m in messages if not is_edit_message(m)]
        if not any(m.type == "human" for m in messages):
            pinned = await self._pinned_message(record, resource_id, thread_id)
            if pinned is not None:
                messages.insert(0, self._as_langchain(resource_id, pinned))
        system = context_message(text) if text else None
        instructions, _tokens = self._instructions(record, thread_id)
        return OMContext(system_message=system, messages=messages, status=status, events=[], source_record=record,
                         instructions=list(instructions))

    async def _pinned_message(self, record: OMRecord, resource_id: str, thread_id: str) -> StoredMessage | None:
        """The newest human message of the thread when an observation took it (looked up by thread
        and seq: a forked conversation may hold the same id in another thread of the resource)."""
        pinned = record.metadata.get("pinned")
        if isinstance(pinned, dict):
            entry = pinned.get(thread_id)
            if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)):
                return None
            rows = await self.store.aget_messages(resource_id, thread_id, after_seq=entry[1] - 1,
                                                  before_seq=entry[1] + 1)
            return rows[0] if rows and rows[0].id == entry[0] else None
        legacy = record.metadata.get("pinned_message_id")  # records written before pins carried a seq
        if isinstance(legacy, str):
            row = await self.store.aget_message(resource_id, legacy)
            if row is not None and row.thread_id == thread_id:
                return row
        return None

    def _instructions(self, record: OMRecord, thread_id: str) -> tuple[list[BaseMessage], int]:
        """The caller's system messages for the thread and their tokens (parsed once per change)."""
        entry = Instructions.stored(record.metadata, thread_id)
        if entry is None:
            return [], 0
        stamp = tuple(entry.get("fingerprints") or ())
        key = record_key(record.resource_id, thread_id)
        cached = self._instruction_cache.get(key)
        if cached is not None and cached[0] == stamp:
            return cached[1], cached[2]
        messages = Instructions.load(record.metadata, thread_id)
        tokens = sum(self.counter.count_message(m) for m in messages)
        _lru_put(self._instruction_cache, key, (stamp, messages, tokens), self.cache_limit)
        return messages, tokens

    def _render(self, record: OMRecord, sections: list[str]) -> str | None:
        """The system message text; rendered again only when the record or a section changed
        (a 20k-token log takes ~0.1 ms to render, and most steps change neither)."""
        stamp = (record.id, record.version, record.updated_at, tuple(sections))
        cached = self._rendered.get(record.key)
        if cached is not None and cached[0] == stamp:
            return cached[1]
        labels = {g.thread_id: self.thread_label(g.thread_id) for g in record.groups}
        text = render_context(
            record.groups,
            current_task=record.current_task,
            suggested_response=record.suggested_response,
            extra_sections=sections,
            thread_labels=labels,
            show_thread=self.config.scope == "resource",
        )
        _lru_put(self._rendered, record.key, (stamp, text), self.cache_limit)
        return text

    def _status(self, record: OMRecord, window: Window, thread_id: str, step_number: int) -> StatusData:
        tokens = window.tokens
        chunks = [c for c in record.buffered_chunks if c.start_seq > record.last_observed_seq.get(thread_id, 0)]
        key = record.key
        obs_status = "running" if self._tasks.running(key, "observe") else ("complete" if chunks else "idle")
        pending = record.buffered_reflection
        ref_status = "running" if self._tasks.running(key, "reflect") else ("complete" if pending else "idle")
        return StatusData(
            windows=Windows(
                active=ActiveWindows(
                    messages=WindowUsage(tokens=tokens, threshold=self._message_limit(record)),
                    observations=WindowUsage(tokens=record.observation_tokens,
                                             threshold=self._reflection_limit(tokens)),
                ),
                buffered=BufferedWindows(
                    observations=BufferedObservations(
                        chunks=len(chunks),
                        message_tokens=sum(c.message_tokens for c in chunks),
                        projected_message_removal=projected_removal(chunks, tokens, self.config.observation),
                        observation_tokens=sum(c.observation_tokens for c in chunks),
                        status=obs_status,
                    ),
                    reflection=BufferedReflectionStatus(
                        input_observation_tokens=pending.input_tokens if pending else 0,
                        observation_tokens=pending.output_tokens if pending else 0,
                        status=ref_status,
                    ),
                ),
            ),
            record_id=record.id,
            thread_id=thread_id,
            step_number=step_number,
            generation_count=record.generation_count,
            tokenizer=self.counter.source,
            instruction_tokens=self._instructions(record, thread_id)[1],
            spend=record_spend(record.metadata),
        )

    # ------------------------------------------------------------- events

    def _debug(self, event: OMEvent) -> None:
        callback = self.config.on_debug_event
        if callback is None:
            return
        try:
            result = callback(event)
            if asyncio.iscoroutine(result):
                asyncio.get_running_loop().create_task(result)
        except Exception:
            logger.exception("langchain-om on_debug_event raised")

    async def _dispatch(self, events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
        """Send events as LangChain custom events and to LangGraph's custom stream, when in a run."""
        from .callbacks import dispatch_events

        for event in events:
            if not self._pending_from_background(event):
                self._debug(event)
        await dispatch_events(events, config)

    @staticmethod
    def _pending_from_background(event: OMEvent) -> bool:
        return event.type.startswith("data-om-buffering-")


def _idle(lock: asyncio.Lock) -> bool:
    """Nobody holds the lock and nobody waits for it (so a new one may stand in for it)."""
    return not lock.locked() and not getattr(lock, "_waiters", None)


def _provider_of(model_id: str | None) -> str | None:
    if not model_id:
        return None
    for sep in (":", "/"):
        if sep in model_id:
            return model_id.split(sep, 1)[0]
    return None


def default_db_path() -> str:
    return os.environ.get("LANGCHAIN_OM_DB", "./langchain_om.db")
