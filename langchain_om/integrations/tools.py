"""The tools OM contributes to an agent (``recall``, ``update_working_memory``), adapted to runs.

The graph nodes and the middleware both hand these out; each tool reads the run's ids the way
``turn.ids_from_config`` does, so it only ever sees the current resource.
"""

from __future__ import annotations

import inspect
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool

from ..engine import ObservationalMemory
from ..foundation.run_ids import resource_from


def om_tools(om: ObservationalMemory) -> list[BaseTool]:
    """Tools OM contributes to an agent: ``recall`` when retrieval is on, and
    ``update_working_memory`` when working memory is agent-managed (``working_memory=True`` or
    ``{"agent_managed": True}``); else none.

    Bind them to your model and add them to your ``ToolNode``::

        tools = [*my_tools, *om_tools(om)]
        model = model.bind_tools(tools)
        builder.add_node("tools", ToolNode(tools))

    The tools read ``thread_id`` / ``resource_id`` (or ``user_id``) from the run config, like
    the OM nodes, so they only see the current resource. They work in sync and async graphs.
    """
    tools: list[BaseTool] = []
    if om.config.retrieval is not None:
        factory = getattr(om, "recall_tool", None)
        if factory is None:
            raise RuntimeError(
                "om_tools: retrieval is on but this build has no recall tool (langchain_om.extensions.recall)"
            )
        tools.append(factory())
    tools.extend(_integration_tool(om, tool) for tool in om.working_memory_tools())
    return tools


def _with_resource(config: RunnableConfig) -> RunnableConfig:
    """``config`` with ``resource_id`` set the way ``ids_from_config`` reads it (``user_id`` alias,
    runtime context)."""
    configurable = dict(config.get("configurable") or {})
    resource = resource_from(config)
    if resource is not None:
        configurable["resource_id"] = resource
    return {**config, "configurable": configurable}


def _config_param(fn: Any) -> str | None:
    """The name of ``fn``'s ``RunnableConfig`` parameter (LangChain injects the run config there)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    for parameter in parameters:
        annotation = parameter.annotation
        if annotation is RunnableConfig or (isinstance(annotation, str) and annotation.endswith("RunnableConfig")):
            return parameter.name
    return None


def _integration_tool(om: ObservationalMemory, tool: BaseTool) -> BaseTool:
    """An engine tool adapted to the integrations: ids resolved like the OM nodes resolve them,
    and a sync path (on OM's own loop) for sync agents when the tool is coroutine-only."""
    if not isinstance(tool, StructuredTool) or tool.coroutine is None:
        return tool
    inner = tool.coroutine
    inner_sync = tool.func

    def with_config(fn: Any, config: RunnableConfig, kwargs: dict[str, Any]) -> dict[str, Any]:
        name = _config_param(fn)
        return {**kwargs, name: _with_resource(config)} if name else kwargs

    async def acall(config: RunnableConfig, **kwargs: Any) -> Any:
        return await inner(**with_config(inner, config, kwargs))

    def call(config: RunnableConfig, **kwargs: Any) -> Any:
        if inner_sync is not None:
            return inner_sync(**with_config(inner_sync, config, kwargs))
        return om._loop.run(acall(config, **kwargs), twin=f"{tool.name}.ainvoke(...)")

    adapted: StructuredTool = tool.model_copy(update={"func": call, "coroutine": acall})
    return adapted
