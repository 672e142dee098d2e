"""One OM turn of a LangGraph run: what happens on a step when a checkpointer may be there.

The graph nodes (``graph.py``), the ``create_agent`` middleware (``middleware.py``) and the chat
history (``history.py``) all run their step through this module, so "what does OM do on a turn"
has one answer:

- the run's ids come from ``config["configurable"]`` (``thread_id``; ``resource_id`` or its alias
  ``user_id``) and the runtime context (``ids_from_config``);
- the step follows the checkpoint the run started from: ``aprocess_at_checkpoint`` resolves OM's
  branch for that checkpoint (``extensions/branches.py``: time travel and forks), runs the engine's
  step on it and returns the position to checkpoint with the state; ``aturn_end_at_checkpoint``
  stores the turn's final messages there;
- an aborted step (OM could not build a context) ends in a tripwire ``AIMessage`` for the graph
  and the middleware (``tripwire_message``), or in ``OMAborted`` for callers that cannot skip their
  model call (``require_context``: the chat history, ``om_pre_model_hook``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from ..engine import ObservationalMemory, OMAborted, OMContext
from ..engine.live_runs import closed_at_turn_end
from ..engine.persistence import HeadMovedOn, deferred_fork_check
from ..extensions.branches import POSITION_KEY, BranchRun, aposition, aresolve, is_checkpointed
from ..foundation.run_ids import resource_from

TRIPWIRE_KEY = "om_tripwire"
"""``response_metadata`` key of the empty AI message that ends an aborted OM step (no model call)."""

def tripwire_message(reason: str) -> AIMessage:
    """The result of an aborted OM step: no text, no tool calls, the reason in ``response_metadata``."""
    return AIMessage(content="", response_metadata={TRIPWIRE_KEY: reason})


def require_context(context: OMContext, where: str) -> OMContext:
    """``context`` itself, or ``OMAborted`` naming ``where`` when OM could not build it: for callers
    whose model runs next whatever they return, so an over-budget history never reaches it."""
    if context.aborted is not None:
        raise OMAborted(f"{where}: {context.aborted}")
    return context


# ------------------------------------------------------------------ ids from the run config


def ids_from_config(config: RunnableConfig | None) -> tuple[str, str | None]:
    """``(thread_id, resource_id)`` from ``config["configurable"]`` and the runtime context.

    ``resource_id`` is optional; ``user_id`` is accepted as an alias because LangGraph
    Platform and many apps already carry the user there. ``resource_id`` wins if both are set.
    The user may also come from the runtime context (``invoke(..., context=...)``); when both
    places name one they must agree (``foundation/run_ids.py``).
    """
    configurable: Mapping[str, Any] = (config or {}).get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None or (isinstance(thread_id, str) and not thread_id.strip()):
        raise ValueError(
            'config["configurable"]["thread_id"]: required by Observational Memory '
            '(pass config={"configurable": {"thread_id": ...}})'
        )
    return str(thread_id), resource_from(config)


def state_messages(state: Any, key: str) -> list[BaseMessage]:
    """The graph state's messages under ``key``, checked: a clear error when the key is missing or holds
    something other than messages (the state needs the ``add_messages`` reducer)."""
    value = state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)
    if value is None:
        raise ValueError(f"state.{key}: the graph state has no messages under this key")
    messages = list(value)
    for message in messages:
        if not isinstance(message, BaseMessage):
            raise TypeError(f"state.{key}: expected BaseMessage objects (use the add_messages reducer), "
                            f"got {type(message).__name__}")
    return messages


def state_value(state: Any, key: str) -> Any:
    """``state[key]`` of a dict or object state, or None."""
    return state.get(key) if isinstance(state, Mapping) else getattr(state, key, None)


async def aprocess_at_checkpoint(
    om: ObservationalMemory, state: Any, messages: list[BaseMessage], config: RunnableConfig, *,
    live: bool = False, **kwargs: Any,
) -> tuple[OMContext, dict[str, Any], str, str | None]:
    """One OM step that follows the checkpoint the run started from (see ``branches.py``).

    Returns the context, the position to write into state under ``om_position``, and the
    ``(branch, resource_id)`` the step ran on (OM's thread for this checkpoint and resource).
    ``live``: the run's end of turn closes it (``aturn_end_at_checkpoint`` or ``_close_at_exits``),
    so background cycles that end before that stream their events into it (``live_runs.py``).
    """
    context, run = await aprocess_on_branch(om, state, messages, config, live=live, **kwargs)
    return context, await aposition(om, run, checkpointed=is_checkpointed(config)), run.branch, run.resource_id


async def aprocess_on_branch(
    om: ObservationalMemory, state: Any, messages: list[BaseMessage], config: RunnableConfig, *,
    live: bool = False, **kwargs: Any,
) -> tuple[OMContext, BranchRun]:
    """``aprocess_at_checkpoint`` without the position: for a caller that writes the position
    later (the middleware writes it once, after the model answered), saving its store reads."""
    thread_id, resource_id = ids_from_config(config)
    position = state_value(state, POSITION_KEY)
    run = await aresolve(om, thread_id, resource_id, position, messages, defer=True)
    if run.deferred is not None or run.only_new is not None:
        # the step's append checks that the branch did not move on (HEAD_AT_MOST) or that it holds
        # none of the state's messages (ONLY_NEW, a step without a position)
        try:
            with deferred_fork_check(om.resolve_resource(run.branch, run.resource_id), run.branch,
                                     at_most=run.deferred, only_new=run.only_new), closed_at_turn_end(live):
                return await om.aprocess(run.branch, messages, resource_id=run.resource_id, config=config,
                                         **kwargs), run
        except HeadMovedOn:  # nothing was stored: the full check decides (a fork when run from the past)
            pass
        run = await aresolve(om, thread_id, resource_id, position, messages)
    with closed_at_turn_end(live):
        context = await om.aprocess(run.branch, messages, resource_id=run.resource_id, config=config, **kwargs)
    return context, run


async def aturn_end_at_checkpoint(
    om: ObservationalMemory, state: Any, messages: list[BaseMessage], config: RunnableConfig,
) -> dict[str, Any]:
    """``aon_turn_end`` on the checkpoint's branch; returns the position to write into state."""
    thread_id, resource_id = ids_from_config(config)
    run = await aresolve(om, thread_id, resource_id, state_value(state, POSITION_KEY), messages)
    await om.aon_turn_end(run.branch, messages, resource_id=run.resource_id, config=config)
    await om._live_runs.aclose(config)  # the run ends here: later background events wait for the next step
    return await aposition(om, run, checkpointed=is_checkpointed(config))
