"""The reflection cycle: condense the observation log (now, in the background, or by
activating a reflection buffered earlier), as ``planner.plan_reflection`` decides.

A reflection replaces exactly the groups it covered (a prefix of the log) with one group, in
one compare-and-swap. A cycle whose best effort stays over the threshold, or that fails, sets
the record's *hold* (``planner.REFLECTION_HOLD``): no automatic attempt, in this worker or
another, until the log has grown (``planner.reflection_held``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from ..foundation.events import ActivationData, ActivationEvent, ObservationMarkerConfig, iso_now
from ..foundation.hooks import Trigger
from ..model_calls.failures import remaining_budget
from ..model_calls.spend import add_to_record as add_spend
from ..store.base import BufferedReflection, ObservationGroup, OMRecord, RecordConflictError, new_id, utcnow
from . import planner
from .activation import reflection_signals
from .buffer_handoff import lease_wait
from .core import EngineCore
from .leases import lease_name, try_lease, wait_for_lease
from .model_runs import Reflected, apply_hints, arun_reflector
from .state import MAX_COMMIT_RETRIES, CycleResult, OMAborted, StepState, editable

logger = logging.getLogger("langchain_om")


async def areflect_step(core: EngineCore, step: StepState, record: OMRecord, window_tokens: int) -> OMRecord:
    """Plan and carry out the step's reflection; a buffered reflection that was activated is
    followed by a second plan, so ``reflection.block_after`` holds on the log it leaves."""
    signals = reflection_signals(core, step) if record.buffered_reflection is not None else planner.NO_SIGNALS
    plan = planner.plan_reflection(core.config, record, window_tokens, signals)
    if plan is not None and plan.action == "activate":
        staged = record.buffered_reflection
        if staged is not None:
            record = await aactivate_reflection(core, step, record, staged, plan)
        plan = planner.plan_reflection(core.config, record, window_tokens)
        if plan is not None and plan.action == "activate":
            return record  # another worker staged a new one meanwhile: the next step activates it
    if plan is not None and plan.action == "reflect":
        record = await _areflect_leased(core, step, record, window_tokens)
    return record


async def _areflect_leased(core: EngineCore, step: StepState, record: OMRecord, window_tokens: int) -> OMRecord:
    """Reflect under the record's ``reflect`` lease, as observation does under ``observe``: eight
    workers crossing the threshold on the same step paid the Reflector eight times for one log
    (the compare-and-swap kept only one result).

    A step waits for a reflection another worker (or this process's background cycle) is running
    only when ``reflection.block_after`` demands it: a log within it is sent as it is and the
    running reflection lands for a later step (eight workers on one thread each waited the whole
    Reflector call, step p95 13.4 s against 6.2 ms for one worker). A worker that waited plans
    again on the record the holder left: usually reflected already, or a buffered reflection to
    activate."""
    ttl = float(core.config.failure_policy.lease_ttl) / 1000.0
    name = lease_name(step.key, "reflect")
    if not must_block(core, record):
        if core._tasks.running(step.key, "reflect"):
            return record  # this process's background reflection of this log is under way
        async with try_lease(core.store, name, ttl) as held:
            return await _reflect_held(core, step, record, window_tokens) if held else record
    await _await_own_buffered_reflection(core, step, ttl)
    async with wait_for_lease(core.store, name, ttl, lease_wait(core, "lease:reflect", step.key, ttl)):
        return await _reflect_held(core, step, record, window_tokens)


def must_block(core: EngineCore, record: OMRecord) -> bool:
    """Whether the log is over ``reflection.block_after``: the step may not go on without a reflection."""
    return record.observation_tokens > core.config.reflection.block_after_tokens()


async def _reflect_held(core: EngineCore, step: StepState, record: OMRecord, window_tokens: int) -> OMRecord:
    latest = await core.aload_record(step.resource_id, step.thread_id)
    if latest.version != record.version:
        record = latest
        plan = planner.plan_reflection(core.config, record, window_tokens)
        if plan is None:
            return record
        if plan.action == "activate":
            staged = record.buffered_reflection
            return record if staged is None else await aactivate_reflection(core, step, record, staged, plan)
    return await areflect_now(core, step, record, trigger="turn-sync")


async def areflect_manual(core: EngineCore, step: StepState) -> OMRecord:
    """``areflect``: reflect the latest log now, under the record's ``reflect`` lease."""
    ttl = float(core.config.failure_policy.lease_ttl) / 1000.0
    await _await_own_buffered_reflection(core, step, ttl)
    async with wait_for_lease(core.store, lease_name(step.key, "reflect"), ttl):
        record = await core.aload_record(step.resource_id, step.thread_id)
        return await areflect_now(core, step, record, trigger="manual") if record.groups else record


async def _await_own_buffered_reflection(core: EngineCore, step: StepState, ttl: float) -> None:
    """Let this process's buffered reflection (which holds the lease and stages its result under
    the record's lock, held by this step) finish first, lending it the lock: waiting on the lease
    alone would deadlock until the ttl. Bounded by the turn's budget (the lease ttl without one)."""
    left = remaining_budget()
    task = core._tasks.task(step.key, "reflect")
    if task is None:
        return
    bound = ttl if left is None else left
    async with core.waiting("own-reflection", step.key, bound):
        await core._loans.wait_for(step.key, task, bound)


async def areflect_now(core: EngineCore, step: StepState, record: OMRecord, *, trigger: Trigger) -> OMRecord:
    """Reflect the whole log synchronously, one Reflector call for it.

    A concurrent commit (another worker appending an observation) leaves the reflected groups a
    prefix of the log: the same result is applied to the latest record instead of paying the
    Reflector again for a log that only grew at its end. Once the prefix is gone (another
    reflection replaced it), the latest record stands."""
    group_ids = [g.id for g in record.groups]
    outcome = await arun_reflector(core, step, record, group_ids, trigger=trigger, buffering=False)
    if outcome is None:
        return await _hold(core, step, record.observation_tokens)
    for _attempt in range(MAX_COMMIT_RETRIES):
        updated = apply_reflection(core, record, group_ids, outcome.result)
        if updated is None:
            return record
        _set_hold(updated, outcome)
        try:
            return await core.acommit(updated, expected_version=record.version)
        except RecordConflictError:
            record = await core.aload_record(step.resource_id, step.thread_id)
    return record


def _set_hold(record: OMRecord, outcome: Reflected) -> None:
    """Mark a best effort that stayed over the threshold; clear the mark once one reached it."""
    if outcome.reached:
        record.metadata.pop(planner.REFLECTION_HOLD, None)
    else:
        record.metadata[planner.REFLECTION_HOLD] = record.observation_tokens


async def _hold(core: EngineCore, step: StepState, log_tokens: int, flag: str | None = None) -> OMRecord:
    """Record a reflection cycle that stayed over the target or failed: no new one until the log grows."""
    marks: dict[str, Any] = {planner.REFLECTION_HOLD: log_tokens}
    if flag is not None:
        marks[flag] = True
    return await core.amark_record(step.resource_id, step.thread_id, marks)


def apply_reflection(core: EngineCore, record: OMRecord, covered: Sequence[str], result: CycleResult | None,
                     *, text: str | None = None, tokens: int | None = None) -> OMRecord | None:
    """Replace exactly the covered groups (a prefix of the log) with one reflected group."""
    ids = [g.id for g in record.groups]
    if ids[: len(covered)] != list(covered) or not covered:
        return None
    old = record.groups[: len(covered)]
    updated = editable(record)
    updated.generation_count += 1
    threads = sorted({g.thread_id for g in old})
    reflected = ObservationGroup(
        thread_id=old[-1].thread_id, start_id=old[0].start_id, end_id=old[-1].end_id,
        text=text if text is not None else (result.text if result else ""),
        tokens=tokens if tokens is not None else (result.tokens if result else 0),
        generation=updated.generation_count, source="reflection", thread_ids=threads if len(threads) > 1 else [],
    )
    updated.groups = [reflected, *updated.groups[len(covered):]]
    updated.metadata[planner.REFLECTED_AT] = updated.observation_tokens
    updated.buffered_reflection = None
    updated.metadata.pop(planner.REFLECTION_FAILED, None)
    if result is not None:
        apply_hints(core, updated, result.current_task, result.suggested_response, result.extracted)
        add_spend(updated.metadata, "reflector", result.usage, result.provider_metadata)
    updated.updated_at = utcnow()
    return updated


async def abuffer_reflection(core: EngineCore, step: StepState, group_ids: list[str]) -> None:
    """Background: reflect ``group_ids`` and stage the result for a later activation, under the
    record's ``reflect`` lease (skipped while another worker holds it: it is reflecting this log)."""
    ttl = float(core.config.failure_policy.lease_ttl) / 1000.0
    async with try_lease(core.store, lease_name(step.key, "reflect"), ttl) as held:
        if not held:
            return
        record = await core.aload_record(step.resource_id, step.thread_id)
        if [g.id for g in record.groups][: len(group_ids)] != group_ids or record.buffered_reflection is not None:
            return  # reflected or staged by another worker since this cycle was scheduled
        await _buffer_reflection_held(core, step, record, group_ids)


async def _buffer_reflection_held(core: EngineCore, step: StepState, record: OMRecord, group_ids: list[str]) -> None:
    emit = core.background_emit(step.key)
    try:
        outcome = await arun_reflector(core, step, record, group_ids, trigger="async-buffer", buffering=True,
                                       emit=emit)
    except OMAborted as exc:
        logger.warning("langchain-om reflection buffering aborted: %s", exc)
        outcome = None
    # under the record's lock, or a loan of it from a step of this process waiting for this cycle
    async with core._loans.hold(step.key, core._lock(step.key)):
        if outcome is None:
            # the buffering-failed event is out; the observations are untouched
            await _hold(core, step, record.observation_tokens, planner.REFLECTION_FAILED)
            return
        for attempt in range(MAX_COMMIT_RETRIES):
            # retried on a concurrent commit (another worker's step activating or observing): a
            # staged reflection lost to a version race was a Reflector call paid for nothing, and
            # its log then grew past block_after, where every worker's step waits. The first
            # attempt starts from the cached record (a stale one fails the compare-and-swap)
            record, cached = await core.arecord_for_attempt(step.resource_id, step.thread_id, attempt)
            staged = _staged(core, record, group_ids, outcome)
            if staged is None and cached:
                continue  # given up on the stored record only
            if staged is None or await core.commit_quietly(staged, record.version):
                return


def _staged(core: EngineCore, record: OMRecord, group_ids: list[str], outcome: Reflected) -> OMRecord | None:
    """``record`` with ``outcome`` staged as its buffered reflection; None when it no longer fits
    (the covered groups were reflected, or another reflection is staged)."""
    ids = [g.id for g in record.groups]
    if ids[: len(group_ids)] != group_ids or record.buffered_reflection is not None:
        return None
    result = outcome.result
    updated = editable(record)
    extracted = dict(result.extracted)
    if core.extraction_pipeline is not None:
        from ..extensions.extractors import BUILTIN_SLUGS

        core.extraction_pipeline.persist(updated, {k: v for k, v in extracted.items() if k not in BUILTIN_SLUGS})
        extracted = {k: v for k, v in extracted.items() if k in BUILTIN_SLUGS}
    updated.buffered_reflection = BufferedReflection(
        covered_group_ids=group_ids, text=result.text, input_tokens=outcome.input_tokens,
        output_tokens=result.tokens, extracted=extracted, cycle_id=result.cycle_id,
    )
    updated.metadata.pop(planner.REFLECTION_FAILED, None)
    if outcome.reached:
        updated.metadata.pop(planner.REFLECTION_HOLD, None)
    else:
        # the log it leaves once activated: what stays uncovered plus the best effort
        covered_ids = set(group_ids)
        covered = sum(g.tokens for g in record.groups if g.id in covered_ids)
        updated.metadata[planner.REFLECTION_HOLD] = record.observation_tokens - covered + result.tokens
    add_spend(updated.metadata, "reflector", result.usage, result.provider_metadata)
    return updated


async def aactivate_reflection(core: EngineCore, step: StepState, record: OMRecord, pending: BufferedReflection,
                               plan: planner.ReflectionStep) -> OMRecord:
    """Swap a buffered reflection in (no model call); a stale one (the log changed under it) is dropped."""
    updated = apply_reflection(core, record, pending.covered_group_ids, None, text=pending.text,
                               tokens=pending.output_tokens)
    if updated is not None and pending.extracted:
        hints = pending.extracted
        apply_hints(core, updated, hints.get("current-task"), hints.get("suggested-response"), hints)
    if updated is None:
        stale = editable(record)
        stale.buffered_reflection = None
        await core.commit_quietly(stale, record.version)
        return await core.aload_record(step.resource_id, step.thread_id)
    try:
        committed = await core.acommit(updated, expected_version=record.version)
    except RecordConflictError:
        return await core.aload_record(step.resource_id, step.thread_id)
    idle = plan.signals.idle
    step.events.append(ActivationEvent(data=ActivationData(
        cycle_id=new_id("cycle_"), operation_type="reflection", activated_at=iso_now(), chunks_activated=1,
        tokens_activated=pending.output_tokens, observation_tokens=committed.observation_tokens,
        messages_activated=0, generation_count=committed.generation_count, observations=pending.text,
        triggered_by=plan.triggered_by,
        last_activity_at=int(idle.last_activity.timestamp() * 1000) if idle else None,
        ttl_expired_ms=idle.over_ms if idle else None, previous_model=plan.signals.previous_model,
        current_model=step.current_model if plan.triggered_by == "provider_change" else None,
        record_id=committed.id, thread_id=step.thread_id,
        config=ObservationMarkerConfig(**core.config.marker_config()))))
    return committed
