"""Running OM's own models inside a cycle: the Observer over a batch of messages, the Reflector
over the log (with its compression ladder), the extractors after either; each run emits its
start / end / failed events and calls the hooks.

Nothing here commits: a run returns a ``CycleResult`` (or None after a failure it reported),
and the observation and reflection cycles decide what to apply.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any, Literal

from ..foundation.clock import newest_zone, on_clock, stamp_agrees
from ..foundation.events import (
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
    iso_now,
)
from ..foundation.hooks import HookContext, Trigger
from ..foundation.object_memo import ObjectMemo
from ..foundation.tokens import CONVERSATION_OVERHEAD, MESSAGE_OVERHEAD
from ..model_calls import failure_policy
from ..model_calls import observer as observer_mod
from ..model_calls import reflector as reflector_mod
from ..model_calls.context_size import declared_context, warn_if_too_small
from ..model_calls.models import ModelSelectionError, OMModelError, model_supports_images, reads_input_tokens
from ..model_calls.replies import acall_observer, acall_reflector
from ..store.base import OMRecord, StoredMessage, new_id, total_tokens
from .core import EngineCore
from .state import CycleResult, OMAborted, StepState

logger = logging.getLogger("langchain_om")

Operation = Literal["observation", "reflection"]

REFLECTION_TARGET_SHARE = 0.5
"""The Reflector's target, as a share of ``reflection.observation_tokens``: a log condensed to
just under the threshold crosses it again with the next observation, and each crossing is another
cycle. An attempt under the threshold itself is accepted."""


def _push_start(core: EngineCore, push: Callable[[OMEvent], None], operation: Operation, buffering: bool,
                cycle_id: str, tokens: int, record: OMRecord, step: StepState,
                thread_ids: list[str] | None = None) -> None:
    marker = ObservationMarkerConfig(**core.config.marker_config())
    if buffering:
        push(BufferingStartEvent(data=BufferingStartData(
            cycle_id=cycle_id, operation_type=operation, started_at=iso_now(), tokens_to_buffer=tokens,
            record_id=record.id, thread_id=step.thread_id, thread_ids=thread_ids, config=marker)))
    else:
        push(ObservationStartEvent(data=ObservationStartData(
            cycle_id=cycle_id, operation_type=operation, started_at=iso_now(), tokens_to_observe=tokens,
            record_id=record.id, thread_id=step.thread_id, thread_ids=thread_ids, config=marker)))


def _push_end(push: Callable[[OMEvent], None], operation: Operation, buffering: bool, cycle_id: str,
              started: float, tokens_in: int, result: CycleResult, record: OMRecord, step: StepState) -> None:
    duration = (time.perf_counter() - started) * 1000
    values = result.extracted or None
    failures = result.failures or None
    if buffering:
        push(BufferingEndEvent(data=BufferingEndData(
            cycle_id=cycle_id, operation_type=operation, completed_at=iso_now(), duration_ms=duration,
            tokens_buffered=tokens_in, buffered_tokens=result.tokens, observations=result.text,
            extracted_values=values, extraction_failures=failures, record_id=record.id,
            thread_id=step.thread_id)))
    else:
        push(ObservationEndEvent(data=ObservationEndData(
            cycle_id=cycle_id, operation_type=operation, completed_at=iso_now(), duration_ms=duration,
            tokens_observed=tokens_in, observation_tokens=result.tokens, observations=result.text,
            current_task=result.current_task, suggested_response=result.suggested_response,
            extracted_values=values, extraction_failures=failures, record_id=record.id,
            thread_id=step.thread_id)))


def skipped_observation(core: EngineCore, step: StepState, record: OMRecord, reason: str) -> None:
    """Say that this turn skips its synchronous observation (``observer_backoff``): a start and a
    failed event of one cycle id (every failed event has its start: the events contract), the
    error starting with ``skipped:``, no tokens attempted and no hooks (no model call ran)."""
    cycle_id = new_id("cycle_")
    _push_start(core, step.events.append, "observation", False, cycle_id, 0, record, step)
    step.events.append(ObservationFailedEvent(data=ObservationFailedData(
        cycle_id=cycle_id, operation_type="observation", failed_at=iso_now(), duration_ms=0.0,
        tokens_attempted=0, error=reason, record_id=record.id, thread_id=step.thread_id)))


async def cycle_failed(
    core: EngineCore, push: Callable[[OMEvent], None], hook_ctx: HookContext, record: OMRecord, step: StepState,
    cycle_id: str, started: float, tokens: int, error: str, buffering: bool, operation: Operation = "observation",
) -> None:
    """Report a failed cycle: the failed event of its kind and the end hook with the error."""
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
    await core.hooks.call(name, HookContext(
        hook_ctx.thread_id, hook_ctx.resource_id, hook_ctx.trigger, operation, cycle_id, error=error))


def _call_settings(core: EngineCore, which: Operation) -> dict[str, Any]:
    cfg = core.config
    section = cfg.observation if which == "observation" else cfg.reflection
    policy = cfg.failure_policy
    return {
        "settings": cfg.model_settings(which),
        "provider_options": section.provider_options,
        "timeout_s": section.model_timeout_s(),
        "default_retries": policy.max_retries,
        "backoff_s": float(policy.backoff) / 1000.0,
        "max_backoff_s": float(policy.max_backoff) / 1000.0,
    }


# ---------------------------------------------------------------------------- Observer


async def arun_observer(
    core: EngineCore, step: StepState, record: OMRecord, batch: Mapping[str, Sequence[StoredMessage]], *,
    trigger: Trigger, buffering: bool = False, emit: Callable[[OMEvent], None] | None = None,
) -> CycleResult | None:
    """Run the Observer over ``batch`` (thread id -> messages). Returns None on failure (after
    emitting the failure event); raises ``OMAborted`` when no model fits the input."""
    push = emit or step.events.append
    cycle_id = new_id("cycle_")
    tokens_in = sum(total_tokens(msgs) for msgs in batch.values())
    started = time.perf_counter()
    thread_ids = list(batch) if core.config.scope == "resource" else None
    _push_start(core, push, "observation", buffering, cycle_id, tokens_in, record, step, thread_ids)
    hook_ctx = HookContext(step.thread_id, step.resource_id, trigger, "observation", cycle_id)
    await core.hooks.call("on_observation_start", hook_ctx)
    try:
        result = await _call_observer(core, step, record, batch, trigger=trigger)
    except ModelSelectionError as exc:
        await cycle_failed(core, push, hook_ctx, record, step, cycle_id, started, tokens_in, str(exc), buffering)
        raise OMAborted(f"observer model selection failed: {exc}") from exc
    except Exception as exc:
        # a model failure was logged where it happened (once, if permanent); others say it here
        (logger.debug if isinstance(exc, OMModelError) else logger.warning)(
            "langchain-om observation failed: %s", failure_policy.failure_reason(exc))
        await cycle_failed(core, push, hook_ctx, record, step, cycle_id, started, tokens_in,
                           failure_policy.failure_reason(exc), buffering)
        if not buffering:
            failure_policy.raise_if_configured(core.config, exc)
            if trigger == "turn-sync":
                core.observer_backoff.failed(step.key, failure_policy.failure_reason(exc))
        return None
    core.observer_backoff.succeeded(step.key)
    result.cycle_id = cycle_id
    _push_end(push, "observation", buffering, cycle_id, started, tokens_in, result, record, step)
    await core.hooks.call("on_observation_end", HookContext(
        step.thread_id, step.resource_id, trigger, "observation", cycle_id, usage=result.usage,
        provider_metadata=result.provider_metadata))
    return result


def previous_observations(core: EngineCore, record: OMRecord) -> str:
    """The log the Observer reads as context (a staged reflection stands for what it covers)."""
    text = record.observations
    pending = record.buffered_reflection
    if pending is not None:
        covered = set(pending.covered_group_ids)
        kept = [g.text for g in record.groups if g.id not in covered]
        text = "\n\n".join([pending.text, *kept])
    return observer_mod.previous_with_marker(
        text, core.config.observation.previous_observer_tokens, _piece_counter(core)
    )


def _piece_counter(core: EngineCore) -> Callable[[str], int]:
    """The counter's cached count for repeated texts (a user's own counter may have none)."""
    return getattr(core.counter, "count_piece", core.counter.count_text)


def _prompt_tokens(core: EngineCore, spec: Any, prompt: Sequence[Any]) -> int:
    """The prompt's tokens when choosing the model needs them (``ModelByInputTokens``, a dynamic
    model reading ``input_tokens``), else 0: nothing else reads them, and the transcript is new
    text to count on every call.

    Counted from the sections' kept counts: the instructions and the previous log repeat on every
    call, only the transcript is new (counting the whole prompt again cost ~1 ms a call). A prompt
    with attachments, or a user's own counter, is counted whole."""
    if not reads_input_tokens(spec):
        return 0
    count_sections = getattr(core.counter, "count_sections", None)
    if count_sections is None or not all(isinstance(m.content, str) for m in prompt):
        return core.counter.count_messages(prompt)
    return CONVERSATION_OVERHEAD + sum(MESSAGE_OVERHEAD + int(count_sections(m.content)) for m in prompt)


