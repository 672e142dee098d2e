"""LangGraph integration: OM as three nodes in front of a user's model node.

``add_observational_memory(builder, om, before="agent")`` inserts
``om_activator -> om_observer -> om_reflector`` ahead of ``before``. Each node runs
one phase of the engine's step (``aprocess(..., phases=...)``) under the engine's
per-thread lock, and writes the result back into graph state: observed messages
leave state (``RemoveMessage``) and one OM system message (fixed id) stands first.
So the model node reads ``state["messages"]`` and gets the OM context with no code
change, and a checkpointer stores the bounded state, not the full history. Raw
messages stay in the OM store (recall can page through them).

Limits of the rewiring (documented in ``add_observational_memory``): edges are
rewired when they are plain edges, join edges, or conditional edges (with or
without a path map); a node that jumps with ``Command(goto=before)`` or a
``Send(before, ...)`` bypasses OM for that step.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.tools import BaseTool
from langgraph.graph import StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from .context import OM_CONTEXT_MESSAGE_ID
from .engine import ObservationalMemory, OMContext, Phase

logger = logging.getLogger("langchain_om.graph")

ACTIVATOR = "om_activator"
OBSERVER = "om_observer"
REFLECTOR = "om_reflector"
OM_NODES: tuple[str, str, str] = (ACTIVATOR, OBSERVER, REFLECTOR)
_NODE_PHASE: dict[str, Phase] = {ACTIVATOR: "activate", OBSERVER: "observe", REFLECTOR: "reflect"}


# ------------------------------------------------------------------ ids from the run config


def ids_from_config(config: RunnableConfig | None) -> tuple[str, str | None]:
    """``(thread_id, resource_id)`` from ``config["configurable"]``.

    ``resource_id`` is optional; ``user_id`` is accepted as an alias because LangGraph
    Platform and many apps already carry the user there. ``resource_id`` wins if both are set.
    """
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or (isinstance(thread_id, str) and not thread_id.strip()):
        raise ValueError(
            'config["configurable"]["thread_id"]: required by Observational Memory '
            '(pass config={"configurable": {"thread_id": ...}})'
        )
    resource_id = configurable.get("resource_id")
    if resource_id is None:
        resource_id = configurable.get("user_id")
    return str(thread_id), (str(resource_id) if resource_id is not None else None)


def _state_messages(state: Any, key: str) -> list[BaseMessage]:
    value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if value is None:
        raise ValueError(f"state.{key}: the graph state has no messages under this key")
    messages = list(value)
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise TypeError(f"state.{key}: expected BaseMessage objects (use the add_messages reducer), "
                            f"got {type(message).__name__}")
    return messages


# ------------------------------------------------------------------ state updates


def state_update(current: Sequence[BaseMessage], context: OMContext) -> list[BaseMessage]:
    """The ``add_messages`` update that turns ``current`` into exactly ``context.to_messages()``.

    ``add_messages`` replaces a message with a known id in place and appends new ids at the
    end. So when the OM system message already stands first, removing observed messages and
    re-sending the system message keeps the order. When it is not first yet (first
    observation) or the result would be out of order for any other reason, the update clears
    the list (``REMOVE_ALL_MESSAGES``) and sends the full context, which always lands in order.
    Returns ``[]`` when state already matches.
    """
    desired = context.to_messages()
    desired_ids = [m.id for m in desired]
    current_ids = [m.id for m in current]
    current_by_id = {m.id: m for m in current}
    system = context.system_message
    old_system = current_by_id.get(OM_CONTEXT_MESSAGE_ID)
    system_changed = system is not None and (old_system is None or old_system.content != system.content)
    if current_ids == desired_ids and not system_changed:
        return []
    keep = set(desired_ids)
    removals: list[BaseMessage] = [RemoveMessage(id=mid) for mid in current_ids if mid and mid not in keep]
    additions = [m for m in desired if m.id not in current_by_id or (m.id == OM_CONTEXT_MESSAGE_ID and system_changed)]
    predicted = [mid for mid in current_ids if mid in keep]
    predicted += [m.id for m in additions if m.id not in current_by_id]
    if predicted == desired_ids:
        return removals + additions
    return [RemoveMessage(id=REMOVE_ALL_MESSAGES), *desired]


# ------------------------------------------------------------------ nodes


def _phase_node(om: ObservationalMemory, name: str, messages_key: str) -> Runnable[Any, dict[str, Any]]:
    phase = _NODE_PHASE[name]

    def finish(messages: list[BaseMessage], context: OMContext) -> dict[str, Any]:
        if context.aborted:
            logger.warning("langchain-om %s: %s (context left as it was)", name, context.aborted)
        update = state_update(messages, context)
        return {messages_key: update} if update else {}

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        context = await om.aprocess(thread_id, messages, resource_id=resource_id, config=config, phases=(phase,))
        return finish(messages, context)

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        # OM's sync twin runs on its private loop and dispatches the events with this run's config
        context = om.process(thread_id, messages, resource_id=resource_id, config=config, phases=(phase,))
        return finish(messages, context)

    return RunnableLambda(run, afunc=arun, name=name)


def _remap(before: str) -> Any:
    def remap(result: Any) -> Any:
        if isinstance(result, (list, tuple)):
            return [ACTIVATOR if r == before else r for r in result]
        return ACTIVATOR if result == before else result

    return remap


def add_observational_memory(
    builder: StateGraph[Any, Any, Any, Any],
    om: ObservationalMemory,
    *,
    before: str = "agent",
    messages_key: str = "messages",
) -> StateGraph[Any, Any, Any, Any]:
    """Insert ``om_activator -> om_observer -> om_reflector`` ahead of the node ``before``.

    Call it after adding your nodes and edges, before ``compile()``. Every edge that pointed
    at ``before`` is rewired to ``om_activator``: plain edges (including from ``START``),
    join edges, and conditional edges (path maps are rewritten; routers without a path map
    are wrapped so a returned ``before`` becomes ``om_activator``). Not rewired, because
    they are decided inside user code at run time: ``Command(goto=before)`` and
    ``Send(before, ...)``; such jumps reach the model without OM for that step.

    The state needs ``messages_key`` with the ``add_messages`` reducer. Nodes read
    ``thread_id`` (required) and ``resource_id`` (optional, alias ``user_id``) from
    ``config["configurable"]``. Keep your own system prompt in the model node rather than
    in state: state messages are eventually observed and removed. Returns ``builder``.
    """
    if not isinstance(builder, StateGraph):
        raise TypeError(f"builder: expected a langgraph StateGraph, got {type(builder).__name__}")
    if not isinstance(om, ObservationalMemory):
        raise TypeError(f"om: expected an ObservationalMemory, got {type(om).__name__}")
    if getattr(builder, "compiled", False):
        raise ValueError("builder: already compiled; call add_observational_memory before compile()")
    if before not in builder.nodes:
        raise ValueError(f"before: no node named {before!r} in the graph (nodes: {sorted(builder.nodes)})")
    clash = [n for n in OM_NODES if n in builder.nodes]
    if clash:
        raise ValueError(f"builder: already has OM nodes {clash}; add_observational_memory was called twice?")
    channels = getattr(builder, "channels", {})
    if channels and messages_key not in channels:
        raise ValueError(f"messages_key: the state schema has no {messages_key!r} key")

    # rewire plain edges
    for start, end in list(builder.edges):
        if end == before:
            builder.edges.discard((start, end))
            builder.edges.add((start, ACTIVATOR))
    # join edges: (tuple of starts) -> end
    for starts, end in list(builder.waiting_edges):
        if end == before:
            builder.waiting_edges.discard((starts, end))
            builder.waiting_edges.add((starts, ACTIVATOR))
    # conditional edges
    for branches in builder.branches.values():
        for branch_name, spec in list(branches.items()):
            if spec.ends is not None:
                if before in spec.ends.values():
                    ends: dict[Hashable, str] = {k: (ACTIVATOR if v == before else v) for k, v in spec.ends.items()}
                    branches[branch_name] = spec._replace(ends=ends)
            else:
                wrapped = spec.path | RunnableLambda(_remap(before))
                branches[branch_name] = spec._replace(path=wrapped)

    for name in OM_NODES:
        builder.add_node(name, _phase_node(om, name, messages_key))
    builder.add_edge(ACTIVATOR, OBSERVER)
    builder.add_edge(OBSERVER, REFLECTOR)
    builder.add_edge(REFLECTOR, before)
    return builder


# ------------------------------------------------------------------ create_react_agent


def om_pre_model_hook(om: ObservationalMemory, *, messages_key: str = "messages") -> Runnable[Any, dict[str, Any]]:
    """A ``pre_model_hook`` for ``langgraph.prebuilt.create_react_agent`` (deprecated API, still
    supported): the model sees the OM context via ``llm_input_messages``; stored history is
    left intact (the full list stays in state; OM keeps its own bounded view)."""

    async def ahook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        context = await om.aprocess(thread_id, messages, resource_id=resource_id, config=config)
        return {"llm_input_messages": context.to_messages()}

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = _state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        context = om.process(thread_id, messages, resource_id=resource_id, config=config)
        return {"llm_input_messages": context.to_messages()}

    return RunnableLambda(hook, afunc=ahook, name="om_pre_model_hook")


# ------------------------------------------------------------------ tools


def om_tools(om: ObservationalMemory) -> list[BaseTool]:
    """Tools OM contributes to an agent: the ``recall`` tool when retrieval is on, else none.

    Bind them to your model and add them to your ``ToolNode``::

        tools = [*my_tools, *om_tools(om)]
        model = model.bind_tools(tools)
        builder.add_node("tools", ToolNode(tools))

    The recall tool reads ``thread_id`` / ``resource_id`` from the run config, so it only
    sees threads of the current resource.
    """
    if om.config.retrieval is None:
        return []
    factory = getattr(om, "recall_tool", None)
    if factory is None:
        raise RuntimeError("om_tools: retrieval is on but this build has no recall tool (langchain_om.recall)")
    tool = factory()
    return [tool]
