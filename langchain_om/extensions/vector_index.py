"""Semantic recall search over embeddings kept in OM's own store.

With ``retrieval={"vector": True, "embeddings": ...}`` (and no ``vector_store`` of the
user's), each stored message is embedded once and the vector is written to the store's
``message_vectors`` table (SQLite ``BLOB`` / PostgreSQL ``bytea``, float32). The index
therefore lives in the same database as the messages: a restart, or another worker, finds
every vector already there and never re-embeds.

Query path: the store has no vector index (no pgvector here, no SQLite extension), so a
resource's vectors are loaded once into a normalised float32 numpy matrix and scored with
one matrix-vector product (about 5 ms for 100k x 256 dimensions, against ~850 ms for the
pure-Python scan of ``InMemoryVectorStore``). The matrix is kept per resource (a few
resources, least recently used first out) and brought up to date on each search from the
store's ``(count, highest pos)`` stamp: new rows are appended incrementally; a lower count
(a deleted thread) reloads the resource. numpy is why it is a runtime dependency.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt
from langchain_core.embeddings import Embeddings

from ..store.base import OMStore, VectorBatch, VectorItem, replace_lone_surrogates
from ..store.search import encode_vector

DEFAULT_CACHED_RESOURCES = 4
_LOAD_BATCH = 20_000

Matrix = npt.NDArray[np.float32]


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
class _Resident:
    """One resource's vectors in memory: rows ``[:size]`` of ``matrix`` are in use; ``stamp`` is
    the store's ``avector_stamp`` they match."""

    stamp: tuple[int, int] = (0, 0)
    size: int = 0
    dim: int = 0
    matrix: Matrix = field(default_factory=lambda: np.zeros((0, 0), dtype=np.float32))
    thread_ids: list[str] = field(default_factory=list)
    message_ids: list[str] = field(default_factory=list)

    def append(self, batches: Sequence[VectorBatch]) -> None:
        """Add stored rows, normalised, in one allocation (a cold load of 100k x 384 floats
        would otherwise copy the matrix at every growth); rows of another dimension than the
        first are skipped."""
        blobs: list[bytes] = []
        for batch in batches:
            if not len(batch):
                continue
            if self.dim == 0:
                self.dim = len(batch.vectors[0]) // 4
            width = self.dim * 4
            keep = [i for i, blob in enumerate(batch.vectors) if len(blob) == width]
            if len(keep) == len(batch):
                blobs.extend(batch.vectors)
                self.thread_ids.extend(batch.thread_ids)
                self.message_ids.extend(batch.message_ids)
            else:
                blobs.extend(batch.vectors[i] for i in keep)
                self.thread_ids.extend(batch.thread_ids[i] for i in keep)
                self.message_ids.extend(batch.message_ids[i] for i in keep)
        if not blobs:
            return
        needed = self.size + len(blobs)
        if self.matrix.shape[0] < needed or self.matrix.shape[1] != self.dim:
            grown = np.empty((max(needed, self.matrix.shape[0] * 3 // 2, 1024), self.dim), dtype=np.float32)
            if self.size:
                grown[: self.size] = self.matrix[: self.size]
            self.matrix = grown
        block = self.matrix[self.size: needed]
        block[:] = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self.dim)
        norms = np.linalg.norm(block, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        block /= norms
        self.size = needed


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
        self._resident: OrderedDict[str, _Resident] = OrderedDict()
        self._locks: dict[str, asyncio.Lock] = {}

    async def aadd(self, resource_id: str, thread_id: str, texts: Sequence[tuple[str, str]]) -> int:
        """Embed ``(message_id, text)`` pairs of one thread and store the vectors."""
        if not texts:
            return 0
        vectors = await self.embeddings.aembed_documents([text for _, text in texts])
        if len(vectors) != len(texts):
            raise ValueError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")
        items = [
            VectorItem(thread_id=thread_id, message_id=message_id, vector=encode_vector(vector))
            for (message_id, _), vector in zip(texts, vectors, strict=True)
        ]
        return await self.store.aput_vectors(resource_id, self.space, items)

    async def _current(self, resource_id: str) -> _Resident:
        """The resource's resident vectors, brought up to date with the store."""
        lock = self._locks.setdefault(resource_id, asyncio.Lock())
        async with lock:
            stamp = await self.store.avector_stamp(resource_id, self.space)
            resident = self._resident.get(resource_id)
            if resident is not None and resident.stamp != stamp:
                if stamp[0] != resident.stamp[0]:
                    resident = None  # vectors were deleted (a thread): start over
                else:
                    await self._load(resource_id, resident, stamp)  # only added: read the new rows
            if resident is None:
                resident = _Resident()
                await self._load(resource_id, resident, stamp)
            self._resident[resource_id] = resident
            self._resident.move_to_end(resource_id)
            while len(self._resident) > self.max_cached_resources:
                evicted, _ = self._resident.popitem(last=False)
                self._locks.pop(evicted, None)
            return resident

    async def _load(self, resource_id: str, resident: _Resident, stamp: tuple[int, int]) -> None:
        """Read rows after the resident's last pos up to ``stamp``'s (rows added since are read
        by the next search, whose stamp names them)."""
        after = resident.stamp[1]
        batches: list[VectorBatch] = []
        while after < stamp[1]:
            batch = await self.store.aget_vectors(resource_id, self.space, after_pos=after, limit=_LOAD_BATCH)
            batch = batch if not batch.positions or batch.positions[-1] <= stamp[1] else VectorBatch.of(
                [row for row in zip(batch.positions, batch.thread_ids, batch.message_ids, batch.vectors, strict=True)
                 if row[0] <= stamp[1]])
            batches.append(batch)
            if len(batch) < _LOAD_BATCH:
                break
            after = batch.positions[-1]
        resident.append(batches)
        resident.stamp = stamp

    async def asearch(
        self, resource_id: str, query: str, *, k: int, thread_id: str | None = None
    ) -> list[VectorHit]:
        """The ``k`` messages of the resource (or one thread) most similar to ``query`` (cosine)."""
        query_vector = np.asarray(await self.embeddings.aembed_query(replace_lone_surrogates(query)), dtype=np.float32)
        resident = await self._current(resource_id)
        if resident.size == 0 or query_vector.shape[0] != resident.dim:
            return []
        # in a worker thread: the product reads the whole matrix (~150 MB at 100k x 384), tens of
        # milliseconds the event loop would otherwise stand still (numpy releases the GIL)
        # (a view taken now: rows appended meanwhile by another search are not read half-written)
        view = resident.matrix[: resident.size]
        return await asyncio.to_thread(_top_k, view, resident, query_vector, k, thread_id)


def _top_k(
    matrix: Matrix, resident: _Resident, query_vector: Matrix, k: int, thread_id: str | None
) -> list[VectorHit]:
    norm = float(np.linalg.norm(query_vector))
    scores = matrix @ (query_vector / (norm or 1.0))
    size = matrix.shape[0]
    if thread_id is not None:
        mask = np.fromiter((t == thread_id for t in resident.thread_ids[:size]), dtype=bool, count=size)
        scores = np.where(mask, scores, -np.inf)
    k = min(k, size)
    top = np.argpartition(-scores, k - 1)[:k]
    ordered = top[np.argsort(-scores[top], kind="stable")]
    return [
        VectorHit(resident.thread_ids[i], resident.message_ids[i], float(scores[i]))
        for i in ordered
        if np.isfinite(scores[i])
    ]
