"""Storing what the caller passed: new messages, the caller's instructions and edits.

A step costs O(new messages), not O(history): new messages are found from the fingerprints of
the ids this process has seen stored (``inputs.sort_inputs``); a process's first step on a
thread looks up only the ids the caller passes.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, cast

from langchain_core.messages import BaseMessage

from ..foundation.inputs import (
    CallerList,
    Instructions,
    KnownMessage,
    edit_row,
    known_from_rows,
    message_fingerprint,
    sort_inputs,
)
from ..foundation.messages import dump_message, ensure_id, message_timestamp
from ..store.base import (
    NewMessage,
    OMRecord,
    RecordConflictError,
    StoredMessage,
    new_id,
    record_key,
)
from ..store.known import FINGERPRINT_PATH, SupportsFieldLookup
from ..store.step_fast_paths import (
    SupportsHeadAppend,
    SupportsIncarnationAppend,
    SupportsNewAppend,
    ThreadHead,
    supports,
)
from .core import MESSAGE_CACHE_PER_THREAD, EngineCore
from .state import MAX_COMMIT_RETRIES, StepState, lru_put

_C = TypeVar("_C", bound=dict[Any, Any])


@dataclass
class StepInputs:
    """What ``apersist`` found in the caller's messages."""

    instructions: list[BaseMessage] = field(default_factory=list)
    edited: list[BaseMessage] = field(default_factory=list)
    inserted: list[StoredMessage] = field(default_factory=list)
    caller_list: list[BaseMessage] = field(default_factory=CallerList)
    head: ThreadHead | None = None
    """The thread's last seq and the record's stamp as the append committed them
    (``SupportsHeadAppend``): the step's head read, already done. None: read it."""


async def acheck_and_persist(core: EngineCore, resource_id: str, thread_id: str,
                             messages: Sequence[BaseMessage], now: datetime) -> StepInputs:
    """``aensure_thread`` then ``apersist``; on a warm thread with a store that checks the
    incarnation inside its append (``SupportsIncarnationAppend``) the check rides on the append
    (one round trip instead of two). When the append finds another incarnation it writes
    nothing: the full check then drops the stale caches and the step persists again."""
    born = await aensure_thread(core, resource_id, thread_id, defer=True)
    if born is not None:
        inputs = await apersist(core, resource_id, thread_id, messages, now, born=born)
        if inputs is not None:
            return inputs
        await aensure_thread(core, resource_id, thread_id)
    inputs = await apersist(core, resource_id, thread_id, messages, now)
    assert inputs is not None  # None only with an expected incarnation
    return inputs


async def aensure_thread(core: EngineCore, resource_id: str, thread_id: str, *,
                         defer: bool = False) -> datetime | None:
    """Create the thread on its first step here; on later steps check, with a one-row read,
    that it is still the incarnation this worker's caches describe. Another worker may have
    deleted and re-created it, and clients reuse message ids (``msg-1``): matched against the
    old incarnation's ids, the new messages would silently never be stored.

    ``defer``: when the caches are warm and the store can check inside its append, skip the
    read and return the incarnation (``created_at``) the append must find; else None."""
    cache_key = record_key(resource_id, thread_id)
    core.touch_thread(cache_key)  # before any cache of the thread is read or written (cache_policy.py)
    born = core._thread_born.get(cache_key)
    if defer and born is not None and cache_key in core._known_ids \
            and supports(core.store, SupportsIncarnationAppend):
        return born
    # a one-row read first, also on a cache miss: the thread nearly always exists, and creating
    # it is a write transaction (and on SQLite a hop to a worker thread)
    thread = await core.store.aget_thread(resource_id, thread_id)
    if thread is not None and born is not None and cache_key in core._known_ids and thread.created_at == born:
        return None
    for cache in (core._known_ids, core._caller_lists, core._message_cache, core._windows, core._stored_through):
        cache.pop(cache_key, None)
    if thread is None:
        thread = await core.store.aensure_thread(resource_id, thread_id)
    lru_put(core._thread_born, cache_key, thread.created_at, core.cache_limit)
    return None


