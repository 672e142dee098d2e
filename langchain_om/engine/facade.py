"""``ObservationalMemory``: the public methods, each a thin entry into the engine's modules.

The runtime (store, config, caches) is ``EngineCore``; a step is ``step.astep``; the cycles are
``observation``, ``reflection``, ``activation`` and ``background``; every decision about *when*
is ``planner``'s. See docs/architecture.md for the layers and a step's data flow.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig

from ..extensions.branches import adelete_branches
from ..extensions.checkpoint_view import aposition_at, arecord_at
from ..foundation.events import StatusData
from ..foundation.window import Window
from ..store.base import OMRecord, record_key
from ..store.thread_summaries import ThreadSummary
from .core import EngineCore
from .observation import aobserve_manual
from .reflection import areflect_manual
from .state import OMContext, Phase, StepState
from .state_trim import leaving_ids
from .status import status_of
from .step import astep, aturn_end


class ObservationalMemory(EngineCore):
    """Observational Memory for one store; thread-safe across threads and asyncio tasks.

    See DESIGN.md for the options; they mirror the reference page in snake_case.
    """

    async def aprocess(
        self, thread_id: str, messages: Sequence[BaseMessage], *, resource_id: str | None = None,
        config: RunnableConfig | None = None, current_model: str | None = None, now: datetime | None = None,
        phases: Collection[Phase] | None = None,
    ) -> OMContext:
        """Store new messages, run whatever the thresholds call for, return the model's context.

        ``phases`` (default: all) limits the threshold work to some of ``"activate"``, ``"observe"``,
        ``"reflect"``, so graph nodes can run one phase each. The call that includes ``"reflect"``
        closes the agent step: only it emits ``data-om-status`` and starts background buffering.
        """
        return await astep(self, thread_id, messages, resource_id=resource_id, config=config,
                           current_model=current_model, now=now, phases=phases)

    def process(self, thread_id: str, messages: Sequence[BaseMessage], **kwargs: Any) -> OMContext:
        """Sync twin of ``aprocess`` (runs on OM's private loop so background buffering survives)."""
        return self.run_sync(self.aprocess(thread_id, messages, **kwargs), twin="om.aprocess(...)")

    async def aon_turn_end(
        self, thread_id: str, messages: Sequence[BaseMessage] = (), *, resource_id: str | None = None,
        config: RunnableConfig | None = None,
    ) -> None:
        """Store the turn's final messages; with ``buffer_on_idle`` buffer whatever is pending now
        (its extractors see ``config`` as their ``request_context``)."""
        await aturn_end(self, thread_id, messages, resource_id=resource_id, config=config)

    def on_turn_end(self, thread_id: str, messages: Sequence[BaseMessage] = (), **kwargs: Any) -> None:
        """Sync twin of ``aon_turn_end``."""
        self.run_sync(self.aon_turn_end(thread_id, messages, **kwargs), twin="om.aon_turn_end(...)")

    async def aobserve(self, thread_id: str, *, resource_id: str | None = None,
                       config: RunnableConfig | None = None) -> OMRecord:
        """Observe every unobserved message now (trigger ``manual``)."""
        step = await self._manual_step(thread_id, resource_id, config)
        async with self.locked(step.key):
            record = await self.aload_record(step.resource_id, thread_id)
            record = await aobserve_manual(self, step, record)
        await self.dispatch(step.events, config)
        return record.model_copy(deep=True)

    async def areflect(self, thread_id: str, *, resource_id: str | None = None,
                       config: RunnableConfig | None = None) -> OMRecord:
        """Reflect the whole observation log now (trigger ``manual``)."""
        step = await self._manual_step(thread_id, resource_id, config)
        async with self.locked(step.key):
            record = await areflect_manual(self, step)
        await self.dispatch(step.events, config)
        return record.model_copy(deep=True)

    async def _manual_step(self, thread_id: str, resource_id: str | None, config: RunnableConfig | None) -> StepState:
        resource = self.resolve_resource(thread_id, resource_id)
        await self.aensure_setup()
        key = record_key(resource, self.record_thread(thread_id))
        return StepState(resource, thread_id, key, self._clock(), [], None, config)

    def observe(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self.run_sync(self.aobserve(thread_id, **kwargs), twin="om.aobserve(...)")

    def reflect(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self.run_sync(self.areflect(thread_id, **kwargs), twin="om.areflect(...)")

    async def aget_record(self, thread_id: str, *, resource_id: str | None = None, checkpoint: Any = None,
                          checkpointer: Any = None) -> OMRecord:
        """The thread's record (a copy). With ``checkpoint`` (a ``StateSnapshot`` from
        ``graph.get_state(config)``, a state holding ``om_position``, or a checkpoint config with
        ``checkpointer`` = the saver or the compiled graph): the memory that checkpoint names, as it
        saw it; after time travel, the fork's own memory rather than the thread's original line."""
        if checkpoint is not None:
            position = await aposition_at(checkpoint, checkpointer)
            _, _, record = await arecord_at(self, thread_id, resource_id, position)
            return record
        resource = self.resolve_resource(thread_id, resource_id)
        await self.aensure_setup()
        return (await self.aload_record(resource, thread_id)).model_copy(deep=True)

    def get_record(self, thread_id: str, **kwargs: Any) -> OMRecord:
        return self.run_sync(self.aget_record(thread_id, **kwargs), twin="om.aget_record(...)")

    async def astatus(self, thread_id: str, *, resource_id: str | None = None, checkpoint: Any = None,
                      checkpointer: Any = None) -> StatusData:
        """The ``data-om-status`` payload for a thread, without running a step; with ``checkpoint``
        (see ``aget_record``), the windows as that checkpoint saw them."""
        if checkpoint is not None:
            position = await aposition_at(checkpoint, checkpointer)
            resolved, branch, record = await arecord_at(self, thread_id, resource_id, position)
            rows = await self.store.aget_messages(resolved, branch, after_seq=record.last_observed_seq.get(branch, 0),
                                                  before_seq=position.seq + 1)
            key = record_key(resolved, self.record_thread(branch))
            return status_of(self, record, Window(rows), branch, self._step_numbers.last(key))
        resource = self.resolve_resource(thread_id, resource_id)
        await self.aensure_setup()
        record = await self.aload_record(resource, thread_id)
        window = await self.awindow(record, resource, thread_id)
        key = record_key(resource, self.record_thread(thread_id))
        return status_of(self, record, window, thread_id, self._step_numbers.last(key))

    def status(self, thread_id: str, **kwargs: Any) -> StatusData:
        return self.run_sync(self.astatus(thread_id, **kwargs), twin="om.astatus(...)")

    async def alist_threads(self, resource_id: str | None = None, *, after: ThreadSummary | None = None,
                            limit: int = 20) -> list[ThreadSummary]:
        """The threads of ``resource_id`` (None: the threads used without a resource), most recent
        activity first, with title, message count and last activity. Page by key: pass the last
        summary of a page as ``after`` for the next one."""
        await self.aensure_setup()
        summaries: list[ThreadSummary] = await self.store.alist_thread_summaries(resource_id, after=after,
                                                                                 limit=limit)
        return summaries

    def list_threads(self, resource_id: str | None = None, **kwargs: Any) -> list[ThreadSummary]:
        """Sync twin of ``alist_threads``."""
        return self.run_sync(self.alist_threads(resource_id, **kwargs), twin="om.alist_threads(...)")

    def recall_tool(self, *, thread_id: str | None = None, resource_id: str | None = None) -> Any:
        """The ``recall`` tool (needs ``retrieval``). Without ids it reads ``thread_id`` /
        ``resource_id`` from ``config["configurable"]`` at call time, so one tool serves every thread."""
        from ..extensions.recall import make_recall_tool

        return make_recall_tool(self, thread_id=thread_id, resource_id=resource_id)

    def working_memory_tools(self, *, thread_id: str | None = None, resource_id: str | None = None) -> list[Any]:
        """Extra tools for the main agent: ``update_working_memory`` when working memory is agent-managed.

        Integrations (middleware, graph helpers) add these to the agent's tools; without ids the
        tool reads ``thread_id`` / ``resource_id`` from ``config["configurable"]``."""
        if self.working_memory is None:
            return []
        return list(self.working_memory.tools(thread_id=thread_id, resource_id=resource_id))

    def observed_state_ids(
        self, thread_id: str, messages: Sequence[BaseMessage], context: OMContext, *, resource_id: str | None = None,
        keep_unobserved: bool = True,
    ) -> list[str]:
        """Ids of ``messages`` (a caller's own state, as passed to the step that returned
        ``context``) that may leave that state: OM has stored them and they are out of the
        unobserved window. So a checkpointed state stays as bounded as OM's context.
        With ``keep_unobserved=False`` the window does not hold them back either: the model's
        context comes from OM's store, so the state can shrink to the current turn.

        Kept whatever the window says: messages OM never stored, the newest human turn
        (that message and everything after it), and a tool call and its results, which
        leave together or stay together.
        """
        resource = self.resolve_resource(thread_id, resource_id)
        return leaving_ids(self._known_ids.get(record_key(resource, thread_id), {}), messages, context,
                           keep_unobserved=keep_unobserved)

    async def adelete_thread(self, thread_id: str, *, resource_id: str | None = None) -> None:
        """Forget a thread: wait for its background work, delete its messages and thread-scope
        record from the store, and drop OM's in-process caches so new messages start fresh."""
        resource = self.resolve_resource(thread_id, resource_id)
        await self.aensure_setup()
        # forks made by time travel go with it
        await adelete_branches(self, thread_id, resource_id,
                               lambda branch: self.adelete_thread(branch, resource_id=resource_id))
        key = record_key(resource, self.record_thread(thread_id))
        await self._tasks.wait(key)
        async with self.locked(key):
            await self.store.adelete_thread(resource, thread_id)  # also forgets it in the resource record
            self.forget_thread(record_key(resource, thread_id))
            self.forget_record(key)

    def delete_thread(self, thread_id: str, **kwargs: Any) -> None:
        """Sync twin of ``adelete_thread``. It waits for the thread's background work, so from inside a
        running event loop where that work runs it raises at once (await ``adelete_thread`` there)."""
        self.run_sync(self.adelete_thread(thread_id, **kwargs), twin="om.adelete_thread(...)",
                      waits_on=self._background_of(thread_id, kwargs.get("resource_id")))

    async def await_background(self, thread_id: str | None = None, *, resource_id: str | None = None) -> None:
        """Wait for running background buffering (all, or one thread's). Handy in tests and scripts."""
        if thread_id is None:
            await self._tasks.wait()
            return
        resource = self.resolve_resource(thread_id, resource_id)
        await self._tasks.wait(record_key(resource, self.record_thread(thread_id)))

    async def aclose(self, *, cancel: bool = False, timeout: float | None = 30.0) -> None:
        """Finish (or cancel) background work, then close the store. Records stay consistent either way."""
        await self._tasks.aclose(timeout=timeout, cancel=cancel)
        await self.store.aclose()

    def close(self) -> None:
        """Sync twin of ``aclose``. Inside a running event loop it raises at once, closing nothing:
        background work and the store's connections (a PostgreSQL pool) may belong to that loop,
        and close would wait for them while blocking it (await ``aclose`` there)."""
        self._loop.run(self._tasks.aclose(), twin="om.aclose()", waits_on=lambda _loop: True)
        self._loop.run(self.store.aclose(), twin="om.aclose()")
        self._loop.stop()
