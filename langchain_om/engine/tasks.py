"""Background buffering's plumbing: the task registry and the idle TTLs.

Which chunks an activation takes is the planner's (``langchain_om.engine.planner``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any

from ..model_calls.failures import beyond_the_turn

logger = logging.getLogger("langchain_om.engine.tasks")

# Prompt-cache lifetimes per provider, used by ``activate_after_idle="auto"``: once the provider's
# cache has expired, the next call pays for the full prompt anyway, so swapping buffered
# observations in then costs no cache hit. Figures are the providers' documented defaults.
PROMPT_CACHE_TTL_MS: dict[str, float] = {
    "anthropic": 5 * 60_000,  # ephemeral cache_control default: 5 minutes
    "bedrock": 5 * 60_000,  # Anthropic models on Bedrock: same 5-minute cache
    "openai": 5 * 60_000,  # automatic prompt caching: evicted after 5-10 minutes idle
    "azure_openai": 5 * 60_000,
    "google_genai": 60 * 60_000,  # Gemini explicit/implicit cache default TTL: 1 hour
    "google_vertexai": 60 * 60_000,
    "deepseek": 60 * 60_000,  # disk cache, cleared after hours; 1 hour is conservative
    "xai": 5 * 60_000,
    "groq": 5 * 60_000,
}
DEFAULT_PROMPT_CACHE_TTL_MS = 5 * 60_000


def idle_ttl_ms(setting: Any, provider: str | None) -> float | None:
    """Resolve an ``activate_after_idle`` setting to milliseconds (None: never)."""
    if setting is None or setting is False:
        return None
    if setting == "auto":
        return PROMPT_CACHE_TTL_MS.get((provider or "").lower(), DEFAULT_PROMPT_CACHE_TTL_MS)
    return float(setting)


def ms_between(earlier: datetime, later: datetime) -> float:
    return (later - earlier).total_seconds() * 1000


class BackgroundTasks:
    """Fire-and-forget tasks keyed by (record key, kind), at most one per key, each free of the
    turn budget of the step that started it (``failures.beyond_the_turn``).

    Tasks belong to the loop that started them; ``aclose`` waits for them (or cancels them
    after ``timeout``) so a shutdown never leaves a half-written record: every task commits
    its result through the store's compare-and-swap or not at all.

    Every task is cancelled at ``bound_s`` (``failure_policy.background_bound_s``), and ``wait``
    gives up on a task a little after that: a cancellation lost in a library (Python 3.11's
    ``asyncio.wait_for`` can swallow one that races a result, as psycopg's pool wait does)
    cannot keep ``await_background`` waiting forever. ``waiting`` reports each such wait.
    """

    def __init__(self, bound_s: float | None = None,
                 waiting: Callable[..., AbstractAsyncContextManager[None]] | None = None) -> None:
        self._tasks: dict[tuple[str, str], asyncio.Task[Any]] = {}
        self.bound_s = bound_s
        self._waiting = waiting

    def running(self, key: str, kind: str) -> bool:
        task = self._tasks.get((key, kind))
        return task is not None and not task.done()

    def task(self, key: str, kind: str) -> asyncio.Task[Any] | None:
        """The running task of ``(key, kind)``, if any."""
        task = self._tasks.get((key, kind))
        return task if task is not None and not task.done() else None

    def running_any(self, key: str) -> bool:
        return any(self.running(key, kind) for kind in ("observe", "reflect"))

    def on_loop(self, loop: asyncio.AbstractEventLoop, key: str | None = None) -> bool:
        """Whether unfinished tasks (all, or one record's) run on ``loop``."""
        return any(
            not task.done() and task.get_loop() is loop and (key is None or k == key)
            for (k, _), task in list(self._tasks.items())
        )

    def start(self, key: str, kind: str, coro: Coroutine[Any, Any, Any]) -> bool:
        if self.running(key, kind):
            coro.close()
            return False
        # background work answers to no turn: it never inherits the starting step's budget
        task = asyncio.get_running_loop().create_task(beyond_the_turn(self._bounded(key, kind, coro)),
                                                      name=f"langchain-om:{kind}:{key}")
        self._tasks[(key, kind)] = task
        task.add_done_callback(self._finished)
        return True

    async def _bounded(self, key: str, kind: str, coro: Coroutine[Any, Any, Any]) -> Any:
        if self.bound_s is None:
            return await coro
        inner = asyncio.ensure_future(coro)  # its own task: waiting on it never swallows our cancel
        try:
            done, _ = await asyncio.wait({inner}, timeout=self.bound_s)
        except asyncio.CancelledError:
            inner.cancel()
            await asyncio.wait({inner}, timeout=5.0)
            raise
        if inner in done:
            return inner.result()
        inner.cancel()
        await asyncio.wait({inner}, timeout=5.0)
        if self._waiting is not None:  # say which cycle hit its bound, and where
            async with self._waiting(f"background-bound:{kind}", key, self.bound_s):
                pass
        raise TimeoutError(f"langchain-om background {kind} cycle ran past its bound of {self.bound_s:.0f} s "
                           "and was cancelled (failure_policy.turn_budget sets it)")

    def _finished(self, task: asyncio.Task[Any]) -> None:
        for slot, current in list(self._tasks.items()):
            if current is task:
                del self._tasks[slot]  # finished tasks are not kept: one entry per running task
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            logger.error("langchain-om background task %s failed", task.get_name(), exc_info=exc)

    async def wait(self, key: str | None = None) -> None:
        """Wait for running tasks (all, or those of one record), whichever event loop runs them:
        the sync twins start theirs on OM's private loop, so an async caller may wait for those."""
        running = [(k, kind, t) for (k, kind), t in list(self._tasks.items())
                   if (key is None or k == key) and not t.done()]
        if not running:
            return
        # a little past the tasks' own bound: a task that ignored its cancellation is given up on
        limit = None if self.bound_s is None else self.bound_s + 5.0
        if self._waiting is None:
            await _on_their_loops([t for _, _, t in running], lambda group: _wait_group(group, limit))
            return
        k0, kind0, _ = running[0]
        what = f"background-task:{kind0}" + (f" (+{len(running) - 1} more)" if len(running) > 1 else "")
        async with self._waiting(what, k0, limit):
            await _on_their_loops([t for _, _, t in running], lambda group: _wait_group(group, limit))

    async def aclose(self, *, timeout: float | None = 30.0, cancel: bool = False) -> None:
        """Wait up to ``timeout`` for running tasks (or cancel them at once), on whichever loop
        each runs; what is still running after the timeout is cancelled."""
        tasks = [t for t in list(self._tasks.values()) if not t.done()]
        if not tasks:
            return
        await _on_their_loops(tasks, lambda group: _close_group(group, timeout, cancel))
        if not cancel:
            self._tasks.clear()


async def _on_their_loops(
    tasks: list[asyncio.Task[Any]], job: Callable[[list[asyncio.Task[Any]]], Coroutine[Any, Any, None]]
) -> None:
    """Run ``job`` over the tasks of each event loop on that loop (task methods are not
    thread-safe) and wait for all of them; loops that no longer run are skipped."""
    if not tasks:
        return
    here = asyncio.get_running_loop()
    by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Task[Any]]] = {}
    for task in tasks:
        by_loop.setdefault(task.get_loop(), []).append(task)
    runs: list[Any] = []
    for loop, group in by_loop.items():
        if loop is here:
            runs.append(job(group))
        elif loop.is_running():
            runs.append(asyncio.wrap_future(asyncio.run_coroutine_threadsafe(job(group), loop)))
    await asyncio.gather(*runs, return_exceptions=True)


async def _wait_group(tasks: list[asyncio.Task[Any]], limit: float | None) -> None:
    """Wait for the tasks (at most ``limit`` seconds); never raises their errors."""
    _done, pending = await asyncio.wait(tasks, timeout=limit)
    for task in pending:
        logger.error("langchain-om background task %s still running after %.0f s: given up on (left running)",
                     task.get_name(), limit or 0.0)


async def _close_group(tasks: list[asyncio.Task[Any]], timeout: float | None, cancel: bool) -> None:
    """Runs on the tasks' own loop (task.cancel is not thread-safe)."""
    if cancel:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return
    _done, pending = await asyncio.wait(tasks, timeout=timeout)
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
