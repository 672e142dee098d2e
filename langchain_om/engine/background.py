"""Background buffering: pre-compute observations (and a reflection) while the agent works, so
a later activation swaps them in without a model call.

``planner.plan_buffering`` decides when; this module runs the cycles as tasks (at most one of a
kind per record, ``BackgroundTasks``), under the record's ``buffer`` lease so that several
workers never pay the Observer twice for the same messages, and stages the results in the
record. A failed cycle flags the record, so the next threshold crossing observes synchronously.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..foundation.turns import kind_of_row, safe_cut_before
from ..foundation.window import Window
from ..model_calls.spend import add_to_record as add_spend
from ..store.base import BufferedChunk, OMRecord, StoredMessage, record_key, total_tokens
from . import planner
from .core import EngineCore
from .leases import lease_name, try_lease
from .model_runs import arun_observer
from .reflection import abuffer_reflection
from .state import MAX_COMMIT_RETRIES, CycleResult, OMAborted, StepState, editable

logger = logging.getLogger("langchain_om")


def schedule(core: EngineCore, step: StepState, record: OMRecord, window: Window) -> None:
    """Start what the planner asks for after a step (nothing while a cycle of that kind runs)."""
    plan = planner.plan_buffering(
        core.config, record, step.thread_id, window,
        observing=core._tasks.running(step.key, "observe"), reflecting=core._tasks.running(step.key, "reflect"),
    )
    if plan.observe_after is not None and brought_pending(core, step, plan.observe_after):
        core._tasks.start(step.key, "observe", abuffer_observation(core, step, window.after(plan.observe_after)))
    if plan.reflect_groups:
        core._tasks.start(step.key, "reflect", abuffer_reflection(core, step, list(plan.reflect_groups)))


def brought_pending(core: EngineCore, step: StepState, buffered_through: int) -> bool:
    """Whether this process stored a message newer than what is observed or buffered (or does not
    know: its caches of the thread are cold).

    Buffering follows the messages: the worker that brought them starts the cycle, as one worker
    does at its next step. Eight workers repeating one request each started a cycle as soon as
    another's chunk was staged, before a new message came: nothing was observed twice, but the
    chunks were smaller and each paid the Observer's fixed prompt again (8 worker processes:
    16 Observer calls where one worker made 14, 1.14-1.26x the input per stored message)."""
    mine = core._stored_through.get(record_key(step.resource_id, step.thread_id))
    return mine is None or mine > buffered_through


def start_idle_buffering(core: EngineCore, step: StepState, record: OMRecord, window: Window) -> None:
    """``buffer_on_idle``: buffer whatever is pending at the end of a turn."""
    pending = window.after(planner.buffered_through(record, step.thread_id))
    if pending:
        core._tasks.start(step.key, "observe", abuffer_observation(core, step, pending))


async def abuffer_observation(core: EngineCore, step: StepState, pending: Sequence[StoredMessage]) -> None:
    """Observe what is pending in the background and stage the result as a chunk (unless another
    worker holds the record's ``buffer`` lease: it is buffering the same messages).

    ``pending`` is only the scheduling step's view: under the lease the cycle reads the record
    again and takes every stored row not yet observed or buffered up to that view's newest
    message (from the process's window when it holds them, ``held_rows``), so workers cut the
    chunks one worker would; it skips when that is less than the scheduler saw (another worker
    has buffered part of the range; the rest waits for the next boundary)."""
    ttl = float(core.config.failure_policy.lease_ttl) / 1000.0
    wanted = min(core.config.observation.buffer_interval_tokens(), total_tokens(pending))
    # unless a synchronous observation running elsewhere holds the record: it takes these
    # messages, do not pay twice
    async with try_lease(core.store, lease_name(step.key, "buffer"), ttl,
                         unless_held=lease_name(step.key, "observe")) as held:
        if held:
            record = await core.aload_record(step.resource_id, step.thread_id)
            done = planner.buffered_through(record, step.thread_id)
            # up to the scheduling step's newest message: a newer one may be a turn still in
            # progress, which the next step could not activate (it would observe it again)
            upto = max((m.seq for m in pending), default=done)
            now = held_rows(core, step, record, done, upto)
            if now is None:
                rows = await core.store.aget_messages(step.resource_id, step.thread_id, after_seq=done,
                                                      before_seq=upto + 1)  # bounded: a store may read it inline
                now = [m for m in rows if m.seq <= upto]
            if now and total_tokens(now) >= max(1, wanted):
                await _buffer_held(core, step, now, record)


def held_rows(core: EngineCore, step: StepState, record: OMRecord, done: int, upto: int) -> list[StoredMessage] | None:
    """The stored rows ``done < seq <= upto`` from this process's window of the thread, or None
    when it does not hold them all (the caller reads them).

    The cached window is every stored row past its ``after`` up to its ``newest`` (``seq`` grows
    under the store's per-thread lock, see ``EngineCore.awindow``), and an edit in place drops it
    (``persistence._apply_edits``): reading the range back and parsing it again was a tenth of
    a buffering cycle's CPU, for the rows the scheduling step had just held."""
    cached = core._windows.get(record_key(step.resource_id, step.thread_id))
    if cached is None or cached.record_id != record.id or cached.after > done or cached.newest < upto:
        return None
    return [m for m in cached.rows.after(done) if m.seq <= upto]


async def _buffer_held(core: EngineCore, step: StepState, pending: Sequence[StoredMessage], record: OMRecord) -> None:
    """Observe ``pending`` (cut at a safe point) and stage the result; ``record`` was read under
    the lease just before (the Observer reads its log and hints)."""
    emit = core.background_emit(step.key)
    cut = safe_cut_before([kind_of_row(m) for m in pending], len(pending))
    chosen = list(pending[:cut])
    if not chosen:
        return
    try:
        result = await arun_observer(core, step, record, {step.thread_id: chosen}, trigger="async-buffer",
                                     buffering=True, emit=emit)
    except OMAborted as exc:
        logger.warning("langchain-om buffering aborted: %s", exc)
        result = None
    if result is None:
        await _flag_failure(core, step, planner.OBSERVATION_FAILED)
        return
    # under the record's lock, or under a loan of it from a step of this process waiting for this
    # chunk (buffer_handoff: it activates the chunk instead of observing the messages again)
    async with core._loans.hold(step.key, core._lock(step.key)):
        await _stage_chunk(core, step, chosen, result)


async def _stage_chunk(core: EngineCore, step: StepState, chosen: Sequence[StoredMessage],
                       result: CycleResult) -> None:
    """Commit ``result`` as a buffered chunk of ``chosen`` (the caller holds the record's lock).

    Retried on a concurrent commit (another worker's step): a chunk lost to a version race was
    an Observer call paid for nothing. The first attempt starts from the cached record (this
    process's steps commit through the cache while the Observer answers): a stale one fails
    the compare-and-swap and the retry reads the stored one, so no stamp read is paid up front."""
    for attempt in range(MAX_COMMIT_RETRIES):
        record, cached = await core.arecord_for_attempt(step.resource_id, step.thread_id, attempt)
        if chosen[0].seq <= planner.buffered_through(record, step.thread_id):
            if cached:
                continue  # decided on the stored record only
            return  # overtaken by a synchronous observation or another buffer: discard, never double-observe
        chunk = BufferedChunk(
            thread_id=step.thread_id, start_seq=chosen[0].seq, end_seq=chosen[-1].seq, start_id=chosen[0].id,
            end_id=chosen[-1].id, message_count=len(chosen), message_tokens=total_tokens(chosen),
            observations=result.text, observation_tokens=result.tokens, current_task=result.current_task,
            suggested_response=result.suggested_response, thread_title=result.thread_title,
            extracted=result.extracted, cycle_id=result.cycle_id,
        )
        updated = editable(record)
        if core.extraction_pipeline is not None:
            # custom values are persisted when buffered (the buffering-end event reports them as
            # stored); only the continuation hints wait for the chunk's activation
            from ..extensions.extractors import BUILTIN_SLUGS

            custom = {k: v for k, v in result.extracted.items() if k not in BUILTIN_SLUGS}
            core.extraction_pipeline.persist(updated, custom)
            chunk.extracted = {k: v for k, v in result.extracted.items() if k in BUILTIN_SLUGS}
        updated.buffered_chunks.append(chunk)
        add_spend(updated.metadata, "observer", result.usage, result.provider_metadata)
        updated.metadata.pop(planner.OBSERVATION_FAILED, None)
        if await core.commit_quietly(updated, record.version):
            return


async def _flag_failure(core: EngineCore, step: StepState, flag: str) -> None:
    """Record that background work failed, so the next step observes or reflects synchronously."""
    async with core._loans.hold(step.key, core._lock(step.key)):  # a waiting step may lend its lock
        await core.amark_record(step.resource_id, step.thread_id, {flag: True})
