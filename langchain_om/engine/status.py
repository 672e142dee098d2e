"""The ``data-om-status`` payload: the two windows against their thresholds, what is buffered,
what an activation would remove now, and the run's step number and spend."""

from __future__ import annotations

from ..foundation.events import StatusData
from ..foundation.window import Window
from ..model_calls.spend import record_spend
from ..store.base import OMRecord
from . import planner
from .core import EngineCore
from .rendering import instructions_of, omitted_of


def status_of(core: EngineCore, record: OMRecord, window: Window, thread_id: str, step_number: int) -> StatusData:
    tokens = window.tokens
    chunks = planner.staged_chunks(record, thread_id)
    limits = planner.limits(core.config, record.observation_tokens, tokens)
    key = record.key
    obs_status = "running" if core._tasks.running(key, "observe") else ("complete" if chunks else "idle")
    pending = record.buffered_reflection
    ref_status = "running" if core._tasks.running(key, "reflect") else ("complete" if pending else "idle")
    # one validation of the nested payload (in pydantic-core) instead of eight model constructions,
    # each a Python-level ``__init__``: the same models and fields, about a third cheaper per step
    return StatusData.model_validate({
        "windows": {
            "active": {
                "messages": {"tokens": tokens, "threshold": limits.messages},
                "observations": {"tokens": record.observation_tokens, "threshold": limits.observations},
            },
            "buffered": {
                "observations": {
                    "chunks": len(chunks),
                    "message_tokens": sum(c.message_tokens for c in chunks),
                    "projected_message_removal": planner.projected_removal(core.config, record, thread_id, window),
                    "observation_tokens": sum(c.observation_tokens for c in chunks),
                    "status": obs_status,
                },
                "reflection": {
                    "input_observation_tokens": pending.input_tokens if pending else 0,
                    "observation_tokens": pending.output_tokens if pending else 0,
                    "status": ref_status,
                },
            },
        },
        "record_id": record.id,
        "thread_id": thread_id,
        "step_number": step_number,
        "generation_count": record.generation_count,
        "tokenizer": core.counter.source,
        "instruction_tokens": instructions_of(core, record, thread_id)[1],
        "spend": record_spend(record.metadata),
        "omitted": omitted_of(core, record),
    })
