"""Activation: swap buffered observation chunks into the log instantly (no model call).

The planner chose the chunks (``planner.plan_activation`` / the retention rule); this module
commits them with their messages marked observed, applies what the chunks carry (continuation
hints, extracted values, a proposed thread title) and emits ``data-om-activation``. It also
reads the two signals that activate early: the idle TTL and a change of the agent's model.
"""

from __future__ import annotations

from typing import Any

from ..foundation.events import ActivationData, ActivationEvent, ObservationMarkerConfig, iso_now
from ..foundation.messages import model_identity, same_model
from ..foundation.turns import pin_message, pinned_row
from ..foundation.window import Window
from ..store.base import ObservationGroup, OMRecord, RecordConflictError, StoredMessage, new_id
from . import planner
from .core import EngineCore
from .model_runs import apply_hints
from .state import StepState, editable
from .tasks import idle_ttl_ms, ms_between
from .titles import aapply_title


async def aactivate_chunks(core: EngineCore, step: StepState, record: OMRecord, window: Window,
                           activation: planner.Activation) -> OMRecord:
    """Commit an activation; on a concurrent commit the latest record wins (the next plan sees it)."""
    chunks = sorted(activation.chunks, key=lambda c: c.start_seq)
    if not chunks:
        return record
    updated = editable(record)
    chosen_ids = {c.id for c in chunks}
    updated.buffered_chunks = [c for c in updated.buffered_chunks if c.id not in chosen_ids]
    for chunk in chunks:
        updated.groups.append(ObservationGroup(
            thread_id=chunk.thread_id, start_id=chunk.start_id, end_id=chunk.end_id, text=chunk.observations,
            tokens=chunk.observation_tokens, generation=record.generation_count, source="buffered"))
        apply_hints(core, updated, chunk.current_task, chunk.suggested_response, chunk.extracted)
    last = chunks[-1]
    updated.last_observed_seq[step.thread_id] = last.end_seq
    updated.last_observed_id[step.thread_id] = last.end_id
    updated.last_observed_at = step.now
    cut = sum(1 for m in window if m.seq <= last.end_seq)
    pinned = pinned_row(window, window.kinds, cut)
    if pinned is not None:
        pin_message(updated.metadata, pinned)
    # chunks that no longer start after the observed point can never be activated
    updated.buffered_chunks = [c for c in updated.buffered_chunks if c.start_seq > last.end_seq]
    try:
        committed = await core.acommit(
            updated, expected_version=record.version, mark_observed={step.thread_id: last.end_seq}
        )
    except RecordConflictError:
        return await core.aload_record(step.resource_id, step.thread_id)
    signals = activation.signals
    idle = signals.idle
    cycle_id = new_id("cycle_")
    step.events.append(ActivationEvent(data=ActivationData(
        cycle_id=cycle_id, operation_type="observation", activated_at=iso_now(),
        chunks_activated=len(chunks), tokens_activated=sum(c.message_tokens for c in chunks),
        observation_tokens=committed.observation_tokens, messages_activated=sum(c.message_count for c in chunks),
        generation_count=committed.generation_count, observations="\n\n".join(c.observations for c in chunks),
        triggered_by=activation.triggered_by,
        last_activity_at=int(idle.last_activity.timestamp() * 1000) if idle else None,
        ttl_expired_ms=idle.over_ms if idle else None, previous_model=signals.previous_model,
        current_model=step.current_model if activation.triggered_by == "provider_change" else None,
        record_id=committed.id, thread_id=step.thread_id,
        config=ObservationMarkerConfig(**core.config.marker_config()))))
    title = next((c.thread_title for c in reversed(chunks) if c.thread_title), None)
    if title:
        await aapply_title(core, step, title, cycle_id)
    return committed


# ----------------------------------------------------------------------------- signals


def _last_ai(step: StepState) -> StoredMessage | None:
    window = step.arrival_window or Window()
    return next((m for m in reversed(window) if m.data.get("type") == "ai"), None)


def idle_signal(step: StepState, setting: Any) -> planner.IdleSignal | None:
    """The idle TTL of ``setting`` has expired: idle is the gap between the last AI message and
    the message that arrives now (a replayed or imported message carries its own timestamp,
    which beats the wall clock)."""
    ttl = idle_ttl_ms(setting, provider_of(step.current_model))
    last_ai = _last_ai(step)
    if ttl is None or last_ai is None or not step.arrival_window:
        return None
    newest = step.arrival_window[-1]
    arrival = newest.created_at if newest is not last_ai else step.now
    idle = ms_between(last_ai.created_at, arrival)
    return planner.IdleSignal(last_ai.created_at, idle - ttl) if idle >= ttl else None


def changed_model(core: EngineCore, step: StepState) -> str | None:
    """The previous model (``provider/model``) when the step's model differs from the one that
    wrote the last AI message, else None."""
    last_ai = _last_ai(step)
    if not step.current_model or last_ai is None:
        return None
    previous = model_identity(core.message_of(step.resource_id, last_ai))
    if previous and not same_model(previous, step.current_model):
        return previous
    return None


def _signals(core: EngineCore, step: StepState, idle_setting: Any, on_model_change: bool) -> planner.Signals:
    idle = idle_signal(step, idle_setting)
    previous = changed_model(core, step) if idle is None and on_model_change else None
    return planner.Signals(idle, previous)


def observation_signals(core: EngineCore, step: StepState) -> planner.Signals:
    """The early-activation signals under the observation settings (inherited top-level ones)."""
    cfg = core.config
    return _signals(core, step, cfg.observation_idle_ms(), cfg.observation_activates_on_provider_change())


def reflection_signals(core: EngineCore, step: StepState) -> planner.Signals:
    """The same under the reflection settings (standalone only: never inherited, as the page says)."""
    cfg = core.config
    return _signals(core, step, cfg.reflection_idle_ms(), cfg.reflection_activates_on_provider_change())


def provider_of(model_id: str | None) -> str | None:
    if not model_id:
        return None
    for sep in (":", "/"):
        if sep in model_id:
            return model_id.split(sep, 1)[0]
    return None