async def apersist(core: EngineCore, resource_id: str, thread_id: str, messages: Sequence[BaseMessage],
                   now: datetime, *, born: datetime | None = None) -> StepInputs | None:
    """Store the messages not stored yet; report the caller's instructions and edits.

    ``born``: the incarnation the thread must still be (``acheck_and_persist``); None, with
    nothing stored, when it is not."""
    cache_key = record_key(resource_id, thread_id)
    core.touch_thread(cache_key)
    known = core._known_ids.get(cache_key)
    if known is None:
        # a process's first step on the thread: look up only the ids the caller passes (the
        # store skips an id it holds, so a message another worker stored is never doubled)
        ids = [m.id for m in messages if isinstance(m, BaseMessage) and m.id]
        known = await _aknown(core, resource_id, thread_id, ids) if ids else {}
        if core.keeps_thread(cache_key):  # else evicted during the read: this step runs cold, the cache stays bounded
            core._known_ids[cache_key] = known
    cache = _thread_cache(core, core._message_cache, cache_key, OrderedDict)
    # the caller's list of the last step is taken out until this step has stored and settled
    # everything in it: a step that fails half-way makes the next one look at the whole list
    caller_list = core._caller_lists.pop(cache_key, None)
    if caller_list is None:  # (an empty list may stand for released objects: see release_copies)
        caller_list = CallerList()
    sorted_inputs = sort_inputs(messages, known, cache, caller_list, remember=MESSAGE_CACHE_PER_THREAD)
    fresh = sorted_inputs.fresh
    for instruction in sorted_inputs.instructions:
        ensure_id(instruction)
    inputs = StepInputs(instructions=sorted_inputs.instructions, edited=sorted_inputs.edited,
                        caller_list=caller_list)
    if len(fresh) > 1:  # turns another worker may have stored: learn them first (core.acatch_up)
        fresh = await core.acatch_up(resource_id, thread_id, fresh, known, inputs.edited)
    at_most = _head_at_most(resource_id, thread_id)
    only_new = _only_new(resource_id, thread_id)
    if not fresh:
        if only_new:  # the state's messages are stored already: the full fork check decides
            raise HeadMovedOn
        await _acheck_head(core, resource_id, thread_id, at_most)
        if born is not None:  # nothing to append: the incarnation check is a read of its own
            thread = await core.store.aget_thread(resource_id, thread_id)
            if thread is None or thread.created_at != born:
                return None
        note_stored(core, cache_key, [])
        return inputs
    rows: list[NewMessage] = []
    for message in fresh:
        ensure_id(message)
        created = message_timestamp(message) or now
        tokens = core.counter.count_message(message)
        rows.append(NewMessage(id=message.id or new_id("msg_"), data=dump_message(message), tokens=tokens,
                               created_at=created))
    rows = await core.before_store(resource_id, thread_id, rows)
    head: ThreadHead | None = None
    if only_new is not None:
        # the fork check holds when the append proves no message of the state was stored before
        if born is None or not supports(core.store, SupportsNewAppend) or not only_new.issubset(r.id for r in rows):
            raise HeadMovedOn  # nothing written: the full check runs (a cold cache, an instruction's id)
        with_head = await cast("SupportsNewAppend", core.store).aappend_new_with_head(
            resource_id, thread_id, rows, born, core.record_thread(thread_id))
        if with_head is None:
            return None
        inserted, head = with_head
        if not inserted:
            raise HeadMovedOn  # the thread held one of them: nothing was written
    elif born is not None and supports(core.store, SupportsHeadAppend):
        with_head = await cast("SupportsHeadAppend", core.store).aappend_with_head(
            resource_id, thread_id, rows, born, core.record_thread(thread_id), at_most)
        if with_head is None:
            return None
        inserted, head = with_head
        if at_most is not None and not inserted and head[0] > at_most:
            raise HeadMovedOn  # the append found the head past it and wrote nothing
    elif born is not None and supports(core.store, SupportsIncarnationAppend):
        await _acheck_head(core, resource_id, thread_id, at_most)
        appended = await cast("SupportsIncarnationAppend", core.store).aappend_to_incarnation(
            resource_id, thread_id, rows, born)
        if appended is None:
            return None
        inserted = appended
    else:
        await _acheck_head(core, resource_id, thread_id, at_most)
        inserted = await core.store.aappend_messages(resource_id, thread_id, rows)
    _extend_window(core, cache_key, inserted)
    note_stored(core, cache_key, inserted)
    for listener in core.message_listeners:
        await listener(core, resource_id, thread_id, inserted)
    known.update(known_from_rows(inserted))  # fingerprints the counter just stored in each row
    by_id = {m.id: m for m in fresh if m.id}
    await _learn_skipped(core, resource_id, thread_id, rows, inserted, known, by_id, inputs)
    for row in inserted:
        sent = by_id.get(row.id)
        if sent is not None:
            cache[row.id] = sent
    while len(cache) > MESSAGE_CACHE_PER_THREAD:
        cache.popitem(last=False)
    inputs.inserted = inserted
    # the head stands only when every row was this append's own and nothing else follows it here
    if head is not None and len(inserted) == len(rows) and not inputs.edited:
        inputs.head = head
    return inputs


