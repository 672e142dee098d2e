"""The PostgreSQL store's tables of engine state: OM records, leases and per-resource values.

``PostgresRecords`` sits between the connection (``PostgresConnection``) and ``PostgresStore``
(threads, messages, search, vectors): a record is swapped by compare-and-swap under its row
lock, in one transaction with the marking of the messages it observed (see ``postgres/store.py``'s
docstring for the concurrency rules).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
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
from .connection import PostgresConnection
from .schema import Cursor, jsonb, jsonb_text

# The statements a step runs against a thread's history name only columns that lead to a bounded
# index range whatever the planner's statistics say (right after a bulk load there are none, and
# a filter on resource_id alone let it choose the (resource_id, thread_id, seq) index and read the
# whole thread). The resource is still checked, on the rows found.
MARK_OBSERVED_SQL = (
    "UPDATE {s}.messages SET observed = TRUE, observed_at = %s "
    "WHERE thread_id = %s AND seq > %s AND seq <= %s AND NOT observed AND resource_id = %s"
)
"""Mark a thread's range (observed_through, mark]: the (thread_id, seq) unique key, only the new rows."""
MARK_THREAD_OBSERVED_SQL = (
    "WITH prefix AS (SELECT observed_through FROM {s}.threads WHERE thread_id = %(thread)s "
    "AND resource_id = %(resource)s AND observed_through < %(mark)s), "
    "marked AS (UPDATE {s}.messages SET observed = TRUE, observed_at = %(now)s WHERE thread_id = %(thread)s "
    "AND seq > (SELECT observed_through FROM prefix) AND seq <= %(mark)s AND NOT observed "
    "AND resource_id = %(resource)s) "
    "UPDATE {s}.threads SET observed_through = GREATEST(observed_through, COALESCE("
    "(SELECT MAX(seq) FROM {s}.messages WHERE thread_id = %(thread)s AND seq <= %(mark)s), 0)) "
    "WHERE thread_id = %(thread)s AND resource_id = %(resource)s AND observed_through < %(mark)s"
)
"""A commit's marking in one statement (one round trip instead of three): read the thread's
prefix, mark (prefix, mark] as ``MARK_OBSERVED_SQL`` does, advance the prefix to the last stored
row at or below the mark (a mark past the last row must not cover rows appended later). Nothing
when the prefix is at the mark already or the thread is another resource's. Its statements share
one snapshot, taken under the thread's append lock, so no row can arrive between the marking and
the advance."""


_SERVER_EPOCH = "EXTRACT(EPOCH FROM clock_timestamp())::double precision"
"""The server's time in epoch seconds: the one clock all workers share (a lease's ``expires_at``)."""


