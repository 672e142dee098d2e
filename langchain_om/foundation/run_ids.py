"""Reading a run's thread and user from LangChain's run config and LangGraph's runtime context.

One place for the rule every integration and tool follows: ``thread_id`` names the conversation,
``resource_id`` the user, and ``user_id`` (what the LangGraph server fills in from auth, and what
LangChain v1's ``context_schema`` examples call the user) is the alias of ``resource_id``.

The user can be named in two places: ``config["configurable"]`` and the runtime context
(``create_agent(..., context_schema=Context)`` + ``agent.invoke(..., context=Context(user_id=...))``;
a dataclass, a TypedDict / dict or a pydantic model). Precedence, the same in both places:
``resource_id`` before ``user_id``. Across the two places there is no precedence: when both
name a user they must agree, else ``ConflictingResourceError`` names both values and where
each came from. A silent pick would read or write the wrong user's memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig

RUNTIME_KEY = "__pregel_runtime"
"""Where LangGraph keeps the run's ``Runtime`` (its ``context``) in ``config["configurable"]``."""


class ConflictingResourceError(ValueError):
    """The run config and the runtime context name different users."""


def user_id_alias(configurable: Mapping[str, Any]) -> Any:
    """``configurable["user_id"]``, or None when it is unset or blank: the LangGraph server puts
    the authenticated user's name there, an empty string when the deployment has no auth."""
    return _set(configurable.get("user_id"))


def _set(value: Any) -> Any:
    return None if value is None or (isinstance(value, str) and not value.strip()) else value


def _field(context: Any, name: str) -> Any:
    if isinstance(context, Mapping):
        return _set(context.get(name))
    return _set(getattr(context, name, None))


def runtime_context(config: RunnableConfig | None) -> Any:
    """The run's runtime context (``invoke(..., context=...)``), or None outside a graph run."""
    runtime = ((config or {}).get("configurable") or {}).get(RUNTIME_KEY)
    return getattr(runtime, "context", None) if runtime is not None else None


def resource_from(config: RunnableConfig | None) -> str | None:
    """The user a run names (see the module docstring for the precedence), or None."""
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    named: list[tuple[str, Any]] = []
    for key in ("resource_id", "user_id"):
        value = _set(configurable.get(key))
        if value is not None:
            named.append((f'config["configurable"]["{key}"]', value))
            break
    context = runtime_context(config)
    if context is not None:
        for key in ("resource_id", "user_id"):
            value = _field(context, key)
            if value is not None:
                named.append((f"the runtime context's {key}", value))
                break
    if not named:
        return None
    if len(named) == 2 and str(named[0][1]) != str(named[1][1]):
        (first, a), (second, b) = named
        raise ConflictingResourceError(
            f"resource_id: {first} is {str(a)!r} but {second} is {str(b)!r}; name the user in one "
            "place, or make both agree")
    return str(named[0][1])


def ids_from_run_config(config: RunnableConfig | None) -> tuple[str | None, str | None]:
    """``(thread_id, resource_id)`` a tool reads from the run (``config["configurable"]`` and the
    runtime context), either may be missing, as in the graph nodes and middleware."""
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    return (str(thread) if thread is not None else None, resource_from(config))
