"""Reading a run's thread and user from LangChain's ``config["configurable"]``.

One place for the rule every integration and tool follows: ``thread_id`` names the conversation,
``resource_id`` the user, and ``user_id`` (what the LangGraph server fills in from auth) is the
alias of ``resource_id``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.runnables import RunnableConfig


def user_id_alias(configurable: Mapping[str, Any]) -> Any:
    """``configurable["user_id"]``, or None when it is unset or blank: the LangGraph server puts
    the authenticated user's name there, an empty string when the deployment has no auth."""
    user_id = configurable.get("user_id")
    return None if isinstance(user_id, str) and not user_id.strip() else user_id


def ids_from_run_config(config: RunnableConfig | None) -> tuple[str | None, str | None]:
    """``(thread_id, resource_id)`` a tool reads from ``config["configurable"]``, either may be
    missing; ``user_id`` is the alias of ``resource_id``, as in the graph nodes and middleware."""
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    thread = configurable.get("thread_id")
    resource = configurable.get("resource_id")
    if resource is None:
        resource = user_id_alias(configurable)
    return (str(thread) if thread is not None else None, str(resource) if resource is not None else None)