def _check_context(core: EngineCore, spec: Any, role: str, prompt: Sequence[Any], counted: int) -> None:
    """Warn once when a model object states a context smaller than this prompt (``context_size``);
    the prompt is counted only for a model that states one."""
    if declared_context(spec) is not None:
        warn_if_too_small(spec, role, counted or core.counter.count_messages(prompt))


def _newest_moment(core: EngineCore, resource_id: str, batch: Mapping[str, Sequence[StoredMessage]],
                   clock: datetime, zone: tzinfo | None) -> datetime:
    """The Observer's "now": when the newest observed message was stored, on the conversation's
    clock (as the transcript shows it); the step's clock for an empty batch."""
    rows = [rows[-1] for rows in batch.values() if rows]
    if not rows:
        return on_clock(clock, zone)
    return on_clock(max(rows, key=lambda row: row.created_at).created_at, zone)


def _rows_zone(core: EngineCore, resource_id: str, rows: Sequence[StoredMessage]) -> tzinfo | None:
    """The zone the rows' own timestamps state (``conversation_zone``: the newest user message's,
    else the newest message's), read from the newest row back; only messages whose stamp is the
    stored instant count (time-gap markers and late imports say nothing about the clock)."""
    return newest_zone(message for row in reversed(rows) if row.kind == "message"
                       for message in (core.message_of(resource_id, row),)
                       if stamp_agrees(message, row.created_at))


