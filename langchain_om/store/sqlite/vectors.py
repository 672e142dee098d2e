"""The SQLite store's vector segments (see ``vector_segments``): kept, read, and dropped in the
transaction that deletes a row of their range."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..base import VectorBatch, check_resource_id
from ..search import check_space
from ..vector_segments import VectorSegment, check_positions, check_segment, touched
from .connection import immediate
from .records import SQLiteRecords


def drop_stale_segments(conn: sqlite3.Connection, resource_id: str, positions: Sequence[int]) -> None:
    """Drop the resource's segments that hold one of the deleted ``positions`` (caller's transaction)."""
    if not positions:
        return
    bounds = conn.execute("SELECT space, lo, hi FROM vector_segments WHERE resource_id = ?", (resource_id,)).fetchall()
    stale = touched([(str(s), int(lo), int(hi)) for s, lo, hi in bounds], positions)
    conn.executemany("DELETE FROM vector_segments WHERE resource_id = ? AND space = ? AND lo = ?",
                     [(resource_id, space, lo) for space, lo in stale])


class SQLiteVectorSegments(SQLiteRecords):
    """Vector segments of a SQLite store."""

    async def aget_vector_segments(self, resource_id: str, space: str) -> list[VectorSegment]:
        resource_id, space = check_resource_id(resource_id), check_space(space)

        def run(conn: sqlite3.Connection) -> list[VectorSegment]:
            rows = conn.execute(
                "SELECT lo, hi, rows, pos_sum, body FROM vector_segments WHERE resource_id = ? AND space = ? "
                "ORDER BY lo", (resource_id, space)).fetchall()
            return [VectorSegment.model_construct(lo=r[0], hi=r[1], rows=r[2], pos_sum=r[3], body=r[4]) for r in rows]

        return await self._run(run)

    async def aget_vectors_at(self, resource_id: str, space: str, positions: Sequence[int]) -> VectorBatch:
        resource_id, space, wanted = check_resource_id(resource_id), check_space(space), check_positions(positions)

        def run(conn: sqlite3.Connection) -> VectorBatch:
            rows = conn.execute(
                "SELECT pos, thread_id, message_id, vector FROM message_vectors WHERE pos IN "
                "(SELECT value FROM json_each(?)) AND resource_id = ? AND space = ? ORDER BY pos",
                (json.dumps(wanted), resource_id, space)).fetchall()
            return VectorBatch.of(rows)

        return await self._run(run)

    async def aput_vector_segment(self, resource_id: str, space: str, segment: VectorSegment) -> bool:
        resource_id, space, segment = check_segment(resource_id, space, segment)

        def run(conn: sqlite3.Connection) -> bool:
            with immediate(conn):
                found = conn.execute(
                    "SELECT COUNT(*), COALESCE(SUM(pos), 0) FROM message_vectors "
                    "WHERE resource_id = ? AND space = ? AND pos > ? AND pos <= ?",
                    (resource_id, space, segment.lo, segment.hi)).fetchone()
                if (int(found[0]), int(found[1])) != (segment.rows, segment.pos_sum):
                    return False
                return conn.execute(
                    "INSERT INTO vector_segments (resource_id, space, lo, hi, rows, pos_sum, body) "
                    "SELECT ?, ?, ?, ?, ?, ?, ? WHERE NOT EXISTS (SELECT 1 FROM vector_segments "
                    "WHERE resource_id = ? AND space = ? AND lo < ? AND hi > ?) ON CONFLICT DO NOTHING",
                    (resource_id, space, segment.lo, segment.hi, segment.rows, segment.pos_sum, segment.body,
                     resource_id, space, segment.hi, segment.lo)).rowcount > 0

        return await self._run(run)
