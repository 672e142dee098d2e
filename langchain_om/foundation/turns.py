"""What may leave the model's context this step: the rules that keep the current turn readable.

The model must always read the newest human message and the tool round it is answering: an
observation that takes a tool result before the model has seen it leaves the model answering
a question it can no longer read. These functions are pure (no I/O) and read only each
message's *kind*, so the planner, the resource-scope sweep and the Observer's batching ask the
same question and get the same answer, without parsing a message.

Kinds: ``human``, ``marker`` (a time-gap note that belongs to the human message after it),
``call`` (an AI message that calls tools), ``ai``, ``tool`` and ``other`` (edit notes, anything
else). Definitions, over a thread's unobserved window (oldest first):

* the *turn* starts at the newest human message (with the temporal marker that announces it),
  or at the window's start when no human message is left in it (a long tool loop whose request
  was observed and is pinned);
* a *tool round* is a ``call`` plus the tool results answering it; a round is *answered* once an
  AI message follows its results;
* the *newest round* (the last ``call``, onwards) always stays, whatever its size: it is the one
  thing the model must read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.messages import AIMessage, BaseMessage

from ..store.base import StoredMessage

Kind = Literal["human", "marker", "call", "ai", "tool", "other"]
MARKER_ROW_KIND = "temporal-marker"
"""``StoredMessage.kind`` of a time-gap marker row (``langchain_om.extensions.temporal``)."""
_MARKER_FLAG = "langchain_om_kind"


def kind_of_row(row: StoredMessage) -> Kind:
    """A stored row's kind, read from its stored dict (no parsing)."""
    if row.kind == MARKER_ROW_KIND:
        return "marker"
    if row.kind != "message":
        return "other"
    return _kind_of_dict(row.data)


def _kind_of_dict(data: Mapping[str, Any]) -> Kind:
    kind = data.get("type")
    if kind == "human":
        inner = data.get("data")
        extra = inner.get("additional_kwargs") if isinstance(inner, dict) else None
        if isinstance(extra, dict) and extra.get(_MARKER_FLAG) == MARKER_ROW_KIND:
            return "marker"
        return "human"
    if kind in ("ai", "AIMessageChunk"):
        inner = data.get("data")
        return "call" if isinstance(inner, dict) and inner.get("tool_calls") else "ai"
    if kind == "tool":
        return "tool"
    return "other"


def kind_of_message(message: BaseMessage) -> Kind:
    """A LangChain message's kind."""
    if message.type == "human":
        return "marker" if message.additional_kwargs.get(_MARKER_FLAG) == MARKER_ROW_KIND else "human"
    if isinstance(message, AIMessage):
        return "call" if message.tool_calls else "ai"
    if message.type == "tool":
        return "tool"
    return "other"


def is_safe_cut(kinds: Sequence[Kind], cut: int) -> bool:
    """True if taking ``kinds[:cut]`` and keeping the rest splits no tool exchange."""
    if cut <= 0:
        return True
    if cut < len(kinds) and kinds[cut] == "tool":
        return False
    return kinds[cut - 1] != "call"


def safe_cut_before(kinds: Sequence[Kind], cut: int) -> int:
    """The largest safe cut not after ``cut`` (0 when there is none)."""
    cut = min(max(cut, 0), len(kinds))
    while cut > 0 and not is_safe_cut(kinds, cut):
        cut -= 1
    return cut


def safe_cut_after(kinds: Sequence[Kind], cut: int) -> int:
    """The smallest safe cut not before ``cut`` (falls back to the largest before the end)."""
    cut = min(max(cut, 0), len(kinds))
    while cut < len(kinds) and not is_safe_cut(kinds, cut):
        cut += 1
    if cut == len(kinds) and not is_safe_cut(kinds, cut):
        return safe_cut_before(kinds, cut)
    return cut


def last_human(kinds: Sequence[Kind]) -> int | None:
    """Index of the newest human message, if any."""
    for index in range(len(kinds) - 1, -1, -1):
        if kinds[index] == "human":
            return index
    return None


def turn_start(kinds: Sequence[Kind]) -> int:
    """Index where the current turn starts (0 when no human message is in the window)."""
    human = last_human(kinds)
    if human is None:
        return 0
    while human > 0 and kinds[human - 1] == "marker":
        human -= 1  # a time-gap marker belongs to the message it announces
    return human


def newest_round_start(kinds: Sequence[Kind], start: int = 0) -> int | None:
    """Index of the last tool call at or after ``start``, if any."""
    for index in range(len(kinds) - 1, start - 1, -1):
        if kinds[index] == "call":
            return index
    return None


def removable_prefix(kinds: Sequence[Kind], tokens: Sequence[int], *, turn_limit: int) -> int:
    """How many leading messages may leave the context at most (always a safe cut).

    Everything before the current turn may go. The turn itself stays whole unless it alone is
    over ``turn_limit`` (``block_after``); then its answered tool rounds may go too (the human
    message is pinned back into the context), but never the newest round.
    """
    start = turn_start(kinds)
    before_turn = safe_cut_before(kinds, start)
    if sum(tokens[start:]) <= turn_limit:
        return before_turn
    newest = newest_round_start(kinds, start)
    if newest is None:
        return before_turn
    return max(before_turn, safe_cut_before(kinds, newest))


def sync_cut(kinds: Sequence[Kind], tokens: Sequence[int], *, message_limit: int, turn_limit: int,
             keep: int) -> int:
    """How many of the window's messages a synchronous observation takes.

    Everything before the current turn, at a safe boundary. When the turn alone is over
    ``turn_limit`` it also takes the turn's answered rounds, oldest first, until about ``keep``
    tokens are left, never past :func:`removable_prefix`. A turn over ``message_limit`` but under
    ``turn_limit`` stays whole.
    """
    limit = removable_prefix(kinds, tokens, turn_limit=turn_limit)
    base = safe_cut_before(kinds, turn_start(kinds))
    if limit <= base or sum(tokens[base:]) <= message_limit:
        return min(base, limit)
    target, left = base, sum(tokens[base:])
    while target < limit and left > keep:
        left -= tokens[target]
        target += 1
    return min(safe_cut_after(kinds, target), limit)


def other_thread_cut(kinds: Sequence[Kind]) -> int:
    """How much of *another* thread's window a resource-scope sweep may take: never its current
    turn (its newest human message and any tool round after it), so its next context starts with
    its own user message."""
    return safe_cut_before(kinds, turn_start(kinds))


def pinned_index(kinds: Sequence[Kind], cut: int) -> int | None:
    """The newest human message's index if a cut at ``cut`` would take it (it is then pinned
    back into the context)."""
    human = last_human(kinds)
    return human if human is not None and human < cut else None


def pinned_row(rows: Sequence[StoredMessage], kinds: Sequence[Kind], cut: int) -> StoredMessage | None:
    """The row :func:`pinned_index` names, if any."""
    index = pinned_index(kinds, cut)
    return rows[index] if index is not None else None


def pin_message(metadata: dict[str, Any], row: StoredMessage) -> None:
    """Keep the thread's newest human message in its context after an observation took it; the
    pin names the thread and seq, so a copy of the id in another thread never stands in for it."""
    metadata.pop("pinned_message_id", None)
    metadata.setdefault("pinned", {})[row.thread_id] = [row.id, row.seq]
