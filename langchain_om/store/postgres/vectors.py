"""The PostgreSQL store's vector segments (see ``vector_segments``): kept, read, and dropped in
the transaction that deletes a row of their range."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ..base import VectorBatch, check_resource_id
from ..search import check_space
from ..vector_segments import VectorSegment, check_positions, check_segment, touched
from .records import PostgresRecords
from .schema import Cursor, Query


async def lock_vectors(cur: Cursor, resource_id: str, *, shared: bool) -> None:
    """A transaction lock on the resource's vectors: writers and deleters of rows take it shared,
    a segment writer exclusive. So a segment's check (its range's rows) cannot race a deletion,
    and as a ``BIGSERIAL`` pos is drawn before its row commits (a lower pos can become visible
    after a higher one), no row can appear later inside a kept segment's range."""
    digest = hashlib.blake2b(resource_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    mode = "_shared" if shared else ""
    await cur.execute(f"SELECT pg_advisory_xact_lock{mode}(%s)", (int.from_bytes(digest, "big", signed=True),))


async def drop_stale_segments(cur: Cursor, q: Query, resource_id: str, positions: Sequence[int]) -> None:
    """Drop the resource's segments that hold one of the deleted ``positions`` (caller's transaction)."""
    if not positions:
        return
    await cur.execute(q("SELECT space, lo, hi FROM {s}.vector_segments WHERE resource_id = %s"), (resource_id,))
    bounds = [(str(r["space"]), int(r["lo"]), int(r["hi"])) for r in await cur.fetchall()]
    if stale := touched(bounds, positions):
        await cur.executemany(q("DELETE FROM {s}.vector_segments WHERE resource_id = %s AND space = %s AND lo = %s"),
                              [(resource_id, space, lo) for space, lo in stale])


class PostgresVectorSegments(PostgresRecords):
    """Vector segments of a PostgreSQL store."""

    async def aget_vector_segments(self, resource_id: str, space: str) -> list[VectorSegment]:
        resource_id, space = check_resource_id(resource_id), check_space(space)
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT lo, hi, rows, pos_sum, body FROM {s}.vector_segments "
                        "WHERE resource_id = %s AND space = %s ORDER BY lo"),
                (resource_id, space), binary=True)  # bytea as raw bytes, not hex text
            rows = await cur.fetchall()
        return [VectorSegment.model_construct(lo=r["lo"], hi=r["hi"], rows=r["rows"], pos_sum=r["pos_sum"],
                                              body=bytes(r["body"])) for r in rows]

    async def aget_vectors_at(self, resource_id: str, space: str, positions: Sequence[int]) -> VectorBatch:
        resource_id, space, wanted = check_resource_id(resource_id), check_space(space), check_positions(positions)
        async with self._tx() as cur:
            await cur.execute(
                self._q("SELECT pos, thread_id, message_id, vector FROM {s}.message_vectors "
                        "WHERE pos = ANY(%s) AND resource_id = %s AND space = %s ORDER BY pos"),
                (wanted, resource_id, space), binary=True)
            rows = await cur.fetchall()
        return VectorBatch.of([(r["pos"], r["thread_id"], r["message_id"], r["vector"]) for r in rows])

    async def aput_vector_segment(self, resource_id: str, space: str, segment: VectorSegment) -> bool:
        resource_id, space, segment = check_segment(resource_id, space, segment)
        async with self._tx() as cur:
            await lock_vectors(cur, resource_id, shared=False)
            await cur.execute(
                self._q("SELECT pos FROM {s}.message_vectors WHERE resource_id = %s AND space = %s "
                        "AND pos > %s AND pos <= %s"),
                (resource_id, space, segment.lo, segment.hi))
            positions = [int(r["pos"]) for r in await cur.fetchall()]
            if (len(positions), sum(positions)) != (segment.rows, segment.pos_sum):
                return False
            await cur.execute(
                self._q("INSERT INTO {s}.vector_segments (resource_id, space, lo, hi, rows, pos_sum, body) "
                        "SELECT %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS (SELECT 1 FROM {s}.vector_segments "
                        "WHERE resource_id = %s AND space = %s AND lo < %s AND hi > %s) ON CONFLICT DO NOTHING"),
                (resource_id, space, segment.lo, segment.hi, segment.rows, segment.pos_sum, segment.body,
                 resource_id, space, segment.hi, segment.lo))
            return cur.rowcount > 0
