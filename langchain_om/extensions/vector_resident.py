"""One resource's embeddings in memory, and the body format of the segments that persist them.

Why its own module: the semantic index (``vector_index``) decides *when* to read and write;
this module is *what* a resource's vectors look like in memory and on disk. Rows are kept in
``pos`` order as a list of blocks: a segment read back from the store is scored straight from
its bytes (no copy of ~100 MB at 100k x 256 dimensions), rows read from ``message_vectors``
go to a growable block. Every vector is normalised once, before it is kept or persisted, so a
segment's rows score exactly as the same rows read from the table.

Segment body: ``OMV2`` + ``n, dim, threads_len, ids_len`` (uint32) + positions (int64[n]) +
thread ordinals (uint32[n]) + per-row scale and error bound (float32[n] each) + the normalised
vectors as int8 codes (int8[n, dim], a quarter of float32's bytes: a restart reads 26 MB, not
104, at 100k x 256) + the segment's thread ids (JSON) + its message ids (JSON, parsed only
when one of its rows is a hit). A row's codes times its scale differ from the row by at most
its error bound (euclidean), so a code's score is within that bound of the exact score: the
index re-scores, from the table, every row whose bound reaches the k-th best, and the top
hits are exactly those of the float32 scan.
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from ..store.base import VectorBatch
from ..store.vector_segments import VectorSegment

Matrix = npt.NDArray[np.float32]
_HEADER = struct.Struct("<4sIIII")
_MAGIC = b"OMV2"
_SLACK = 1e-5
"""Added to every row's error bound: float32 rounding of the approximate score itself."""


