"""PostgreSQL store for several workers sharing one database (psycopg 3 async + a connection pool).

Everything lives in its own schema (``langchain_om`` by default). Concurrency rules:

- ``acommit_record`` locks the record row (``SELECT ... FOR UPDATE``; a create races through
  ``INSERT ... ON CONFLICT DO NOTHING``), compares versions and marks messages observed in the
  same transaction, so exactly one of two racing workers wins a version.
- ``aappend_messages`` and ``aappend_with_head`` take ``pg_advisory_xact_lock(hashtext(thread_id))``
  so ``seq`` numbers of a thread are assigned by one transaction at a time.
- Schema creation and migration run under an advisory lock, so workers starting together are safe.

All values are bound parameters; the schema name is quoted with ``psycopg.sql.Identifier``.

The package's other modules (connection, schema, records, append, search, vectors, ...) each hold
a concept of their own; ``store/postgres/__init__.py`` lists them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import _util as u
from ..base import (
    InvalidStoreInput,
    NewMessage,
    OMRecord,
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
    search_arguments,
)
from .append import (
    MessageRow,
    PostgresHeadAppend,
    claim_and_read,
    read_incarnation,
    search_entries,
    write_rows,
)
from .cjk import CJK_TABLE, index_cjk
from .connection import DSN_ENV as DSN_ENV
from .known import PostgresFieldLookup
from .records import MARK_OBSERVED_SQL as MARK_OBSERVED_SQL
from .records import MARK_THREAD_OBSERVED_SQL as MARK_THREAD_OBSERVED_SQL
from .schema import INSERT_SEARCH, Cursor, jsonb, jsonb_text
from .schema import MIGRATIONS as MIGRATIONS
from .schema import SEARCH_CONFIG as SEARCH_CONFIG
from .search import search_messages
from .threads import PostgresThreadListing
from .vectors import PostgresVectorSegments, drop_stale_segments, lock_vectors

# The statements a step runs against a thread's history name only columns that lead to a bounded
# index range whatever the planner's statistics say (right after a bulk load there are none, and
# a filter on resource_id alone let it choose the (resource_id, thread_id, seq) index and read the
# whole thread). The resource is still checked, on the rows found.
MESSAGES_BY_IDS_SQL = (
    "SELECT id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at "
    "FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s)"
)
"""A bounded lookup of a thread's ids: the (thread_id, id) unique key."""

_THREAD_COLUMNS = "thread_id, resource_id, title, created_at, updated_at, metadata"
_MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"
# Timestamps are read as UTC wall time (``AT TIME ZONE 'UTC'``, naive, which ``u.to_utc`` takes as
# UTC) so the session's TimeZone cannot matter: read as timestamptz in, say, America/New_York,
# 0001-01-01T02:00Z would be a BC date that psycopg refuses to load.
_THREAD_SELECT = (
    "thread_id, resource_id, title, created_at AT TIME ZONE 'UTC' AS created_at, "
    "updated_at AT TIME ZONE 'UTC' AS updated_at, metadata"
)
_MESSAGE_SELECT = (
    "id, resource_id, thread_id, seq, kind, data, tokens, created_at AT TIME ZONE 'UTC' AS created_at, "
    "observed, observed_at AT TIME ZONE 'UTC' AS observed_at"
)


def _thread(row: dict[str, Any]) -> ThreadInfo:
    return ThreadInfo(
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        title=row["title"],
        created_at=u.to_utc(row["created_at"]),
        updated_at=u.to_utc(row["updated_at"]),
        metadata=u.from_jsonb_safe(row["metadata"]),
    )


def _message(row: dict[str, Any]) -> StoredMessage:
    return StoredMessage(
        id=row["id"],
        thread_id=row["thread_id"],
        resource_id=row["resource_id"],
        seq=row["seq"],
        data=u.from_jsonb_safe(row["data"]),
        tokens=row["tokens"],
        created_at=u.to_utc(row["created_at"]),
        kind=row["kind"],
        observed=row["observed"],
        observed_at=u.to_utc(row["observed_at"]) if row["observed_at"] is not None else None,
    )


