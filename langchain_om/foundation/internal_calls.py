"""OM's own model calls and messages, marked the way LangChain marks a harness's own work.

LangChain 1.5 gives middleware two conventions, and OM follows both:

* a model call the middleware makes for itself (the Observer, the Reflector, an extractor) carries
  ``lc_source`` and ``internal_call_metadata()`` in its run metadata, so the agent's
  ``run.messages`` and v3 event stream (``InternalCallTransformer``, which the middleware declares)
  never show it as if the agent had said it, and a tracer can tell it apart;
* a message the harness adds to the conversation (a time-gap marker) carries
  ``add_notification_metadata``, so UIs and other middleware can tell it from what the user typed.

Both are looked up lazily: ``internal_call_metadata`` lives in ``langchain.agents``, which a step
without a model call must not import (tests/test_import_cost.py).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from langchain_core.messages import BaseMessage

LC_SOURCE = "observational_memory"
"""``lc_source`` of OM's model calls and of the messages OM adds."""


@lru_cache(maxsize=1)
def _internal_marker() -> dict[str, Any]:
    """LangChain's process-local internal-call marker ({} on a langchain without it)."""
    try:
        from langchain.agents.middleware.internal_call_transformer import internal_call_metadata
    except ImportError:  # pragma: no cover - langchain < 1.5
        return {}
    return dict(internal_call_metadata())


def internal_call_metadata_for(role: str) -> dict[str, Any]:
    """Run metadata of one of OM's own model calls (``role``: observer, reflector, an extractor's)."""
    return {"lc_source": LC_SOURCE, "langchain_om_role": role, **_internal_marker()}


def as_notification(message: BaseMessage, kind: str) -> BaseMessage:
    """``message`` marked as added by OM (``additional_kwargs`` ``lc_source`` and ``lc_data``), content unchanged.

    The same keys ``langchain_core.messages.add_notification_metadata`` sets (imported when present);
    chat model integrations do not send them to the model."""
    try:
        from langchain_core.messages import add_notification_metadata
    except ImportError:  # pragma: no cover - langchain-core < 1.7.2
        kwargs = {**message.additional_kwargs, "lc_source": LC_SOURCE, "lc_data": {"kind": kind}}
        return message.model_copy(update={"additional_kwargs": kwargs})
    return add_notification_metadata(message, source=LC_SOURCE, data={"kind": kind})  # type: ignore[arg-type]
