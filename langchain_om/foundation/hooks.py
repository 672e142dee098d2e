"""Lifecycle hooks around each Observer / Reflector cycle.

Hooks are for accounting and tracing (cost per OM call, logging); they must
never break memory, so every exception a hook raises is logged and swallowed.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

logger = logging.getLogger("langchain_om.foundation.hooks")

Trigger = Literal["manual", "turn-sync", "async-buffer"]


@dataclass(frozen=True)
class HookContext:
    """What a hook is told about the cycle."""

    thread_id: str
    resource_id: str
    trigger: Trigger
    operation: Literal["observation", "reflection"]
    cycle_id: str
    usage: dict[str, Any] | None = None
    provider_metadata: dict[str, Any] | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


HookFn = Callable[[HookContext], Awaitable[None] | None]


@dataclass
class ObserveHooks:
    """Optional callbacks; sync or async callables taking a ``HookContext``."""

    on_observation_start: HookFn | None = None
    on_observation_end: HookFn | None = None
    on_reflection_start: HookFn | None = None
    on_reflection_end: HookFn | None = None

    @classmethod
    def coerce(cls, value: Any) -> ObserveHooks:
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {
                "on_observation_start",
                "on_observation_end",
                "on_reflection_start",
                "on_reflection_end",
            }
            if unknown:
                from .config import OMConfigError

                raise OMConfigError(f"hooks.{sorted(unknown)[0]}", "is not a known hook")
            return cls(**value)
        from .config import OMConfigError

        raise OMConfigError("hooks", f"expected ObserveHooks or a dict, got {type(value).__name__}")

    async def call(self, name: str, context: HookContext) -> None:
        hook: HookFn | None = getattr(self, name)
        if hook is None:
            return
        try:
            result = hook(context)
            if inspect.isawaitable(result):
                await result
        except Exception:
            logger.exception("langchain-om hook %s raised; the cycle continues", name)
