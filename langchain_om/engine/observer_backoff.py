"""Backoff across turns: a thread whose Observer keeps failing stops paying for it on every turn.

Each synchronous observation that fails costs the turn its retries, up to
``failure_policy.turn_budget``; with a model that is down, slow or answering nonsense, every turn
paid that in full (a minute a turn with a slow local model, where 2-5 s was normal). So after the
second failure in a row a thread's turns skip the synchronous observation for a while, doubling
with each further failure: 1 turn, then 2, 4, ... up to ``MAX_SKIPPED_TURNS``, and never for
longer than ``MAX_PAUSE_S`` of wall time (a user who comes back after a break gets a fresh try).
A skipped turn says so (``data-om-observation-failed`` with ``skipped`` in its error, so the
status carries it and the hard ceiling still bounds the context), background buffering goes on
as configured, and the first success clears the count. One failure alone never skips a turn: a
transient error the next turn does not repeat costs nothing more.

The counts live in the process (bounded like the engine's caches): a worker that restarts gives
the Observer a fresh try, which is the safe side.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["MAX_PAUSE_S", "MAX_SKIPPED_TURNS", "ObserverBackoff"]

MAX_SKIPPED_TURNS = 32
MAX_PAUSE_S = 900.0


@dataclass
class _Failing:
    failures: int
    skipped: int
    since: float
    error: str


class ObserverBackoff:
    """Consecutive synchronous Observer failures per record key, and the turns they skip."""

    def __init__(self, limit: int = 10_000) -> None:
        self._limit = max(1, limit)
        self._failing: OrderedDict[str, _Failing] = OrderedDict()

    def skip(self, key: str) -> str | None:
        """Why this turn skips the synchronous observation (and counts it as skipped), else None."""
        state = self._failing.get(key)
        if state is None or state.failures < 2:
            return None
        turns = min(MAX_SKIPPED_TURNS, 2 ** (state.failures - 2))
        if state.skipped >= turns or time.monotonic() - state.since >= MAX_PAUSE_S:
            return None
        state.skipped += 1
        return (f"skipped: the Observer failed {state.failures} times in a row; this thread skips the "
                f"synchronous observation for {turns} turn{'s' if turns > 1 else ''} "
                f"({state.skipped} of {turns}) so no turn waits on it"
                + (f"; last error: {state.error}" if state.error else ""))

    def failed(self, key: str, error: str = "") -> None:
        """Count a failed synchronous observation (the next pause starts now); ``error`` is its
        one-line reason, repeated on the skipped turns so the status still says what is wrong."""
        state = self._failing.pop(key, None)
        failures = 1 if state is None else state.failures + 1
        self._failing[key] = _Failing(failures, 0, time.monotonic(), error)
        while len(self._failing) > self._limit:
            self._failing.popitem(last=False)

    def succeeded(self, key: str) -> None:
        """The Observer worked for this key: no more skipping."""
        self._failing.pop(key, None)
