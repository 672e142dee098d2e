"""Which messages a caller's own checkpointed state may drop after a step (the middleware's and
the graph nodes' state trimming): what OM stored and no longer shows, never the current turn,
and a tool call with its results together."""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from ..foundation.inputs import KnownMessage
from .state import OMContext

_ID = operator.attrgetter("id")


def leaving_ids(known: Mapping[str, KnownMessage], messages: Sequence[BaseMessage], context: OMContext, *,
                keep_unobserved: bool = True) -> list[str]:
    """``ObservationalMemory.observed_state_ids`` (see there); ``known``: the ids OM stored."""
    if context.aborted is not None:
        return []
    newest_human = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].type == "human"), -1)
    if newest_human <= 0:
        return []
    # sets built in C (``map``): the state holds the whole unobserved window, and nearly every
    # step leaves nothing, so a Python pass over it would be most of this call's cost
    candidates = set(map(_ID, messages[:newest_human]))
    if keep_unobserved:
        candidates.difference_update(map(_ID, context.messages))
    eligible = {mid for mid in candidates if mid and mid in known}
    if not eligible:  # most steps: the state is the window plus the turn, nothing leaves
        return []
    caller = {call["id"]: m.id for m in messages if isinstance(m, AIMessage) for call in m.tool_calls}
    units: dict[str | None, list[str | None]] = {}  # a tool call and its results form one unit
    for message in messages:
        unit = caller.get(message.tool_call_id, message.id) if isinstance(message, ToolMessage) else message.id
        units.setdefault(unit, []).append(message.id)
    leaving = {mid for members in units.values() if all(m in eligible for m in members) for mid in members}
    return [m.id for m in messages if m.id is not None and m.id in leaving]

