"""Getting OM's data-part events to the user: LangChain custom events, LangGraph's
custom stream, and callback handlers that collect or draw them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.callbacks.manager import adispatch_custom_event
from langchain_core.runnables import RunnableConfig

from .events import EVENT_TYPES, OMEvent, parse_event

logger = logging.getLogger("langchain_om.callbacks")


def _stream_writer(config: RunnableConfig | None) -> Any:
    """LangGraph's custom-stream writer for the current node, if we are inside one."""
    try:
        from langgraph._internal._constants import CONFIG_KEY_RUNTIME
    except ImportError:  # pragma: no cover - older layout
        try:
            from langgraph.constants import CONFIG_KEY_RUNTIME  # type: ignore[no-redef]
        except ImportError:
            return None
    candidates: list[Any] = []
    if config is not None:
        candidates.append(config)
    try:
        from langgraph.config import get_config

        candidates.append(get_config())
    except Exception:
        pass
    for candidate in candidates:
        runtime = (candidate.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
        writer = getattr(runtime, "stream_writer", None)
        if writer is not None:
            return writer
    return None


async def dispatch_events(events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
    """Emit each event as a LangChain custom event (name = type) and on ``stream_mode="custom"``."""
    if not events:
        return
    writer = _stream_writer(config)
    for event in events:
        part = event.to_part()
        try:
            await adispatch_custom_event(event.type, part, config=config)
        except RuntimeError:
            pass  # not inside a run: nobody to tell
        except Exception:
            logger.exception("langchain-om could not dispatch %s", event.type)
        if writer is not None:
            try:
                writer(part)
            except Exception:
                logger.exception("langchain-om could not write %s to the custom stream", event.type)


def _as_event(name: str, data: Any) -> OMEvent | None:
    if name not in EVENT_TYPES or not isinstance(data, dict):
        return None
    try:
        return parse_event(data)
    except Exception:
        return None


class OMEventHandler(AsyncCallbackHandler):
    """Collects every OM event seen in a run, typed, in arrival order."""

    def __init__(self) -> None:
        self.events: list[OMEvent] = []

    async def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        event = _as_event(name, data)
        if event is not None:
            self.events.append(event)

    def of_type(self, event_type: str) -> list[OMEvent]:
        return [e for e in self.events if e.type == event_type]


class SyncOMEventHandler(BaseCallbackHandler):
    """The same collector for sync runs."""

    def __init__(self) -> None:
        self.events: list[OMEvent] = []

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        event = _as_event(name, data)
        if event is not None:
            self.events.append(event)
