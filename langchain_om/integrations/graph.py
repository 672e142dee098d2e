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

The step itself (ids from the run config, the checkpoint's branch, the tripwire) is
``turn.py``'s, shared with the middleware and the chat history; OM's tools are ``tools.py``'s.

Aborted steps (OM cannot build a context, e.g. no tier of a ``ModelByInputTokens`` fits
the input): the OM node that hit it appends a tripwire ``AIMessage`` (empty content, the
reason under ``response_metadata["om_tripwire"]``) and ends the run before the model node,
the same result ``ObservationalMemoryMiddleware`` gives; ``on_abort="raise"`` raises
``OMAborted`` instead. ``om_pre_model_hook`` cannot skip the model node of
``create_react_agent``, so it always raises ``OMAborted``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, Union, get_type_hints

from langchain_core.messages import BaseMessage, RemoveMessage
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langgraph.graph import END, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.types import Command
from typing_extensions import NotRequired, TypedDict

from ..engine import ObservationalMemory, OMAborted, OMContext, Phase
from ..extensions.branches import POSITION_KEY
from ..foundation.context import OM_CONTEXT_MESSAGE_ID
from .tools import om_tools as om_tools  # public here since the first release
from .turn import TRIPWIRE_KEY as TRIPWIRE_KEY  # public here since the first release
from .turn import (
    aprocess_at_checkpoint,
    aturn_end_at_checkpoint,
    require_context,
    state_messages,
    state_value,
    tripwire_message,
)
from .turn import ids_from_config as ids_from_config  # public here since the first release

logger = logging.getLogger("langchain_om.integrations.graph")

ACTIVATOR = "om_activator"
OBSERVER = "om_observer"
REFLECTOR = "om_reflector"
OM_NODES: tuple[str, str, str] = (ACTIVATOR, OBSERVER, REFLECTOR)
TURN_END = "om_turn_end"  # added only with observation.buffer_on_idle
_NODE_PHASE: dict[str, Phase] = {ACTIVATOR: "activate", OBSERVER: "observe", REFLECTOR: "reflect"}

OnAbort = Literal["end", "raise"]


def node_input_schema(builder: StateGraph[Any, Any, Any, Any]) -> type[Any] | None:
    """The OM nodes' input schema: the graph's state plus ``om_position`` (a plain last-value
    channel), so OM's position is checkpointed with the state without the user declaring it."""
    try:
        hints = get_type_hints(builder.state_schema, include_extras=True)
    except Exception:  # a schema LangGraph reads some other way: keep the default input
        return None
    if POSITION_KEY in hints:
        return None
    fields = {k: v for k, v in hints.items() if k != "__slots__"}
    fields[POSITION_KEY] = NotRequired[Union[dict[str, Any], None]]  # noqa: UP007 (runtime alias on 3.10)
    schema: type[Any] = TypedDict("OMNodeState", fields)  # type: ignore[misc]
    return schema


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


CurrentModel = Union[str, Callable[[RunnableConfig], str | None], None]  # noqa: UP007 (runtime alias on 3.10)


def current_model_from(config: RunnableConfig, current_model: CurrentModel) -> str | None:
    """The id of the model the next node will call (for ``activate_on_provider_change``):
    the ``current_model`` argument (a string, or a function of the run's config), else a
    string under ``config["configurable"]["model"]``, the usual place for a per-run model choice."""
    if callable(current_model):
        chosen = current_model(config)
        return str(chosen) if chosen else None
    if current_model:
        return current_model
    configured = (config.get("configurable") or {}).get("model")
    return configured if isinstance(configured, str) and configured else None


def _phase_node(
    om: ObservationalMemory, name: str, messages_key: str, goto: str, on_abort: OnAbort,
    current_model: CurrentModel = None, live: bool = False,
) -> Runnable[Any, Command[str]]:
    """One OM phase as a node that routes with ``Command``: on to ``goto``, or to ``END`` when aborted."""
    phase = _NODE_PHASE[name]

    def finish(state: Any, messages: list[BaseMessage], context: OMContext, position: dict[str, Any]) -> Command[str]:
        update = state_update(messages, context)
        if context.aborted is None:
            # one dict, and none at all when the phase changed nothing (its streamed update is then
            # None, like any middleware hook with nothing to do)
            changes: dict[str, Any] = {}
            if position != state_value(state, POSITION_KEY):
                changes[POSITION_KEY] = position
            if update:
                changes[messages_key] = update
            return Command(update=changes or None, goto=goto)
        logger.warning("langchain-om %s aborted the step: %s", name, context.aborted)
        if on_abort == "raise":
            raise OMAborted(f"{name}: {context.aborted}")
        return Command(update={messages_key: [*update, tripwire_message(context.aborted)], POSITION_KEY: position},
                       goto=END)

    async def arun(state: Any, config: RunnableConfig) -> Command[str]:
        messages = state_messages(state, messages_key)
        context, position, _, _ = await aprocess_at_checkpoint(
            om, state, messages, config, live=live, phases=(phase,),
            current_model=current_model_from(config, current_model))
        return finish(state, messages, context, position)

    def run(state: Any, config: RunnableConfig) -> Command[str]:
        messages = state_messages(state, messages_key)
        # OM's sync twin runs on its private loop and dispatches the events with this run's config
        context, position, _, _ = om._loop.run(aprocess_at_checkpoint(
            om, state, messages, config, live=live, phases=(phase,),
            current_model=current_model_from(config, current_model)))
        return finish(state, messages, context, position)

    return RunnableLambda(run, afunc=arun, name=name)


def _remap(before: str, target: str = ACTIVATOR) -> Any:
    def remap(result: Any) -> Any:
        if isinstance(result, (list, tuple)):
            return [target if r == before else r for r in result]
        return target if result == before else result

    return remap


def om_turn_end_node(om: ObservationalMemory, *, messages_key: str = "messages") -> Runnable[Any, dict[str, Any]]:
    """A node for the end of an agent turn: stores the final messages and, with
    ``observation.buffer_on_idle``, starts background buffering of what is still pending while
    the user is away. ``add_observational_memory`` wires it in front of ``END`` by itself when
    ``buffer_on_idle`` is on; use this to place it yourself."""

    async def arun(state: Any, config: RunnableConfig) -> dict[str, Any]:
        position = await aturn_end_at_checkpoint(om, state, state_messages(state, messages_key), config)
        return {POSITION_KEY: position}

    def run(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state, messages_key)
        return {POSITION_KEY: om._loop.run(aturn_end_at_checkpoint(om, state, messages, config))}

    return RunnableLambda(run, afunc=arun, name=TURN_END)


def _route_ends_through_turn_end(builder: StateGraph[Any, Any, Any, Any], source: str) -> bool:
    """Rewire ``source -> END`` (plain or conditional) to ``source -> om_turn_end -> END``."""
    rewired = False
    if (source, END) in builder.edges:
        builder.edges.discard((source, END))
        builder.edges.add((source, TURN_END))
        rewired = True
    for branch_name, spec in list(builder.branches.get(source, {}).items()):
        if spec.ends is not None:
            if END in spec.ends.values():
                ends: dict[Hashable, str] = {k: (TURN_END if v == END else v) for k, v in spec.ends.items()}
                builder.branches[source][branch_name] = spec._replace(ends=ends)
                rewired = True
        else:
            wrapped = spec.path | RunnableLambda(_remap(END, TURN_END))
            builder.branches[source][branch_name] = spec._replace(path=wrapped)
            rewired = True
    return rewired


def _reaches_end(result: Any, ends: Mapping[Hashable, str] | None) -> bool:
    """Whether a route's result (a key, a node name, or a list of them and ``Send``s) goes to END."""
    for item in result if isinstance(result, (list, tuple)) else [result]:
        try:
            target = ends.get(item, item) if ends is not None else item
        except TypeError:  # an unhashable Send
            continue
        if target == END:
            return True
    return False


def _run_closer(om: ObservationalMemory, goes_to_end: Callable[[Any], bool], result: Callable[[Any], Any],
                ) -> Runnable[Any, Any]:
    """A route step that closes the run (``LiveRuns.aclose``) when the turn leaves for END."""

    async def aclose(value: Any, config: RunnableConfig) -> Any:
        if goes_to_end(value):
            await om._live_runs.aclose(config)
        return result(value)

    def close(value: Any, config: RunnableConfig) -> Any:
        if goes_to_end(value):
            om.run_sync(om._live_runs.aclose(config), twin="graph.ainvoke(...)")
        return result(value)

    return RunnableLambda(close, afunc=aclose, name="om_run_end")


def _close_at_exits(builder: StateGraph[Any, Any, Any, Any], source: str, om: ObservationalMemory) -> bool:
    """Without an ``om_turn_end`` node, close the run where ``source`` exits to END (plain or
    conditional edges), so events of background cycles ending later wait for the next step.
    False when ``source`` never exits to END (then no run is treated as open)."""
    closes = False
    for branch_name, spec in list(builder.branches.get(source, {}).items()):
        if spec.ends is not None and END not in spec.ends.values():
            continue
        ends = spec.ends

        def goes_to_end(value: Any, ends: Mapping[Hashable, str] | None = ends) -> bool:
            return _reaches_end(value, ends)

        builder.branches[source][branch_name] = spec._replace(
            path=spec.path | _run_closer(om, goes_to_end, lambda value: value))
        closes = True
    if (source, END) in builder.edges:
        builder.edges.discard((source, END))
        builder.add_conditional_edges(source, _run_closer(om, lambda _state: True, lambda _state: END), [END])
        closes = True
    return closes


def add_observational_memory(
    builder: StateGraph[Any, Any, Any, Any],
    om: ObservationalMemory,
    *,
    before: str = "agent",
    messages_key: str = "messages",
    on_abort: OnAbort = "end",
    current_model: CurrentModel = None,
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
    ``config["configurable"]``. System messages in state are the caller's instructions: they
    stay first in state and are never observed (docs/what-the-model-sees.md). Returns ``builder``.

    The OM nodes route with ``Command`` (each declares its next node and ``END`` as
    destinations). When OM aborts a step (it cannot build a context, e.g. no tier of a
    ``ModelByInputTokens`` fits the Observer's input), ``on_abort`` decides:

    - ``"end"`` (default): the node appends a tripwire ``AIMessage`` (empty content,
      ``response_metadata["om_tripwire"]`` = the reason) and the run ends there; neither
      ``before`` nor anything after it runs, like ``ObservationalMemoryMiddleware``'s tripwire.
      Check ``result["messages"][-1].response_metadata.get("om_tripwire")``.
    - ``"raise"``: the node raises ``OMAborted`` and the invoke fails; the checkpoint keeps
      what the nodes before it wrote, so the thread can be retried or continued.

    With ``observation.buffer_on_idle`` on, the turn's exits from ``before`` to ``END``
    (plain or conditional) go through an ``om_turn_end`` node that stores the final reply
    and buffers what is pending while the user is away (see ``om_turn_end_node``).

    ``current_model`` names the model ``before`` will call (``"openai:gpt-5-mini"``, or a
    function of the run's config), so ``activate_on_provider_change`` can compare it with the
    model that wrote the last reply; without it, a string ``config["configurable"]["model"]``
    is used when present.
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
    if on_abort not in ("end", "raise"):
        raise ValueError(f"on_abort: expected 'end' or 'raise', got {on_abort!r}")
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

    schema = node_input_schema(builder)
    live = False  # whether the turn's end closes the run (live background events, live_runs.py)
    if om.config.buffering_enabled and om.config.observation.buffer_on_idle and TURN_END not in builder.nodes:
        if _route_ends_through_turn_end(builder, before):
            builder.add_node(TURN_END, om_turn_end_node(om, messages_key=messages_key), input_schema=schema)
            builder.add_edge(TURN_END, END)
            live = True
    if not live:
        live = _close_at_exits(builder, before, om)
    for name, goto in ((ACTIVATOR, OBSERVER), (OBSERVER, REFLECTOR), (REFLECTOR, before)):
        builder.add_node(name, _phase_node(om, name, messages_key, goto, on_abort, current_model, live),
                         destinations=(goto, END), input_schema=schema)
    return builder


# ------------------------------------------------------------------ create_react_agent


def om_pre_model_hook(om: ObservationalMemory, *, messages_key: str = "messages") -> Runnable[Any, dict[str, Any]]:
    """A ``pre_model_hook`` for ``langgraph.prebuilt.create_react_agent`` (deprecated API, still
    supported): the model sees the OM context via ``llm_input_messages``; stored history is
    left intact (the full list stays in state; OM keeps its own bounded view).

    Works with ``invoke`` and ``ainvoke``. ``create_react_agent`` always runs its model after
    the hook, so an aborted OM step (see ``add_observational_memory``) raises ``OMAborted``
    rather than letting the model answer without its memory."""

    def result(context: OMContext) -> dict[str, Any]:
        return {"llm_input_messages": require_context(context, "om_pre_model_hook").to_messages()}

    async def ahook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        return result(await om.aprocess(thread_id, messages, resource_id=resource_id, config=config))

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        messages = state_messages(state, messages_key)
        thread_id, resource_id = ids_from_config(config)
        return result(om.process(thread_id, messages, resource_id=resource_id, config=config))

    return RunnableLambda(hook, afunc=ahook, name="om_pre_model_hook")

