"""Semantic recall search over embeddings kept in OM's own store.

With ``retrieval={"vector": True, "embeddings": ...}`` (and no ``vector_store`` of the
user's), each stored message is embedded once and the vector is written to the store's
``message_vectors`` table (SQLite ``BLOB`` / PostgreSQL ``bytea``, float32). The index
therefore lives in the same database as the messages: a restart, or another worker, finds
every vector already there and never re-embeds.

Query path: the store has no vector index (no pgvector here, no SQLite extension), so a
resource's vectors are held in memory, normalised float32, and scored exactly with one
matrix-vector product per block (about 5 ms for 100k x 256 dimensions, against ~850 ms for the
pure-Python scan of ``InMemoryVectorStore``). They are kept per resource (a few resources,
least recently used first out) and brought up to date on each search from the store's
``(deletions, highest pos)`` stamp: new rows are appended incrementally; a deletion (a thread,
an edited message) reloads the resource. numpy comes with the ``[vector]`` extra (install.py checks for it).

After a restart, reading 100k rows one by one took seconds. Stores that keep vector segments
(``store.vector_segments``: SQLite, PostgreSQL) hold the normalised rows as int8 codes in blobs
of ``SEGMENT_ROWS`` rows each, written by the searches themselves; a load reads the segments
and only the rows no segment holds. The rows whose error bound reaches the k-th best are
re-scored from the table, so hits are exactly the float32 scan's. A deletion drops the
segments of its rows in its transaction, so a segment never returns a deleted or edited
message's vector. See docs/search.md.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from ..store.base import InvalidStoreInput, OMStore, VectorBatch, VectorItem, replace_lone_surrogates
from ..store.search import encode_vector
from ..store.vector_segments import SupportsVectorSegments
from .vector_resident import Matrix, Resident

logger = logging.getLogger("langchain_om")

DEFAULT_CACHED_RESOURCES = 4
_LOAD_BATCH = 20_000
_RESCORE_BATCH = 5_000
SEGMENT_ROWS = 512
"""Rows per persisted segment (128 KB of int8 codes at 256 dimensions): after a restart fewer
than this many rows (plus any range a deletion reopened) are read row by row from the table."""


def embedding_space(embeddings: Embeddings) -> str:
    """A name for the vectors an embedder makes (class, model, size): vectors of two spaces are
    never compared, so switching embedders starts a fresh index instead of mixing them."""
    parts = [type(embeddings).__name__]
    for attr in ("model", "model_name", "deployment", "dimensions", "size"):
        value = getattr(embeddings, attr, None)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            parts.append(f"{attr}={value}")
    return ":".join(parts)[:256]


@dataclass
class VectorHit:
    thread_id: str
    message_id: str
    score: float


class StoreVectorIndex:
    """Embeddings of a store's messages, persisted in that store, searched with numpy."""

    def __init__(
        self, store: OMStore, embeddings: Embeddings, *, space: str | None = None,
        max_cached_resources: int = DEFAULT_CACHED_RESOURCES,
    ) -> None:
        self.store = store
        self.embeddings = embeddings
        self.space = space or embedding_space(embeddings)
        self.max_cached_resources = max(1, max_cached_resources)
        self._resident: OrderedDict[str, Resident] = OrderedDict()
        self._segments = store if isinstance(store, SupportsVectorSegments) else None
        self._locks: dict[str, asyncio.Lock] = {}

    async def aadd(self, resource_id: str, thread_id: str, texts: Sequence[tuple[str, str]]) -> int:
        """Embed ``(message_id, text)`` pairs of one thread and store the vectors."""
        if not texts:
            return 0
        vectors = await self.embeddings.aembed_documents([text for _, text in texts])
        if len(vectors) != len(texts):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        items = []
        for (message_id, _), vector in zip(texts, vectors, strict=True):
            try:
                items.append(VectorItem(thread_id=thread_id, message_id=message_id, vector=encode_vector(vector)))
            except InvalidStoreInput as exc:
                # one bad vector (NaN from a provider's glitch) costs only its own message's
                # semantic recall (keyword search still finds it), never the batch's other vectors
                logger.warning("langchain-om: not storing the embedding of message %r for recall search: %s",
                               message_id, exc)
        return await self.store.aput_vectors(resource_id, self.space, items) if items else 0

    async def _current(self, resource_id: str) -> Resident:
        """The resource's resident vectors, brought up to date with the store."""
        lock = self._locks.setdefault(resource_id, asyncio.Lock())
        async with lock:
            stamp = await self.store.avector_stamp(resource_id, self.space)
            resident = self._resident.get(resource_id)
            if resident is not None and resident.stamp != stamp:
                if stamp[0] != resident.stamp[0]:
                    resident = None  # vectors were deleted (a thread, an edit): start over
                else:
                    await self._read_table(resource_id, resident, resident.stamp[1], stamp[1])  # only added
                    resident.stamp = stamp
            if resident is None:
                resident = await self._load(resource_id, stamp)
            await self._persist(resource_id, resident)
            self._resident[resource_id] = resident
            self._resident.move_to_end(resource_id)
            while len(self._resident) > self.max_cached_resources:
                evicted, _ = self._resident.popitem(last=False)
                self._locks.pop(evicted, None)
            return resident

    async def _load(self, resource_id: str, stamp: tuple[int, int]) -> Resident:
        """Every vector of the resource: its segments, and from the table the ranges no segment
        holds (between segments, after the last one), all in ``pos`` order."""
        resident = Resident()
        segments = await self._segments.aget_vector_segments(resource_id, self.space) if self._segments else []
        done = 0
        for segment in segments:
            if segment.lo < done:
                continue  # overlaps one already read (two workers wrote at once): its rows are there
            if segment.lo > done:
                await self._read_table(resource_id, resident, done, segment.lo, page=SEGMENT_ROWS)
                resident.holes.append((done, segment.lo))
            if not resident.append_segment(segment):
                await self._read_table(resource_id, resident, segment.lo, segment.hi, page=SEGMENT_ROWS)
                resident.holes.append((segment.lo, segment.hi))
            done = segment.hi
        resident.covered = done
        top = max(stamp[1], done)
        await self._read_table(resource_id, resident, done, top)
        resident.stamp = (stamp[0], top)
        return resident

    async def _read_table(
        self, resource_id: str, resident: Resident, after: int, through: int, *, page: int = _LOAD_BATCH
    ) -> None:
        """Read the table's rows with ``after < pos <= through`` (pages of ``page`` rows: a range
        between two segments is read in small pages, not to read far past its end)."""
        batches: list[VectorBatch] = []
        while after < through:
            batch = await self.store.aget_vectors(resource_id, self.space, after_pos=after, limit=page)
            if batch.positions and batch.positions[-1] > through:
                batch = VectorBatch.of([row for row in zip(batch.positions, batch.thread_ids, batch.message_ids,
                                                           batch.vectors, strict=True) if row[0] <= through])
                batches.append(batch)
                break
            batches.append(batch)
            if len(batch) < page:
                break
            after = batch.positions[-1]
        resident.append_rows(batches)

    async def _persist(self, resource_id: str, resident: Resident) -> None:
        """Write segments for rows only the table holds: each hole, and the rows after the last
        segment in runs of ``SEGMENT_ROWS`` (the rest waits: at most that many rows are read
        from the table after a restart). A refused write (a row deleted meanwhile, rows of
        another dimension) stops the writing until the next reload."""
        store = self._segments
        if store is None or resident.covered is None or resident.size == 0:
            return
        positions = resident.positions[: resident.size]
        for lo, hi in resident.holes:
            first, end = (int(np.searchsorted(positions, edge, side="right")) for edge in (lo, hi))
            if not await store.aput_vector_segment(resource_id, self.space, resident.segment(lo, hi, first, end)):
                resident.covered = None
                return
        resident.holes.clear()
        first = int(np.searchsorted(positions, resident.covered, side="right"))
        while resident.size - first >= SEGMENT_ROWS:
            end = first + SEGMENT_ROWS
            hi = int(positions[end - 1])
            segment = resident.segment(resident.covered, hi, first, end)
            if not await store.aput_vector_segment(resource_id, self.space, segment):
                resident.covered = None
                return
            resident.covered, first = hi, end

    async def asearch(
        self, resource_id: str, query: str, *, k: int, thread_id: str | None = None
    ) -> list[VectorHit]:
        """The ``k`` messages of the resource (or one thread) most similar to ``query`` (cosine)."""
        query_vector = np.asarray(await self.embeddings.aembed_query(replace_lone_surrogates(query)), dtype=np.float32)
        resident = await self._current(resource_id)
        if resident.size == 0 or query_vector.shape[0] != resident.dim:
            return []
        # in a worker thread: the product reads every row (~100 MB at 100k x 256), milliseconds the
        # event loop would otherwise stand still (numpy releases the GIL)
        unit = query_vector / (float(np.linalg.norm(query_vector)) or 1.0)
        rows, unsure = await asyncio.to_thread(_candidates, resident, unit, k, thread_id)
        # the candidates' final scores, all computed one way (float32 rows, float64 sums), so equal
        # rows ("ok" said 30 times) tie exactly and keep their stored order, as in the full scan
        exact = np.full(len(rows), -np.inf)
        sure = np.setdiff1d(np.arange(len(rows)), unsure, assume_unique=True)
        if len(sure):
            exact[sure] = resident.exact_rows(rows[sure]).astype(np.float64) @ unit.astype(np.float64)
        if len(unsure) and self._segments is not None:
            wanted = [int(p) for p in resident.positions[rows[unsure]]]
            fetched: dict[int, float] = {}
            for start in range(0, len(wanted), _RESCORE_BATCH):  # many equal rows ("ok") can all be candidates
                found = await self._segments.aget_vectors_at(resource_id, self.space,
                                                             wanted[start:start + _RESCORE_BATCH])
                fetched.update(zip(found.positions, _exact_scores(found.vectors, unit), strict=True))
            exact[unsure] = [fetched.get(pos, -np.inf) for pos in wanted]  # missing: deleted since
        order = np.argsort(-exact, kind="stable")[:k]
        return [VectorHit(resident.threads[resident.thread_ords[rows[i]]], resident.message_id(int(rows[i])),
                          float(exact[i])) for i in order if np.isfinite(exact[i])]


