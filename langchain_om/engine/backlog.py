"""Split a backlog the Observer cannot take in one call into calls it can, in order.

A synchronous observation takes everything before the newest human turn. After an outage
(or with a large ``message_tokens``) that can be far more than one Observer call holds, and a
call that can never fit fails on every step. ``split_backlog`` cuts it into parts of at most
``observer_batch_limit`` tokens at safe boundaries (a tool call never leaves its result
behind); the engine observes and commits them oldest first, so a failure part-way keeps what
was already observed and the next step resumes at the first unobserved message.

The limit is ``observation.max_tokens_per_batch``, lowered to the Observer model's input
limit (minus room for the prompt and the previous observations) when the model publishes one
(``BaseChatModel.profile["max_input_tokens"]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..foundation.config import OMConfig
from ..foundation.turns import kind_of_row, safe_cut_after, safe_cut_before
from ..store.base import StoredMessage, total_tokens

# the Observer's instructions, previous observations and reply need room besides the transcript
_PROMPT_ROOM_TOKENS = 8_000


@dataclass
class Slice:
    """Consecutive unobserved messages of one thread that go to the Observer together."""

    thread_id: str
    messages: list[StoredMessage]

    @property
    def tokens(self) -> int:
        return total_tokens(self.messages)


def model_input_limit(spec: Any) -> int | None:
    """The model's input limit in tokens when it publishes one (first model of a fallback list)."""
    if isinstance(spec, (list, tuple)):
        return model_input_limit(spec[0]) if spec else None
    if isinstance(spec, Mapping):
        return model_input_limit(spec.get("model"))
    profile = getattr(spec, "profile", None)
    if isinstance(profile, Mapping):
        value = profile.get("max_input_tokens")
        if isinstance(value, int) and value > 0:
            return value
    return None


def observer_batch_limit(config: OMConfig) -> int:
    """Tokens of conversation one Observer call may take."""
    limit = config.observation.max_tokens_per_batch
    model_limit = model_input_limit(config.model_spec("observation"))
    if model_limit is not None:
        previous = config.observation.previous_observer_tokens or 0
        limit = min(limit, max(1_000, model_limit - _PROMPT_ROOM_TOKENS - int(previous)))
    return limit


def split_thread(piece: Slice, limit: int) -> list[Slice]:
    """Split one thread's slice into parts of at most ``limit`` tokens at safe cuts.

    A single tool exchange larger than the limit stays whole (it cannot be split safely)."""
    if piece.tokens <= limit:
        return [piece]
    msgs = piece.messages
    kinds = [kind_of_row(m) for m in msgs]
    parts: list[Slice] = []
    start = 0
    while start < len(msgs):
        end, total = start, 0
        while end < len(msgs) and (end == start or total + msgs[end].tokens <= limit):
            total += msgs[end].tokens
            end += 1
        if end < len(msgs):
            safe = safe_cut_before(kinds, end)
            if safe <= start:
                safe = safe_cut_after(kinds, start + 1)
                if safe <= start:
                    safe = len(msgs)
            end = safe
        parts.append(Slice(piece.thread_id, msgs[start:end]))
        start = end
    return parts


def split_backlog(config: OMConfig, chosen: Sequence[StoredMessage], thread_id: str) -> list[list[StoredMessage]]:
    """``chosen`` in consecutive parts that each fit one Observer call (one part when it fits)."""
    parts = split_thread(Slice(thread_id, list(chosen)), observer_batch_limit(config))
    return [part.messages for part in parts if part.messages]
