"""The engine's shared runtime: configuration, store, token counter, in-process caches, locks
and background tasks, plus the small reads every cycle needs (the record, the unobserved window,
a stored row as a LangChain message).

``ObservationalMemory`` is this runtime plus the public methods (``facade``); the step and cycle
modules are functions over it. Extensions (recall, working memory, temporal markers, extractors,
branches) see it only through ``langchain_om.extensions.host.MemoryHost``.

In-process caches, each bounded (docs/storage.md, "In-process caches"): per thread (``cache_limit``
threads, evicted by sampled recency, see ``cache_policy``) the ids stored, the caller's last list, the thread's
incarnation, parsed messages (``MESSAGE_CACHE_PER_THREAD`` each), the unobserved window and the
caller's instructions; per record (``cache_limit`` records) the parsed record, the rendered log,
the run step counter, undelivered background events (``PENDING_EVENTS_LIMIT`` each) and idle
locks. An evicted thread's next step is a cold step, nothing more.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Coroutine, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Literal, TypeVar, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from ..foundation._loop import LoopThread
from ..foundation.config import OMConfig
from ..foundation.events import OMEvent, WaitData, WaitEvent, iso_now
from ..foundation.hooks import ObserveHooks
from ..foundation.inputs import KnownMessage, known_from_rows, message_fingerprint
from ..foundation.messages import load_message
from ..foundation.run_steps import RunSteps
from ..foundation.tokens import TokenCounter, get_token_counter
from ..foundation.window import Window
from ..model_calls.credentials import check_model_strings
from ..model_calls.transcript import thread_label
from ..store.base import (
    NewMessage,
    OMRecord,
    OMStore,
    RecordConflictError,
    RecordStamp,
    StoredMessage,
    SupportsLoopBinding,
    SupportsRecordStamp,
    new_id,
    record_key,
    utcnow,
)
from ..store.step_fast_paths import supports
from .buffer_handoff import LockLoans
from .cache_policy import SampledKeys
from .live_runs import LiveRuns
from .observer_backoff import ObserverBackoff
from .resource_ids import resolve as resolve_resource_ids
from .state import MAX_COMMIT_RETRIES, editable, lru_put
from .tasks import BackgroundTasks

logger = logging.getLogger("langchain_om")

SectionProvider = Callable[[Any, OMRecord, str, str], Awaitable[str | None]]
"""Called with ``(om, record, resource_id, thread_id)`` to add a section to the context; the
record is OM's cached one, shared across steps: read it, never change it."""
MessageListener = Callable[[Any, str, str, list[StoredMessage]], Awaitable[None]]
"""Called with ``(om, resource_id, thread_id, inserted_rows)`` after new messages are stored."""
MESSAGE_CACHE_PER_THREAD = 2048
THREAD_CACHE_LIMIT = 512
PENDING_EVENTS_LIMIT = 200
_T = TypeVar("_T")
_V = TypeVar("_V")


class WindowCache:
    """The unobserved rows of one thread as last read (see ``EngineCore.window``)."""

    __slots__ = ("after", "newest", "record_id", "rows")

    def __init__(self, record_id: str, after: int, newest: int, rows: Window) -> None:
        self.record_id, self.after, self.newest, self.rows = record_id, after, newest, rows


