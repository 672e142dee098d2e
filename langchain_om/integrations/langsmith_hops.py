"""Untraced middleware hooks without LangSmith's two thread hops.

``create_agent`` wraps every middleware's ``awrap_model_call`` in LangSmith's ``traceable``. Its
async wrapper runs ``_setup_run`` and ``_on_run_end`` through ``loop.run_in_executor`` on every
model call, tracing on or off: two thread hops per call, ~0.3 ms of CPU on a small VM when the
loop is otherwise idle (a chat server with one active user), plus the latency of two thread
switches. When nothing is traced both functions only copy a context and return, so running them
on the loop changes nothing but the cost.

LangSmith offers one switch for this, a process-wide ``aio_to_thread`` override
(``langsmith.set_runtime_overrides``). ``install`` sets it only when no override is set yet (a
user's own, e.g. for Temporal, is never replaced), and the override runs a call inline only when
it is provably untraced: ``_setup_run`` of an ``ObservationalMemoryMiddleware`` hook (``HOOK_FLAG``) while
tracing is off, or ``_on_run_end`` of a run that was never created. Every other call goes to LangSmith's
own implementation, unchanged. With an override set, LangSmith runs a traced coroutine under
``tracing_context`` in the caller's task instead of in a task of its own (its documented path for
custom runtimes). ``ObservationalMemoryMiddleware(..., inline_untraced_hooks=False)`` leaves
LangSmith as it is.
"""

from __future__ import annotations

import contextvars
import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from langsmith import run_helpers, utils

logger = logging.getLogger("langchain_om.integrations.langsmith_hops")

_DefaultToThread = Callable[..., Awaitable[Any]]


HOOK_FLAG = "inline_untraced_hooks"
"""The attribute of a middleware instance that opts its hooks in (``ObservationalMemoryMiddleware``
sets it from its argument), so one instance switched off keeps LangSmith's path even when another
instance installed the override."""


def _is_om_hook(traced: Any) -> bool:
    return getattr(getattr(traced, "__self__", None), HOOK_FLAG, False) is True


def _untraced_setup(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``func`` is LangSmith's ``_setup_run`` for an OM hook that will not be traced."""
    if func is not run_helpers._setup_run or not args or not _is_om_hook(args[0]):
        return False
    container_input = kwargs.get("container_input") or {}
    if container_input.get("enabled") is True:  # traceable(enabled=True) traces regardless
        return False
    extra = kwargs.get("langsmith_extra") or {}
    if extra.get("parent") is not None or extra.get("run_tree") is not None:
        return False
    return not utils.tracing_is_enabled()  # off in this context, no current run tree, not in env


def _untraced_end(func: Any, args: tuple[Any, ...]) -> bool:
    """Whether ``func`` ends a run that ``_setup_run`` never created (tracing was off)."""
    if not (isinstance(func, functools.partial) and func.func is run_helpers._handle_container_end):
        return False
    container = args[0] if args else None
    return isinstance(container, dict) and container.get("new_run") is None


async def inline_untraced(
    default: _DefaultToThread, ctx: contextvars.Context, func: Any, /, *args: Any, **kwargs: Any
) -> Any:
    """LangSmith's ``aio_to_thread``, run on the loop when the call is provably untraced."""
    if _untraced_setup(func, args, kwargs) or _untraced_end(func, args):
        return ctx.run(func, *args, **kwargs)
    return await default(ctx, func, *args, **kwargs)


def install() -> bool:
    """Set ``inline_untraced`` as LangSmith's ``aio_to_thread`` override, unless an override is
    already set (ours or a user's) or this LangSmith has no such hook. Returns whether ours is set."""
    try:
        import langsmith
        from langsmith._runtime_overrides import get_runtime_overrides
    except ImportError:  # a LangSmith without runtime overrides: nothing to do
        return False
    setter = getattr(langsmith, "set_runtime_overrides", None)
    if setter is None or not hasattr(run_helpers, "_setup_run") or not hasattr(run_helpers, "_handle_container_end"):
        return False
    current = get_runtime_overrides().aio_to_thread
    if current is inline_untraced:
        return True
    if current is not None:
        logger.debug("LangSmith already has an aio_to_thread override; leaving it in place")
        return False
    setter(aio_to_thread=inline_untraced)
    return True
