"""Delivering OM's data-part events into a run: LangChain custom events and LangGraph's
custom stream.

The engine hands every event to ``dispatch_events`` (sync callers reach it through the
engine's async path, with the run's config); the handlers that
collect or draw them for users live in ``callbacks`` (the integrations layer), which this
module does not need to know about.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks.base import BaseCallbackManager
from langchain_core.callbacks.manager import adispatch_custom_event
from langchain_core.runnables import RunnableConfig, ensure_config

from .events import OMEvent

logger = logging.getLogger("langchain_om.foundation.dispatch")

STREAM_FORMAT_KEY = "om_stream_format"
"""``config["configurable"]`` key choosing the shape OM writes to LangGraph's custom stream.

Unset (or ``"part"``): the AI SDK data part itself, ``{"type": "data-om-…", "id", "data", "transient"?}``,
which ``langchain_om.integrations.ui`` and ``langgraph_sdk`` clients read as is. ``"ai-sdk-langchain"``: the
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
    # the config's own callbacks when it has them: what ``ensure_config`` would take (a copy of
    # them), without copying the whole config
    callbacks = config.get("callbacks") if config else None
    if callbacks is None:
        callbacks = ensure_config(config).get("callbacks")
    if isinstance(callbacks, BaseCallbackManager) and callbacks.parent_run_id is not None:
        return _someone_listens(callbacks)
    try:
        from langsmith.run_helpers import get_tracing_context
    except ImportError:  # pragma: no cover - langsmith ships with langchain-core
        return True
    return get_tracing_context().get("parent") is not None


def _someone_listens(callbacks: BaseCallbackManager) -> bool:
    """Whether a custom event dispatched into this run reaches a handler. A run nobody watches
    (a plain ``ainvoke``: no handler, no tracing) would pay LangChain's callback setup, ~0.1 ms an
    event, for nothing; any handler that takes custom events, tracing, or a configure hook
    (which LangChain adds at dispatch time) counts as listening."""
    if any(not handler.ignore_custom_event for handler in callbacks.handlers):
        return True
    try:
        from langchain_core.tracers.context import _configure_hooks, _tracing_v2_is_enabled
        from langchain_core.utils.env import env_var_is_set
    except ImportError:  # pragma: no cover - another langchain-core layout: assume someone listens
        return True
    if _tracing_v2_is_enabled():
        return True
    return any(var.get() is not None or (env_var is not None and env_var_is_set(env_var))
               for var, _inheritable, _handler_class, env_var in _configure_hooks)


def _ignore(_chunk: Any) -> None:
    pass


def _does_nothing(writer: Any) -> bool:
    """Whether ``writer`` is a function whose whole body is ``pass`` (LangGraph hands each node one
    when the run does not stream ``custom``): writing to it would only cost building the parts.
    Compared by bytecode, so any function that does nothing counts, and nothing else does."""
    code = getattr(writer, "__code__", None)
    mine = _ignore.__code__
    return (code is not None and code.co_code == mine.co_code and code.co_consts == mine.co_consts
            and code.co_argcount == 1 and not getattr(writer, "__closure__", None))


def _audience(config: RunnableConfig | None) -> tuple[Any, bool] | None:
    """Who can hear events now: LangGraph's custom-stream writer (or None) and whether there is
    a LangChain run to send custom events to; None when nobody can."""
    writer = _stream_writer(config)
    if writer is not None and _does_nothing(writer):
        writer = None
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
