"""Runs that are still streaming, so a background cycle's events reach the run they belong to.

A buffering cycle (observation or reflection) runs in the background: it starts at one agent
step and ends whenever its Observer or Reflector answers. Its events (``data-om-buffering-*``)
should reach the user while they can still be shown: in the run that is streaming when the
cycle ends (a tool is running, or the next model step), not one turn later.

A run is *open* from its first OM step until the integration's end of turn closes it
(``ObservationalMemoryMiddleware.after_agent``, the graph's ``om_turn_end`` node or the exit of
the model node to ``END``; see ``graph.py``). Only runs of an integration that closes them are
registered (``closed_at_turn_end``): a bare ``om.aprocess(..., config=...)`` has no end of turn
OM could see, so its background events keep arriving with the next step, as before.

- An event of a cycle that ends while its record's run is open is dispatched into that run at
  once (LangChain custom event and LangGraph custom stream), on the loop the run's steps ran on,
  in order with the run's own events, and it is *not* returned again with the next step.
- An event of a cycle that ends after the run closed waits for the next step (``deliver`` says
  no, and the engine queues it as it always did).
- A run can also end without reaching its end of turn (an error, an interrupt waiting for a
  human). Nothing tells OM, so it keeps writing into that run; those events are *unconfirmed*
  until the same run takes another step or closes (it was alive, so they were seen). When a
  step of another run comes first, the unconfirmed events come back with that step: they may be
  shown twice then (the AI SDK keeps one part per id, so a UI shows them once), never lost.

Thread safety: a sync agent runs in its own thread while OM's steps and background cycles run
on OM's private loop (``om._loop``); an async agent runs everything on its own loop. Events are
always dispatched on the loop that ran the run's steps (where the step's own events are
dispatched too), through one task per run, so the two orders (custom stream and callbacks)
agree. LangGraph's custom-stream writer is safe to call from any thread (a thread-safe queue,
or ``call_soon_threadsafe`` on the run's loop); the writer reads the node's config from the
context, so the delivering task sets the run's config there first.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import var_child_runnable_config

from ..foundation.dispatch import dispatch_events
from ..foundation.events import OMEvent
from ..foundation.run_steps import run_mark

logger = logging.getLogger("langchain_om.engine.live_runs")

UNCONFIRMED_LIMIT = 200
"""Events kept per run for a re-send (as many as the engine keeps pending for one record)."""

_CLOSED_AT_TURN_END: ContextVar[bool] = ContextVar("langchain_om_closed_at_turn_end", default=False)


@contextlib.contextmanager
def closed_at_turn_end(closes: bool = True) -> Iterator[None]:
    """Marks the OM steps inside as steps of a run whose end of turn calls ``LiveRuns.aclose``."""
    token = _CLOSED_AT_TURN_END.set(closes)
    try:
        yield
    finally:
        _CLOSED_AT_TURN_END.reset(token)


def run_token(config: RunnableConfig | None) -> object | None:
    """The LangGraph run of ``config``: its ``RunControl``, one object shared by every task of the
    run and by subgraphs called inside it (``run_steps.run_mark``); None outside a LangGraph run,
    which no integration closes."""
    mark = run_mark(config)
    return mark.token if mark is not None and mark.kind == "graph" else None


@dataclass(eq=False)
class _Run:
    """One open run of one record: where and how to deliver, and what it has not confirmed yet."""

    token: object
    config: RunnableConfig
    loop: asyncio.AbstractEventLoop
    order: asyncio.Lock = field(default_factory=asyncio.Lock)
    queue: list[OMEvent] = field(default_factory=list)
    unconfirmed: list[OMEvent] = field(default_factory=list)
    drainer: concurrent.futures.Future[None] | asyncio.Future[None] | None = None
    open: bool = True


class LiveRuns:
    """The open run of each record key (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # background cycles may push from another thread than the steps
        self._by_key: dict[str, _Run] = {}
        self._by_token: dict[int, _Run] = {}  # the newest run of a token, for the step's own dispatch

    # ------------------------------------------------------------------ the step

    def refresh(self, key: str, config: RunnableConfig | None) -> list[OMEvent]:
        """A step of ``key`` begins: register its run (when an integration will close it).

        Returns the events that went live into a run which never reached its end of turn and
        which the next step must carry again (empty in the normal case).
        """
        token = run_token(config) if _CLOSED_AT_TURN_END.get() else None
        with self._lock:
            old = self._by_key.get(key)
            if old is not None and token is not None and old.token is token and old.open:
                old.config = config or {}
                old.unconfirmed.clear()  # the run is alive: what it got so far was seen
                return []
            resend: list[OMEvent] = []
            if old is not None:
                resend = self._drop(key, old)
            if token is not None and config is not None:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:  # pragma: no cover - steps always run on a loop
                    return resend
                run = _Run(token, config, loop)
                self._by_key[key] = run
                self._by_token[id(token)] = run
            return resend

    async def dispatch(self, events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
        """Dispatch a step's own events, after any live event of the same run already under way."""
        if not events:
            return
        token = run_token(config)
        run = self._by_token.get(id(token)) if token is not None else None
        if run is None or run.token is not token or run.loop is not asyncio.get_running_loop():
            await dispatch_events(events, config)
            return
        async with run.order:
            await dispatch_events(events, config)

    # ------------------------------------------------------------------ background cycles

    def deliver(self, key: str, event: OMEvent) -> bool:
        """Send ``event`` into the open run of ``key``; False when there is none (queue it for the next step)."""
        with self._lock:
            run = self._by_key.get(key)
            if run is None or not run.open or run.loop.is_closed():
                return False
            run.queue.append(event)
            if run.drainer is None:
                try:
                    if _running_loop() is run.loop:  # a cycle on the run's own loop: no cross-thread wake-up
                        run.drainer = run.loop.create_task(self._drain(run))
                    else:
                        run.drainer = asyncio.run_coroutine_threadsafe(self._drain(run), run.loop)
                except RuntimeError:  # the run's loop closed in between: the run is over
                    run.queue.pop()
                    run.open = False
                    return False
            return True

    async def _drain(self, run: _Run) -> None:
        """Deliver the run's queue in order; one such task per run at a time."""
        async with run.order:
            while True:
                with self._lock:
                    if not run.queue:
                        run.drainer = None
                        return
                    batch = list(run.queue)
                    run.queue.clear()
                    run.unconfirmed.extend(batch)
                    del run.unconfirmed[:-UNCONFIRMED_LIMIT]
                    config = run.config
                # LangGraph's writer reads the node's config from the context: this run's, not the
                # one of the step that started the cycle (possibly an earlier, finished run)
                var_child_runnable_config.set(config)
                try:
                    await dispatch_events(batch, config)
                except Exception:  # a broken handler must not stop the next deliveries
                    logger.exception("langchain-om could not deliver background events")

    # ------------------------------------------------------------------ the end of the turn

    async def aclose(self, config: RunnableConfig | None) -> None:
        """The run of ``config`` reached its end of turn: deliver what is on its way, then close it.

        Called from inside the run (its last node), so what is delivered here is still streamed;
        later events of its records wait for the next step.
        """
        token = run_token(config)
        if token is None:
            return
        with self._lock:
            closing = [(key, run) for key, run in self._by_key.items() if run.token is token]
            for key, run in closing:
                self._drop(key, run, keep_queue=True)
        current = asyncio.get_running_loop()
        for _key, run in closing:
            drainer = run.drainer
            if drainer is not None and run.loop is current:
                with contextlib.suppress(Exception):
                    await asyncio.wrap_future(drainer)
            with self._lock:
                run.unconfirmed.clear()

    def _drop(self, key: str, run: _Run, *, keep_queue: bool = False) -> list[OMEvent]:
        """Unregister ``run`` for ``key`` (lock held). Returns what it has not confirmed, unless the
        run is closing normally (``keep_queue``: its drainer still delivers the queue into it)."""
        run.open = False
        self._by_key.pop(key, None)
        if self._by_token.get(id(run.token)) is run:
            del self._by_token[id(run.token)]
        if keep_queue:
            return []
        resend = [*run.unconfirmed, *run.queue]
        run.unconfirmed.clear()
        run.queue.clear()
        return resend

    def forget(self, key: str) -> None:
        """The record left OM's in-process caches: drop its run (its events start afresh too)."""
        with self._lock:
            run = self._by_key.get(key)
            if run is not None:
                self._drop(key, run)

    def is_open(self, key: str) -> bool:
        """Whether ``key`` has an open run (for tests and diagnostics)."""
        with self._lock:
            run = self._by_key.get(key)
            return run is not None and run.open


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
