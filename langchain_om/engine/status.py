"""The ``data-om-status`` payload: the two windows against their thresholds, what is buffered,
what an activation would remove now, and the run's step number and spend."""

from __future__ import annotations

from ..foundation.events import (
    ActiveWindows,
    BufferedObservations,
    BufferedReflectionStatus,
    BufferedWindows,
    BufferStatus,
    StatusData,
    Windows,
    WindowUsage,
    spend_from_the_wire,
)
from ..foundation.window import Window
from ..model_calls.spend import record_spend
from ..store.base import OMRecord
from . import planner
from .core import EngineCore
from .rendering import instructions_of


def status_of(core: EngineCore, record: OMRecord, window: Window, thread_id: str, step_number: int) -> StatusData:
    tokens = window.tokens
    chunks = planner.staged_chunks(record, thread_id)
    limits = planner.limits(core.config, record.observation_tokens, tokens)
    key = record.key
    obs_status: BufferStatus = "running" if core._tasks.running(key, "observe") else ("complete" if chunks else "idle")
    pending = record.buffered_reflection
    ref_status: BufferStatus = "running" if core._tasks.running(key, "reflect") else ("complete" if pending else "idle")
    # built with ``model_construct``: every value here is OM's own (ints it counted, ids it checked),
    # so validating eight nested models on every step (~0.1 ms) would check nothing; the fields and
    # the wire shape are the validated ones (tests/test_status_construct.py)
    spend = record_spend(record.metadata)
    return StatusData.model_construct(
        windows=Windows.model_construct(
            active=ActiveWindows.model_construct(
                messages=WindowUsage.model_construct(tokens=tokens, threshold=limits.messages),
                observations=WindowUsage.model_construct(tokens=record.observation_tokens,
                                                         threshold=limits.observations),
            ),
            buffered=BufferedWindows.model_construct(
                observations=BufferedObservations.model_construct(
                    chunks=len(chunks),
                    message_tokens=sum(c.message_tokens for c in chunks),
                    projected_message_removal=planner.projected_removal(core.config, record, thread_id, window),
                    observation_tokens=sum(c.observation_tokens for c in chunks),
                    status=obs_status,
                ),
                reflection=BufferedReflectionStatus.model_construct(
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
        tokenizer=core.counter.source,
        instruction_tokens=instructions_of(core, record, thread_id)[1],
        observation_error=None,
        # what the field's validator would make of it: a stored record's keys read back to snake_case
        spend=spend_from_the_wire(spend),
    )
