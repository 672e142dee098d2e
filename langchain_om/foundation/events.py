"""Typed ``data-om-*`` events.

Each event is a pydantic model with ``type`` and ``data``. ``data`` uses
snake_case attributes in Python and serialises with the reference page's
camelCase names (``event.to_part()``), so a JavaScript client that already
understands the upstream data parts reads them unchanged.

On the wire a part also carries the two keys the AI SDK gives data parts a client can keep:
``id`` (a part with the same type and id replaces the earlier one instead of piling up) and
``transient`` (the part reaches ``onData`` only and is never stored in the message). The
status part is one per thread and transient: it is a live gauge, not history. Every cycle
part (start, end, failed, activation, title update) uses its ``cycleId`` as id, so the parts
of one cycle share it and a re-sent part replaces itself.
"""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SerializationInfo, field_serializer, field_validator
from pydantic.alias_generators import to_camel, to_snake

from .field_docs import describe_fields

OperationType = Literal["observation", "reflection"]
BufferStatus = Literal["idle", "running", "complete"]


def iso_now() -> str:
    return datetime.now(timezone.utc).isoformat()


class _Data(BaseModel):
    # attribute docstrings become field descriptions (describe_fields, at the end of this module):
    # docs/events.md is generated from them; defer_build: schemas are built on first use, after that
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", defer_build=True)


class ObservationMarkerConfig(_Data):
    message_tokens: int
    observation_tokens: int
    scope: Literal["thread", "resource"]


class WindowUsage(_Data):
    tokens: int
    threshold: int


class ActiveWindows(_Data):
    messages: WindowUsage
    observations: WindowUsage


class BufferedObservations(_Data):
    chunks: int = 0
    message_tokens: int = 0
    projected_message_removal: int = 0
    observation_tokens: int = 0
    status: BufferStatus = "idle"


class BufferedReflectionStatus(_Data):
    input_observation_tokens: int = 0
    observation_tokens: int = 0
    status: BufferStatus = "idle"


class BufferedWindows(_Data):
    observations: BufferedObservations = Field(default_factory=BufferedObservations)
    reflection: BufferedReflectionStatus = Field(default_factory=BufferedReflectionStatus)


class Windows(_Data):
    active: ActiveWindows
    buffered: BufferedWindows = Field(default_factory=BufferedWindows)


class OmittedLog(_Data):
    first_date: str | None = None
    """The oldest date whose notes were left out of the agent's context."""
    last_date: str | None = None
    """The newest date whose notes (all, or the earlier ones: ``partial``) were left out."""
    partial: bool = False
    """Only the earlier notes of ``last_date`` were left out."""
    notes: int = 0
    """How many note lines were left out."""
    tokens: int = 0
    """Stored log tokens not shown."""
    shown_tokens: int = 0
    """Tokens of the log as shown (the omission line included)."""
    limit: int = 0
    """The hard limit the shown log keeps to: ``observation_tokens x block_after``."""


class StatusData(_Data):
    windows: Windows
    record_id: str
    thread_id: str
    step_number: int
    generation_count: int
    tokenizer: str | None = None
    """Which counter produced the numbers: ``tiktoken:o200k_base`` or ``estimator`` (an extension)."""
    instruction_tokens: int = 0
    """Tokens of the caller's own system messages, which lead every model call and are never
    observed, so they count toward neither window (an extension)."""
    observation_error: str | None = None
    """This step's Observer failure, one line (an extension; see ``failure_policy``)."""
    omitted: OmittedLog | None = None
    """What of the observation log the agent's context leaves out (never out of the store) to stay
    within ``observation_tokens x block_after``; None when the whole log is shown (an extension)."""
    spend: dict[str, Any] | None = None
    """OM's own model spend on this record so far: per role, calls and tokens (an extension).
    A plain dict in Python (``spend["observer"]["input_tokens"]``); its keys are camelCase on the
    wire (``inputTokens``) like every other key, and read back to snake_case."""

    @field_serializer("spend")
    def _spend_on_the_wire(self, spend: dict[str, Any] | None, info: SerializationInfo) -> dict[str, Any] | None:
        return _totals_keys(spend, _camel) if info.by_alias else spend

    @field_validator("spend", mode="before")
    @classmethod
    def _spend_from_the_wire(cls, spend: Any) -> Any:
        return spend_from_the_wire(spend)


# the spend's few key names, renamed once each: pydantic's alias generators run regexes, and
# every step's status passes them (both ways, ~20 us a step uncached)
_camel = lru_cache(maxsize=256)(to_camel)
_snake = lru_cache(maxsize=256)(to_snake)


