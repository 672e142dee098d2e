"""Getting OM's data-part events to the user: LangChain custom events, LangGraph's
custom stream, and callback handlers that collect or draw them.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.callbacks.base import BaseCallbackManager
from langchain_core.callbacks.manager import adispatch_custom_event, dispatch_custom_event
from langchain_core.runnables import RunnableConfig, ensure_config

from .events import (
    EVENT_TYPES,
    ActivationEvent,
    BufferingEndEvent,
    BufferingFailedEvent,
    BufferingStartEvent,
    ObservationEndEvent,
    ObservationFailedEvent,
    ObservationStartEvent,
    OMEvent,
    StatusData,
    StatusEvent,
    ThreadUpdateEvent,
    parse_event,
)

logger = logging.getLogger("langchain_om.callbacks")

STREAM_FORMAT_KEY = "om_stream_format"
"""``config["configurable"]`` key choosing the shape OM writes to LangGraph's custom stream.

Unset (or ``"part"``): the AI SDK data part itself, ``{"type": "data-om-…", "id", "data", "transient"?}``,
which ``langchain_om.ui`` and ``langgraph_sdk`` clients read as is. ``"ai-sdk-langchain"``: the
payload ``@ai-sdk/langchain``'s ``toUIMessageStream`` maps onto that part, ``{"type": "om-…",
"id", ...reference fields}``, so its users get ``data-om-*`` parts whose ``data`` holds the
reference fields (instead of ``data-data-om-*`` with them nested one level down).
"""
STREAM_FORMATS = ("part", "ai-sdk-langchain")


def _stream_format(config: RunnableConfig | None) -> str:
    value = ((config or {}).get("configurable") or {}).get(STREAM_FORMAT_KEY) or "part"
    if value not in STREAM_FORMATS:
        raise ValueError(f"configurable.{STREAM_FORMAT_KEY}: expected one of {STREAM_FORMATS}, got {value!r}")
    return str(value)


def _stream_writer(config: RunnableConfig | None) -> Any:
    """LangGraph's custom-stream writer for the current node, if we are inside one.

    The public ``get_stream_writer()`` reads the node's context; when OM is called with an
    explicit config outside that context (a sync twin on OM's own loop, say), the writer is
    looked up in that config's runtime instead.
    """
    try:
        from langgraph.config import get_stream_writer

        return get_stream_writer()
    except Exception:  # not inside a LangGraph node's context
        pass
    if config is None:
        return None
    try:
        from langgraph._internal._constants import CONFIG_KEY_RUNTIME
    except ImportError:  # pragma: no cover - a LangGraph without this layout
        return None
    runtime = (config.get("configurable") or {}).get(CONFIG_KEY_RUNTIME)
    return getattr(runtime, "stream_writer", None)


def _has_parent_run(config: RunnableConfig | None) -> bool:
    """Whether a custom event would have a run to belong to. LangChain takes the parent run
    from the config's callback manager or from an active LangSmith trace, and refuses the
    event otherwise; asking first saves building a callback manager (~50 us) on every step
    taken outside a run."""
    callbacks = ensure_config(config).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager) and callbacks.parent_run_id is not None:
        return True
    try:
        from langsmith.run_helpers import get_tracing_context
    except ImportError:  # pragma: no cover - langsmith ships with langchain-core
        return True
    return get_tracing_context().get("parent") is not None


def _audience(config: RunnableConfig | None) -> tuple[Any, bool] | None:
    """Who can hear events now: LangGraph's custom-stream writer (or None) and whether there is
    a LangChain run to send custom events to; None when nobody can."""
    writer = _stream_writer(config)
    in_run = _has_parent_run(config)
    return None if writer is None and not in_run else (writer, in_run)


def _write(writer: Any, part: dict[str, Any], event_type: str) -> None:
    try:
        writer(part)
    except Exception:
        logger.exception("langchain-om could not write %s to the custom stream", event_type)


async def dispatch_events(events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
    """Emit each event as a LangChain custom event (name = type) and on ``stream_mode="custom"``
    (in the shape ``configurable.om_stream_format`` asks for)."""
    audience = _audience(config) if events else None
    if audience is None:
        return
    writer, in_run = audience
    flat = _stream_format(config) == "ai-sdk-langchain"
    for event in events:
        part = event.to_part()
        if in_run:
            try:
                await adispatch_custom_event(event.type, part, config=config)
            except RuntimeError:
                pass  # not inside a run after all: nobody to tell
            except Exception:
                logger.exception("langchain-om could not dispatch %s", event.type)
        if writer is not None:
            _write(writer, event.to_langchain_js_payload() if flat else part, event.type)


def dispatch_events_sync(events: Sequence[OMEvent], config: RunnableConfig | None) -> None:
    """Sync twin of ``dispatch_events``, for sync graph nodes and middleware hooks.

    Called in the run's own thread, so callback handlers and the custom-stream writer see the
    events exactly as they would from an async node.
    """
    audience = _audience(config) if events else None
    if audience is None:
        return
    writer, in_run = audience
    flat = _stream_format(config) == "ai-sdk-langchain"
    for event in events:
        part = event.to_part()
        if in_run:
            try:
                dispatch_custom_event(event.type, part, config=config)
            except RuntimeError:
                pass  # not inside a run after all
            except Exception:
                logger.exception("langchain-om could not dispatch %s", event.type)
        if writer is not None:
            _write(writer, event.to_langchain_js_payload() if flat else part, event.type)


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


class OMConsoleHandler(BaseCallbackHandler):
    """Draws both OM windows on a terminal with rich: message tokens against the observation
    threshold, observation tokens against the reflection threshold, and buffered chunks.

    It updates on every ``data-om-status`` and logs cycle starts and ends. On a terminal
    (``live=None`` and an interactive console) it redraws one live panel in place; otherwise
    it prints one compact line per status so logs and notebooks stay readable.
    Call ``stop()`` (or use it as a context manager) to end the live display.
    """

    run_inline = True  # keep events in arrival order, also under async callback managers

    def __init__(self, console: Any = None, *, live: bool | None = None, log_size: int = 6) -> None:
        from collections import deque

        from rich.console import Console

        self.console: Console = console if console is not None else Console()
        self.live = self.console.is_terminal if live is None else live
        self.status: StatusData | None = None
        self.log: deque[str] = deque(maxlen=log_size)
        self.cycles: dict[str, str] = {}
        self._live: Any = None

    # -- events

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
            self.handle(event)

    def handle(self, event: OMEvent) -> None:
        """Update the display for one event (usable without callbacks, e.g. from OMContext.events)."""
        line = self._describe(event)
        if isinstance(event, StatusEvent):
            self.status = event.data
            if self.live:
                self._refresh()
            else:
                self.console.print(self.status_line(), highlight=False)
            return
        if line is None:
            return
        self.log.append(line)
        if self.live:
            self._refresh()
        else:
            self.console.print(line, highlight=False)

    def _describe(self, event: OMEvent) -> str | None:
        data: Any = event.data
        cycle = getattr(data, "cycle_id", "")
        if isinstance(event, (ObservationStartEvent, BufferingStartEvent)):
            kind = "buffering" if isinstance(event, BufferingStartEvent) else "sync"
            tokens = data.tokens_to_buffer if kind == "buffering" else data.tokens_to_observe
            self.cycles[cycle] = data.operation_type
            return f"▶ {data.operation_type} ({kind}) started on {tokens} tokens [{cycle[-8:]}]"
        if isinstance(event, ObservationEndEvent):
            self.cycles.pop(cycle, None)
            return (f"✔ {data.operation_type} done: {data.tokens_observed} → {data.observation_tokens} tokens "
                    f"in {data.duration_ms:.0f} ms [{cycle[-8:]}]")
        if isinstance(event, BufferingEndEvent):
            self.cycles.pop(cycle, None)
            return (f"✔ {data.operation_type} buffered: {data.tokens_buffered} → {data.buffered_tokens} tokens "
                    f"[{cycle[-8:]}]")
        if isinstance(event, (ObservationFailedEvent, BufferingFailedEvent)):
            self.cycles.pop(cycle, None)
            return f"✘ {data.operation_type} failed: {data.error} [{cycle[-8:]}]"
        if isinstance(event, ActivationEvent):
            return (f"⇪ activated {data.chunks_activated} {data.operation_type} chunk(s), "
                    f"{data.tokens_activated} tokens ({data.triggered_by})")
        if isinstance(event, ThreadUpdateEvent):
            return f"✎ thread title: {data.new_title}"
        return None

    # -- rendering

    def status_line(self) -> str:
        status = self.status
        if status is None:
            return "OM: no status yet"
        active = status.windows.active
        buffered = status.windows.buffered.observations
        return (f"OM step {status.step_number} | messages {active.messages.tokens}/{active.messages.threshold} | "
                f"observations {active.observations.tokens}/{active.observations.threshold} | "
                f"buffered {buffered.chunks} chunk(s), {buffered.message_tokens} tokens | "
                f"generation {status.generation_count}")

    def render(self) -> Any:
        """The rich renderable of the current state (a panel with two bars, buffers and the log)."""
        from rich.console import Group
        from rich.panel import Panel
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        table = Table.grid(padding=(0, 1))
        table.add_column(justify="right", no_wrap=True)
        table.add_column(width=30)
        table.add_column(no_wrap=True)
        status = self.status
        if status is not None:
            active = status.windows.active
            for label, usage in (("messages", active.messages), ("observations", active.observations)):
                bar = ProgressBar(total=max(usage.threshold, 1), completed=min(usage.tokens, usage.threshold),
                                  width=30)
                table.add_row(label, bar, f"{usage.tokens}/{usage.threshold}")
            buffered = status.windows.buffered
            table.add_row("buffered", f"{buffered.observations.chunks} chunk(s)",
                          f"{buffered.observations.message_tokens} msg tokens → "
                          f"{buffered.observations.observation_tokens} ({buffered.observations.status})")
            table.add_row("reflection", buffered.reflection.status,
                          f"{buffered.reflection.input_observation_tokens} → "
                          f"{buffered.reflection.observation_tokens}")
        title = "Observational Memory" if status is None else (
            f"Observational Memory · step {status.step_number} · generation {status.generation_count}")
        log = [Text(line, no_wrap=True, overflow="ellipsis") for line in self.log]
        return Panel(Group(table, *log), title=title, expand=False)

    def _refresh(self) -> None:
        from rich.live import Live

        if self._live is None:
            self._live = Live(self.render(), console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        self._live.update(self.render(), refresh=True)

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> OMConsoleHandler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