HEAD_AT_MOST: ContextVar[tuple[str, str, int] | None] = ContextVar("langchain_om_head_at_most", default=None)
"""``(resource, thread, seq)``: the integrations' deferred fork check (``extensions/branches.py``). A
checkpoint's step continues its branch when the branch's last seq is at most the position's; the
step's append checks that in its own transaction instead of a read of its own before the step.
When it does not hold, ``apersist`` writes nothing and raises ``HeadMovedOn``: the integration
then runs the full check (and forks when the caller runs from the past) and the step again."""


ONLY_NEW: ContextVar[tuple[str, str, frozenset[str]] | None] = ContextVar("langchain_om_only_new", default=None)
"""``(resource, thread, ids)``: the deferred fork check of a step without a position (no checkpointer,
``extensions/branches.py``), whose state holds only ``ids``. Such a step continues its branch when the
branch holds none of them; when they are exactly what the step appends, an append that writes
nothing if any is stored (``SupportsNewAppend``) checks that instead of the fork probe's reads.
Otherwise ``apersist`` writes nothing and raises ``HeadMovedOn``, and the full check runs."""


class HeadMovedOn(Exception):
    """A deferred fork check did not hold (``HEAD_AT_MOST``: the thread holds rows past the
    checkpoint's position; ``ONLY_NEW``: the step could not prove the state's ids new); nothing was stored."""


@contextmanager
def deferred_fork_check(resource_id: str, thread_id: str, *, at_most: int | None = None,
                        only_new: frozenset[str] | None = None) -> Iterator[None]:
    """Leave the integration's fork check to the steps' appends in the block (``HEAD_AT_MOST``
    with ``at_most``, else ``ONLY_NEW``); a check that does not hold raises ``HeadMovedOn``."""
    if at_most is not None:
        head_token = HEAD_AT_MOST.set((resource_id, thread_id, at_most))
        try:
            yield
        finally:
            HEAD_AT_MOST.reset(head_token)
        return
    new_token = ONLY_NEW.set((resource_id, thread_id, only_new) if only_new else None)
    try:
        yield
    finally:
        ONLY_NEW.reset(new_token)


def _head_at_most(resource_id: str, thread_id: str) -> int | None:
    expected = HEAD_AT_MOST.get()
    return expected[2] if expected is not None and expected[:2] == (resource_id, thread_id) else None


def _only_new(resource_id: str, thread_id: str) -> frozenset[str] | None:
    expected = ONLY_NEW.get()
    return expected[2] if expected is not None and expected[:2] == (resource_id, thread_id) else None


async def _acheck_head(core: EngineCore, resource_id: str, thread_id: str, at_most: int | None) -> None:
    """The deferred fork check as a read of its own, before a write that cannot check it."""
    if at_most is not None and await core.store.alast_seq(resource_id, thread_id) > at_most:
        raise HeadMovedOn