def spend_from_the_wire(spend: Any) -> Any:
    """What ``StatusData.spend``'s validator makes of a value: a dict's role totals keyed in snake_case
    (``status_of`` builds the status without validation and applies this itself)."""
    return _totals_keys(spend, _snake) if isinstance(spend, dict) else spend


def _totals_keys(spend: dict[str, Any] | None, rename: Any) -> dict[str, Any] | None:
    """``spend`` with each role's total names renamed (the roles are names, not fields: kept)."""
    if spend is None:
        return None
    return {role: {rename(str(key)): value for key, value in totals.items()} if isinstance(totals, dict) else totals
            for role, totals in spend.items()}


class ExtractionFailure(_Data):
    slug: str
    error: str


class ObservationStartData(_Data):
    cycle_id: str
    operation_type: OperationType
    started_at: str
    tokens_to_observe: int
    record_id: str
    thread_id: str
    thread_ids: list[str] | None = None
    config: ObservationMarkerConfig


class ObservationEndData(_Data):
    cycle_id: str
    operation_type: OperationType
    completed_at: str
    duration_ms: float
    tokens_observed: int
    observation_tokens: int
    observations: str
    current_task: str | None = None
    suggested_response: str | None = None
    extracted_values: dict[str, Any] | None = None
    extraction_failures: list[ExtractionFailure] | None = None
    record_id: str
    thread_id: str


class ObservationFailedData(_Data):
    cycle_id: str
    operation_type: OperationType
    failed_at: str
    duration_ms: float
    tokens_attempted: int
    error: str
    observations: str | None = None
    record_id: str
    thread_id: str


class BufferingStartData(_Data):
    cycle_id: str
    operation_type: OperationType
    started_at: str
    tokens_to_buffer: int
    record_id: str
    thread_id: str
    thread_ids: list[str] | None = None
    config: ObservationMarkerConfig


class BufferingEndData(_Data):
    cycle_id: str
    operation_type: OperationType
    completed_at: str
    duration_ms: float
    tokens_buffered: int
    buffered_tokens: int
    observations: str
    extracted_values: dict[str, Any] | None = None
    extraction_failures: list[ExtractionFailure] | None = None
    record_id: str
    thread_id: str


class BufferingFailedData(_Data):
    cycle_id: str
    operation_type: OperationType
    failed_at: str
    duration_ms: float
    tokens_attempted: int
    error: str
    observations: str | None = None
    record_id: str
    thread_id: str


class ActivationData(_Data):
    cycle_id: str
    operation_type: OperationType
    activated_at: str
    chunks_activated: int
    tokens_activated: int
    observation_tokens: int
    messages_activated: int
    generation_count: int
    observations: str
    triggered_by: Literal["threshold", "ttl", "provider_change"]
    last_activity_at: int | None = None
    ttl_expired_ms: float | None = None
    previous_model: str | None = None
    current_model: str | None = None
    record_id: str
    thread_id: str
    config: ObservationMarkerConfig


class ThreadUpdateData(_Data):
    cycle_id: str
    thread_id: str
    old_title: str | None = None
    new_title: str
    timestamp: str


class TemporalMarkerData(_Data):
    """An extension: a persisted "time passed" marker inserted before a late user message."""

    message_id: str
    thread_id: str
    gap_ms: float
    previous_at: str
    current_at: str
    text: str


WaitPhase = Literal["start", "end"]


class WaitData(_Data):
    """An extension, for ``on_debug_event`` only (never streamed): OM waits for something.

    ``waits_for`` names it (``record-lock``: another step or cycle of this process on the same
    record; ``own-buffering``: this process's buffering cycle on the messages to observe;
    ``own-reflection``: this process's buffered reflection of a log over ``block_after``;
    ``lease:observe`` / ``lease:buffer`` / ``lease:reflect``: another worker's cycle;
    ``background-task``: a cycle ``await_background`` or shutdown waits for;
    ``background-bound``: a cycle cut off at its bound). A ``start`` is sent only when the wait does
    not end at once; its ``end`` carries
    ``waited_ms`` and ``outcome`` (``done``, ``timeout``, ``cancelled``)."""

    wait_id: str
    """Id shared by the ``start`` and ``end`` of one wait."""
    waits_for: str
    """What OM waits for: ``record-lock``, ``own-buffering``, ``own-reflection``, ``lease:observe``,
    ``lease:buffer``, ``lease:reflect``, ``background-task`` or ``background-bound``."""
    phase: WaitPhase
    """``start`` (the wait did not end at once) or ``end``."""
    record_key: str
    """The record (resource and thread) the wait is about."""
    started_at: str
    """ISO 8601 time the wait began."""
    waited_ms: float | None = None
    """On ``end``: how long it waited."""
    outcome: str | None = None
    """On ``end``: ``done``, ``timeout`` or ``cancelled``."""
    bound_s: float | None = None
    """The longest the wait may last, when it has a bound."""