class PostgresStore(PostgresHeadAppend, PostgresFieldLookup, PostgresThreadListing, PostgresVectorSegments):
    """``OMStore`` on PostgreSQL; safe for many workers and processes on one database."""

    @classmethod
    def from_env(cls, *, schema: str = "langchain_om") -> PostgresStore:
        """A store on the DSN in ``$LANGCHAIN_OM_PG_DSN``."""
        dsn = os.environ.get(DSN_ENV)
        if not dsn:
            raise StoreError(f"{DSN_ENV} is not set")
        return cls(dsn, schema=schema)

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"

    # ---- threads ------------------------------------------------------------------------

    async def _select_thread(self, cur: Cursor, resource_id: str, thread_id: str) -> ThreadInfo | None:
        await cur.execute(
            self._q(f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE thread_id = %s AND resource_id = %s"),
            (thread_id, resource_id),
        )
        row = await cur.fetchone()
        return _thread(row) if row is not None else None

    async def _claim(
        self, cur: Cursor, resource_id: str, thread_id: str, title: str | None, metadata: dict[str, Any] | None
    ) -> None:
        """Create the thread unless it exists; raise if another resource owns the id."""
        now = utcnow()
        await cur.execute(
            self._q(
                f"INSERT INTO {{s}}.threads ({_THREAD_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (thread_id) DO NOTHING"
            ),
            (thread_id, resource_id, title, now, now, jsonb(metadata or {}, "metadata")),
        )
        await cur.execute(self._q("SELECT resource_id FROM {s}.threads WHERE thread_id = %s"), (thread_id,))
        row = await cur.fetchone()
        if row is None or row["resource_id"] != resource_id:
            raise InvalidStoreInput("thread_id", "is not available")

    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing; an existing thread is returned unchanged."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        async with self._tx() as cur:
            await self._claim(cur, resource_id, thread_id, title, meta)
            thread = await self._select_thread(cur, resource_id, thread_id)
        assert thread is not None
        return thread

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._one() as cur:
            return await self._select_thread(cur, resource_id, thread_id)

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Replace the title (when given) and merge ``metadata`` keys into the stored metadata."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        title = u.check_title(title)
        meta = u.check_metadata(metadata)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE thread_id = %s AND resource_id = %s FOR UPDATE"
                ),
                (thread_id, resource_id),
            )
            row = await cur.fetchone()
            if row is None:
                raise InvalidStoreInput("thread_id", "no such thread")
            thread = _thread(row)
            merged = {**thread.metadata, **meta} if meta is not None else thread.metadata
            await cur.execute(
                self._q(
                    "UPDATE {s}.threads SET title = %s, metadata = %s, updated_at = %s "
                    "WHERE thread_id = %s AND resource_id = %s"
                ),
                (
                    title if title is not None else thread.title,
                    jsonb(merged, "metadata"),
                    utcnow(),
                    thread_id,
                    resource_id,
                ),
            )
            updated = await self._select_thread(cur, resource_id, thread_id)
        assert updated is not None
        return updated

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
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_THREAD_SELECT} FROM {{s}}.threads WHERE resource_id = %s "
                    "AND (%s::timestamptz IS NULL OR created_at < %s::timestamptz) "
                    "AND (%s::timestamptz IS NULL OR created_at > %s::timestamptz) "
                    "ORDER BY created_at DESC, ord DESC LIMIT %s OFFSET %s"
                ),
                (resource_id, before_dt, before_dt, after_dt, after_dt, count, start),
            )
            return [_thread(row) for row in await cur.fetchall()]

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order (``COLLATE "C"`` compares UTF-8
        bytes, whatever the database's locale), after ``after_id`` (keyset paging)."""
        resource_id = check_resource_id(resource_id)
        start = None if after_id is None else check_thread_id(after_id, "after_id")
        count = u.check_limit(limit)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT thread_id FROM {s}.threads WHERE resource_id = %s "
                    'AND (%s::text IS NULL OR thread_id COLLATE "C" > %s::text COLLATE "C") '
                    'ORDER BY thread_id COLLATE "C" LIMIT %s'
                ),
                (resource_id, start, start, count),
            )
            return [str(row["thread_id"]) for row in await cur.fetchall()]

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove the thread, its messages and its thread-scope record, and forget it in the
        resource-scope record (``u.record_without_thread``), in one transaction; another
        resource's thread is untouched."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (thread_id,))
            await self._forget_in_resource_record(cur, resource_id, thread_id)
            await cur.execute(
                self._q("DELETE FROM {s}.threads WHERE thread_id = %s AND resource_id = %s RETURNING thread_id"),
                (thread_id, resource_id),
            )
            if await cur.fetchone() is None:
                return
            # the messages before their index entries: a CJK backfill batch holding some of the rows
            # (postgres/cjk) is waited for here, and the entries it wrote are then deleted below
            await cur.execute(
                self._q("DELETE FROM {s}.messages WHERE thread_id = %s AND resource_id = %s"), (thread_id, resource_id)
            )
            for table in ("message_search", CJK_TABLE):
                await cur.execute(
                    self._q(f"DELETE FROM {{s}}.{table} WHERE thread_id = %s AND resource_id = %s"),
                    (thread_id, resource_id),
                )
            await lock_vectors(cur, resource_id, shared=True)
            await cur.execute(
                self._q("DELETE FROM {s}.message_vectors WHERE thread_id = %s AND resource_id = %s RETURNING pos"),
                (thread_id, resource_id),
            )
            await self._count_vector_deletions(cur, resource_id, [int(r["pos"]) for r in await cur.fetchall()])
            await cur.execute(
                self._q("DELETE FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )

    async def _forget_in_resource_record(self, cur: Cursor, resource_id: str, thread_id: str) -> None:
        key = record_key(resource_id, None)
        await cur.execute(self._q("SELECT version, body FROM {s}.records WHERE key = %s FOR UPDATE"), (key,))
        row = await cur.fetchone()
        if row is None:
            return
        forgotten = u.record_without_thread(OMRecord.model_validate(u.from_jsonb_safe(row["body"])), thread_id)
        if forgotten is None:
            return
        now = utcnow()
        version = int(row["version"]) + 1
        body_text = u.record_json(forgotten.model_copy(update={"version": version, "updated_at": now}))
        await cur.execute(
            self._q("UPDATE {s}.records SET version = %s, body = %s, updated_at = %s WHERE key = %s"),
            (version, jsonb_text(body_text), now, key),
        )

    # ---- messages -----------------------------------------------------------------------

    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Append in order with seq = last + 1, ...; ids already in the thread are skipped."""
        appended = await self._append(resource_id, thread_id, messages, None)
        assert appended is not None  # None only when an incarnation was expected
        return appended

    async def aappend_to_incarnation(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime
    ) -> list[StoredMessage] | None:
        """``SupportsIncarnationAppend``: the incarnation is read with the ids and last ``seq``."""
        return await self._append(resource_id, thread_id, messages, born)

    async def _append(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime | None
    ) -> list[StoredMessage] | None:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        batch = u.check_messages(messages)
        encoded = [(m, jsonb(m.data, "data")) for m in batch]
        if not encoded and born is None:
            async with self._one() as cur:
                await cur.execute(self._q("SELECT resource_id FROM {s}.threads WHERE thread_id = %s"), (thread_id,))
                row = await cur.fetchone()
            if row is not None and row["resource_id"] != resource_id:
                raise InvalidStoreInput("thread_id", "is not available")
            return []
        # the thread's advisory lock with BEGIN, then one read and one write (postgres/append.py)
        async with self._locked_tx(thread_id) as cur:
            if born is not None:
                read = await read_incarnation(cur, self._q, resource_id, thread_id, [m.id for m, _ in encoded], born)
                if read is None:
                    return None  # another incarnation (or none): the caller re-checks
                seen, last = read
            else:
                seen, last = await claim_and_read(cur, self._q, resource_id, thread_id, [m.id for m, _ in encoded])
            inserted: list[StoredMessage] = []
            rows: list[MessageRow] = []
            entries: list[tuple[str, str, str, str]] = []
            for message, data in encoded:
                if message.id in seen:
                    continue
                seen.add(message.id)
                last += 1
                rows.append((message.id, resource_id, thread_id, last, message.kind, data, message.tokens,
                             message.created_at, stored_fingerprint(message.data)))
                entries.extend(search_entries(resource_id, thread_id, message.id, message.data, message.kind))
                inserted.append(
                    StoredMessage(
                        id=message.id,
                        thread_id=thread_id,
                        resource_id=resource_id,
                        seq=last,
                        data=message.data,
                        tokens=message.tokens,
                        created_at=message.created_at,
                        kind=message.kind,
                    )
                )
            if rows:
                await write_rows(cur, self._q, thread_id, rows, entries)
        return inserted

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
        order = "DESC" if descending else "ASC"
        async with self._one() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_MESSAGE_SELECT} FROM {{s}}.messages "
                    "WHERE resource_id = %s AND thread_id = %s AND seq > %s "
                    f"AND (%s::bigint IS NULL OR seq < %s::bigint) ORDER BY seq {order} LIMIT %s"
                ),
                (resource_id, thread_id, low, high, high, count),
            )
            return [_message(row) for row in await cur.fetchall()]

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """The earliest message with this id among the resource's threads."""
        resource_id = check_resource_id(resource_id)
        message_id = check_id(message_id, "message_id")
        async with self._one() as cur:
            await cur.execute(
                self._q(
                    f"SELECT {_MESSAGE_SELECT} FROM {{s}}.messages WHERE resource_id = %s AND id = %s "
                    "ORDER BY created_at, thread_id, seq LIMIT 1"
                ),
                (resource_id, message_id),
            )
            row = await cur.fetchone()
        return _message(row) if row is not None else None

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)
        if not wanted:
            return []
        async with self._one() as cur:
            await cur.execute(self._q(MESSAGES_BY_IDS_SQL), (thread_id, wanted))
            return [_message(row) for row in await cur.fetchall() if row["resource_id"] == resource_id]

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        """Rewrite an unobserved message in place, with its index entry; its stored vectors are
        dropped (the caller embeds the new text), so no search finds the old words.

        One transaction (the row, both keyword indexes, the vectors under their lock): a worker
        killed half-way leaves the old text with its old entries, never the new text with the
        old words indexed, which no later step would repair (the stored copy would already equal
        the caller's). The row is updated first, so its row lock orders the edit against the
        CJK backfill (``postgres/cjk``), which locks the rows it indexes."""
        resource_id, thread_id, new, _text = u.check_replacement(resource_id, thread_id, message_id, data, tokens)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "UPDATE {s}.messages SET data = %s, tokens = %s, fingerprint = %s WHERE resource_id = %s "
                    "AND thread_id = %s AND id = %s AND NOT observed AND kind = 'message'"
                ),
                (jsonb(new.data, "data"), new.tokens, stored_fingerprint(new.data), resource_id, thread_id, message_id),
            )
            if not cur.rowcount:
                return False
            await self._reindex_message(cur, resource_id, thread_id, message_id, new.data, new.kind)
            await lock_vectors(cur, resource_id, shared=True)
            await cur.execute(
                self._q("DELETE FROM {s}.message_vectors WHERE thread_id = %s AND message_id = %s "
                        "AND resource_id = %s RETURNING pos"),
                (thread_id, message_id, resource_id),
            )
            await self._count_vector_deletions(cur, resource_id, [int(r["pos"]) for r in await cur.fetchall()])
            return True

    async def _count_vector_deletions(self, cur: Cursor, resource_id: str, positions: list[int]) -> None:
        """Count dropped vectors, so a cached copy of the resource's vectors reloads, and drop the
        segments that held them."""
        if dropped := len(positions):
            await drop_stale_segments(cur, self._q, resource_id, positions)
            await cur.execute(
                self._q("INSERT INTO {s}.vector_deletions (resource_id, deleted) VALUES (%s, %s) ON CONFLICT "
                        "(resource_id) DO UPDATE SET deleted = {s}.vector_deletions.deleted + excluded.deleted"),
                (resource_id, dropped),
            )

    async def _reindex_message(
        self, cur: Cursor, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], kind: str
    ) -> None:
        """An edited message's keyword index entry, rewritten in place (its ``pos``, the recency
        search ranks candidates by, stays), added if it had none, removed if it has no text now."""
        entries = search_entries(resource_id, thread_id, message_id, data, kind)
        await cur.execute(
            self._q(f"DELETE FROM {{s}}.{CJK_TABLE} WHERE thread_id = %s AND message_id = %s AND resource_id = %s"),
            (thread_id, message_id, resource_id),
        )
        if not entries:
            await cur.execute(
                self._q("DELETE FROM {s}.message_search WHERE thread_id = %s AND message_id = %s "
                        "AND resource_id = %s"),
                (thread_id, message_id, resource_id),
            )
            return
        await index_cjk(cur, self._q, entries)
        await cur.execute(
            self._q(f"UPDATE {{s}}.message_search SET search = to_tsvector('{SEARCH_CONFIG}', %s) "
                    "WHERE thread_id = %s AND message_id = %s AND resource_id = %s"),
            (entries[0][3], thread_id, message_id, resource_id),
        )
        if not cur.rowcount:
            await cur.executemany(self._q(INSERT_SEARCH), entries)

    async def acount_messages(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT COUNT(*) AS n FROM {s}.messages WHERE resource_id = %s AND thread_id = %s"),
                (resource_id, thread_id),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row is not None else 0

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        async with self._one() as cur:
            await cur.execute(
                self._q(
                    "SELECT COALESCE(MAX(seq), 0) AS n FROM {s}.messages WHERE resource_id = %s AND thread_id = %s"
                ),
                (resource_id, thread_id),
            )
            row = await cur.fetchone()
        return int(row["n"]) if row is not None else 0

    # ---- search -------------------------------------------------------------------------

    @property
    def keyword_search_available(self) -> bool:
        """PostgreSQL's full-text search is built in."""
        return True

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """``tsvector`` search (GIN index) ranked by ``ts_rank``, inside the resource, in the
        English and the CJK index (``postgres/search``)."""
        resource_id, thread_id, terms, count = search_arguments(resource_id, query, thread_id, limit)
        if not terms:
            return []
        async with self._tx() as cur:
            return await search_messages(cur, self._q, resource_id, thread_id, terms, count, _message)

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        checked = check_vector_items(items)
        if not checked:
            return 0
        async with self._tx() as cur:
            await lock_vectors(cur, resource_id, shared=True)  # no segment is written over a pending row
            await cur.executemany(
                self._q(
                    "INSERT INTO {s}.message_vectors (resource_id, space, thread_id, message_id, vector) "
                    "SELECT %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {s}.messages "
                    "WHERE thread_id = %s AND id = %s AND resource_id = %s) "
                    "ON CONFLICT (thread_id, message_id, space) DO NOTHING"
                ),
                [(resource_id, space, item.thread_id, item.message_id, item.vector,
                  item.thread_id, item.message_id, resource_id) for item in checked],
            )
            return max(cur.rowcount, 0)  # psycopg sums the rows of every statement of executemany

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        low = u.check_count(after_pos, "after_pos")
        count = None if limit is None else u.check_count(limit, "limit")
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT pos, thread_id, message_id, vector FROM {s}.message_vectors "
                    "WHERE resource_id = %s AND space = %s AND pos > %s ORDER BY pos LIMIT %s"
                ),
                (resource_id, space, low, count),
                binary=True,  # bytea as raw bytes: the text format would double them as hex
            )
            rows = await cur.fetchall()
        return VectorBatch.of([(r["pos"], r["thread_id"], r["message_id"], r["vector"]) for r in rows])

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        resource_id = check_resource_id(resource_id)
        space = check_space(space)
        async with self._tx() as cur:
            await cur.execute(
                self._q(
                    "SELECT (SELECT COALESCE(MAX(deleted), 0) FROM {s}.vector_deletions WHERE resource_id = %s) AS n,"
                    " (SELECT COALESCE(MAX(pos), 0) FROM {s}.message_vectors WHERE resource_id = %s AND space = %s)"
                    " AS top"
                ),
                (resource_id, resource_id, space),
            )
            row = await cur.fetchone()
        return (int(row["n"]), int(row["top"])) if row is not None else (0, 0)
