"""The SQLite store's tables of engine state: OM records, leases and per-resource values.

``SQLiteRecords`` sits between the connection (``SQLiteConnection``) and ``SQLiteStore``
(threads, messages, search, vectors): a record is swapped by compare-and-swap in one
``BEGIN IMMEDIATE`` transaction with the marking of the messages it observed, which is the
commit flushed with ``synchronous = FULL`` (see ``sqlite/store.py``'s docstring).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .. import _util as u
from ..base import (
    OMRecord,
    RecordConflictError,
    RecordStamp,
    ValueUpdate,
    check_id,
    check_resource_id,
    record_key,
    utcnow,
)
from ..step_fast_paths import ForkProbe
from .connection import SQLiteConnection, immediate

_ID_CHUNK = 500  # ids per IN list, well under SQLite's limit on parameters

MARK_OBSERVED_SQL = (
    "UPDATE messages INDEXED BY messages_unobserved SET observed = 1, observed_at = ? "
    "WHERE thread_id = ? AND observed = 0 AND seq <= ? AND resource_id = ?"
)


TAKE_LEASE_SQL = (  # (name, owner, expires_at, now): one row changed when taken or renewed
    "INSERT INTO leases (name, owner, expires_at) VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
    "SET owner = excluded.owner, expires_at = excluded.expires_at "
    "WHERE leases.expires_at < ? OR leases.owner = excluded.owner"
)


class SQLiteRecords(SQLiteConnection):
    """Records (compare-and-swap), leases and values of a SQLite store."""

    _FULL_SYNC_OBSERVED = True
    """Flush commits that mark messages observed (see ``sqlite/store.py``'s docstring); the storage
    benchmark turns it off to measure what it costs."""

    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> OMRecord | None:
            row = conn.execute(
                "SELECT body FROM records WHERE key = ? AND resource_id = ?", (key, resource_id)
            ).fetchone()
            return u.record_from_json(row[0]) if row is not None else None

        return await self._run_inline(run)  # a one-row read (a cache miss's): no worker-thread hop

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> RecordStamp | None:
            row = conn.execute(
                "SELECT version, updated_at FROM records WHERE key = ? AND resource_id = ?", (key, resource_id)
            ).fetchone()
            return (int(row[0]), u.from_iso(row[1])) if row is not None else None

        return await self._run_inline(run)

    async def aget_thread_head(
        self, resource_id: str, thread_id: str, record_thread: str | None
    ) -> tuple[int, RecordStamp | None]:
        """The thread's last ``seq`` and the record's stamp in one statement (``SupportsThreadHead``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        key = record_key(resource_id, record_thread)

        def run(conn: sqlite3.Connection) -> tuple[int, RecordStamp | None]:
            row = conn.execute(
                "SELECT (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE resource_id = ? AND thread_id = ?), "
                "r.version, r.updated_at FROM (SELECT 1) AS one "
                "LEFT JOIN records AS r ON r.key = ? AND r.resource_id = ?",
                (resource_id, thread_id, key, resource_id),
            ).fetchone()
            stamp = (int(row[1]), u.from_iso(row[2])) if row[1] is not None else None
            return int(row[0]), stamp

        return await self._run_inline(run)

    async def afork_probe(self, resource_id: str, thread_id: str, message_ids: Sequence[str],
                          newest: int) -> ForkProbe:
        """The newest rows and the asked ids' rows, ids and kinds only (``SupportsForkProbe``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)

        def run(conn: sqlite3.Connection) -> ForkProbe:
            top = [(int(seq), str(mid), str(kind)) for seq, mid, kind in conn.execute(
                "SELECT seq, id, kind FROM messages WHERE resource_id = ? AND thread_id = ? "
                "ORDER BY seq DESC LIMIT ?", (resource_id, thread_id, newest))]
            held: list[tuple[str, int, str]] = []
            for start in range(0, len(wanted) if top else 0, _ID_CHUNK):
                chunk = wanted[start:start + _ID_CHUNK]
                # the unique (thread_id, id) index answers it (see ``aget_messages_by_ids``)
                held.extend((str(mid), int(seq), str(kind)) for mid, seq, kind in conn.execute(
                    f"SELECT id, seq, kind FROM messages WHERE thread_id = ? AND id IN ({', '.join('?' * len(chunk))}) "
                    "AND +resource_id = ?", [thread_id, *chunk, resource_id]))
            return top, held

        return await self._run_inline(run) if len(wanted) <= _ID_CHUNK else await self._run(run)

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Compare-and-swap the record and mark messages observed in one ``BEGIN IMMEDIATE`` transaction."""
        record, expected = u.check_record(record, expected_version)
        marks = u.check_mark_observed(mark_observed)
        thread_part = u.record_thread(record)
        key = record_key(record.resource_id, thread_part)

        flush = bool(marks) and self._FULL_SYNC_OBSERVED and self.synchronous == "normal" and not self.in_memory

        def run(conn: sqlite3.Connection) -> OMRecord:
            if not flush:
                return swap(conn)
            conn.execute("PRAGMA synchronous = FULL")  # cannot change inside a transaction
            try:
                return swap(conn)
            finally:
                conn.execute("PRAGMA synchronous = NORMAL")

        def swap(conn: sqlite3.Connection) -> OMRecord:
            with immediate(conn):
                row = conn.execute("SELECT version FROM records WHERE key = ?", (key,)).fetchone()
                current = int(row[0]) if row is not None else 0
                if current != expected:
                    raise RecordConflictError(f"record {key!r} is at version {current}, expected {expected}")
                now = utcnow()
                stored = record.model_copy(update={"version": expected + 1, "updated_at": now})
                plain = u.record_data(stored)
                body = u.dumps(plain, "record")
                conn.execute(
                    "INSERT INTO records (key, resource_id, thread_id, scope, version, body, updated_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET "
                    "version = excluded.version, body = excluded.body, updated_at = excluded.updated_at",
                    (key, record.resource_id, thread_part, record.scope, expected + 1, body, u.iso(now)),
                )
                for thread_id, seq in marks.items():
                    conn.execute(MARK_OBSERVED_SQL, (u.iso(now), thread_id, seq, record.resource_id))
                # what the stored body parses to, without parsing it: ``plain`` is JSON data owned
                # here (json.loads of the ASCII body cost ~50 us a commit of a short log)
                return OMRecord.model_validate(plain)

        # inline when the connection is free, a flushed commit too (as every commit is with
        # ``synchronous="full"``): its fsync blocks the loop (~0.3 ms here), but in a worker thread
        # under a busy loop it held the one connection while waiting for the GIL (p90 17 ms), and
        # every step's SQLite call queued behind it: at 200 users ~90 waits a turn, ~20 with this
        return await self._run_inline(run)

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the lease ``name`` for ``owner`` unless another owner holds an unexpired one.

        Leases, like the key-value reads and writes below, are one-row transactions run inline when
        the connection is free (``_run_inline``): a hop to a worker thread cost more than the call,
        and a busy step takes and gives back two of them per Observer or Reflector cycle."""

        def run(conn: sqlite3.Connection) -> bool:
            now = time.time()
            with immediate(conn):
                cursor = conn.execute(TAKE_LEASE_SQL, (name, owner, now + ttl_s, now))
                return cursor.rowcount == 1

        return await self._run_inline(run)

    async def atry_lease_unless(self, name: str, owner: str, ttl_s: float, blocker: str) -> bool:
        """``atry_lease`` while nobody holds an unexpired ``blocker`` (checked in the same
        transaction): a buffering cycle takes its lease unless a synchronous observation holds the
        record's, one round trip where the take and the check were two."""

        def run(conn: sqlite3.Connection) -> bool:
            now = time.time()
            with immediate(conn):
                if conn.execute("SELECT 1 FROM leases WHERE name = ? AND expires_at >= ?", (blocker, now)).fetchone():
                    return False
                cursor = conn.execute(TAKE_LEASE_SQL, (name, owner, now + ttl_s, now))
                return cursor.rowcount == 1

        return await self._run_inline(run)

    async def alease_free(self, name: str) -> bool:
        """Whether nobody holds an unexpired lease ``name`` (a read: what ``atry_lease`` would find)."""
        return await self._run_inline(lambda conn: conn.execute(
            "SELECT 1 FROM leases WHERE name = ? AND expires_at >= ?", (name, time.time())).fetchone() is None)

    async def arelease_lease(self, name: str, owner: str) -> None:
        """Give the lease back (a no-op when ``owner`` no longer holds it)."""

        def run(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                conn.execute("DELETE FROM leases WHERE name = ? AND owner = ?", (name, owner))

        await self._run_inline(run)

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        key = record_key(resource_id, thread_id)

        def run(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                conn.execute("DELETE FROM records WHERE key = ? AND resource_id = ?", (key, resource_id))

        await self._run(run)

    # ---- values -------------------------------------------------------------------------

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))

        def run(conn: sqlite3.Connection) -> Any | None:
            row = conn.execute(
                "SELECT value FROM kv WHERE resource_id = ? AND namespace = ? AND key = ?", slot
            ).fetchone()
            return u.loads(row[0]) if row is not None else None

        return await self._run_inline(run)

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        text = u.dumps(value, "value")

        def run(conn: sqlite3.Connection) -> None:
            with immediate(conn):
                conn.execute(
                    "INSERT INTO kv (resource_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = excluded.value, updated_at = excluded.updated_at",
                    (*slot, text, u.iso(utcnow())),
                )

        await self._run_inline(run)

    async def aupdate_value(self, resource_id: str, namespace: str, key: str, update: ValueUpdate) -> Any:
        """Read, apply ``update`` and write in one ``BEGIN IMMEDIATE`` transaction (other
        connections and processes wait for the write lock, so no update is lost)."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        apply = u.check_update(update)

        def run(conn: sqlite3.Connection) -> Any:
            with immediate(conn):
                row = conn.execute(
                    "SELECT value FROM kv WHERE resource_id = ? AND namespace = ? AND key = ?", slot
                ).fetchone()
                text = u.dumps(apply(u.loads(row[0]) if row is not None else None), "value")
                conn.execute(
                    "INSERT INTO kv (resource_id, namespace, key, value, updated_at) VALUES (?, ?, ?, ?, ?) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = excluded.value, updated_at = excluded.updated_at",
                    (*slot, text, u.iso(utcnow())),
                )
                return u.loads(text)

        return await self._run(run)
