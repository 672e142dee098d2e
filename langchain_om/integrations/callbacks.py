"""Callback handlers that collect or draw OM's data-part events for users.

The events reach LangChain callbacks as custom events (``dispatch.py`` sends them); these
handlers are what a user passes in ``config["callbacks"]`` to see them: typed, in order, or as a
live console panel.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler

from ..foundation.events import (
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
from ..foundation.terminal_text import visible

__all__ = [
    "OMConsoleHandler",
    "OMEventHandler",
    "SyncOMEventHandler",
]


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
        line = visible(line)  # it may quote a model's title or a provider's error: shown, never run
        self.log.append(line)
        if self.live:
            self._refresh()
        else:
            self.console.print(line, highlight=False, markup=False)

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
