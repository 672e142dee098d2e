"""How OM's own model calls fail, and what a failure costs the turn.

The Observer and Reflector are paid, rate-limited services. This module decides:

* whether an error is worth retrying (``classify_error``): 408/409/429/5xx, timeouts and
  connection errors are *transient*; authentication, permission, bad request, not found,
  missing credentials and a prompt longer than the model's context (llama.cpp's "Requested
  tokens (9000) exceed context window of 8192", OpenAI's ``context_length_exceeded``) are
  *permanent* (retrying them only multiplies the bill and the wait);
* how long to wait between retries (``backoff_delay``: exponential, capped, full jitter, so
  eight workers hitting one rate limit do not retry in lock step);
* how long one turn may spend in OM's model calls (``turn_budget`` / ``remaining_budget``:
  a context variable the engine sets around the synchronous threshold work, so background
  buffering is never bounded by a turn it does not block);
* which permanent failures were already reported (``FailureLog``), so a missing key is
  logged once per model, not on every step.

Classification reads the real providers' exception shapes without importing them: the
``openai`` / ``anthropic`` SDKs raise ``APIStatusError`` subclasses with ``status_code``
(``RateLimitError`` 429, ``AuthenticationError`` 401, ...), ``APITimeoutError`` and
``APIConnectionError`` without one; ``google-genai`` errors carry ``code``; httpx errors carry
``response.status_code``. Wrapped errors are followed through ``__cause__``.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import random
import time
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

_T = TypeVar("_T")

logger = logging.getLogger("langchain_om.model_calls.failures")

ErrorKind = Literal["transient", "permanent"]

_TRANSIENT_STATUS = {408, 409, 425, 429}
_TRANSIENT_NAMES = (
    "ratelimit", "timeout", "timedout", "connection", "serviceunavailable", "overloaded",
    "internalserver", "resourceexhausted", "unavailable", "deadlineexceeded", "toomanyrequests",
    "apiconnection", "servererror",
)
_PERMANENT_NAMES = (
    "authentication", "permissiondenied", "badrequest", "notfound", "invalidargument",
    "unprocessable", "unauthenticated", "forbidden", "conflictingconfig",
)
_CONTEXT_OVERFLOW_TEXT = (
    "exceed context window", "exceeds context window", "context_length_exceeded", "maximum context length",
    "context length exceeded", "context window exceeded", "prompt is too long", "too many tokens",
    "input is too long", "exceeds the context", "n_ctx",
)
"""A prompt the model cannot read: the same prompt fails the same way on every retry."""
_PERMANENT_TEXT = (
    "missing credentials", "api key", "api_key", "invalid_api_key", "unauthorized", "incorrect api key",
    "not installed", "no module named",
)


class OMObservationError(RuntimeError):
    """OM's model call failed and ``failure_policy.on_failure`` is ``"raise"``.

    ``kind`` is ``"transient"`` or ``"permanent"``; ``cause`` is the last underlying error."""

    def __init__(self, message: str, *, kind: ErrorKind, cause: BaseException | None = None) -> None:
        self.kind = kind
        self.cause = cause
        super().__init__(message)


class TurnBudgetExceeded(TimeoutError):
    """The turn's budget for OM's model calls ran out (``failure_policy.turn_budget``)."""


def _status_of(exc: BaseException) -> int | None:
    for attr in ("status_code", "code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    if isinstance(value, int) and 100 <= value <= 599:
        return value
    return None


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify_error(exc: BaseException) -> ErrorKind:
    """``"transient"`` (retry after a backoff) or ``"permanent"`` (never retry).

    The first error in the cause chain that says anything decides; an error that says nothing
    (a bare ``RuntimeError`` from a custom model) counts as transient, so it gets the bounded
    retries and no more."""
    for err in _chain(exc):
        if any(part in str(err).lower() for part in _CONTEXT_OVERFLOW_TEXT):
            return "permanent"
        if isinstance(err, TurnBudgetExceeded):
            return "permanent"  # retrying cannot help within this turn
        if isinstance(err, (ImportError, ModuleNotFoundError)):
            return "permanent"
        status = _status_of(err)
        if status is not None:
            if status in _TRANSIENT_STATUS or status >= 500:
                return "transient"
            if 400 <= status < 500:
                return "permanent"
        name = type(err).__name__.lower().replace("_", "")
        if any(part in name for part in _PERMANENT_NAMES):
            return "permanent"
        if any(part in name for part in _TRANSIENT_NAMES):
            return "transient"
        if isinstance(err, (asyncio.TimeoutError, TimeoutError, ConnectionError)):
            return "transient"
        text = str(err).lower()
        if any(part in text for part in _PERMANENT_TEXT):
            return "permanent"
    return "transient"


def backoff_delay(attempt: int, base_s: float, cap_s: float, rng: random.Random | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): uniform in ``[0, min(cap, base * 2**attempt)]``."""
    ceiling = min(cap_s, base_s * (2 ** max(0, attempt)))
    if ceiling <= 0:
        return 0.0
    return (rng or random).uniform(0, ceiling)