class EngineCore:
    """The runtime every engine module works on (see the module docstring)."""

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
            enabled=enabled, model=model, scope=scope, observation=observation, reflection=reflection,
            share_token_budget=share_token_budget, temporal_markers=temporal_markers, retrieval=retrieval,
            activate_after_idle=activate_after_idle, activate_on_provider_change=activate_on_provider_change,
            obscure_thread_ids=obscure_thread_ids, token_counter=token_counter, on_debug_event=on_debug_event,
            failure_policy=failure_policy,
        )
        check_model_strings(self.config)  # a missing key or package fails here, not on every step
        self.hooks = ObserveHooks.coerce(hooks)
        if store is None:
            from ..store import default_store

            store = default_store()
        self.store: OMStore = store
        self.counter: TokenCounter = get_token_counter(token_counter)
        self._clock = clock or utcnow
        self._tasks = BackgroundTasks(self.config.failure_policy.background_bound_s(), self.waiting)
        self._loans = LockLoans()  # a step waiting for this process's buffering cycle lends it the lock
        self._loop = LoopThread(refuse_in=self._store_bound_to)
        self._setup_lock: asyncio.Lock | None = None
        self._setup_loop: asyncio.AbstractEventLoop | None = None
        self._is_setup = False
        # a lock lives as long as someone holds, awaits or is about to take it (a task's frame keeps
        # it alive), and not a moment longer: no eviction can hand two tasks two locks for one key
        self._locks: weakref.WeakValueDictionary[tuple[int, str], asyncio.Lock] = weakref.WeakValueDictionary()
        self._known_ids: dict[str, dict[str, KnownMessage]] = {}  # thread -> stored id -> fingerprint, seq
        self._caller_lists: OrderedDict[str, list[BaseMessage]] = OrderedDict()  # thread -> caller's last list
        self._thread_born: OrderedDict[str, datetime] = OrderedDict()  # thread incarnation seen by the caches
        self._message_cache: dict[str, OrderedDict[str, BaseMessage]] = {}
        self._windows: dict[str, WindowCache] = {}
        # thread -> the newest seq this process stored: buffering follows the messages (background.schedule)
        self._stored_through: dict[str, int] = {}
        self._records: OrderedDict[str, OMRecord] = OrderedDict()  # record key -> last record read
        self._rendered: OrderedDict[str, tuple[Any, ...]] = OrderedDict()  # key -> (stamp, text, omission)
        # thread -> (fingerprints, the caller's system messages, their tokens)
        self._instruction_cache: OrderedDict[str, tuple[Any, list[BaseMessage], int]] = OrderedDict()
        self.cache_limit = THREAD_CACHE_LIMIT
        """How many threads (and records) keep in-process state; those evicted beyond it (sampled
        recency, ``cache_policy``) start their next step cold (docs/storage.md, "In-process caches")."""
        self._recent_threads = SampledKeys()  # which threads / records keep state (cache_policy.py)
        self._recent_records = SampledKeys()
        self._pending_events: dict[str, list[OMEvent]] = {}
        self._live_runs = LiveRuns()  # the run each record streams into, for background events (live_runs.py)
        self._step_numbers = RunSteps()  # record key -> the run of its last step, that step's number
        self.observer_backoff = ObserverBackoff()  # record key -> failures in a row (observer_backoff.py)
        self.section_providers: list[SectionProvider] = []
        """Sections rendered after the observation log (they change as the conversation goes)."""
        self.static_section_providers: list[SectionProvider] = []
        """Sections rendered before the log (guidance that rarely changes: a cacheable prefix)."""
        self.message_listeners: list[MessageListener] = []
        if self.config.retrieval is not None:
            from ..extensions.recall import install_retrieval

            install_retrieval(self)
        from ..extensions.extractors import ExtractionPipeline
        from ..extensions.working_memory import WorkingMemory

        self.working_memory: WorkingMemory | None = WorkingMemory.from_option(self, working_memory)
        """Working memory (``working_memory=`` option / ``observation.manage_working_memory``), or None."""
        self.extraction_pipeline: ExtractionPipeline | None = ExtractionPipeline.from_config(
            self, WorkingMemory.observer_extractors(self.config))
        """Built-in and custom extractors (``observation.extract`` / ``reflection.extract``)."""

    # ----------------------------------------------------------- the host interface

    async def aensure_setup(self) -> None:
        """Create the store's tables once (idempotent, safe from any task)."""
        if self._is_setup:
            return
        loop = asyncio.get_running_loop()
        if self._setup_lock is None or self._setup_loop is not loop:
            self._setup_lock, self._setup_loop = asyncio.Lock(), loop
        async with self._setup_lock:
            if not self._is_setup:
                await self.store.asetup()
                self._is_setup = True

    _ensure_setup = aensure_setup

    def resolve_resource(self, thread_id: str, resource_id: str | None) -> str:
        """The resource a thread's memory lives under: the caller's, else the thread's private one."""
        return resolve_resource_ids(thread_id, resource_id, self.config.scope)

    _resource_for = resolve_resource

    def record_thread(self, thread_id: str) -> str | None:
        """The record's thread id: the thread in thread scope, None (the resource's) in resource scope."""
        return thread_id if self.config.scope == "thread" else None

    _record_thread = record_thread

    def thread_label(self, thread_id: str) -> str:
        return thread_label(thread_id, self.config.obscure_ids)

    def message_of(self, resource_id: str, stored: StoredMessage) -> BaseMessage:
        """A stored row as a LangChain message, parsed once per thread cache."""
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
        lru_put(cache, stored.id, message, MESSAGE_CACHE_PER_THREAD)  # parse each stored row once
        return message

    _as_langchain = message_of

    def queue_events(self, key: str, events: Sequence[OMEvent]) -> None:
        """Hold events for the record's next step (``key``: the record key)."""
        pending = self._pending_events.setdefault(key, [])
        pending.extend(events)
        del pending[:-PENDING_EVENTS_LIMIT]  # a thread nobody steps keeps only its newest events

    def remember_thread_rows(self, resource_id: str, thread_id: str, rows: Sequence[StoredMessage],
                             parsed: dict[str, BaseMessage] | None = None) -> None:
        """A thread created with exactly ``rows`` (a fork): its known ids, and parsed copies when
        the caller has them, so its first step neither looks ids up nor parses again."""
        key = record_key(resource_id, thread_id)
        self._known_ids[key] = known_from_rows(rows)
        if parsed:
            self._message_cache[key] = OrderedDict(parsed)

    def parsed_messages(self, resource_id: str, thread_id: str) -> dict[str, BaseMessage]:
        """The thread's parsed messages this process holds (id -> message); empty when none."""
        return dict(self._message_cache.get(record_key(resource_id, thread_id)) or {})

    def knows_none_of(self, resource_id: str, thread_id: str, ids: Collection[str]) -> bool:
        """Whether the thread's stored ids are cached and none of ``ids`` is among them: a hint that a
        stateless step's state holds only new messages (``SupportsNewAppend`` then proves it)."""
        known = self._known_ids.get(record_key(resource_id, thread_id))
        return known is not None and known.keys().isdisjoint(ids)

    def run_sync(self, coro: Coroutine[Any, Any, _T], *, twin: str,
                 waits_on: Callable[[asyncio.AbstractEventLoop], bool] | None = None) -> _T:
        """Run ``coro`` on OM's private loop (the sync twins of async methods)."""
        return self._loop.run(coro, twin=twin, waits_on=waits_on)

    # ------------------------------------------------------------------ reads

    def _lock(self, key: str) -> asyncio.Lock:
        loop_id = id(asyncio.get_running_loop())
        lock = self._locks.get((loop_id, key))
        if lock is None:
            lock = self._locks[(loop_id, key)] = asyncio.Lock()
        return lock

    @asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[None]:
        """Hold the record's lock for the block; a wait for it is reported (``waiting``)."""
        lock = self._lock(key)
        if lock.locked() and self.config.on_debug_event is not None:
            async with self.waiting("record-lock", key):
                await lock.acquire()
        else:
            await lock.acquire()
        try:
            yield
        finally:
            lock.release()

    @asynccontextmanager
    async def waiting(self, waits_for: str, key: str, bound_s: float | None = None) -> AsyncIterator[None]:
        """Name a wait in two debug events (``data-om-wait`` start / end, see ``WaitData``), so a
        stuck step or cycle says what it waits for. Free when no ``on_debug_event`` is set."""
        if self.config.on_debug_event is None:
            yield
            return
        data = WaitData(wait_id=new_id("wait_"), waits_for=waits_for, phase="start",
                        record_key=self.thread_label(key), started_at=iso_now(), bound_s=bound_s)
        self.debug(WaitEvent(data=data))
        started, outcome = time.monotonic(), "done"
        try:
            yield
        except TimeoutError:
            outcome = "timeout"
            raise
        except asyncio.CancelledError:
            outcome = "cancelled"
            raise
        except Exception:
            outcome = "error"
            raise
        finally:
            self.debug(WaitEvent(data=data.model_copy(update={
                "phase": "end", "waited_ms": (time.monotonic() - started) * 1000, "outcome": outcome})))

    async def aload_record(self, resource_id: str, thread_id: str) -> OMRecord:
        """The stored record, parsed only when its stamp changed since the last read.

        The returned object is shared with the cache: engine code changes records only on a copy
        (``state.editable`` or ``model_copy(deep=True)``), and public methods hand out copies.
        """
        record_thread = self.record_thread(thread_id)
        key = record_key(resource_id, record_thread)
        cached = self._records.get(key)
        if cached is not None and supports(self.store, SupportsRecordStamp):  # checked once per store
            stamp = await cast(SupportsRecordStamp, self.store).aget_record_stamp(resource_id, record_thread)
            if stamp is not None and stamp == (cached.version, cached.updated_at):
                if key in self._records:  # another task may have evicted it during the await: a miss, not an error
                    self._records.move_to_end(key)
                return cached
        return await self._aread_record(resource_id, record_thread, key)

    async def arecord_for_attempt(self, resource_id: str, thread_id: str, attempt: int) -> tuple[OMRecord, bool]:
        """The record attempt ``attempt`` of a compare-and-swap loop starts from, and whether it is
        the cached one. The first attempt takes the record as this process last read or committed
        it, without a store read (a stale one fails the swap); a retry, or a thread not cached,
        reads the stored record. A decision that gives up on a cached record should retry: only
        the stored one settles it."""
        if attempt == 0:
            cached = self._records.get(record_key(resource_id, self.record_thread(thread_id)))
            if cached is not None:
                return cached, True
        return await self.aload_record(resource_id, thread_id), False

    async def arecord_at_stamp(self, resource_id: str, thread_id: str, stamp: RecordStamp | None) -> OMRecord:
        """``aload_record`` for a caller that has just read the record's stamp (with the thread's
        head, ``SupportsThreadHead``): the cached record when the stamp matches, else a full read."""
        record_thread = self.record_thread(thread_id)
        key = record_key(resource_id, record_thread)
        cached = self._records.get(key)
        if cached is not None and stamp is not None and stamp == (cached.version, cached.updated_at):
            self._records.move_to_end(key)  # no await since the lookup: still there
            return cached
        return await self._aread_record(resource_id, record_thread, key)

    async def _aread_record(self, resource_id: str, record_thread: str | None, key: str) -> OMRecord:
        """The stored record, parsed and cached; a fresh one is created when none is stored."""
        record = await self.store.aget_record(resource_id, record_thread)
        if record is not None:
            self.keep_for_record(self._records, key, record)
            return record
        fresh = OMRecord(resource_id=resource_id, thread_id=record_thread, scope=self.config.scope)
        try:
            return await self.store.acommit_record(fresh, expected_version=0)
        except RecordConflictError:
            existing = await self.store.aget_record(resource_id, record_thread)
            if existing is None:
                raise
            return existing

    _load_record = aload_record

    async def awindow(self, record: OMRecord, resource_id: str, thread_id: str, *, refresh: bool = True,
                      last_seq: int | None = None) -> Window:
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
            # the step's own rows are in the cache already (see persistence): read rows only when
            # another worker stored some, which the thread's last seq tells in one small read
            # (``last_seq``: the caller just read it, with the record's stamp)
            if refresh and (last_seq if last_seq is not None else await self.store.alast_seq(
                    resource_id, thread_id)) > newest:
                others = await self.store.aget_messages(resource_id, thread_id, after_seq=newest)
                rows = rows.plus(others)
                self._learn_rows(key, others)
            newest = rows[-1].seq if rows else newest
        if self.keeps_thread(key):  # a thread evicted during the reads stays forgotten (bounded)
            self._windows[key] = WindowCache(record.id, after, newest, rows)
        return rows

    _window = awindow

    def _learn_rows(self, key: str, rows: Sequence[StoredMessage]) -> None:
        """Rows another worker stored, read for the window, become known ids too: the caller's
        next list carries those messages, and a known one is neither rebuilt nor re-sent."""
        known = self._known_ids.get(key)
        if known is not None and rows:
            known.update(known_from_rows(rows))

    async def acatch_up(self, resource_id: str, thread_id: str, fresh: list[BaseMessage],
                        known: dict[str, KnownMessage], edited: list[BaseMessage]) -> list[BaseMessage]:
        """Of ``fresh`` (the caller's messages this process does not know), those still to store.

        A worker that steps a thread after others did (a load balancer dealing one user's turns
        round-robin) is handed the turns they stored. Counting, serialising and appending them
        only for the store to skip them, then reading them back by id, then reading them again
        for the window, was most of such a step. When the caller's new messages span more than
        one turn, one read of the rows stored since this process last looked (``seq`` above its
        window's newest row) settles it first: those rows extend the cached window and the known
        ids, the caller's own objects stand for them as parsed messages, and a copy that differs
        from its stored row is an edit (added to ``edited``). A cost in what changed, not in the
        history; any other step (one turn, or no cached window) keeps the plain append, whose
        skip of held ids stays the safety net."""
        key = record_key(resource_id, thread_id)
        window = self._windows.get(key)
        if window is None or sum(1 for m in fresh if m.type == "human") < 2:
            return fresh
        after = window.newest
        rows = await self.store.aget_messages(resource_id, thread_id, after_seq=after)
        if not rows:
            return fresh
        learned = known_from_rows(rows)
        known.update(learned)
        if self._windows.get(key) is window and window.newest == after:  # no other task moved it meanwhile
            window.rows = window.rows.plus(rows)
            window.newest = rows[-1].seq
        cache = self._message_cache.get(key)
        still: list[BaseMessage] = []
        for message in fresh:
            entry = learned.get(message.id) if message.id else None
            if entry is None:
                still.append(message)
            elif message_fingerprint(message) != entry.fingerprint:
                edited.append(message)
            elif cache is not None:
                lru_put(cache, str(message.id), message, MESSAGE_CACHE_PER_THREAD)
        return still

    def window_messages(self, resource_id: str, thread_id: str, window: Window) -> list[BaseMessage]:
        """The window's rows as LangChain messages. Rows parsed for an earlier step's context
        travel with the window (``Window.parsed``), so a step looks up only its new rows."""
        parsed = window.parsed
        if len(parsed) < len(window):
            cache = self._message_cache.get(record_key(resource_id, thread_id))
            rest = window[len(parsed):]
            if cache is None:
                parsed += tuple(self.message_of(resource_id, m) for m in rest)
            else:
                hit = cache.get
                parsed += tuple(hit(m.id) or self.message_of(resource_id, m) for m in rest)
            window.parsed = parsed
        return list(parsed)

    async def acommit(self, record: OMRecord, *, expected_version: int,
                      mark_observed: dict[str, int] | None = None) -> OMRecord:
        """``store.acommit_record``, and the committed record becomes the cached one: the next
        ``aload_record`` then costs a stamp read instead of parsing the whole record again (a 20k-token
        log is ~1 ms of JSON and validation). A stale entry only costs a miss: the stamp decides."""
        if mark_observed is None:
            committed = await self.store.acommit_record(record, expected_version=expected_version)
        else:
            committed = await self.store.acommit_record(record, expected_version=expected_version,
                                                        mark_observed=mark_observed)
        self.keep_for_record(self._records, committed.key, committed)  # only a record this process keeps
        return committed

    async def commit_quietly(self, record: OMRecord, version: int) -> bool:
        """Commit unless another writer got there first (the caller then re-plans or gives up)."""
        try:
            await self.acommit(record, expected_version=version)
            return True
        except RecordConflictError:
            return False

    async def amark_record(self, resource_id: str, thread_id: str, marks: dict[str, Any]) -> OMRecord:
        """Set ``marks`` in the latest record's metadata; a concurrent commit is retried, not lost.

        Failure flags and the reflection hold are facts about the record that every worker must
        see, so they are written on whatever record is current, not on the one a cycle started from.
        """
        record = await self.aload_record(resource_id, thread_id)
        for _attempt in range(MAX_COMMIT_RETRIES):
            if all(record.metadata.get(key) == value for key, value in marks.items()):
                return record
            updated = editable(record)
            updated.metadata.update(marks)
            try:
                return await self.acommit(updated, expected_version=record.version)
            except RecordConflictError:
                record = await self.aload_record(resource_id, thread_id)
        return record

    # --------------------------------------------------------------- caches

    def touch_thread(self, cache_key: str) -> None:
        """Mark a thread as used now; drop the caches of threads evicted beyond the limit
        (``cache_policy.SampledKeys``: sampled, so a cycle over more threads than the limit
        still finds most of them cached)."""
        for old in self._recent_threads.touch(cache_key, self.cache_limit):
            self.forget_thread(old)

    def keeps_thread(self, cache_key: str) -> bool:
        """Whether the thread is still among the ``cache_limit`` recent ones: a step that finds it
        evicted after an ``await`` writes nothing back into the caches (a cold step next time)."""
        return cache_key in self._recent_threads

    def forget_thread(self, cache_key: str) -> None:
        """Drop one thread's in-process state (its next step is a cold step)."""
        for cache in (self._known_ids, self._caller_lists, self._thread_born, self._message_cache, self._windows,
                      self._instruction_cache, self._stored_through):
            cache.pop(cache_key, None)

    def touch_record(self, key: str) -> None:
        """Mark a record as used now; forget the per-record state of records evicted beyond the
        limit: step numbers, undelivered background events, cached record and rendered log.
        A record with background work running stays until a later step. (Locks need no
        eviction: ``_locks`` keeps each only while some task refers to it.)"""
        for old in self._recent_records.touch(key, self.cache_limit, busy=self._tasks.running_any):
            self.forget_record(old)

    def keep_for_record(self, cache: OrderedDict[str, _V], key: str, value: _V) -> None:
        """Cache ``value`` for a record this process keeps (``touch_record``); another record's
        (a public read, a late background cycle) is not kept, so it cannot push out the entry of
        a record that is kept: each per-record cache holds exactly the kept records' entries."""
        if key in self._recent_records:
            lru_put(cache, key, value, self.cache_limit)

    def forget_record(self, key: str) -> None:
        """Drop one record's in-process state."""
        self._step_numbers.forget(key)
        self._live_runs.forget(key)
        for cache in (self._pending_events, self._records, self._rendered):
            cache.pop(key, None)

    async def before_store(self, resource_id: str, thread_id: str, rows: list[NewMessage]) -> list[NewMessage]:
        """Extension point before rows are written (temporal markers insert rows here)."""
        if not self.config.temporal_markers:
            return rows
        from ..extensions.temporal import insert_temporal_markers

        return await insert_temporal_markers(self, resource_id, thread_id, rows)

    # --------------------------------------------------------------- events

    def background_emit(self, key: str) -> Callable[[OMEvent], None]:
        """Where a background cycle's events go: held for the record's next step."""
        def push(event: OMEvent) -> None:
            self.debug(event)
            if self._live_runs.deliver(key, event):
                return  # dispatched into the run that is streaming now (live_runs.py)
            if key in self._recent_records:  # else a record this process no longer keeps: it starts afresh
                self.queue_events(key, [event])

        return push

    def debug(self, event: OMEvent) -> None:
        callback = self.config.on_debug_event
        if callback is None:
            return
        try:
            result = callback(event)
            if asyncio.iscoroutine(result):
                asyncio.get_running_loop().create_task(result)
        except Exception:
            logger.exception("langchain-om on_debug_event raised")

    async def dispatch(self, events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
        """Send events as LangChain custom events and to LangGraph's custom stream, when in a run."""
        for event in events:
            if not event.type.startswith("data-om-buffering-"):  # background events were debugged already
                self.debug(event)
        await self._live_runs.dispatch(events, config)  # in order with live background events (live_runs.py)

    # ---------------------------------------------------------------- loops

    def _store_bound_to(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the store's connections belong to ``loop`` (a sync twin there would deadlock)."""
        return isinstance(self.store, SupportsLoopBinding) and self.store.bound_loop() is loop

    def _background_of(self, thread_id: str, resource_id: str | None) -> Callable[[asyncio.AbstractEventLoop], bool]:
        """Whether a loop runs background work of this thread's record (what ``adelete_thread`` waits for)."""
        key = record_key(self.resolve_resource(thread_id, resource_id), self.record_thread(thread_id))
        return lambda loop: self._tasks.on_loop(loop, key)

