"""The synchronous observation cycle: the planner said the step must observe now.

One worker at a time pays the Observer for a range (the record's ``observe`` lease); a backlog
larger than one Observer call is observed in several, oldest first; each part commits with its
messages marked observed in the same compare-and-swap, so a crash or a concurrent worker can
only make a step redo work, never apply it twice or half-way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from ..foundation.hooks import Trigger
from ..foundation.turns import pin_message, pinned_row, safe_cut_before
from ..foundation.window import Window
from ..model_calls.failures import remaining_budget
from ..model_calls.spend import add_to_record as add_spend
from ..store.base import ObservationGroup, OMRecord, RecordConflictError, StoredMessage, utcnow
from . import planner
from .activation import aactivate_chunks
from .backlog import split_backlog
from .buffer_handoff import lease_wait
from .core import EngineCore
from .leases import lease_name, wait_for_lease, wait_until_free
from .model_runs import apply_hints, arun_observer
from .resource_scope import aobserve_resource
from .state import MAX_COMMIT_RETRIES, CycleResult, StepState, editable
from .titles import aapply_title


async def aobserve_now(core: EngineCore, step: StepState, record: OMRecord, plan: planner.SyncObservation,
                       window: Window) -> OMRecord:
    """Carry out a ``SyncObservation`` under the record's ``observe`` lease."""
    ttl = float(core.config.failure_policy.lease_ttl) / 1000.0
    own_cycle_over = not core.config.buffering_enabled or await _await_own_buffering(core, step, ttl)
    async with wait_for_lease(core.store, lease_name(step.key, "observe"), ttl,
                              lease_wait(core, "lease:observe", step.key, ttl)):
        if core.config.buffering_enabled and own_cycle_over:
            # another worker's chunk of these messages; a cycle starting now sees `observe` taken and skips
            await wait_until_free(core.store, lease_name(step.key, "buffer"), ttl,
                                  lease_wait(core, "lease:buffer", step.key, ttl))
        latest = await core.aload_record(step.resource_id, step.thread_id)
        if latest.version != record.version:  # another worker observed meanwhile: plan on what is left
            record, window = latest, await core.awindow(latest, step.resource_id, step.thread_id)
            replanned = planner.plan_observation(core.config, record, step.thread_id, window)
            if replanned is None:
                return record
            plan = replanned
        return await _observe_held(core, step, record, plan, window)


async def _await_own_buffering(core: EngineCore, step: StepState, ttl: float) -> bool:
    """Let this process's buffering cycle, already running on these messages, finish and stage its
    chunk, which the observation then activates instead of paying the Observer again; the step
    lends it the record's lock meanwhile (``buffer_handoff``). Bounded by the turn's budget (the
    lease ttl without one): a call in flight answers sooner than a new one would. Returns False
    if the cycle is still running after the wait."""
    left = remaining_budget()
    task = core._tasks.task(step.key, "observe")
    if task is None:
        return True
    async with core.waiting("own-buffering", step.key, ttl if left is None else left):
        return await core._loans.wait_for(step.key, task, ttl if left is None else left)


async def _observe_held(core: EngineCore, step: StepState, record: OMRecord, plan: planner.SyncObservation,
                        window: Window) -> OMRecord:
    if plan.activate_first:
        record = await aactivate_chunks(core, step, record, window, planner.Activation(plan.activate_first,
                                                                                        "threshold"))
        window = await core.awindow(record, step.resource_id, step.thread_id)
        replanned = planner.plan_observation(core.config, record, step.thread_id, window)
        if replanned is None or replanned.activate_first:
            return record
        plan = replanned
    if core.config.scope == "resource":

        return await aobserve_resource(core, step, record, trigger="turn-sync")
    cut = plan.cut
    human = window[plan.pinned] if plan.pinned is not None else None
    parts = split_backlog(core.config, window[:cut], step.thread_id)
    for index, part in enumerate(parts):
        if index and remaining_budget() == 0:
            break  # the turn's budget is spent: the rest waits for the next step
        pinned = human if human is not None and part[0].seq <= human.seq <= part[-1].seq else None
        record, observed = await acommit_part(core, step, record, part, pinned, "turn-sync")
        if not observed:
            break
    return record