class OMEvent(BaseModel):
    """Base of every data part. ``to_part()`` gives the wire shape ``{"type", "id", "data"[, "transient"]}``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)  # its data's descriptions are set first
    type: str
    data: _Data

    transient: ClassVar[bool] = False
    """Whether a client should only hear this part (``onData``) instead of keeping it in the message."""

    @property
    def part_id(self) -> str:
        """The stable id a client keys the part by: the cycle's id for every cycle part."""
        cycle_id = getattr(self.data, "cycle_id", None)
        if not isinstance(cycle_id, str):  # pragma: no cover - every cycle event has one
            raise TypeError(f"{type(self).__name__} has no cycle_id; it must define part_id")
        return cycle_id

    def to_part(self) -> dict[str, Any]:
        part: dict[str, Any] = {"type": self.type, "id": self.part_id,
                                "data": self.data.model_dump(mode="json", by_alias=True, exclude_none=True)}
        if self.transient:
            part["transient"] = True
        return part

    def to_langchain_js_payload(self) -> dict[str, Any]:
        """The custom-stream payload ``@ai-sdk/langchain``'s ``toUIMessageStream`` turns into this very part.

        That package names a part ``"data-" + payload.type``, keys it by ``payload.id`` and
        sends the whole payload as ``data``; so the payload is the reference fields with
        ``type`` (without the ``data-`` prefix) and ``id`` beside them.
        """
        data = self.data.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"type": self.type.removeprefix("data-"), "id": self.part_id, **data}


class StatusEvent(OMEvent):
    type: Literal["data-om-status"] = "data-om-status"
    data: StatusData
    transient: ClassVar[bool] = True

    @property
    def part_id(self) -> str:
        return f"om-status:{self.data.thread_id}"


class ObservationStartEvent(OMEvent):
    type: Literal["data-om-observation-start"] = "data-om-observation-start"
    data: ObservationStartData


class ObservationEndEvent(OMEvent):
    type: Literal["data-om-observation-end"] = "data-om-observation-end"
    data: ObservationEndData


class ObservationFailedEvent(OMEvent):
    type: Literal["data-om-observation-failed"] = "data-om-observation-failed"
    data: ObservationFailedData


class BufferingStartEvent(OMEvent):
    type: Literal["data-om-buffering-start"] = "data-om-buffering-start"
    data: BufferingStartData


class BufferingEndEvent(OMEvent):
    type: Literal["data-om-buffering-end"] = "data-om-buffering-end"
    data: BufferingEndData


class BufferingFailedEvent(OMEvent):
    type: Literal["data-om-buffering-failed"] = "data-om-buffering-failed"
    data: BufferingFailedData


class ActivationEvent(OMEvent):
    type: Literal["data-om-activation"] = "data-om-activation"
    data: ActivationData


class ThreadUpdateEvent(OMEvent):
    type: Literal["data-om-thread-update"] = "data-om-thread-update"
    data: ThreadUpdateData


class TemporalMarkerEvent(OMEvent):
    type: Literal["data-om-temporal-marker"] = "data-om-temporal-marker"
    data: TemporalMarkerData

    @property
    def part_id(self) -> str:
        return f"om-temporal-marker:{self.data.message_id}"


class WaitEvent(OMEvent):
    type: Literal["data-om-wait"] = "data-om-wait"
    data: WaitData
    transient: ClassVar[bool] = True

    @property
    def part_id(self) -> str:
        return f"om-wait:{self.data.wait_id}"


EVENT_TYPES: dict[str, type[OMEvent]] = {
    cls.model_fields["type"].default: cls
    for cls in (
        StatusEvent,
        ObservationStartEvent,
        ObservationEndEvent,
        ObservationFailedEvent,
        BufferingStartEvent,
        BufferingEndEvent,
        BufferingFailedEvent,
        ActivationEvent,
        ThreadUpdateEvent,
        TemporalMarkerEvent,
        WaitEvent,
    )
}


def parse_event(part: dict[str, Any]) -> OMEvent:
    """Read a wire-shape data part back into its typed event (``id`` and ``transient`` follow from it)."""
    cls = EVENT_TYPES.get(str(part.get("type")))
    if cls is None:
        raise ValueError(f"type: unknown OM event type {part.get('type')!r}")
    return cls.model_validate({"type": part["type"], "data": part.get("data", {})})


describe_fields(__name__, _Data)