def note_stored(core: EngineCore, cache_key: str, inserted: Sequence[StoredMessage]) -> None:
    """Remember the newest message this process stored in the thread (0: it stored none since its
    caches were cold). A buffering cycle is started by the worker that brought the messages it
    would buffer; another worker's step that only repeats a request starts none."""
    if core.keeps_thread(cache_key):
        newest = inserted[-1].seq if inserted else 0
        core._stored_through[cache_key] = max(core._stored_through.get(cache_key, 0), newest)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while one lookup builds its small acyclic tuples.

    Tens of thousands of new tuples make the collector walk the whole heap, the caller's handed
    history included, several times: with 50k messages that was most of a cold step. Nothing
    built here can form a cycle; the collector resumes (if it was on) as soon as the lookup ends."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


async def _aknown(core: EngineCore, resource_id: str, thread_id: str, ids: list[str]) -> dict[str, KnownMessage]:
    """What the store holds of the caller's ids: each message's fingerprint and ``seq``.

    A store that looks up the fingerprint OM keeps with each row (``SupportsFieldLookup``; the
    SQL stores read their ``fingerprint`` column) spares parsing every row: a caller handing over
    50k messages pays for 50k small tuples. Rows without
    that fingerprint, and edit rows (which stand for the newest version of another message),
    are read whole, as before."""
    store = core.store
    if isinstance(store, SupportsFieldLookup):
        with _collector_paused():
            fields = await store.aget_message_fields(resource_id, thread_id, ids, FINGERPRINT_PATH)
            make = tuple.__new__  # KnownMessage(...) through its Python __new__ costs twice as much
            known: dict[str, KnownMessage] = {}
            for mid, seq, kind, value in fields:  # one pass; an edit row or a row without one: read whole
                if kind != "message" or value is None:
                    break
                known[mid] = make(KnownMessage, (value, seq))
            else:
                return known
    found = await store.aget_messages_by_ids(resource_id, thread_id, ids)
    return known_from_rows(sorted(found, key=lambda row: row.seq))


async def _learn_skipped(core: EngineCore, resource_id: str, thread_id: str, rows: Sequence[NewMessage],
                         inserted: Sequence[StoredMessage], known: dict[str, KnownMessage],
                         sent: dict[str, BaseMessage], inputs: StepInputs) -> None:
    """Rows the store skipped because another worker stored them first become known here, as
    stored: otherwise this worker would never see a later edit of them (the message is not
    "known", so a changed copy looks new and is skipped again) and would keep showing the old
    text. A copy that differs from the stored row is an edit, applied like any other."""
    if len(inserted) == len(rows):
        return
    taken = {row.id for row in inserted}
    skipped = [row.id for row in rows if row.id not in taken]
    stored = await core.store.aget_messages_by_ids(resource_id, thread_id, skipped)
    known.update(known_from_rows(stored))
    for row in stored:
        message = sent.get(row.id)
        if message is not None and message_fingerprint(message) != known[row.id].fingerprint:
            inputs.edited.append(message)


async def asettle(core: EngineCore, step: StepState, record: OMRecord, inputs: StepInputs) -> OMRecord:
    """Under the thread lock: keep the caller's instructions, apply edits of known messages."""
    if inputs.instructions:
        prints = Instructions.fingerprints(inputs.instructions)  # once a step, for every check below
        if Instructions.changed(record.metadata, step.thread_id, prints):
            for _attempt in range(MAX_COMMIT_RETRIES):
                updated = record.model_copy(deep=True)
                Instructions.put(updated.metadata, step.thread_id, inputs.instructions, prints)
                try:
                    record = await core.acommit(updated, expected_version=record.version)
                    break
                except RecordConflictError:
                    record = await core.aload_record(step.resource_id, step.thread_id)
                    if not Instructions.changed(record.metadata, step.thread_id, prints):
                        break
        # this step's own objects stand for the stored copy (same content): the caller's state
        # keeps its ids, and nothing is parsed again
        tokens = sum(core.counter.count_message(m) for m in inputs.instructions)
        lru_put(core._instruction_cache, record_key(step.resource_id, step.thread_id),
                (tuple(prints), list(inputs.instructions), tokens), core.cache_limit)
    if inputs.edited:
        await _apply_edits(core, step, record, inputs.edited)
    settled(core, step.resource_id, step.thread_id, inputs)
    return record


