"""One agent step, start to end: the I/O loop around the planner.

``astep`` stores the caller's messages, then under the record's lock asks the planner phase by
phase and carries each decision out: activate buffered chunks, observe synchronously, reflect
(or activate a buffered reflection). It then builds the model's context and status and starts
the background work the planner asks for. Each phase reads the state the previous one left, so
``aprocess`` with all phases and the graph's phase-by-phase nodes reach the same decisions.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from ..foundation.events import StatusEvent
from ..foundation.inputs import release_copies
from ..foundation.oversize import warn_oversized
from ..foundation.run_steps import run_mark
from ..model_calls import failure_policy
from ..model_calls.failures import turn_budget
from ..store.base import OMRecord, SupportsThreadHead, record_key
from ..store.step_fast_paths import ThreadHead, supports
from . import planner
from .activation import aactivate_chunks, observation_signals
from .background import schedule, start_idle_buffering
from .core import EngineCore
from .model_runs import skipped_observation
from .observation import aobserve_now
from .persistence import acheck_and_persist, asettle, settled
from .reflection import areflect_step
from .rendering import abuild_context
from .state import OMAborted, OMContext, Phase, StepState, check_phases, left_window
from .status import status_of


async def astep(
    core: EngineCore, thread_id: str, messages: Sequence[BaseMessage], *, resource_id: str | None,
    config: RunnableConfig | None, current_model: str | None, now: datetime | None,
    phases: Collection[Phase] | None,
) -> OMContext:
    """``ObservationalMemory.aprocess`` (see there)."""
    resource = core.resolve_resource(thread_id, resource_id)
    run = check_phases(phases)
    await core.aensure_setup()
    moment = now or core._clock()
    inputs = await acheck_and_persist(core, resource, thread_id, messages, moment)
    warn_oversized(inputs.inserted, core.config.observation.message_tokens)
    key = record_key(resource, core.record_thread(thread_id))
    core.touch_record(key)
    step = StepState(resource, thread_id, key, moment, [], current_model, config)
    aborted: str | None = None
    async with core.locked(key):
        step.events.extend(core._live_runs.refresh(key, config))  # live_runs.py: a run left without a close
        step.events.extend(core._pending_events.pop(key, []))
        last_seq: int | None = None
        if inputs.head is not None:
            # the append read both in its transaction (``SupportsHeadAppend``): the step takes
            # effect at its append's commit, as if the read below had run right after it
            last_seq, stamp = inputs.head
            record = await core.arecord_at_stamp(resource, thread_id, stamp)
        elif not inputs.edited and supports(core.store, SupportsThreadHead):  # checked once per store
            # the record's stamp and the thread's last seq (the window's refresh) in one read;
            # an edit appends rows after it, so a step with edits reads the last seq after them
            last_seq, stamp = await cast(SupportsThreadHead, core.store).aget_thread_head(
                resource, thread_id, core.record_thread(thread_id))
            record = await core.arecord_at_stamp(resource, thread_id, stamp)
        else:
            record = await core.aload_record(resource, thread_id)
        record = await asettle(core, step, record, inputs)
        window_before = await core.awindow(record, resource, thread_id, last_seq=last_seq)
        if core.config.enabled:
            try:
                with turn_budget(core.config.failure_policy.turn_budget_s()):
                    record = await arun_phases(core, step, record, run)
            except OMAborted as exc:
                aborted = str(exc)
                record = await core.aload_record(resource, thread_id)
        window = await core.awindow(record, resource, thread_id, refresh=False)
        # the reflect phase closes an agent step; so does an abort, after which no model runs
        closes_step = "reflect" in run or aborted is not None
        if closes_step:
            core._step_numbers.close_step(key, run_mark(config), core.cache_limit)
        status = status_of(core, record, window, thread_id, core._step_numbers.last(key))
        if closes_step:
            step.events.insert(0, StatusEvent(data=status))
        context = await abuild_context(core, record, window, resource, thread_id, status, now=moment)
        if closes_step:
            failure_policy.apply_to_context(core.config, core.counter, context, step.events)
            if context.status is not status:  # marked with the step's failure
                step.events[0] = StatusEvent(data=context.status)
        if core.config.enabled and closes_step and aborted is None:
            schedule(core, step, record, window)
    context.events = step.events
    context.observed_message_ids = left_window(window_before, window)
    context.aborted = aborted
    await core.dispatch(step.events, config)
    return context


async def arun_phases(core: EngineCore, step: StepState, record: OMRecord, phases: frozenset[str]) -> OMRecord:
    """Activate, observe, reflect: each phase plans on the record and window the last one left."""
    cfg = core.config
    window = await core.awindow(record, step.resource_id, step.thread_id, refresh=False)
    if step.arrival_window is None:
        step.arrival_window = window
    if "activate" in phases:
        # the idle and model-change signals matter only when chunks are staged: read them only then
        signals = observation_signals(core, step) if record.buffered_chunks else planner.NO_SIGNALS
        activation = planner.plan_activation(cfg, record, step.thread_id, window, signals)
        if activation is not None:
            record = await aactivate_chunks(core, step, record, window, activation)
            window = await core.awindow(record, step.resource_id, step.thread_id, refresh=False)
    if "observe" in phases:
        observation = planner.plan_observation(cfg, record, step.thread_id, window)
        skip = observation is not None and cfg.failure_policy.on_failure == "continue" and \
            core.observer_backoff.skip(step.key)
        if skip:
            skipped_observation(core, step, record, skip)
        elif observation is not None:
            record = await aobserve_now(core, step, record, observation, window)
            window = await core.awindow(record, step.resource_id, step.thread_id, refresh=False)
    if "reflect" in phases:
        record = await areflect_step(core, step, record, window.tokens)
    return record


async def aturn_end(core: EngineCore, thread_id: str, messages: Sequence[BaseMessage], *,
                    resource_id: str | None, config: RunnableConfig | None = None) -> ThreadHead | None:
    """``ObservationalMemory.aon_turn_end`` (see there). Returns the thread's head as the turn's
    append committed it when nothing was written after it (the middleware's position then needs
    no read of its own), else None."""
    resource = core.resolve_resource(thread_id, resource_id)
    await core.aensure_setup()
    inputs = await acheck_and_persist(core, resource, thread_id, messages, core._clock())
    key = record_key(resource, core.record_thread(thread_id))
    core.touch_record(key)
    idle_buffering = core.config.buffering_enabled and core.config.observation.buffer_on_idle
    release_copies(inputs.caller_list)  # the turn is over (see there)
    # instructions may commit the record and edits append rows: the append's head is then stale
    head = None if inputs.instructions or inputs.edited else inputs.head
    if not (idle_buffering or inputs.instructions or inputs.edited):
        settled(core, resource, thread_id, inputs)
        return head
    step = StepState(resource, thread_id, key, core._clock(), [], None, config)
    async with core.locked(key):
        record = await core.aload_record(resource, thread_id)
        record = await asettle(core, step, record, inputs)
        if not idle_buffering:
            return head
        window = await core.awindow(record, resource, thread_id)
    start_idle_buffering(core, step, record, window)
    return head
