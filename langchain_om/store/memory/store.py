"""An in-process store for tests and notebooks.

State lives in plain dicts behind one lock. Every value crosses the boundary as a copy
(a JSON round-trip, like the real backends do), so a caller mutating a returned record or
message can never change what is stored, and the memory store behaves like SQLite/PostgreSQL.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import _util as u
from ..base import (
    InvalidStoreInput,
    NewMessage,
    OMRecord,
    RecordConflictError,
    RecordStamp,
    SearchHit,
    StoredMessage,
    ThreadInfo,
    ValueUpdate,
    VectorBatch,
    VectorItem,
    check_id,
    check_resource_id,
    check_thread_id,
    record_key,
    utcnow,
)
from ..cjk import CJKTerm, cjk_index_tokens, has_cjk, normalise, plain_words
from ..search import check_space, check_vector_items, search_arguments, search_text
from ..step_fast_paths import ForkProbe
from .threads import MemoryThreadListing

_SUFFIXES = ("ings", "ing", "ies", "es", "ed", "s")


def _stem(word: str) -> str:
    """A crude English stemmer, so "flights" finds "flight" as the SQL stores' stemmers do."""
    for suffix in _SUFFIXES:
        if len(word) > len(suffix) + 2 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


class _Indexed:
    """A message as the scan reads it: its normalised text (CJK words are found as substrings
    of it) and the counts of its other words, stemmed."""

    __slots__ = ("size", "text", "words")

    def __init__(self, text: str) -> None:
        self.text = normalise(text)
        self.words: dict[str, int] = {}
        for word in plain_words(self.text):
            word = _stem(word)
            self.words[word] = self.words.get(word, 0) + 1
        self.size = sum(self.words.values()) + len(cjk_index_tokens(text))

    def count(self, english: list[str], cjk: list[CJKTerm]) -> list[int]:
        """How often each query term occurs, for the terms that occur."""
        found = [self.words[t] for t in english if t in self.words]
        found += [n for term in cjk if has_cjk(term.text) and (n := self.text.count(term.text))]
        return found