# ------------------------------------------------------------------ turn budget

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar("langchain_om_turn_deadline", default=None)


@contextmanager
def turn_budget(seconds: float | None) -> Iterator[None]:
    """Bound OM's model calls made inside this block (and tasks it awaits) to ``seconds`` in all.

    Nested blocks keep the tighter deadline. ``None`` leaves the current deadline as it is."""
    if seconds is None:
        yield
        return
    deadline = time.monotonic() + seconds
    outer = _deadline.get()
    token = _deadline.set(deadline if outer is None else min(outer, deadline))
    try:
        yield
    finally:
        _deadline.reset(token)


async def beyond_the_turn(coro: Coroutine[Any, Any, _T]) -> _T:
    """Await ``coro`` free of any turn's budget: for background work (buffering) started inside a
    step. A task copies its creator's context variables, so without this a buffering cycle
    started inside a bounded step was cut off by a turn it does not block."""
    token = _deadline.set(None)
    try:
        return await coro
    finally:
        _deadline.reset(token)


def remaining_budget() -> float | None:
    """Seconds left in the current turn's budget, ``None`` when unbounded (never negative)."""
    deadline = _deadline.get()
    if deadline is None:
        return None
    return max(0.0, deadline - time.monotonic())


def attempt_timeout(per_attempt_s: float | None) -> float | None:
    """The timeout of the next attempt: the per-attempt timeout, cut to what the turn has left.

    Raises ``TurnBudgetExceeded`` when nothing is left."""
    left = remaining_budget()
    if left is None:
        return per_attempt_s
    if left <= 0.001:
        raise TurnBudgetExceeded("the turn's budget for OM model calls (failure_policy.turn_budget) is spent")
    return left if per_attempt_s is None else min(per_attempt_s, left)


# ------------------------------------------------------------------ reporting once


class FailureLog:
    """Remembers which permanent failures were reported, so each is logged once per process."""

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def reset(self) -> None:
        """Forget what was reported (after fixing a key, or between tests)."""
        self._seen.clear()

    def report(self, role: str, model: str, exc: BaseException, kind: ErrorKind) -> None:
        key = f"{role}\x1f{model}\x1f{type(exc).__name__}\x1f{str(exc)[:200]}"
        if kind == "permanent" and key in self._seen:
            logger.debug("langchain-om %s call to %s failed again: %s", role, model, exc)
            return
        if kind == "permanent":
            self._seen.add(key)
            logger.error("langchain-om %s model %s failed permanently (not retried): %s: %s",
                         role, model, type(exc).__name__, exc)
        else:
            logger.warning("langchain-om %s call to %s failed (transient): %s: %s", role, model,
                           type(exc).__name__, exc)


FAILURE_LOG = FailureLog()
