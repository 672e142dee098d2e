"""The embedded default store: one SQLite file (or ``":memory:"``), stdlib ``sqlite3`` only.

One connection per store, guarded by a threading lock, with calls pushed to a worker thread
so the event loop never waits on a lock or a disk flush. Writes that read-then-write
(appending with the next ``seq``, compare-and-swap of a record) run inside ``BEGIN
IMMEDIATE``, which takes SQLite's write lock up front; with ``busy_timeout`` that makes
several processes on one file safe: the second writer waits instead of interleaving.

Two hot calls of every agent step skip the thread hop (~0.2 ms on two cores) when they
cannot make the loop wait: one-row reads, and appending a step's messages while no other
connection holds the write lock (tried with a zero busy timeout; if it is held, the append
waits in a thread like any call). When a worker thread of this store holds the connection,
such a call waits for its release on the event loop and then runs inline, rather than
queueing a thread of its own behind it (``SQLiteConnection._run_inline``).
Under WAL with ``synchronous = NORMAL`` a commit only
writes to the log, without a flush; the flushing part, checkpoints, is taken off the
commit (``wal_autocheckpoint = 0``) and run in the worker thread every
``_CHECKPOINT_AFTER_CHANGES`` changed rows.

Durability: a commit that marks messages observed runs with ``synchronous = FULL`` (the WAL
is flushed before it returns), inline like the other short calls: its fsync blocks the loop
(~0.3 ms on this machine's disk), but a worker thread under a busy loop held the connection
while waiting for the GIL (p90 17 ms at 200 users) and every step's call queued behind it.
Such a commit is what lets an integration drop the messages from the graph state, and
LangGraph's SqliteSaver checkpoints with FULL; under NORMAL a power loss could keep the
checkpoint that dropped them and lose the commit that observed them. The WAL is one ordered
log, so flushing that commit also makes every earlier append durable.
Other commits keep NORMAL (a lost one is redone: an append is replayed from the state, a
lost reflection runs again); ``synchronous="full"`` flushes every commit, for
``keep_in_state="turn"``, where merely stored messages leave the state.

The package's other modules (connection, schema, records, search, keyword queue, vectors, ...) each
hold a concept of their own; ``store/sqlite/__init__.py`` lists them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from .. import _util as u
from ..base import (
    InvalidStoreInput,
    NewMessage,
    SearchHit,
    StoredMessage,
    StoreError,
    ThreadInfo,
    VectorBatch,
    VectorItem,
    check_id,
    check_resource_id,
    check_thread_id,
    record_key,
    utcnow,
)
from ..known import stored_fingerprint
from ..search import (
    check_space,
    check_vector_items,
    scope_token,
    search_arguments,
)
from ..step_fast_paths import ThreadHead
from . import keyword_queue as keywords
from .cjk import delete_cjk_thread, search_scope
from .connection import immediate
from .known import SQLiteFieldLookup
from .records import MARK_OBSERVED_SQL as MARK_OBSERVED_SQL
from .schema import MIGRATIONS as MIGRATIONS
from .search import search_messages
from .threads import SQLiteThreadListing
from .vectors import SQLiteVectorSegments, drop_stale_segments

_MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"
_THREAD_COLUMNS = "thread_id, resource_id, title, created_at, updated_at, metadata"
_ID_CHUNK = 500  # ids per IN (...) list: well under SQLite's 32,766 bound variables
_HEAD_SQL_NO_RECORD = (
    "SELECT t.resource_id, t.created_at, (SELECT MAX(seq) FROM messages WHERE thread_id = ?) "
    "FROM (SELECT 1) LEFT JOIN threads AS t ON t.thread_id = ?"
)
_HEAD_SQL = (  # an append's first statement (see ``_append``), also reading a record's stamp
    "SELECT t.resource_id, t.created_at, (SELECT MAX(seq) FROM messages WHERE thread_id = ?), r.version, "
    "r.updated_at FROM (SELECT 1) LEFT JOIN records AS r ON r.key = ? AND r.resource_id = ? "
    "LEFT JOIN threads AS t ON t.thread_id = ?"
)
_INLINE_ROWS = 64  # a read bounded to this many rows runs inline (``_run_inline``)


class _Held(Exception):
    """An ``only_new`` append met an id the thread holds: ``immediate`` rolls it back."""


def _thread(row: sqlite3.Row) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        title=row["title"],
        created_at=u.from_iso(row["created_at"]),
        updated_at=u.from_iso(row["updated_at"]),
        metadata=u.loads(row["metadata"]),
    )


def _message(row: sqlite3.Row) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        seq=row["seq"],
        data=u.loads(row["data"]),
        tokens=row["tokens"],
        created_at=u.from_iso(row["created_at"]),
        kind=row["kind"],
        observed=bool(row["observed"]),
        observed_at=u.from_iso(row["observed_at"]) if row["observed_at"] else None,
    )


class SQLiteStore(SQLiteFieldLookup, SQLiteThreadListing, SQLiteVectorSegments):
    """``OMStore`` on a SQLite file; safe for several stores and processes on the same file."""

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    @staticmethod
    def _owner(conn: sqlite3.Connection, thread_id: str) -> str | None:
        row = conn.execute("SELECT resource_id FROM threads WHERE thread_id = ?", (thread_id,)).fetchone()
        return None if row is None else str(row[0])

    @staticmethod
    def _insert_thread(
        conn: sqlite3.Connection, resource_id: str, thread_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> None:
        now = u.iso(utcnow())
        conn.execute(
            f"INSERT INTO threads ({_THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (thread_id, resource_id, title, now, now, u.dumps(metadata or {}, "metadata")),
        )

    @staticmethod
    def _select_thread(conn: sqlite3.Connection, resource_id: str, thread_id: str) -> ThreadInfo | None:
        row = conn.execute(
            f"SELECT {_THREAD_COLUMNS} FROM threads WHERE thread_id = ? AND resource_id = ?",
            (thread_id, resource_id),
        ).fetchone()
        return _thread(row) if row is not None else None

    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing; an existing thread is returned unchanged."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)

        def run(conn: sqlite3.Connection) -> ThreadInfo:
            with immediate(conn):
                owner = self._owner(conn, thread_id)
                if owner is not None and owner != resource_id:
                    raise InvalidStoreInput("thread_id", "is not available")
                if owner is None:
                    self._insert_thread(conn, resource_id, thread_id, title, meta)
                thread = self._select_thread(conn, resource_id, thread_id)
                assert thread is not None
                return thread

        # a one-row transaction: inline when the connection is free (a worker thread under a busy
        # loop waits for the GIL while holding the connection; 200 users' first turns queued 200 of them)
        return await self._run_inline(run)

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        # a one-row read on every agent step (the engine's thread incarnation check): inline
        return await self._run_inline(lambda conn: self._select_thread(conn, resource_id, thread_id))

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Replace the title (when given) and merge ``metadata`` keys into the stored metadata."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)

        def run(conn: sqlite3.Connection) -> ThreadInfo:
            with immediate(conn):
                thread = self._select_thread(conn, resource_id, thread_id)
                if thread is None:
                    raise InvalidStoreInput("thread_id", "no such thread")
                merged = {**thread.metadata, **meta} if meta is not None else thread.metadata
                conn.execute(
                    "UPDATE threads SET title = ?, metadata = ?, updated_at = ? "
                    "WHERE thread_id = ? AND resource_id = ?",
                    (
                        title if title is not None else thread.title,
                        u.dumps(merged, "metadata"),
                        u.iso(utcnow()),
                        thread_id,
                        resource_id,
                    ),
                )
                updated = self._select_thread(conn, resource_id, thread_id)
                assert updated is not None
                return updated

        return await self._run(run)

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
        query = f"SELECT {_THREAD_COLUMNS} FROM threads WHERE resource_id = ?"
        params: list[Any] = [resource_id]
        if before_dt is not None:
            query += " AND created_at < ?"
            params.append(u.iso(before_dt))
        if after_dt is not None:
            query += " AND created_at > ?"
            params.append(u.iso(after_dt))
        query += " ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?"
        params += [-1 if count is None else count, start]
        return await self._run(lambda conn: [_thread(row) for row in conn.execute(query, params)])

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order (SQLite's BINARY collation compares
        UTF-8 bytes, which orders like code points), after ``after_id`` (keyset paging)."""
        resource_id = check_resource_id(resource_id)
        start = None if after_id is None else check_thread_id(after_id, "after_id")
        count = u.check_limit(limit)
        query = "SELECT thread_id FROM threads WHERE resource_id = ?"
        params: list[Any] = [resource_id]
        if start is not None:
            query += " AND thread_id > ?"
            params.append(start)
        query += " ORDER BY thread_id LIMIT ?"
        params.append(-1 if count is None else count)
        return await self._run(lambda conn: [str(row[0]) for row in conn.execute(query, params)])

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove the thread, its messages and its thread-scope record, and forget it in the
        resource-scope record (``u.record_without_thread``), in one transaction; another
        resource's thread is untouched."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                self._forget_in_resource_record(conn, resource_id, thread_id)
                if self._owner(conn, thread_id) != resource_id:
                    return
                if self._fts:
                    conn.execute(
                        "DELETE FROM message_search WHERE message_search MATCH ?",
                        (f'scope : "{scope_token("t", thread_id)}"',),
                    )
                    delete_cjk_thread(conn, scope_token("t", thread_id))
                    keywords.forget_thread(conn, thread_id)
                self._drop_vectors(conn, resource_id, thread_id, None)
                conn.execute("DELETE FROM messages WHERE thread_id = ? AND resource_id = ?", (thread_id, resource_id))
                conn.execute(
                    "DELETE FROM records WHERE key = ? AND resource_id = ?",
                    (record_key(resource_id, thread_id), resource_id),
                )
                conn.execute("DELETE FROM threads WHERE thread_id = ? AND resource_id = ?", (thread_id, resource_id))

        await self._run(run)

    @staticmethod
    def _forget_in_resource_record(conn: sqlite3.Connection, resource_id: str, thread_id: str) -> None:
        key = record_key(resource_id, None)
        row = conn.execute("SELECT version, body FROM records WHERE key = ?", (key,)).fetchone()
        forgotten = u.record_without_thread(u.record_from_json(row[1]), thread_id) if row is not None else None
        if forgotten is None:
            return
        now = utcnow()
        version = int(row[0]) + 1
        body = u.record_json(forgotten.model_copy(update={"version": version, "updated_at": now}))
        conn.execute(
            "UPDATE records SET version = ?, body = ?, updated_at = ? WHERE key = ?", (version, body, u.iso(now), key)
        )

    @staticmethod
    def _drop_vectors(conn: sqlite3.Connection, resource_id: str, thread_id: str, ids: Sequence[str] | None) -> None:
        """Forget stored embeddings (of messages ``ids``, or the whole thread's), counted as
        deletions so a cached copy of the resource's vectors reloads."""
        only = "" if ids is None else f" AND message_id IN ({', '.join('?' * len(ids))})"
        positions = [int(row[0]) for row in conn.execute(
            f"DELETE FROM message_vectors WHERE thread_id = ? AND resource_id = ?{only} RETURNING pos",
            (thread_id, resource_id, *(ids or ()))).fetchall()]
        dropped = len(positions)
        drop_stale_segments(conn, resource_id, positions)
        if dropped:
            conn.execute(
                "INSERT INTO vector_deletions (resource_id, deleted) VALUES (?, ?) ON CONFLICT (resource_id) "
                "DO UPDATE SET deleted = deleted + excluded.deleted",
                (resource_id, dropped),
            )

    # ---- messages -----------------------------------------------------------------------

    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order with seq = last + 1, ...; ids already in the thread are skipped."""
        appended = await self._append(resource_id, thread_id, messages, None)
        assert appended is not None  # None only when an incarnation was expected
        return appended[0]

    async def aappend_to_incarnation(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime
    ) -> list[StoredMessage] | None:
        """``SupportsIncarnationAppend``: the incarnation is read in the append's transaction."""
        appended = await self._append(resource_id, thread_id, messages, born)
        return None if appended is None else appended[0]

    async def aappend_with_head(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime,
        record_thread: str | None, at_most: int | None = None,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        """``SupportsHeadAppend``: the record's stamp is read with the incarnation and last seq."""
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        return await self._append(resource_id, thread_id, messages, born, record_key(resource_id, record_thread),
                                  u.check_optional_count(at_most, "at_most"))

    async def aappend_new_with_head(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime,
        record_thread: str | None,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        """``SupportsNewAppend``: a held id rolls the whole append back (nothing written, no rows)."""
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        return await self._append(resource_id, thread_id, messages, born, record_key(resource_id, record_thread),
                                  only_new=True)

    async def _append(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime | None,
        stamp_of: str | None = None, at_most: int | None = None, only_new: bool = False,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        encoded = u.check_messages_json(messages)
        # one statement reads the owner, the incarnation, the last seq and (``stamp_of``) the record's stamp
        head_sql = _HEAD_SQL if stamp_of is not None else _HEAD_SQL_NO_RECORD
        head_args = (thread_id, stamp_of, resource_id, thread_id) if stamp_of is not None else (thread_id, thread_id)

        def run(conn: sqlite3.Connection) -> tuple[list[StoredMessage], ThreadHead] | None:
            with immediate(conn):
                found = conn.execute(head_sql, head_args).fetchone()
                owner: str | None = found[0]
                if born is not None and (owner != resource_id or u.from_iso(found[1]) != born):
                    return None  # another incarnation (or none): the caller re-checks
                if owner is not None and owner != resource_id:
                    raise InvalidStoreInput("thread_id", "is not available")
                stamp = (int(found[3]), u.from_iso(found[4])) if stamp_of is not None and found[3] is not None \
                    else None
                if not encoded or (at_most is not None and int(found[2] or 0) > at_most):
                    return [], (int(found[2] or 0), stamp)  # nothing to write, or the head moved on: nothing written
                if owner is None:
                    self._insert_thread(conn, resource_id, thread_id, None, None)
                last = int(found[2] or 0)
                inserted: list[StoredMessage] = []
                seen: set[str] = set()
                for message, data in encoded:
                    if message.id in seen:
                        continue
                    seen.add(message.id)
                    added = conn.execute(
                        f"INSERT INTO messages ({_MESSAGE_COLUMNS}, fingerprint) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, NULL, ?) "
                        "ON CONFLICT (thread_id, id) DO NOTHING",  # already stored: skipped, seq not used
                        (message.id, resource_id, thread_id, last + 1, message.kind, data, message.tokens,
                         u.iso(message.created_at), stored_fingerprint(message.data)),
                    ).rowcount
                    if not added:
                        if only_new:
                            raise _Held([], (int(found[2] or 0), stamp))
                        continue
                    last += 1
                    # every field was checked above (``check_messages_json``): built, not validated again
                    inserted.append(StoredMessage.model_construct(
                        id=message.id, thread_id=thread_id, resource_id=resource_id, seq=last, data=message.data,
                        tokens=message.tokens, created_at=message.created_at, kind=message.kind))
                if inserted:
                    conn.execute("UPDATE threads SET updated_at = ? WHERE thread_id = ?", (u.iso(utcnow()), thread_id))
                    if self._fts:  # indexed in batches (sqlite/keyword_queue); every search indexes the rest first
                        keywords.queue(conn, thread_id, [m.id for m in inserted])
                return inserted, (last, stamp)

        try:
            return await self._run_inline(run)
        except _Held as held:
            return cast("tuple[list[StoredMessage], ThreadHead]", held.args)

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
        query = f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE resource_id = ? AND thread_id = ? AND seq > ?"
        params: list[Any] = [resource_id, thread_id, low]
        if high is not None:
            query += " AND seq < ?"
            params.append(high)
        query += f" ORDER BY seq {'DESC' if descending else 'ASC'} LIMIT ?"
        params.append(-1 if count is None else count)

        def read(conn: sqlite3.Connection) -> list[StoredMessage]:
            return [_message(row) for row in conn.execute(query, params)]

        # a few rows at most (a background cycle's pending messages, a short page) are read inline
        # when the connection is free: handing them to a worker thread cost more than reading them
        bounds = [n for n in (count, None if high is None else high - low - 1) if n is not None]
        return await (self._run_inline(read) if bounds and min(bounds) <= _INLINE_ROWS else self._run(read))

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """The earliest message with this id among the resource's threads."""
        resource_id = check_resource_id(resource_id)
        message_id = check_id(message_id, "message_id")

        def run(conn: sqlite3.Connection) -> StoredMessage | None:
            row = conn.execute(
                f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE resource_id = ? AND id = ? "
                "ORDER BY created_at, thread_id, seq LIMIT 1",
                (resource_id, message_id),
            ).fetchone()
            return _message(row) if row is not None else None

        return await self._run(run)

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)

        def run(conn: sqlite3.Connection) -> list[StoredMessage]:
            rows: list[StoredMessage] = []
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start:start + _ID_CHUNK]
                marks = ", ".join("?" * len(chunk))
                # the unique (thread_id, id) index answers it; '+resource_id' keeps the planner off
                # the (resource_id, thread_id, seq) index, which would walk the thread's history
                rows.extend(_message(row) for row in conn.execute(
                    f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE thread_id = ? AND id IN ({marks}) "
                    "AND +resource_id = ?", [thread_id, *chunk, resource_id]))
            return rows

        return await self._run(run) if wanted else []

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        """Rewrite an unobserved message in place, with its index entry; its stored vectors are
        dropped (the caller embeds the new text), so no search finds the old words."""
        resource_id, thread_id, new, text = u.check_replacement(resource_id, thread_id, message_id, data, tokens)

        def run(conn: sqlite3.Connection) -> bool:
            with immediate(conn):
                changed = conn.execute(
                    "UPDATE messages SET data = ?, tokens = ?, fingerprint = ? WHERE thread_id = ? AND id = ? "
                    "AND +resource_id = ? AND observed = 0 AND kind = 'message'",
                    (text, new.tokens, stored_fingerprint(new.data), thread_id, message_id, resource_id),
                ).rowcount
                if changed:
                    if self._fts:
                        keywords.reindex_edited(conn, search_scope(resource_id, thread_id), thread_id, message_id,
                                                new.data, new.kind)
                    self._drop_vectors(conn, resource_id, thread_id, [message_id])
            return bool(changed)

        return await self._run(run)

    async def acount_messages(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        return await self._run(
            lambda conn: int(
                conn.execute(
                    "SELECT COUNT(*) FROM messages WHERE resource_id = ? AND thread_id = ?", (resource_id, thread_id)
                ).fetchone()[0]
            )
        )

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        return await self._run_inline(
            lambda conn: int(
                conn.execute(
                    "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE resource_id = ? AND thread_id = ?",
                    (resource_id, thread_id),
                ).fetchone()[0]
            )
        )

    # ---- search -------------------------------------------------------------------------

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """FTS5 search ranked by BM25 over the message text, in the English and the CJK index
        (``sqlite/search``); only the resource's index entries are read."""
        resource_id, thread_id, terms, count = search_arguments(resource_id, query, thread_id, limit)
        if not self._fts:
            raise StoreError("keyword search needs SQLite's FTS5 extension, which this Python's sqlite3 lacks")
        if not terms:
            return []

        def run(conn: sqlite3.Connection) -> list[SearchHit]:
            if keywords.has_queued(conn):  # appended but not yet indexed (by any store on this file)
                with immediate(conn):
                    keywords.index_queued(conn)
            return search_messages(conn, resource_id, thread_id, terms, count, _message)

        return await self._run(run)

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        checked = check_vector_items(items)
        if not checked:
            return 0

        def run(conn: sqlite3.Connection) -> int:
            with immediate(conn):
                before = conn.total_changes
                conn.executemany(
                    "INSERT INTO message_vectors (resource_id, space, thread_id, message_id, vector) "
                    "SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM messages "
                    "WHERE thread_id = ? AND id = ? AND resource_id = ?) "
                    "ON CONFLICT (thread_id, message_id, space) DO NOTHING",
                    [
                        (resource_id, space, item.thread_id, item.message_id, item.vector,
                         item.thread_id, item.message_id, resource_id)
                        for item in checked
                    ],
                )
                return conn.total_changes - before

        return await self._run(run)

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        low = u.check_count(after_pos, "after_pos")
        count = -1 if limit is None else u.check_count(limit, "limit")

        def run(conn: sqlite3.Connection) -> VectorBatch:
            rows = conn.execute(
                "SELECT pos, thread_id, message_id, vector FROM message_vectors "
                "WHERE resource_id = ? AND space = ? AND pos > ? ORDER BY pos LIMIT ?",
                (resource_id, space, low, count),
            ).fetchall()
            return VectorBatch.of(rows)

        return await self._run(run)

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)

        def run(conn: sqlite3.Connection) -> tuple[int, int]:
            row = conn.execute(
                "SELECT (SELECT COALESCE(MAX(deleted), 0) FROM vector_deletions WHERE resource_id = ?), "
                "(SELECT COALESCE(MAX(pos), 0) FROM message_vectors WHERE resource_id = ? AND space = ?)",
                (resource_id, resource_id, space),
            ).fetchone()
            return int(row[0]), int(row[1])

        return await self._run_inline(run)