class InMemoryStore(MemoryThreadListing):
    """``OMStore`` kept in process memory; lost when the process exits.

    The critical sections never await, so a ``threading.Lock`` gives the same exclusion
    between asyncio tasks as an ``asyncio.Lock`` would, and additionally stays correct when
    the store is shared across event loops or threads (the sync twins run a private loop).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: dict[str, ThreadInfo] = {}
        self._thread_order: dict[str, int] = {}
        self._messages: dict[str, list[StoredMessage]] = {}
        self._message_ids: dict[str, set[str]] = {}  # per thread, so an append need not scan the thread
        self._observed_prefix: dict[str, int] = {}  # per thread: how many leading rows are observed
        self._records: dict[str, str] = {}
        self._stamps: dict[str, RecordStamp] = {}  # (version, updated_at) of each record, beside its body
        self._kv: dict[tuple[str, str, str], str] = {}
        self._counter = itertools.count(1)
        self._words: dict[tuple[str, str], _Indexed] = {}  # (thread, message id) -> searchable form
        self._vectors: dict[tuple[str, str], list[tuple[int, str, str, bytes]]] = {}  # (resource, space) -> rows
        self._vector_deletions: dict[str, int] = {}
        self._vector_keys: set[tuple[str, str, str]] = set()  # (thread, message id, space)
        self._vector_pos = itertools.count(1)

    async def asetup(self) -> None:
        """Nothing to create; present for the protocol."""

    async def aclose(self) -> None:
        """Nothing to release; the data stays until the object is dropped."""

    # ---- threads ------------------------------------------------------------------------

    def _owned(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        thread = self._threads.get(thread_id)
        return thread if thread is not None and thread.resource_id == resource_id else None

    def _claim(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        """The caller's thread, None if free; raises if another resource owns the id."""
        thread = self._threads.get(thread_id)
        if thread is not None and thread.resource_id != resource_id:
            raise InvalidStoreInput("thread_id", "is not available")
        return thread

    def _create(
        self, resource_id: str, thread_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> ThreadInfo:
        now = utcnow()
        thread = ThreadInfo(
            thread_id=thread_id,
            resource_id=resource_id,
            title=title,
            created_at=now,
            updated_at=now,
            metadata=metadata or {},
        )
        self._threads[thread_id] = thread
        self._thread_order[thread_id] = next(self._counter)
        self._messages.setdefault(thread_id, [])
        return thread

    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing; an existing thread is returned unchanged."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        with self._lock:
            thread = self._claim(resource_id, thread_id) or self._create(resource_id, thread_id, title, meta)
            return thread.model_copy(deep=True)

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        with self._lock:
            thread = self._owned(resource_id, thread_id)
            return thread.model_copy(deep=True) if thread else None

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Replace the title (when given) and merge ``metadata`` keys into the stored metadata."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        with self._lock:
            thread = self._owned(resource_id, thread_id)
            if thread is None:
                raise InvalidStoreInput("thread_id", "no such thread")
            update: dict[str, Any] = {"updated_at": utcnow()}
            if title is not None:
                update["title"] = title
            if meta is not None:
                update["metadata"] = {**thread.metadata, **meta}
            thread = thread.model_copy(update=update, deep=True)
            self._threads[thread_id] = thread
            return thread.model_copy(deep=True)

    async def alist_threads(
        self,
        resource_id: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        offset: int = 0,
        limit: int = 20,
    ) -> list[ThreadInfo]:
        """Threads of a resource, newest first (creation time, then creation order)."""
        resource_id = check_resource_id(resource_id)
        before_dt = u.check_datetime(before, "before")
        after_dt = u.check_datetime(after, "after")
        start = u.check_count(offset, "offset")
        count = u.check_limit(limit)
        with self._lock:
            rows = [
                t
                for t in self._threads.values()
                if t.resource_id == resource_id
                and (before_dt is None or t.created_at < before_dt)
                and (after_dt is None or t.created_at > after_dt)
            ]
            rows.sort(key=lambda t: (t.created_at, self._thread_order[t.thread_id]), reverse=True)
            end = None if count is None else start + count
            return [t.model_copy(deep=True) for t in rows[start:end]]

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order, after ``after_id`` (keyset paging)."""
        resource_id = check_resource_id(resource_id)
        start = None if after_id is None else check_thread_id(after_id, "after_id")
        count = u.check_limit(limit)
        with self._lock:
            ids = sorted(t.thread_id for t in self._threads.values()
                         if t.resource_id == resource_id and (start is None or t.thread_id > start))
        return ids if count is None else ids[:count]

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove the thread, its messages and its thread-scope record, and forget it in the
        resource-scope record (``u.record_without_thread``), all under one lock hold; another
        resource's thread is untouched."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        with self._lock:
            shared = record_key(resource_id, None)
            body = self._records.get(shared)
            forgotten = u.record_without_thread(u.record_from_json(body), thread_id) if body is not None else None
            if forgotten is not None:
                now = utcnow()
                version = self._stamps[shared][0] + 1
                self._records[shared] = u.record_json(forgotten.model_copy(update={"version": version,
                                                                                   "updated_at": now}))
                self._stamps[shared] = (version, now)
            if self._owned(resource_id, thread_id) is None:
                return
            del self._threads[thread_id]
            self._thread_order.pop(thread_id, None)
            for row in self._messages.pop(thread_id, []):
                self._words.pop((thread_id, row.id), None)
            self._message_ids.pop(thread_id, None)
            self._observed_prefix.pop(thread_id, None)
            for key, rows in self._vectors.items():
                if key[0] == resource_id:
                    kept = [v for v in rows if v[1] != thread_id]
                    dropped = len(rows) - len(kept)
                    self._vector_deletions[resource_id] = self._vector_deletions.get(resource_id, 0) + dropped
                    rows[:] = kept
            self._vector_keys = {k for k in self._vector_keys if k[0] != thread_id}
            self._records.pop(record_key(resource_id, thread_id), None)
            self._stamps.pop(record_key(resource_id, thread_id), None)

    # ---- messages -----------------------------------------------------------------------

    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order with seq = last + 1, ...; ids already in the thread are skipped."""
        appended = self._append(resource_id, thread_id, messages, None)
        assert appended is not None  # None only when an incarnation was expected
        return appended

    async def aappend_to_incarnation(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime
    ) -> list[StoredMessage] | None:
        """``SupportsIncarnationAppend``: the incarnation is checked under the append's lock hold."""
        return self._append(resource_id, thread_id, messages, born)

    def _append(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime | None
    ) -> list[StoredMessage] | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        batch = u.check_messages(messages)
        with self._lock:
            if born is not None:
                current = self._threads.get(thread_id)
                if current is None or current.resource_id != resource_id or current.created_at != born:
                    return None  # another incarnation (or none): the caller re-checks
            thread = self._claim(resource_id, thread_id)
            if not batch:
                return []
            if thread is None:
                thread = self._create(resource_id, thread_id, None, None)
            rows = self._messages.setdefault(thread_id, [])
            seen = self._message_ids.get(thread_id)
            if seen is None:
                seen = self._message_ids[thread_id] = {m.id for m in rows}
            last = rows[-1].seq if rows else 0
            inserted: list[StoredMessage] = []
            for message in batch:
                if message.id in seen:
                    continue
                seen.add(message.id)
                last += 1
                stored = StoredMessage(
                    id=message.id,
                    thread_id=thread_id,
                    resource_id=resource_id,
                    seq=last,
                    data=message.data,
                    tokens=message.tokens,
                    created_at=message.created_at,
                    kind=message.kind,
                )
                rows.append(stored)
                inserted.append(stored.model_copy(deep=True))
            if inserted:
                self._threads[thread_id] = thread.model_copy(update={"updated_at": utcnow()})
            return inserted

    def _thread_messages(self, resource_id: str, thread_id: str) -> list[StoredMessage]:
        return self._messages.get(thread_id, []) if self._owned(resource_id, thread_id) else []

    async def aget_messages(
        self,
        resource_id: str,
        thread_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        low = u.check_count(after_seq, "after_seq")
        high = u.check_optional_count(before_seq, "before_seq")
        count = u.check_limit(limit)
        with self._lock:
            # seq is 1, 2, 3, ... in list order, so the range is a slice
            thread_rows = self._thread_messages(resource_id, thread_id)
            rows = thread_rows[low: (len(thread_rows) if high is None else max(low, high - 1))]
            if descending:
                rows.reverse()
            if count is not None:
                rows = rows[:count]
            return [m.model_copy(deep=True) for m in rows]

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """The earliest message with this id among the resource's threads."""
        resource_id = check_resource_id(resource_id)
        message_id = check_id(message_id, "message_id")
        with self._lock:
            matches = [
                m
                for thread_id, rows in self._messages.items()
                if self._owned(resource_id, thread_id)
                for m in rows
                if m.id == message_id
            ]
            if not matches:
                return None
            return min(matches, key=lambda m: (m.created_at, m.thread_id, m.seq)).model_copy(deep=True)

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = set(u.check_message_ids(message_ids))
        with self._lock:
            return [m.model_copy(deep=True) for m in self._thread_messages(resource_id, thread_id) if m.id in wanted]

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        resource_id, thread_id, new, _text = u.check_replacement(resource_id, thread_id, message_id, data, tokens)
        with self._lock:
            rows = self._thread_messages(resource_id, thread_id)
            for index, row in enumerate(rows):
                if row.id == message_id and not row.observed and row.kind == "message":
                    rows[index] = row.model_copy(update={"data": new.data, "tokens": new.tokens})
                    self._words.pop((thread_id, message_id), None)
                    self._drop_vectors(resource_id, thread_id, message_id)
                    return True
            return False

    def _drop_vectors(self, resource_id: str, thread_id: str, message_id: str) -> None:
        """Forget an edited message's embeddings (every space), counted as deletions so a cached
        copy of the resource's vectors reloads (the caller holds the lock)."""
        for key, rows in self._vectors.items():
            if key[0] == resource_id:
                kept = [v for v in rows if (v[1], v[2]) != (thread_id, message_id)]
                dropped = len(rows) - len(kept)
                if dropped:
                    self._vector_deletions[resource_id] = self._vector_deletions.get(resource_id, 0) + dropped
                    rows[:] = kept
                    self._vector_keys.discard((thread_id, message_id, key[1]))

    async def acount_messages(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        with self._lock:
            return len(self._thread_messages(resource_id, thread_id))

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        with self._lock:
            rows = self._thread_messages(resource_id, thread_id)
            return rows[-1].seq if rows else 0

    # ---- search -------------------------------------------------------------------------

    @property
    def keyword_search_available(self) -> bool:
        """Always: a word-count scan of the resource's messages stands in for a full-text index."""
        return True

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """Messages holding any query word, scored by how many distinct query words they hold,
        then how often; ties newest first. A linear scan: fine for tests and notebooks."""
        resource_id, thread_id, terms, count = search_arguments(resource_id, query, thread_id, limit)
        english = [_stem(term) for term in terms.english]
        if not terms:
            return []
        scored: list[tuple[float, StoredMessage]] = []
        with self._lock:
            for tid, rows in self._messages.items():
                if (thread_id is not None and tid != thread_id) or self._owned(resource_id, tid) is None:
                    continue
                for row in rows:
                    words = self._words.get((tid, row.id))
                    if words is None:  # counted at the first search, not on every append
                        words = self._words[(tid, row.id)] = _Indexed(search_text(row.data, row.kind))
                    found = words.count(english, terms.cjk)
                    if found:
                        scored.append((len(found) + sum(found) / (1 + words.size), row))
            scored.sort(key=lambda item: (item[0], item[1].created_at, item[1].seq), reverse=True)
            return [SearchHit(message=row.model_copy(deep=True), score=score) for score, row in scored[:count]]

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        checked = check_vector_items(items)
        stored = 0
        with self._lock:
            rows = self._vectors.setdefault((resource_id, space), [])
            for item in checked:
                key = (item.thread_id, item.message_id, space)
                if key in self._vector_keys or self._owned(resource_id, item.thread_id) is None:
                    continue
                if item.message_id not in self._message_ids.get(item.thread_id, set()):
                    continue
                self._vector_keys.add(key)
                rows.append((next(self._vector_pos), item.thread_id, item.message_id, item.vector))
                stored += 1
        return stored

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        low = u.check_count(after_pos, "after_pos")
        with self._lock:
            found = [v for v in self._vectors.get((resource_id, space), []) if v[0] > low]
        return VectorBatch.of(found if limit is None else found[: u.check_count(limit, "limit")])

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        with self._lock:
            rows = self._vectors.get((resource_id, space), [])
            return self._vector_deletions.get(resource_id, 0), (rows[-1][0] if rows else 0)

    # ---- records ------------------------------------------------------------------------

    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        with self._lock:
            body = self._records.get(record_key(resource_id, thread_id))
        return u.record_from_json(body) if body is not None else None

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        with self._lock:
            return self._stamps.get(record_key(resource_id, thread_id))

    async def afork_probe(self, resource_id: str, thread_id: str, message_ids: Sequence[str],
                          newest: int) -> ForkProbe:
        """The newest rows and the asked ids' rows under one lock hold (``SupportsForkProbe``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = set(u.check_message_ids(message_ids))
        with self._lock:
            rows = self._thread_messages(resource_id, thread_id)
            top: list[tuple[int, str, str]] = [(m.seq, m.id, m.kind) for m in reversed(rows[-newest:])] \
                if newest > 0 else []
            stored_ids = self._message_ids.get(thread_id)  # the append's id set: no walk when none is held
            if stored_ids is not None and rows:
                wanted &= stored_ids
            held: list[tuple[str, int, str]] = [(m.id, m.seq, m.kind) for m in rows if m.id in wanted] \
                if wanted and rows else []
            return top, held

    async def aget_thread_head(
        self, resource_id: str, thread_id: str, record_thread: str | None
    ) -> tuple[int, RecordStamp | None]:
        """The thread's last ``seq`` and the record's stamp under one lock hold (``SupportsThreadHead``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        with self._lock:
            rows = self._thread_messages(resource_id, thread_id)
            return (rows[-1].seq if rows else 0), self._stamps.get(record_key(resource_id, record_thread))

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Compare-and-swap the record and mark messages observed, all under one lock hold."""
        record, expected = u.check_record(record, expected_version)
        marks = u.check_mark_observed(mark_observed)
        key = record_key(record.resource_id, u.record_thread(record))
        with self._lock:
            current = self._stamps.get(key)
            current_version = current[0] if current is not None else 0
            if current_version != expected:
                raise RecordConflictError(
                    f"record {key!r} is at version {current_version}, expected {expected}"
                )
            now = utcnow()
            stored = record.model_copy(update={"version": expected + 1, "updated_at": now})
            body = u.record_json(stored)
            for thread_id, seq in marks.items():
                # observed rows are always a prefix (a mark takes every row up to a seq), so the
                # walk starts at the first unobserved row and touches only the rows it changes
                rows = self._thread_messages(record.resource_id, thread_id)
                index = self._observed_prefix.get(thread_id, 0)
                while index < len(rows) and rows[index].seq <= seq:
                    if not rows[index].observed:
                        rows[index] = rows[index].model_copy(update={"observed": True, "observed_at": now})
                    index += 1
                if rows:
                    self._observed_prefix[thread_id] = index
            self._records[key] = body
            self._stamps[key] = (expected + 1, now)
        return u.record_from_json(body)

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        with self._lock:
            self._records.pop(record_key(resource_id, thread_id), None)
            self._stamps.pop(record_key(resource_id, thread_id), None)

    # ---- values -------------------------------------------------------------------------

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        with self._lock:
            text = self._kv.get(slot)
        return u.loads(text) if text is not None else None

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        text = u.dumps(value, "value")
        with self._lock:
            self._kv[slot] = text

    async def aupdate_value(self, resource_id: str, namespace: str, key: str, update: ValueUpdate) -> Any:
        """Read, apply ``update`` and write under one lock hold."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        apply = u.check_update(update)
        with self._lock:
            text = self._kv.get(slot)
            value = apply(u.loads(text) if text is not None else None)
            text = u.dumps(value, "value")
            self._kv[slot] = text
        return u.loads(text)
