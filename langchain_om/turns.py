"""What may leave the model's context this step: the rules that keep the current turn readable.

The model must always read the newest human message and the tool round it is answering: an
observation that takes a tool result before the model has seen it leaves the model answering
a question it can no longer read. These functions are pure (no I/O), so every cut the engine
makes (a synchronous observation, an activation of buffered chunks, a resource-scope sweep)
asks the same question and gets the same answer.

Definitions, over a thread's unobserved window (oldest first):

* the *turn* starts at the newest human message (with the temporal marker that announces it),
  or at the window's start when no human message is left in it (a long tool loop whose request
  was observed and is pinned);
* a *tool round* is an AI message that calls tools plus the tool results answering it; a round
  is *answered* once an AI message follows its results;
* the *newest round* (the last AI message with tool calls, onwards) always stays, whatever its
  size: it is the one thing the model must read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage

from .messages import has_tool_calls, last_human_index, safe_cut_at_or_after, safe_cut_at_or_before
from .store.base import StoredMessage
from .temporal import is_marker_message


def turn_start(messages: Sequence[BaseMessage]) -> int:
    """Index where the current turn starts (0 when no human message is in ``messages``)."""
    human = last_human_index(messages)
    if human is None:
        return 0
    while human > 0 and is_marker_message(messages[human - 1]):
        human -= 1  # a time-gap marker belongs to the message it announces
    return human


def newest_round_start(messages: Sequence[BaseMessage], start: int = 0) -> int | None:
    """Index of the last AI message with tool calls at or after ``start``, if any."""
    for index in range(len(messages) - 1, start - 1, -1):
        if has_tool_calls(messages[index]):
            return index
    return None


def removable_prefix(messages: Sequence[BaseMessage], tokens: Sequence[int], *, turn_limit: int) -> int:
    """How many leading messages may leave the context at most (always a safe cut).

    Everything before the current turn may go. The turn itself stays whole unless it alone is
    over ``turn_limit`` (``block_after``); then its answered tool rounds may go too (the human
    message is pinned back into the context), but never the newest round.
    """
    start = turn_start(messages)
    before_turn = safe_cut_at_or_before(messages, start)
    if sum(tokens[start:]) <= turn_limit:
        return before_turn
    newest = newest_round_start(messages, start)
    if newest is None:
        return before_turn
    return max(before_turn, safe_cut_at_or_before(messages, newest))


def sync_cut(messages: Sequence[BaseMessage], tokens: Sequence[int], *, message_limit: int, turn_limit: int,
             keep: int) -> int:
    """How many of the window's messages a synchronous observation takes.

    Everything before the current turn, at a safe boundary. When the turn alone is over
    ``turn_limit`` it also takes the turn's answered rounds, oldest first, until about ``keep``
    tokens are left, never past :func:`removable_prefix`. ``message_limit`` is kept for callers
    that observe a turn over the message threshold but under ``turn_limit``: nothing of it goes.
    """
    limit = removable_prefix(messages, tokens, turn_limit=turn_limit)
    base = safe_cut_at_or_before(messages, turn_start(messages))
    if limit <= base or sum(tokens[base:]) <= message_limit:
        return min(base, limit)
    target, left = base, sum(tokens[base:])
    while target < limit and left > keep:
        left -= tokens[target]
        target += 1
    return min(safe_cut_at_or_after(messages, target), limit)


def other_thread_cut(messages: Sequence[BaseMessage]) -> int:
    """How much of *another* thread's window a resource-scope sweep may take: never its current
    turn (its newest human message and any tool round after it), so its next context starts with
    its own user message."""
    return safe_cut_at_or_before(messages, turn_start(messages))


def pinned_row(messages: Sequence[BaseMessage], rows: Sequence[StoredMessage], cut: int) -> StoredMessage | None:
    """The newest human message's row if a cut at ``cut`` would observe it (``messages`` are the
    parsed ``rows``)."""
    human = last_human_index(messages)
    if human is not None and human < cut:
        return rows[human]
    return None


def pin_message(metadata: dict[str, Any], row: StoredMessage) -> None:
    """Keep the thread's newest human message in its context after an observation took it; the
    pin names the thread and seq, so a copy of the id in another thread never stands in for it."""
    metadata.pop("pinned_message_id", None)
    metadata.setdefault("pinned", {})[row.thread_id] = [row.id, row.seq]