async def acommit_part(core: EngineCore, step: StepState, record: OMRecord, chosen: Sequence[StoredMessage],
                       pinned: StoredMessage | None, trigger: Trigger) -> tuple[OMRecord, bool]:
    """Observe and commit ``chosen``; returns the latest record and whether the Observer succeeded.

    A concurrent commit that left ``chosen`` unobserved (another worker's reflection, activation
    or staged chunk) gets the same result applied to the latest record: paying the Observer
    again for the same messages doubled the spend of workers on one thread. Only messages another
    worker observed meanwhile are taken out, and the rest observed again."""
    result = None
    for _attempt in range(MAX_COMMIT_RETRIES):
        if result is None:
            result = await arun_observer(core, step, record, {step.thread_id: chosen}, trigger=trigger)
            if result is None:
                return record, False
        updated = apply_observation(core, record, step.thread_id, chosen, result, human_pinned=pinned)
        updated.metadata.pop(planner.OBSERVATION_FAILED, None)
        try:
            committed = await core.acommit(
                updated, expected_version=record.version, mark_observed={step.thread_id: chosen[-1].seq}
            )
        except RecordConflictError:
            record = await core.aload_record(step.resource_id, step.thread_id)
            await core.awindow(record, step.resource_id, step.thread_id)
            left = [m for m in chosen if m.seq > record.last_observed_seq.get(step.thread_id, 0)]
            if not left:
                return record, True
            if len(left) != len(chosen):
                chosen, result = left, None
            continue
        await aapply_title(core, step, result.thread_title, result.cycle_id)
        return committed, True
    return record, True


def apply_observation(
    core: EngineCore, record: OMRecord, thread_id: str, chosen: Sequence[StoredMessage], result: CycleResult, *,
    human_pinned: StoredMessage | None, source: Literal["observation", "buffered"] = "observation",
) -> OMRecord:
    """A copy of ``record`` with ``chosen`` observed as one group (and the cycle's hints)."""
    updated = editable(record)
    updated.groups.append(ObservationGroup(
        thread_id=thread_id, start_id=chosen[0].id, end_id=chosen[-1].id, text=result.text, tokens=result.tokens,
        generation=record.generation_count, source=source,
    ))
    updated.last_observed_seq[thread_id] = chosen[-1].seq
    updated.last_observed_id[thread_id] = chosen[-1].id
    updated.last_observed_at = chosen[-1].created_at
    # staged chunks overlapping what was just observed can never be activated
    updated.buffered_chunks = [
        c for c in updated.buffered_chunks if c.thread_id != thread_id or c.start_seq > chosen[-1].seq
    ]
    apply_hints(core, updated, result.current_task, result.suggested_response, result.extracted)
    add_spend(updated.metadata, "observer", result.usage, result.provider_metadata)
    if human_pinned is not None:
        pin_message(updated.metadata, human_pinned)
    updated.updated_at = utcnow()
    return updated


async def aobserve_manual(core: EngineCore, step: StepState, record: OMRecord) -> OMRecord:
    """Observe every unobserved message now (trigger ``manual``), up to a safe cut."""
    if core.config.scope == "resource":

        return await aobserve_resource(core, step, record, trigger="manual")
    window = await core.awindow(record, step.resource_id, step.thread_id)
    kinds = window.kinds
    cut = safe_cut_before(kinds, len(kinds))
    if cut <= 0:
        return record
    chosen = window[:cut]
    result = await arun_observer(core, step, record, {step.thread_id: chosen}, trigger="manual")
    if result is None:
        return record
    updated = apply_observation(core, record, step.thread_id, chosen, result,
                                human_pinned=pinned_row(window, kinds, cut))
    record = await core.acommit(updated, expected_version=record.version,
                                mark_observed={step.thread_id: chosen[-1].seq})
    await aapply_title(core, step, result.thread_title, result.cycle_id)
    return record