def _candidates(
    resident: Resident, unit: Matrix, k: int, thread_id: str | None
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Rows that can be among the ``k`` best, and which of them (indexes into the first array)
    are approximate (a segment's int8 codes): a row is left out only when even its
    upper bound is below the ``k``-th best lower bound, so re-scoring the approximate ones
    exactly gives exactly the top ``k`` of the float32 scan."""
    scores, size = resident.scores(unit)
    errors = resident.errors[:size]
    if thread_id is not None:
        wanted = resident.thread_index.get(thread_id)
        if wanted is None:
            return np.zeros(0, np.intp), np.zeros(0, np.intp)
        scores = np.where(resident.thread_ords[:size] == wanted, scores, -np.inf)
    k = min(k, size)
    if k <= 0:
        return np.zeros(0, np.intp), np.zeros(0, np.intp)
    bound = errors + np.float32(1e-6)  # every row: float32 rounding of its own score
    # a row whose score is NaN (a non-finite vector stored before they were refused) bounds
    # nothing: as the k-th best it made the floor NaN, and no row compares >= NaN
    lower = np.where(np.isfinite(scores) & np.isfinite(bound), scores - bound, -np.inf)
    floor = lower[np.argpartition(-lower, k - 1)[k - 1]]
    rows = np.flatnonzero((scores + bound >= floor) & np.isfinite(scores))
    return rows, np.flatnonzero(errors[rows] > 0)


def _exact_scores(blobs: Sequence[bytes], unit: Matrix) -> list[float]:
    """Cosine scores of stored float32 rows, normalised as the table path does."""
    width = unit.shape[0] * 4
    if not blobs or any(len(blob) != width for blob in blobs):
        return [_exact_scores([blob], unit)[0] if len(blob) == width else -np.inf for blob in blobs] if blobs else []
    rows = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), -1).astype(np.float32)
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    rows /= norms
    return [float(v) for v in rows.astype(np.float64) @ unit.astype(np.float64)]
