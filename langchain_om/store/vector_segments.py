"""Vector segments: a resource's stored embeddings, also kept as a few large contiguous blobs.

Why: after a restart the semantic recall index must hold every vector of the resource in
memory before it can score a query; reading 100k rows of ``message_vectors`` one by one takes
seconds (row decoding, one ``bytes`` object per row), reading ~100 one-megabyte blobs takes tens
of milliseconds. A segment covers the position range ``(lo, hi]`` of one resource and space
and holds exactly the rows stored there when it was written (``rows`` of them, positions
summing to ``pos_sum``: the store checks both against the table in the writing transaction).
Rows are never updated, only deleted, so a segment stays exact until a row of its range is
deleted: the store then drops the segment in the same transaction, and the reader falls back to
the table for that range until a new segment is written. The body's format belongs to the
reader (``extensions/vector_index``); the store only keeps it, scoped by resource and space.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Sequence
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from .base import InvalidStoreInput, VectorBatch, check_resource_id
from .search import check_space


class VectorSegment(BaseModel):
    """A contiguous copy of a resource's vectors with positions in ``(lo, hi]``."""

    model_config = ConfigDict(extra="forbid")

    lo: int
    hi: int
    rows: int
    pos_sum: int
    body: bytes


@runtime_checkable
class SupportsVectorSegments(Protocol):
    """Optional: a store that keeps vector segments (the SQLite and PostgreSQL stores). Without
    it the index reads every row of ``message_vectors`` after a restart (exact, only slower)."""

    async def aget_vector_segments(self, resource_id: str, space: str) -> list[VectorSegment]:
        """The resource's segments in ``space``, by ``lo``."""

    async def aget_vectors_at(self, resource_id: str, space: str, positions: Sequence[int]) -> VectorBatch:
        """The resource's rows at ``positions`` in ``space`` (those still stored), in ``pos`` order."""

    async def aput_vector_segment(self, resource_id: str, space: str, segment: VectorSegment) -> bool:
        """Keep ``segment`` if the rows stored in its range match its ``rows`` and ``pos_sum`` and no
        other segment overlaps it; returns whether it was kept."""


def check_segment(resource_id: str, space: str, segment: VectorSegment) -> tuple[str, str, VectorSegment]:
    """The arguments of ``aput_vector_segment``, checked (a clear error naming the field)."""
    resource_id = check_resource_id(resource_id)
    space = check_space(space)
    if not isinstance(segment, VectorSegment):
        raise InvalidStoreInput("segment", "must be a VectorSegment")
    if not 0 <= segment.lo < segment.hi or segment.rows < 0 or segment.pos_sum < 0:
        raise InvalidStoreInput("segment", "needs 0 <= lo < hi and non-negative rows and pos_sum")
    return resource_id, space, segment


def check_positions(positions: Sequence[int]) -> list[int]:
    """``aget_vectors_at``'s positions, checked (at most 10,000 per call; numpy ints welcome)."""
    if isinstance(positions, (str, bytes)) or len(positions) > 10_000:
        raise InvalidStoreInput("positions", "must be a sequence of at most 10,000 ints")
    try:
        return [operator.index(pos) for pos in positions if not isinstance(pos, bool) or _no_bool()]
    except TypeError:
        raise InvalidStoreInput("positions", "must hold ints") from None


def _no_bool() -> bool:
    raise TypeError("bool")


def touched(bounds: Sequence[tuple[str, int, int]], positions: Iterable[int]) -> set[tuple[str, int]]:
    """The ``(space, lo)`` keys of the segments (``(space, lo, hi)``, any order) whose range holds
    one of ``positions``: the segments a deletion makes stale."""
    by_space: dict[str, list[tuple[int, int]]] = {}
    for space, lo, hi in bounds:
        by_space.setdefault(space, []).append((lo, hi))
    ranges = [(space, sorted(spans)) for space, spans in by_space.items()]
    stale: set[tuple[str, int]] = set()
    for pos in positions:
        for space, spans in ranges:
            at = bisect.bisect_left(spans, (pos, pos)) - 1  # the last segment with lo < pos
            if at >= 0 and spans[at][0] < pos <= spans[at][1]:
                stale.add((space, spans[at][0]))
    return stale