_supports_images = ObjectMemo(model_supports_images)
"""``model_supports_images`` once per model object: it reads the model's LangSmith parameters
(~40 us), on every Observer call, for an answer that comes from the model's name."""


async def _call_observer(
    core: EngineCore, step: StepState, record: OMRecord, batch: Mapping[str, Sequence[StoredMessage]], *,
    trigger: Trigger,
) -> CycleResult:
    cfg = core.config
    spec = cfg.model_spec("observation")
    supports_images = _supports_images(spec) is not False  # unknown capability: forward (page)
    texts: list[str] = []
    attachments: list[Any] = []
    zones: dict[str, tzinfo | None] = {}
    for thread_id, msgs in batch.items():
        label = core.thread_label(thread_id) if (cfg.scope == "resource" or len(batch) > 1) else None
        zone = _rows_zone(core, step.resource_id, msgs)
        if zone is None and thread_id == step.thread_id and not any(row.data.get("type") == "human" for row in msgs):
            zone = _rows_zone(core, step.resource_id, step.arrival_window or ())  # replies only: the user's says
        zones[thread_id] = zone
        transcript = observer_mod.format_transcript(
            list(msgs), thread_label=label, observe_attachments=cfg.observation.observe_attachments,
            model_supports_images=supports_images, zone=zone, count_tokens=_piece_counter(core),
        )
        texts.append(transcript.text)
        attachments.extend(transcript.attachments)
    transcript_all = observer_mod.Transcript(text="\n\n".join(texts), attachments=attachments)
    inline = await inline_extractors(core, "observation", step, record)
    current_title: str | None = None
    if cfg.observation.thread_title:
        thread = await core.store.aget_thread(step.resource_id, step.thread_id)
        current_title = thread.title if thread is not None else None
    prompt = observer_mod.build_observer_messages(
        transcript_all, previous_observations=previous_observations(core, record),
        instruction=cfg.observation.instruction, now=_newest_moment(core, step.resource_id, batch, step.now,
                           zones.get(step.thread_id) or next((z for z in zones.values() if z), None)),
        want_thread_title=cfg.observation.thread_title,
        inline_extractors=inline, current_title=current_title,
        previous_task=record.current_task, previous_suggestion=record.suggested_response,
    )
    input_tokens = _prompt_tokens(core, spec, prompt)
    _check_context(core, spec, "observer", prompt, input_tokens)
    call, parsed = await acall_observer(  # a looping reply is refused and asked for once more (replies.py)
        spec if spec is not None else "default", prompt, inline_slugs=[spec_.slug for spec_ in inline],
        input_tokens=input_tokens, count_tokens=core.counter.count_text,
        context={"thread_id": step.thread_id, "resource_id": step.resource_id, "trigger": trigger,
                 "input_tokens": input_tokens, "memory": core, "role": "observer"},
        **_call_settings(core, "observation"),
    )
    extracted, failures = await extract(core, "observation", step, record, parsed, transcript_all.text)
    return CycleResult(
        text=parsed.observations, tokens=core.counter.count_text(parsed.observations),
        current_task=parsed.current_task, suggested_response=parsed.suggested_response,
        thread_title=parsed.thread_title, extracted=extracted, failures=failures, usage=call.usage,
        provider_metadata=call.provider_metadata,
    )


