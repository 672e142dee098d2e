"""Thread titles proposed by the Observer (``observation.thread_title``)."""

from __future__ import annotations

from ..foundation.events import ThreadUpdateData, ThreadUpdateEvent, iso_now
from ..store.base import new_id
from .core import EngineCore
from .state import StepState


async def aapply_title(core: EngineCore, step: StepState, title: str | None, cycle_id: str | None) -> None:
    """Give the thread the title an Observer proposed (``observation.thread_title``) and say so
    with ``data-om-thread-update``; whether the observation was committed now or activated later."""
    if not core.config.observation.thread_title or not title:
        return
    thread = await core.store.aget_thread(step.resource_id, step.thread_id)
    old = thread.title if thread else None
    if title == old:
        return
    await core.store.aupdate_thread(step.resource_id, step.thread_id, title=title)
    step.events.append(ThreadUpdateEvent(data=ThreadUpdateData(
        cycle_id=cycle_id or new_id("cycle_"), thread_id=step.thread_id, old_title=old, new_title=title,
        timestamp=iso_now(),
    )))