async def _already_applied(core: EngineCore, step: StepState, mid: str, fingerprint: str) -> bool:
    """Whether the stored row already holds this content: another worker rewrote it in place
    before it was observed, and this worker's fingerprint was the old one. A correction note
    would tell the Observer about a change that is already in the row it observed."""
    rows = await core.store.aget_messages_by_ids(step.resource_id, step.thread_id, [mid])
    stored = known_from_rows(rows).get(mid)
    return stored is not None and stored.fingerprint == fingerprint


def settled(core: EngineCore, resource_id: str, thread_id: str, inputs: StepInputs) -> None:
    """Everything the caller passed is stored: its list is the baseline of the next step."""
    lru_put(core._caller_lists, record_key(resource_id, thread_id), inputs.caller_list, core.cache_limit)


async def _apply_edits(core: EngineCore, step: StepState, record: OMRecord, edited: Sequence[BaseMessage]) -> None:
    """An unobserved message takes its new content in place; an observed one gets an ``edit``
    row after the newest message, which the Observer reads as a correction."""
    cache_key = record_key(step.resource_id, step.thread_id)
    known = _thread_cache(core, core._known_ids, cache_key, dict)
    cache = _thread_cache(core, core._message_cache, cache_key, OrderedDict)
    watermark = record.last_observed_seq.get(step.thread_id, 0)
    corrections: list[NewMessage] = []
    rewritten: list[str] = []
    for message in edited:
        mid = str(message.id)
        entry = known.get(mid)
        if entry is None:
            continue
        tokens = core.counter.count_message(message)
        fingerprint = message_fingerprint(message)
        replaced = entry.seq > watermark and await core.store.areplace_message(
            step.resource_id, step.thread_id, mid, dump_message(message), tokens)
        if replaced:
            rewritten.append(mid)
        elif not await _already_applied(core, step, mid, fingerprint):
            corrections.append(edit_row(message, tokens, step.now))
        known[mid] = KnownMessage(fingerprint, entry.seq)
        cache[mid] = message
    core._windows.pop(cache_key, None)  # re-read the (bounded) unobserved window with the edits
    if corrections:
        inserted = await core.store.aappend_messages(step.resource_id, step.thread_id, corrections)
        note_stored(core, cache_key, inserted)
        for listener in core.message_listeners:
            await listener(core, step.resource_id, step.thread_id, inserted)
    if rewritten and core.message_listeners:
        # rows rewritten in place are new text to index: the store dropped their old vectors
        rows = await core.store.aget_messages_by_ids(step.resource_id, step.thread_id, rewritten)
        for listener in core.message_listeners:
            await listener(core, step.resource_id, step.thread_id, rows)


def _thread_cache(core: EngineCore, caches: dict[str, _C], cache_key: str, make: Callable[[], _C]) -> _C:
    """The thread's entry of one per-thread cache, created if missing; a thread another task
    evicted across an ``await`` gets a private one, so the caches never outgrow ``cache_limit``."""
    entry = caches.get(cache_key)
    if entry is None:
        entry = make()
        if core.keeps_thread(cache_key):
            caches[cache_key] = entry
    return entry


def _extend_window(core: EngineCore, cache_key: str, inserted: list[StoredMessage]) -> None:
    """Add just-stored rows to the cached window when they follow its newest row directly;
    after a gap (another worker stored rows in between) the next refresh reads them all."""
    window = core._windows.get(cache_key)
    if window is None or not inserted:
        return
    first, last = inserted[0].seq, inserted[-1].seq
    if first == window.newest + 1 and last - first == len(inserted) - 1:
        window.rows = window.rows.plus(inserted)
        window.newest = last