class PostgresRecords(PostgresConnection):
    """Records (compare-and-swap), leases and values of a PostgreSQL store."""

    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT body FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )
            row = await cur.fetchone()
        return OMRecord.model_validate(u.from_jsonb_safe(row["body"])) if row is not None else None

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT version, updated_at AT TIME ZONE 'UTC' AS updated_at FROM {s}.records "
                        "WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )
            row = await cur.fetchone()
        return (int(row["version"]), u.to_utc(row["updated_at"])) if row is not None else None

    async def aget_thread_head(
        self, resource_id: str, thread_id: str, record_thread: str | None
    ) -> tuple[int, RecordStamp | None]:
        """The thread's last ``seq`` and the record's stamp in one statement (``SupportsThreadHead``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT (SELECT COALESCE(MAX(seq), 0) FROM {s}.messages WHERE resource_id = %s "
                        "AND thread_id = %s) AS n, r.version, r.updated_at AT TIME ZONE 'UTC' AS updated_at "
                        "FROM (SELECT 1) AS one LEFT JOIN {s}.records AS r ON r.key = %s AND r.resource_id = %s"),
                (resource_id, thread_id, record_key(resource_id, record_thread), resource_id),
            )
            row = await cur.fetchone()
        assert row is not None  # one row whatever is stored
        stamp = (int(row["version"]), u.to_utc(row["updated_at"])) if row["version"] is not None else None
        return int(row["n"]), stamp

    async def afork_probe(self, resource_id: str, thread_id: str, message_ids: Sequence[str],
                          newest: int) -> ForkProbe:
        """The newest rows and the asked ids' rows in one statement (``SupportsForkProbe``)."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT * FROM (SELECT seq, id, kind, true AS top FROM {s}.messages WHERE resource_id = %s "
                        "AND thread_id = %s ORDER BY seq DESC LIMIT %s) AS newest UNION ALL "
                        "SELECT seq, id, kind, false FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s) "
                        "AND resource_id = %s"),
                (resource_id, thread_id, newest, thread_id, wanted, resource_id),
            )
            rows = await cur.fetchall()
        top = sorted(((int(r["seq"]), str(r["id"]), str(r["kind"])) for r in rows if r["top"]), reverse=True)
        held = [(str(r["id"]), int(r["seq"]), str(r["kind"])) for r in rows if not r["top"]]
        return top, held

    async def atry_lease(self, name: str, owner: str, ttl_s: float) -> bool:
        """Take (or renew) the lease ``name`` for ``owner`` unless another owner holds an unexpired one.

        A lease row with an expiry rather than an advisory lock: an advisory lock lives as long as
        its session, and pooled connections outlive the worker step that took it. Expiry is the
        server's clock (``clock_timestamp()``), never a worker's: a host whose clock runs a minute
        ahead would otherwise take live leases, and one running behind would hand out dead ones."""
        async with self._one() as cur:
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.leases (name, owner, expires_at) "
                    f"VALUES (%s, %s, {_SERVER_EPOCH} + %s::double precision) ON CONFLICT (name) "
                    "DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at "
                    f"WHERE {{s}}.leases.expires_at < {_SERVER_EPOCH} OR {{s}}.leases.owner = excluded.owner "
                    "RETURNING owner"
                ),
                (name, owner, float(ttl_s)),
            )
            return await cur.fetchone() is not None

    async def alease_free(self, name: str) -> bool:
        """Whether nobody holds an unexpired lease ``name`` (a read: what ``atry_lease`` would find)."""
        async with self._one() as cur:
            await cur.execute(
                self._q(f"SELECT NOT EXISTS (SELECT 1 FROM {{s}}.leases WHERE name = %s "
                        f"AND expires_at >= {_SERVER_EPOCH}) AS free"),
                (name,),
            )
            row = await cur.fetchone()
        return bool(row is not None and row["free"])

    async def arelease_lease(self, name: str, owner: str) -> None:
        """Give the lease back (a no-op when ``owner`` no longer holds it)."""
        async with self._one() as cur:
            await cur.execute(self._q("DELETE FROM {s}.leases WHERE name = %s AND owner = %s"), (name, owner))

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Compare-and-swap the record (row lock) and mark messages observed in the same transaction."""
        record, expected = u.check_record(record, expected_version)
        marks = u.check_mark_observed(mark_observed)
        thread_part = u.record_thread(record)
        key = record_key(record.resource_id, thread_part)
        now = utcnow()
        stored = record.model_copy(update={"version": expected + 1, "updated_at": now})
        plain = u.record_data(stored)
        # sent as encoded: not parsed back and encoded twice more; the returned record is
        # validated from the data the body was encoded from
        body = jsonb_text(u.dumps(plain, "record"))
        if not marks and expected > 0:
            # the common commit (a chunk staged, a flag set): one compare-and-swap statement on its own
            async with self._one() as cur:
                await self._swap(cur, key, record.resource_id, expected, body, now)
            return OMRecord.model_validate(plain)
        # each marked thread's append lock, taken before the record's row lock as adelete_thread
        # does: no append is half done while observed_through moves past its rows (the first
        # one with BEGIN, in one round trip)
        threads = sorted(marks)
        async with self._locked_tx(threads[0]) if threads else self._tx() as cur:
            for thread_id in threads[1:]:
                await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (thread_id,))
            if expected == 0:
                await cur.execute(
                    self._q(
                        "INSERT INTO {s}.records (key, resource_id, thread_id, scope, version, body, updated_at) "
                        "VALUES (%s, %s, %s, %s, 1, %s, %s) ON CONFLICT (key) DO NOTHING RETURNING version"
                    ),
                    (key, record.resource_id, thread_part, record.scope, body, now),
                )
                if await cur.fetchone() is None:
                    raise RecordConflictError(f"record {key!r} already exists (expected to create it)")
            else:
                await self._swap(cur, key, record.resource_id, expected, body, now)
            for thread_id, seq in sorted(marks.items()):
                await self._mark_observed(cur, record.resource_id, thread_id, seq, now)
        return OMRecord.model_validate(plain)

    async def _swap(self, cur: Cursor, key: str, resource_id: str, expected: int, body: Any, now: datetime) -> None:
        """Write version ``expected + 1`` if the stored record is at ``expected``: one statement.
        A concurrent writer's update makes this one wait for its row lock and then re-check the
        version on the row it committed (READ COMMITTED), so exactly one of two racing swaps wins."""
        await cur.execute(
            self._q("UPDATE {s}.records SET version = %s, body = %s, updated_at = %s "
                    "WHERE key = %s AND resource_id = %s AND version = %s RETURNING version"),
            (expected + 1, body, now, key, resource_id, expected),
        )
        if await cur.fetchone() is not None:
            return
        await cur.execute(self._q("SELECT version FROM {s}.records WHERE key = %s AND resource_id = %s"),
                          (key, resource_id))
        row = await cur.fetchone()
        current = int(row["version"]) if row is not None else 0
        raise RecordConflictError(f"record {key!r} is at version {current}, expected {expected}")

    async def _mark_observed(self, cur: Cursor, resource_id: str, thread_id: str, seq: int, now: datetime) -> None:
        """Mark the thread's rows up to ``seq`` observed, touching only those past its
        ``observed_through`` (every row at or below it is observed already: a flag is never
        cleared and a new row always takes a higher seq). Runs under the thread's append lock."""
        await cur.execute(self._q(MARK_THREAD_OBSERVED_SQL),
                          {"thread": thread_id, "resource": resource_id, "mark": seq, "now": now})

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None:
        resource_id, thread_id = u.check_record_ids(resource_id, thread_id)
        async with self._tx() as cur:
            await cur.execute(
                self._q("DELETE FROM {s}.records WHERE key = %s AND resource_id = %s"),
                (record_key(resource_id, thread_id), resource_id),
            )

    # ---- values -------------------------------------------------------------------------

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        async with self._one() as cur:
            await cur.execute(
                self._q("SELECT value FROM {s}.kv WHERE resource_id = %s AND namespace = %s AND key = %s"), slot
            )
            row = await cur.fetchone()
        return u.from_jsonb_safe(row["value"]) if row is not None else None

    async def _lock_value(self, cur: Cursor, slot: tuple[str, str, str]) -> None:
        """Serialise writers of one value (a missing row has nothing ``FOR UPDATE`` could lock)."""
        await cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (_value_lock_key(slot),))

    async def aupdate_value(self, resource_id: str, namespace: str, key: str, update: ValueUpdate) -> Any:
        """Read, apply ``update`` and write in one transaction under the value's advisory lock."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        apply = u.check_update(update)
        async with self._tx() as cur:
            await self._lock_value(cur, slot)
            await cur.execute(
                self._q("SELECT value FROM {s}.kv WHERE resource_id = %s AND namespace = %s AND key = %s"), slot
            )
            row = await cur.fetchone()
            value = u.json_roundtrip(apply(u.from_jsonb_safe(row["value"]) if row is not None else None), "value")
            await cur.execute(
                self._q(
                    "INSERT INTO {s}.kv (resource_id, namespace, key, value, updated_at) VALUES (%s, %s, %s, %s, %s) "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
                ),
                (*slot, jsonb(value, "value"), utcnow()),
            )
        return value

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        """A blind write, under the value's advisory lock (so it never lands between the read and
        the write of an ``aupdate_value``): one statement, the lock taken in it before the upsert
        (a write reads nothing, so the statement's earlier snapshot does not matter), in its own
        transaction: one round trip instead of four (BEGIN, lock, upsert, COMMIT); the branch
        snapshots write one on most turns."""
        slot = (check_resource_id(resource_id), check_id(namespace, "namespace"), check_id(key, "key"))
        encoded = jsonb(value, "value")
        async with self._one() as cur:
            await cur.execute(
                self._q(
                    "WITH locked AS (SELECT pg_advisory_xact_lock(hashtext(%s))) "
                    "INSERT INTO {s}.kv (resource_id, namespace, key, value, updated_at) "
                    "SELECT %s, %s, %s, %s, %s FROM locked "
                    "ON CONFLICT (resource_id, namespace, key) DO UPDATE SET "
                    "value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
                ),
                (_value_lock_key(slot), *slot, encoded, utcnow()),
            )


def _value_lock_key(slot: tuple[str, str, str]) -> str:
    """The advisory lock's text of one value (resource, namespace, key)."""
    return "langchain_om.kv\x1f" + "\x1f".join(slot)
