"""A value worked out once per live object (a chat model's name, its image support).

Chat models are pydantic objects that need not be hashable, so the memo is keyed by ``id`` and
keeps the object itself beside the value: an ``id`` reused by a new object after the old one
was freed never hits, since the held object is compared by identity. Bounded: a dynamic model
spec may hand out a new model object per call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class ObjectMemo(Generic[V]):
    """``compute(obj)`` once per object; at ``limit`` objects the memo starts afresh."""

    def __init__(self, compute: Callable[[Any], V], limit: int = 64) -> None:
        self._compute = compute
        self._limit = limit
        self._held: dict[int, tuple[Any, V]] = {}

    def __call__(self, obj: Any) -> V:
        held = self._held.get(id(obj))
        if held is not None and held[0] is obj:
            return held[1]
        value = self._compute(obj)
        if len(self._held) >= self._limit:
            self._held.clear()
        self._held[id(obj)] = (obj, value)
        return value