# ---------------------------------------------------------------------------- Reflector


@dataclass
class Reflected:
    """A Reflector run's accepted output; ``reached``: it got under the reflection threshold."""

    result: CycleResult
    input_tokens: int
    reached: bool


async def arun_reflector(
    core: EngineCore, step: StepState, record: OMRecord, group_ids: Sequence[str], *, trigger: Trigger,
    buffering: bool, emit: Callable[[OMEvent], None] | None = None,
) -> Reflected | None:
    """Reflect the given groups with an increasing compression ladder.

    Every attempt asks for one target, ``REFLECTION_TARGET_SHARE`` of the threshold (room for the
    log to grow before the next reflection), and says how far the log is from it. An attempt under
    the threshold ends the cycle; one still over it is followed by the next level, told how far
    its best predecessor stayed over. The smallest acceptable output so far is kept, and an attempt
    that does not beat it ends the ladder (another level would pay for the same result), so a
    cycle costs at most four calls and usually one or two, and always ends. An output that is not
    smaller than the input (or degenerate) is never accepted; with none, the cycle fails.
    """
    cfg = core.config
    push = emit or step.events.append
    wanted = set(group_ids)
    groups = [g for g in record.groups if g.id in wanted]
    source_text = "\n\n".join(g.text for g in groups)
    in_tokens = sum(g.tokens for g in groups)
    target = cfg.reflection.observation_tokens
    cycle_id = new_id("cycle_")
    started = time.perf_counter()
    _push_start(core, push, "reflection", buffering, cycle_id, in_tokens, record, step)
    hook_ctx = HookContext(step.thread_id, step.resource_id, trigger, "reflection", cycle_id)
    await core.hooks.call("on_reflection_start", hook_ctx)
    spec = cfg.model_spec("reflection")
    inline = await inline_extractors(core, "reflection", step, record)
    last_error = "reflection did not compress the observations"
    best: tuple[int, Any, Any] | None = None  # (tokens, parsed, call)
    for level in range(reflector_mod.MAX_COMPRESSION_LEVEL + 1):
        prompt = reflector_mod.build_reflector_messages(
            source_text, instruction=cfg.reflection.instruction, level=level,
            target_tokens=max(1, round(target * REFLECTION_TARGET_SHARE)), log_tokens=in_tokens,
            previous_tokens=best[0] if best is not None else None, inline_extractors=inline,
        )
        input_tokens = _prompt_tokens(core, spec, prompt)
        _check_context(core, spec, "reflector", prompt, input_tokens)
        try:
            call, parsed = await acall_reflector(  # a looping reply: asked once more, then OMModelError
                spec if spec is not None else "default", prompt, inline_slugs=[s.slug for s in inline],
                input_tokens=input_tokens, count_tokens=core.counter.count_text,
                context={"thread_id": step.thread_id, "resource_id": step.resource_id, "trigger": trigger,
                         "input_tokens": input_tokens, "memory": core, "role": "reflector"},
                **_call_settings(core, "reflection"),
            )
        except ModelSelectionError as exc:
            await cycle_failed(core, push, hook_ctx, record, step, cycle_id, started, in_tokens, str(exc),
                               buffering, "reflection")
            raise OMAborted(f"reflector model selection failed: {exc}") from exc
        except Exception as exc:
            last_error = failure_policy.failure_reason(exc)
            (logger.debug if isinstance(exc, OMModelError) else logger.warning)(
                "langchain-om reflection attempt %d failed: %s", level, last_error)
            if isinstance(exc, OMModelError):
                break  # the model itself failed (retries are spent): another level would pay again
            continue
        out_tokens = core.counter.count_text(parsed.observations)
        if not reflector_mod.is_compressed(in_tokens, out_tokens):
            last_error = f"reflection output ({out_tokens} tokens) not smaller than input ({in_tokens})"
            continue
        if best is not None and out_tokens >= best[0]:
            break  # no progress on the best attempt: a harder level would pay for the same
        best = (out_tokens, parsed, call)
        if out_tokens <= target:
            break
    if best is None:
        await cycle_failed(core, push, hook_ctx, record, step, cycle_id, started, in_tokens, last_error, buffering,
                           "reflection")
        return None
    out_tokens, parsed, call = best
    extracted, failures = await extract(core, "reflection", step, record, parsed, source_text)
    result = CycleResult(parsed.observations, out_tokens, parsed.current_task, parsed.suggested_response, None,
                         extracted, failures, call.usage, call.provider_metadata, cycle_id=cycle_id)
    _push_end(push, "reflection", buffering, cycle_id, started, in_tokens, result, record, step)
    await core.hooks.call("on_reflection_end", HookContext(
        step.thread_id, step.resource_id, trigger, "reflection", cycle_id, usage=call.usage,
        provider_metadata=call.provider_metadata))
    return Reflected(result, in_tokens, out_tokens <= target)