def _grow(array: npt.NDArray[np.generic], needed: int) -> npt.NDArray[np.generic]:
    if array.shape[0] >= needed:
        return array
    grown = np.empty((max(needed, array.shape[0] * 3 // 2, 1024), *array.shape[1:]), dtype=array.dtype)
    grown[: array.shape[0]] = array
    return grown


@dataclass
class _Block:
    """Rows ``[start, start + size)`` of the resident; ``owned`` blocks grow (exact rows from the
    table), segment blocks do not (int8 ``codes`` times ``scale``)."""

    start: int
    matrix: Matrix | None
    size: int
    owned: bool
    codes: npt.NDArray[np.int8] | None = None
    scale: Matrix | None = None

    def score(self, query: Matrix, size: int) -> Matrix:
        """Scores of the first ``size`` rows. A segment's codes are widened one block at a time
        (a small temporary the allocator reuses) and never kept as float32: measured at 100k x 256,
        that scores in ~7 ms where widening every segment once took 20-90 ms (fresh pages) and
        four times the memory."""
        if self.codes is None or self.scale is None:
            return self.rows()[:size] @ query
        return (self.codes[:size].astype(np.float32) @ query) * self.scale[:size]

    def rows(self) -> Matrix:
        if self.matrix is None:
            assert self.codes is not None and self.scale is not None
            self.matrix = self.codes.astype(np.float32) * self.scale[:, None]
        return self.matrix


@dataclass
class Resident:
    """One resource's vectors: ``stamp`` is the store's ``avector_stamp`` they match;
    ``covered`` is the ``hi`` of the last segment (rows up to it are persisted, except in
    ``holes``, ranges read from the table between two segments); None once a segment write was
    refused (rows of another dimension in the range): no more tries until the next reload."""

    stamp: tuple[int, int] = (0, 0)
    size: int = 0
    dim: int = 0
    blocks: list[_Block] = field(default_factory=list)
    positions: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    thread_ords: npt.NDArray[np.int32] = field(default_factory=lambda: np.zeros(0, dtype=np.int32))
    errors: Matrix = field(default_factory=lambda: np.zeros(0, dtype=np.float32))
    threads: list[str] = field(default_factory=list)
    thread_index: dict[str, int] = field(default_factory=dict)
    id_starts: list[int] = field(default_factory=list)
    id_chunks: list[bytes | list[str]] = field(default_factory=list)
    covered: int | None = 0
    holes: list[tuple[int, int]] = field(default_factory=list)

    def _thread(self, thread_id: str) -> int:
        index = self.thread_index.get(thread_id)
        if index is None:
            index = self.thread_index[thread_id] = len(self.threads)
            self.threads.append(thread_id)
        return index

    def _add_rows(self, positions: Sequence[int] | npt.NDArray[np.int64], ords: npt.NDArray[np.int32],
                  errors: Matrix | float) -> None:
        needed = self.size + len(ords)
        self.positions = _grow(self.positions, needed)  # type: ignore[assignment]
        self.thread_ords = _grow(self.thread_ords, needed)  # type: ignore[assignment]
        self.errors = _grow(self.errors, needed)  # type: ignore[assignment]
        self.positions[self.size: needed] = positions
        self.thread_ords[self.size: needed] = ords
        self.errors[self.size: needed] = errors
        self.size = needed

    def append_rows(self, batches: Sequence[VectorBatch]) -> None:
        """Add rows read from the table, normalised, into the growable last block; rows of
        another dimension than the first are skipped."""
        blobs: list[bytes] = []
        positions: list[int] = []
        ords: list[int] = []
        ids: list[str] = []
        for batch in batches:
            for pos, thread_id, message_id, blob in zip(
                    batch.positions, batch.thread_ids, batch.message_ids, batch.vectors, strict=True):
                if self.dim == 0:
                    self.dim = len(blob) // 4
                if len(blob) == self.dim * 4:
                    blobs.append(blob)
                    positions.append(pos)
                    ords.append(self._thread(thread_id))
                    ids.append(message_id)
        if not blobs:
            return
        rows = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(blobs), self.dim).astype(np.float32)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        with np.errstate(invalid="ignore"):  # a non-finite row (stored by an older version) stays NaN
            rows /= norms
        last = self.blocks[-1] if self.blocks else None
        if last is None or not last.owned:
            last = _Block(self.size, np.empty((0, self.dim), dtype=np.float32), 0, True)
            self.blocks.append(last)
        matrix: Matrix = _grow(last.rows(), last.size + len(rows))  # type: ignore[assignment]
        matrix[last.size: last.size + len(rows)] = rows
        last.matrix = matrix
        self.id_starts.append(self.size)
        self.id_chunks.append(ids)
        self._add_rows(positions, np.asarray(ords, dtype=np.int32), 0.0)
        last.size += len(rows)  # last: a search scoring meanwhile sees these rows only once complete

    def append_segment(self, segment: VectorSegment) -> bool:
        """Add a segment's rows (its codes are read straight from its bytes); False if it is not
        ours to read (another format or dimension): the caller reads its range from the table."""
        body = segment.body
        if len(body) < _HEADER.size:
            return False
        magic, n, dim, threads_len, ids_len = _HEADER.unpack_from(body)
        at = _HEADER.size
        threads_at = at + n * 20 + n * dim
        if magic != _MAGIC or len(body) != threads_at + threads_len + ids_len or (self.dim and dim != self.dim):
            return False
        if n == 0:
            return True
        self.dim = dim
        local = json.loads(body[threads_at: threads_at + threads_len])
        mapping = np.asarray([self._thread(str(t)) for t in local], dtype=np.int32)
        ords = mapping[np.frombuffer(body, dtype="<u4", count=n, offset=at + n * 8)]
        scale = np.frombuffer(body, dtype="<f4", count=n, offset=at + n * 12)
        errors = np.frombuffer(body, dtype="<f4", count=n, offset=at + n * 16) + np.float32(_SLACK)
        codes = np.frombuffer(body, dtype=np.int8, count=n * dim, offset=at + n * 20).reshape(n, dim)
        self.id_starts.append(self.size)
        self.id_chunks.append(body[threads_at + threads_len:])
        start = self.size
        self._add_rows(np.frombuffer(body, dtype="<i8", count=n, offset=at), ords, errors)
        self.blocks.append(_Block(start, None, n, False, codes, scale))
        return True

    def segment(self, lo: int, hi: int, first: int, end: int) -> VectorSegment:
        """Rows ``[first, end)`` (positions in ``(lo, hi]``) as a segment to persist."""
        n = end - first
        local: dict[int, int] = {}
        ords = np.asarray([local.setdefault(int(o), len(local)) for o in self.thread_ords[first:end]], dtype="<u4")
        threads = json.dumps([self.threads[o] for o in local]).encode()
        ids = json.dumps([self.message_id(i) for i in range(first, end)]).encode()
        positions = self.positions[first:end]
        rows = np.concatenate(self._rows(first, end)) if n else np.zeros((0, self.dim), dtype=np.float64)
        # a non-finite row (stored before they were refused) is kept as zero codes with a NaN scale:
        # its score stays NaN, as the table's row scores, and no NaN is cast to int8
        finite: npt.NDArray[np.bool_] = np.asarray(np.isfinite(rows).all(axis=1))
        rows = np.where(finite[:, None], rows, 0.0)
        scale = np.abs(rows).max(axis=1) / 127 if n else np.zeros(0)
        scale[scale == 0] = 1.0
        codes = np.clip(np.rint(rows / scale[:, None]), -127, 127).astype(np.int8)
        scale[~finite] = np.nan
        errors = np.linalg.norm(rows - codes.astype(np.float64) * scale.astype(np.float32)[:, None], axis=1)
        parts = [_HEADER.pack(_MAGIC, n, self.dim, len(threads), len(ids)), positions.astype("<i8").tobytes(),
                 ords.tobytes(), scale.astype("<f4").tobytes(), (errors * (1 + 1e-6)).astype("<f4").tobytes(),
                 codes.tobytes()]
        return VectorSegment(lo=lo, hi=hi, rows=n, pos_sum=int(positions.sum()),
                             body=b"".join([*parts, threads, ids]))

    def _rows(self, first: int, end: int) -> list[npt.NDArray[np.float64]]:
        """Rows ``[first, end)`` as float64 (only rows read from the table are persisted: exact)."""
        out = []
        for block in self.blocks:
            low, high = max(first, block.start), min(end, block.start + block.size)
            if low < high:
                out.append(block.rows()[low - block.start: high - block.start].astype(np.float64))
        return out

    def exact_rows(self, rows: npt.NDArray[np.intp]) -> Matrix:
        """The normalised float32 rows at ``rows`` (rows read from the table, not codes)."""
        starts = [block.start for block in self.blocks]
        out = np.empty((len(rows), self.dim), dtype=np.float32)
        for i, row in enumerate(rows):
            block = self.blocks[bisect.bisect_right(starts, int(row)) - 1]
            out[i] = block.rows()[int(row) - block.start]
        return out

    def message_id(self, row: int) -> str:
        chunk = bisect.bisect_right(self.id_starts, row) - 1
        ids = self.id_chunks[chunk]
        if isinstance(ids, bytes):
            ids = self.id_chunks[chunk] = json.loads(ids)
        return str(ids[row - self.id_starts[chunk]])

    def scores(self, query: Matrix) -> tuple[Matrix, int]:
        """Cosine scores of every row against the normalised ``query`` (a snapshot of the blocks:
        rows another search appends meanwhile are not read half-written)."""
        blocks = [(b, b.size) for b in self.blocks]
        parts = [block.score(query, size) for block, size in blocks]
        scores = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        return scores.astype(np.float32, copy=False), int(scores.shape[0])
