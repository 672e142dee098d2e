"""The step planner: what a step should do, decided from data alone.

No I/O, no models, no clock. The engine reads the config, the record and the thread's
unobserved window, asks these functions what to do, carries the decision out (model calls,
commits) and asks again: the size of an observation is known only after the Observer
answered, so a step plans phase by phase, like LangGraph's Pregel loop asks its ``_algo``
for the next tasks after every superstep.

Every rule of the reference page about *when* and *how much* lives here:

* thresholds (``message_tokens``, ``observation_tokens``, ``block_after``), with
  ``share_token_budget`` moving the two limits into each other's unused room;
* activation of buffered chunks: which chunks, so that about the retention floor stays
  (:func:`choose_chunks`), and on which trigger (threshold, idle TTL, provider change);
* synchronous observation: when it must block the step and where it cuts (``turns``);
* background buffering: the cadence of observation chunks and when to pre-compute a reflection;
* reflection: activate a buffered one, reflect now, or wait; and the *hold* that stops a
  Reflector that cannot reach the target from running again before the log has really grown
  (nor pre-computes another reflection of a log that is mostly the last one's output).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from ..foundation.config import OMConfig
from ..foundation.turns import Kind, pinned_index, removable_prefix, sync_cut
from ..foundation.window import Window
from ..store.base import BufferedChunk, OMRecord

ActivationTrigger = Literal["threshold", "ttl", "provider_change"]

OBSERVATION_FAILED = "buffering_failed"
"""Record flag: a background observation failed, so the next threshold crossing observes
synchronously at once instead of waiting for ``block_after`` (the page's fallback)."""
REFLECTION_FAILED = "reflection_buffering_failed"
"""Record flag: a background reflection failed (the same fallback, once the hold allows it)."""
REFLECTION_HOLD = "reflection_hold"
"""Record metadata: the log's tokens when a reflection cycle ended over its target or failed."""

OVERSHOOT_SHARE = 0.95
"""An activation may remove at most this share of the retention floor more than its target."""
MIN_LEFT = 1000
"""An activation leaves at least min(this, retention floor) tokens in the window."""
HALVING_MARGIN = 1.1
"""Past ``message_tokens - 1.1 x interval`` the buffer interval halves, so the last chunk is
ready when the threshold is crossed."""
REFLECTED_AT = "reflected_at"
"""Record metadata: the log's tokens right after the last reflection was applied."""
HOLD_GROWTH_SHARE = 0.25
"""Real growth: after a reflection that could not reach its target, the log must grow by this
share of ``observation_tokens`` before the next attempt, and after any reflection before the next
one is pre-computed in the background. (At 10%, every observation of the bundled demo replayed a
week apart started another four-level attempt: 44-48 Reflector calls a replay, issue 43.)"""


# ----------------------------------------------------------------------------- limits


@dataclass(frozen=True)
class Limits:
    """The step's two thresholds (a shared budget lends each one the other's unused room)."""

    messages: int
    observations: int


def limits(cfg: OMConfig, log_tokens: int, window_tokens: int) -> Limits:
    """Thresholds for a log of ``log_tokens`` and a window of ``window_tokens``."""
    message_tokens = cfg.observation.message_tokens
    observation_tokens = cfg.reflection.observation_tokens
    if not cfg.share_token_budget:
        return Limits(message_tokens, observation_tokens)
    total = message_tokens + observation_tokens
    return Limits(max(message_tokens, total - log_tokens), max(observation_tokens, total - window_tokens))


# ------------------------------------------------------------------------- activation


@dataclass(frozen=True)
class IdleSignal:
    """The phase's idle TTL expired: the last AI message was at ``last_activity``."""

    last_activity: datetime
    over_ms: float


@dataclass(frozen=True)
class Signals:
    """What the engine observed about the step's timing and model, for one phase's settings
    (observation and reflection have their own TTL and provider-change options)."""

    idle: IdleSignal | None = None
    previous_model: str | None = None


NO_SIGNALS = Signals()


@dataclass(frozen=True)
class Activation:
    """Swap these buffered chunks into the log (oldest first); why, and what it removes."""

    chunks: tuple[BufferedChunk, ...]
    triggered_by: ActivationTrigger
    signals: Signals = NO_SIGNALS

    @property
    def message_tokens(self) -> int:
        return sum(chunk.message_tokens for chunk in self.chunks)


def staged_chunks(record: OMRecord, thread_id: str) -> list[BufferedChunk]:
    """The thread's buffered chunks that are still ahead of its observed point, oldest first."""
    watermark = record.last_observed_seq.get(thread_id, 0)
    return sorted((c for c in record.buffered_chunks if c.thread_id == thread_id and c.start_seq > watermark),
                  key=lambda chunk: chunk.start_seq)


def activatable(cfg: OMConfig, window: Window, chunks: Sequence[BufferedChunk]) -> list[BufferedChunk]:
    """The oldest chunks whose messages may leave the context now: a chunk may cover the round
    the model has not answered yet, but it is activated only once the model answered it."""
    if not chunks or not window:
        return list(chunks)
    limit = removable_prefix(window.kinds, window.token_list, turn_limit=cfg.observation.block_after_tokens())
    through = window[limit - 1].seq if limit > 0 else window[0].seq - 1
    out: list[BufferedChunk] = []
    for chunk in chunks:
        if chunk.end_seq > through:
            break
        out.append(chunk)
    return out


def retention_floor(cfg: OMConfig) -> int:
    """Tokens an activation should leave in the window: ``(1 - r) x message_tokens`` for a ratio
    ``buffer_activation`` r, or the absolute value (>= 1000)."""
    return cfg.observation.tokens_to_keep_after_activation()


def choose_chunks(chunks: Sequence[BufferedChunk], window_tokens: int, floor: int) -> list[BufferedChunk]:
    """The prefix of ``chunks`` an activation takes, on chunk boundaries, so that about ``floor``
    tokens of a ``window_tokens`` window stay.

    The removal target is ``window_tokens - floor``. Take the smallest prefix reaching it, unless
    that overshoots the target by more than ``0.95 x floor`` or leaves fewer than
    ``min(1000, floor)`` tokens; then the largest prefix below the target; with none, the first
    chunk (an activation always makes progress). A window within the floor has nothing to remove.
    """
    target = window_tokens - floor
    if not chunks or target <= 0:
        return []
    removed = 0
    below = 0
    for count, chunk in enumerate(chunks, start=1):
        removed += chunk.message_tokens
        if removed >= target:
            overshoot_ok = removed - target <= OVERSHOOT_SHARE * floor
            leaves_enough = window_tokens - removed >= min(MIN_LEFT, floor)
            if overshoot_ok and leaves_enough:
                return list(chunks[:count])
            break
        below = count
    return list(chunks[:below]) if below else [chunks[0]]


def projected_removal(cfg: OMConfig, record: OMRecord, thread_id: str, window: Window) -> int:
    """``projectedMessageRemoval``: the message tokens a threshold activation would remove now (the
    same chunks ``plan_activation`` would choose: only activatable ones, none within the floor)."""
    chunks = activatable(cfg, window, staged_chunks(record, thread_id))
    return sum(c.message_tokens for c in choose_chunks(chunks, window.tokens, retention_floor(cfg)))


def plan_activation(cfg: OMConfig, record: OMRecord, thread_id: str, window: Window,
                    signals: Signals = NO_SIGNALS) -> Activation | None:
    """Whether to activate buffered chunks before anything else this step.

    Over the message threshold the chunks chosen by the retention rule go; after an idle TTL or
    a change of model (the provider's prompt cache is cold anyway) every activatable chunk goes.
    """
    if not cfg.buffering_enabled:
        return None
    staged = staged_chunks(record, thread_id)
    if not staged:
        return None
    if window.tokens > limits(cfg, record.observation_tokens, window.tokens).messages:
        chosen = choose_chunks(activatable(cfg, window, staged), window.tokens, retention_floor(cfg))
        return Activation(tuple(chosen), "threshold") if chosen else None
    trigger: ActivationTrigger | None = None
    if signals.idle is not None:
        trigger = "ttl"
    elif signals.previous_model is not None:
        trigger = "provider_change"
    if trigger is None:
        return None
    ready = activatable(cfg, window, staged)
    return Activation(tuple(ready), trigger, signals) if ready else None


# ------------------------------------------------------------------------ observation


@dataclass(frozen=True)
class SyncObservation:
    """Observe now, blocking the step.

    ``activate_first``: buffered chunks to swap in before the Observer runs (they cover part of
    the backlog already); the engine activates them and plans again on the smaller window.
    Otherwise ``cut`` rows of the window go to the Observer; ``pinned`` is the index of the
    newest human message when the cut takes it (it is pinned back into the context).
    """

    reason: Literal["threshold", "block_after", "buffering_failed"]
    activate_first: tuple[BufferedChunk, ...] = ()
    cut: int = 0
    pinned: int | None = None


def observation_cut(cfg: OMConfig, kinds: Sequence[Kind], tokens: Sequence[int]) -> int:
    """How many rows of a window a synchronous observation takes (``turns.sync_cut``)."""
    obs = cfg.observation
    return sync_cut(kinds, tokens, message_limit=obs.message_tokens, turn_limit=obs.block_after_tokens(),
                    keep=retention_floor(cfg))


def plan_observation(cfg: OMConfig, record: OMRecord, thread_id: str, window: Window) -> SyncObservation | None:
    """Whether the step must observe synchronously, and what.

    Without buffering, crossing the message threshold observes. With buffering, the window may
    grow up to ``block_after`` while chunks are pre-computed; past it (or once a background
    cycle failed) the step observes now.
    """
    if not window:
        return None
    tokens = window.tokens
    if tokens <= limits(cfg, record.observation_tokens, tokens).messages:
        return None
    reason: Literal["threshold", "block_after", "buffering_failed"] = "threshold"
    if cfg.buffering_enabled:
        if tokens > cfg.observation.block_after_tokens():
            reason = "block_after"
        elif record.metadata.get(OBSERVATION_FAILED):
            reason = "buffering_failed"
        else:
            return None
        ready = activatable(cfg, window, staged_chunks(record, thread_id))
        if ready:
            return SyncObservation(reason, activate_first=tuple(ready))
    kinds = window.kinds
    cut = observation_cut(cfg, kinds, window.token_list)
    if cut <= 0:
        return None
    return SyncObservation(reason, cut=cut, pinned=pinned_index(kinds, cut))


# -------------------------------------------------------------------------- buffering


def buffer_boundaries(tokens: int, interval: int, message_limit: int) -> int:
    """How many buffering boundaries lie at or below ``tokens`` unobserved tokens: multiples of
    ``interval``, and past ``message_limit - 1.1 x interval`` multiples of half of it."""
    if interval <= 0 or tokens <= 0:
        return 0
    zone = max(0, int(message_limit - HALVING_MARGIN * interval))
    half = max(1, interval // 2)
    if tokens <= zone:
        return tokens // interval
    return zone // interval + tokens // half - zone // half


@dataclass(frozen=True)
class Buffering:
    """Background work to start: observe the window's rows after ``observe_after`` (a seq), and/or
    pre-compute a reflection of ``reflect_groups``."""

    observe_after: int | None = None
    reflect_groups: tuple[str, ...] = ()


def buffered_through(record: OMRecord, thread_id: str) -> int:
    """The newest seq that is observed or covered by a buffered chunk."""
    return max([record.last_observed_seq.get(thread_id, 0),
                *(c.end_seq for c in record.buffered_chunks if c.thread_id == thread_id)])


def plan_buffering(cfg: OMConfig, record: OMRecord, thread_id: str, window: Window, *,
                   observing: bool = False, reflecting: bool = False) -> Buffering:
    """What to pre-compute in the background after this step (none while one of a kind runs).

    Observation: a cycle starts each time the window's tokens cross a buffering boundary
    (:func:`buffer_boundaries`) past what is buffered already; it takes everything not buffered
    yet. It keeps going between the threshold and ``block_after``. Reflection: once the log
    reaches ``buffer_activation x observation_tokens``, unless a reflection is staged or held.
    """
    if not cfg.buffering_enabled:
        return Buffering()
    observe_after: int | None = None
    if not observing and window:
        done = buffered_through(record, thread_id)
        pending = window.after(done)
        if pending:
            covered = window.tokens - pending.tokens
            interval = cfg.observation.buffer_interval_tokens()
            limit = limits(cfg, record.observation_tokens, window.tokens).messages
            if buffer_boundaries(window.tokens, interval, limit) > buffer_boundaries(covered, interval, limit):
                observe_after = done
    reflect: tuple[str, ...] = ()
    if (
        not reflecting
        and cfg.reflection_buffering_enabled
        and record.groups
        and record.buffered_reflection is None
        and record.observation_tokens >= cfg.reflection.buffer_start_tokens()
        and not reflection_held(cfg, record)
        and grown_since_reflection(cfg, record)
    ):
        reflect = tuple(g.id for g in record.groups)
    return Buffering(observe_after, reflect)


# ------------------------------------------------------------------------- reflection


@dataclass(frozen=True)
class ReflectionStep:
    """``activate``: swap the buffered reflection in (then plan again: ``block_after`` is checked
    on the log it leaves). ``reflect``: run the Reflector now, blocking the step."""

    action: Literal["activate", "reflect"]
    triggered_by: ActivationTrigger = "threshold"
    signals: Signals = NO_SIGNALS


def reflection_held(cfg: OMConfig, record: OMRecord) -> bool:
    """Whether the last reflection cycle ended over its target (or failed) and the log has not
    grown enough since: another attempt now would pay for the same result."""
    return _not_grown_since(cfg, record, REFLECTION_HOLD)


def _not_grown_since(cfg: OMConfig, record: OMRecord, key: str) -> bool:
    """Whether the log's tokens lie within real growth (``HOLD_GROWTH_SHARE``) of the mark the
    record's metadata keeps under ``key`` (False when there is none)."""
    mark = record.metadata.get(key)
    if not isinstance(mark, int):
        return False
    growth = max(1, round(cfg.reflection.observation_tokens * HOLD_GROWTH_SHARE))
    return mark <= record.observation_tokens < mark + growth


def grown_since_reflection(cfg: OMConfig, record: OMRecord) -> bool:
    """Whether the log has really grown since the last reflection left it: pre-computing another
    reflection of a log that is mostly the last one's output pays for little (the demo staged one
    right after every activation, ~1,000 tokens condensed to ~950)."""
    return not _not_grown_since(cfg, record, REFLECTED_AT)


def plan_reflection(cfg: OMConfig, record: OMRecord, window_tokens: int,
                    signals: Signals = NO_SIGNALS) -> ReflectionStep | None:
    """Whether to reflect this step, and how (``window_tokens``: the window after observing)."""
    if not record.groups:
        return None
    log = record.observation_tokens
    staged = record.buffered_reflection if cfg.reflection_buffering_enabled else None
    if log <= limits(cfg, log, window_tokens).observations:
        if staged is None:
            return None
        if signals.idle is not None:
            return ReflectionStep("activate", "ttl", signals)
        if signals.previous_model is not None:
            return ReflectionStep("activate", "provider_change", signals)
        return None
    if staged is not None:
        return ReflectionStep("activate")
    if reflection_held(cfg, record):
        return None
    if (
        cfg.reflection_buffering_enabled
        and log <= cfg.reflection.block_after_tokens()
        and not record.metadata.get(REFLECTION_FAILED)
    ):
        return None  # between the threshold and block_after only the background reflects
    return ReflectionStep("reflect")