# --------------------------------------------------------------------------- extractors


async def inline_extractors(core: EngineCore, source: Operation, step: StepState, record: OMRecord) -> list[Any]:
    """Extractors whose values the model writes in the same reply (inline tags)."""
    if core.extraction_pipeline is not None:
        return list(await core.extraction_pipeline.ainline_specs(
            source, record, memory=core, thread_id=step.thread_id, resource_id=step.resource_id,
            request_context=step.config, main_agent=step.current_model))
    return []


async def extract(
    core: EngineCore, source: Operation, step: StepState, record: OMRecord, parsed: Any, input_text: str,
) -> tuple[dict[str, Any], list[ExtractionFailure]]:
    """Built-in and custom values, all through the extraction pipeline when there is one."""
    if core.extraction_pipeline is not None:
        return await core.extraction_pipeline.run(
            source=source, memory=core, record=record, parsed=parsed, input_text=input_text,
            thread_id=step.thread_id, resource_id=step.resource_id,
            request_context=step.config, main_agent=step.current_model,
        )
    values: dict[str, Any] = {}
    if getattr(parsed, "current_task", None):
        values["current-task"] = parsed.current_task
    if getattr(parsed, "suggested_response", None):
        values["suggested-response"] = parsed.suggested_response
    if getattr(parsed, "thread_title", None) and core.config.observation.thread_title:
        values["thread-title"] = parsed.thread_title
    return values, []


def apply_hints(core: EngineCore, record: OMRecord, current_task: str | None, suggested: str | None,
                extracted: Mapping[str, Any]) -> None:
    """Write a cycle's continuation hints and extracted values into ``record`` (a copy)."""
    if current_task:
        record.metadata["current_task"] = current_task
    if suggested:
        record.metadata["suggested_response"] = suggested
    if extracted and core.extraction_pipeline is not None:
        core.extraction_pipeline.persist(record, extracted)
    elif extracted:
        record.metadata.setdefault("om", {}).setdefault("extracted", {}).update(extracted)
