"""What a step does after OM's Observer failed (``failure_policy.on_failure``).

The engine calls two functions from here:

* ``raise_if_configured`` right after a failed synchronous cycle: with ``on_failure="raise"``
  the caller gets ``OMObservationError`` (one line: model, error class, first line of the error);
* ``apply_to_context`` when a step's context is built after a failed observation: the status
  carries the failure (``observation_error``), and when the unobserved window is past the hard ceiling
  (``failure_policy.hard_ceiling``, default twice ``observation.block_after``'s tokens) the
  agent's context keeps the newest messages that fit it (the user's newest message and the open
  tool round always stay, as ``foundation.turns`` rules), so a long Observer outage can
  never grow the agent's prompt without bound. Nothing is deleted: the older messages stay
  stored and unobserved, and the Observer takes them (in batches) once it works again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from langchain_core.messages import BaseMessage

from ..foundation.config import OMConfig
from ..foundation.events import ObservationFailedEvent, OMEvent, StatusData
from ..foundation.tokens import TokenCounter
from ..foundation.turns import kind_of_message, last_human, newest_round_start, safe_cut_after, turn_start
from .failures import OMObservationError, classify_error
from .models import OMModelError


class _Context(Protocol):
    """The parts of a step's context (``OMContext``) the policy adjusts."""

    status: StatusData
    messages: list[BaseMessage]


def failure_reason(exc: BaseException) -> str:
    """One line naming the model and the error (no per-attempt history, no traceback)."""
    if isinstance(exc, OMModelError):
        return exc.reason()
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:300]}"


def raise_if_configured(config: OMConfig, exc: BaseException, operation: str = "observation") -> None:
    """Raise ``OMObservationError`` from ``exc`` when the policy says so (a synchronous cycle failed)."""
    if config.failure_policy.on_failure != "raise":
        return
    kind = exc.kind if isinstance(exc, OMModelError) else classify_error(exc)
    raise OMObservationError(f"langchain-om {operation} failed: {failure_reason(exc)}", kind=kind,
                             cause=exc) from exc


def step_failure(events: Sequence[OMEvent]) -> str | None:
    """The error of this step's failed synchronous observation, if any."""
    for event in reversed(events):
        if isinstance(event, ObservationFailedEvent) and event.data.operation_type == "observation":
            return event.data.error
    return None


def _trim(counter: TokenCounter, messages: list[BaseMessage], ceiling: int) -> list[BaseMessage]:
    """The newest messages that fit ``ceiling``, cut by the turn rule (``foundation.turns``): the
    newest human message (with its time-gap marker) and the newest tool round always stay, whatever
    their size; answered rounds between them go first, oldest first, and a round goes whole."""
    tokens = [counter.count_messages([m]) for m in messages]
    if sum(tokens) <= ceiling:
        return messages
    kinds = [kind_of_message(m) for m in messages]
    human = last_human(kinds)
    start = turn_start(kinds)
    body = human + 1 if human is not None else 0
    newest = newest_round_start(kinds, body)
    keep_from = newest if newest is not None else max(len(messages) - 1, body)
    head = sum(tokens[start:body])
    if head + sum(tokens[body:]) <= ceiling:  # the whole turn fits: older turns fill what is left
        cut, left = start, ceiling - head - sum(tokens[body:])
        while cut > 0 and tokens[cut - 1] <= left:
            left -= tokens[cut - 1]
            cut -= 1
        return messages[min(safe_cut_after(kinds, cut), start):]
    cut, left = keep_from, ceiling - head - sum(tokens[keep_from:])
    while cut > body and tokens[cut - 1] <= left:
        left -= tokens[cut - 1]
        cut -= 1
    cut = max(min(safe_cut_after(kinds, cut), keep_from), body)
    return messages[start:body] + messages[cut:]


def apply_to_context(config: OMConfig, counter: TokenCounter, context: _Context, events: Sequence[OMEvent]) -> None:
    """Mark the status with this step's failure; enforce the hard ceiling on the agent's context."""
    error = step_failure(events)
    if error is None or not config.enabled:
        return  # the ceiling guards against a failing Observer only; a working one keeps the window bounded
    tokens = context.status.windows.active.messages.tokens
    ceiling = config.hard_ceiling_tokens()
    if tokens > ceiling:
        if config.failure_policy.on_failure == "raise":
            raise OMObservationError(
                f"langchain-om: {tokens} unobserved tokens are past failure_policy.hard_ceiling ({ceiling}) "
                f"and the Observer cannot keep up{': ' + error if error else ''}", kind="transient")
        context.messages = _trim(counter, list(context.messages), ceiling)
    context.status = context.status.model_copy(update={"observation_error": error})
