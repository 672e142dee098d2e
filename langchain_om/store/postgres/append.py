"""Appending messages to a PostgreSQL thread in few round trips.

An agent step appends one or two messages; each statement is a network round trip and costs
Python CPU in psycopg, so an append is four round trips whatever it stores: BEGIN with the
thread's advisory lock (one simple query; ``seq`` numbers are assigned by one transaction at a time),
one read that claims the thread and reads its owner, the ids already stored and the last
``seq``, and one write that stores the rows, their keyword index rows (plain and CJK) and the
thread's ``updated_at`` (a statement with data-modifying CTEs), then COMMIT. A large batch (a cold step
handing over a long history) writes with ``executemany`` instead, which psycopg pipelines and
which stays clear of PostgreSQL's limit on parameters per statement.

``PostgresHeadAppend.aappend_with_head`` (``SupportsHeadAppend``, a warm step's append) is one round
trip: the advisory lock and one statement that checks the incarnation and the checkpoint's
position, numbers and stores the rows the thread lacks, indexes them and reads the head, sent as
one simple query (``_script``: client-side binding, one implicit transaction). The rows go as one
JSON array, so the statement's text is the same for every batch size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from .. import _util as u
from .._util import to_utc
from ..base import InvalidStoreInput, NewMessage, StoredMessage, record_key, utcnow
from ..known import stored_fingerprint
from ..search import search_text
from ..step_fast_paths import ThreadHead
from .cjk import INSERT_CJK, cjk_entries
from .connection import PostgresConnection
from .schema import INSERT_SEARCH, SEARCH_CONFIG, Cursor, jsonb, stored_json_text

Query = Callable[[str], sql.Composed]
MessageRow = tuple[str, str, str, int, str, Jsonb, int, datetime, str | None]
SearchRow = tuple[str, str, str, str]

ONE_STATEMENT_ROWS = 64
"""Batches up to this many rows are written in one statement (9 parameters a row)."""

_THREAD_COLUMNS = "thread_id, resource_id, title, created_at, updated_at, metadata"
_CLAIM_AND_READ = (
    f"WITH claimed AS (INSERT INTO {{s}}.threads ({_THREAD_COLUMNS}) VALUES (%s, %s, NULL, %s, %s, %s) "
    "ON CONFLICT (thread_id) DO NOTHING RETURNING resource_id) "
    "SELECT COALESCE((SELECT resource_id FROM claimed), "
    "(SELECT resource_id FROM {s}.threads WHERE thread_id = %s)) AS owner, "
    "ARRAY(SELECT id FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s)) AS seen, "
    "(SELECT COALESCE(MAX(seq), 0) FROM {s}.messages WHERE thread_id = %s) AS last"
)
_READ_INCARNATION = (
    "SELECT resource_id AS owner, created_at AT TIME ZONE 'UTC' AS created_at, "
    "ARRAY(SELECT id FROM {s}.messages WHERE thread_id = %s AND id = ANY(%s)) AS seen, "
    "(SELECT COALESCE(MAX(seq), 0) FROM {s}.messages WHERE thread_id = %s) AS last "
    "FROM {s}.threads WHERE thread_id = %s"
)
_MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, fingerprint"
_INSERT_MESSAGES = f"INSERT INTO {{s}}.messages ({_MESSAGE_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)"
_TOUCH_THREAD = "UPDATE {s}.threads SET updated_at = %s WHERE thread_id = %s"


async def claim_and_read(
    cur: Cursor, q: Query, resource_id: str, thread_id: str, ids: list[str]
) -> tuple[set[str], int]:
    """Under the thread's advisory lock (taken by the caller's previous statement, so this
    statement's snapshot sees every committed append): create the thread unless it exists,
    check its owner, and return the ids of ``ids`` it holds and its last ``seq``."""
    now = utcnow()
    await cur.execute(q(_CLAIM_AND_READ), (thread_id, resource_id, now, now, jsonb({}, "metadata"),
                                           thread_id, thread_id, ids, thread_id))
    row = await cur.fetchone()
    assert row is not None  # one row whatever is stored
    owner = row["owner"]
    if owner is None:
        # another transaction created the thread after this statement's snapshot was taken (its
        # insert made ours do nothing): read it again, with a fresh snapshot
        await cur.execute(q("SELECT resource_id FROM {s}.threads WHERE thread_id = %s"), (thread_id,))
        found = await cur.fetchone()
        owner = found["resource_id"] if found is not None else None
    if owner != resource_id:
        raise InvalidStoreInput("thread_id", "is not available")
    return set(row["seen"] or ()), int(row["last"])


async def read_incarnation(
    cur: Cursor, q: Query, resource_id: str, thread_id: str, ids: list[str], born: datetime
) -> tuple[set[str], int] | None:
    """``claim_and_read`` for a caller that knows the thread's incarnation: under the advisory
    lock, the ids of ``ids`` it holds and its last ``seq`` when ``resource_id`` owns it and it
    was created at ``born``; None (another incarnation, or none) otherwise. Nothing is created."""
    await cur.execute(q(_READ_INCARNATION), (thread_id, ids, thread_id, thread_id))
    row = await cur.fetchone()
    if row is None or row["owner"] != resource_id or to_utc(row["created_at"]) != born:
        return None
    return set(row["seen"] or ()), int(row["last"])


async def write_rows(
    cur: Cursor, q: Query, thread_id: str, rows: Sequence[MessageRow], entries: list[SearchRow]
) -> None:
    """Store ``rows``, their keyword index rows and the thread's ``updated_at``."""
    cjk = cjk_entries(entries)
    now = utcnow()
    if len(rows) > ONE_STATEMENT_ROWS:
        await cur.executemany(q(_INSERT_MESSAGES), rows)
        if entries:
            await cur.executemany(q(INSERT_SEARCH), entries)
        if cjk:
            await cur.executemany(q(INSERT_CJK), cjk)
        await cur.execute(q(_TOUCH_THREAD), (now, thread_id))
        return
    params: list[Any] = [now, thread_id]
    ctes = [f"touched AS ({_TOUCH_THREAD})"]
    if entries:
        values = ", ".join([f"(%s, %s, %s, to_tsvector('{SEARCH_CONFIG}', %s))"] * len(entries))
        ctes.append(f"searched AS (INSERT INTO {{s}}.message_search (resource_id, thread_id, message_id, search) "
                    f"VALUES {values})")
        params.extend(value for entry in entries for value in entry)
    if cjk:
        values = ", ".join(["(%s, %s, %s, %s::tsvector)"] * len(cjk))
        ctes.append(f"cjk AS (INSERT INTO {{s}}.message_search_cjk (resource_id, thread_id, message_id, search) "
                    f"VALUES {values} ON CONFLICT (thread_id, message_id) DO NOTHING)")
        params.extend(value for entry in cjk for value in entry)
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(rows))
    params.extend(value for row in rows for value in row)
    await cur.execute(q(f"WITH {', '.join(ctes)} INSERT INTO {{s}}.messages ({_MESSAGE_COLUMNS}) VALUES {values}"),
                      params)


def search_entries(
    resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], kind: str
) -> list[SearchRow]:
    """The keyword index rows (``INSERT_SEARCH``'s parameters) of one message: none without text."""
    text = search_text(data, kind)
    return [(resource_id, thread_id, message_id, text)] if text else []


# The statement after the lock: ``head`` reads the owner, incarnation and last seq (this statement's
# snapshot is taken after the lock, so it sees every committed append) and the record's stamp;
# ``fresh`` numbers the rows the thread lacks, and only when the incarnation is the caller's and the
# last seq is at most ``at_most``; the other CTEs write them, their index rows and ``updated_at``.
# The rows come as one JSON array (``rows_json``): one literal to quote, where arrays of each
# column cost psycopg's Python array dumper more CPU than the rest of the append. A row the thread
# holds is found by a correlated subquery, one (thread_id, id) key lookup per row: as NOT EXISTS the
# planner made it a hash anti-join over every message of the thread (tests/test_pg_bounded_history.py).
HEAD_APPEND_SQL = (
    "WITH head AS (SELECT t.resource_id AS owner, t.created_at, "
    "(SELECT COALESCE(MAX(seq), 0) FROM {s}.messages WHERE thread_id = %(thread)s) AS last, "
    "r.version, r.updated_at FROM (SELECT 1) AS one "
    "LEFT JOIN {s}.threads AS t ON t.thread_id = %(thread)s "
    "LEFT JOIN {s}.records AS r ON r.key = %(key)s AND r.resource_id = %(resource)s), "
    "fresh AS (SELECT v.*, head.last + row_number() OVER (ORDER BY v.n) AS seq FROM head, "
    "jsonb_to_recordset(%(rows)s::jsonb) AS v(n bigint, id text, kind text, tokens bigint, "
    "created_at timestamptz, fingerprint text, search text, cjk text, data jsonb) "
    "WHERE head.owner = %(resource)s AND head.created_at = %(born)s "
    "AND (%(at_most)s::bigint IS NULL OR head.last <= %(at_most)s::bigint) "
    "AND (SELECT 1 FROM {s}.messages AS m WHERE m.thread_id = %(thread)s AND m.id = v.id) IS NULL), "
    f"added AS (INSERT INTO {{s}}.messages ({_MESSAGE_COLUMNS}) SELECT id, %(resource)s, %(thread)s, seq, kind, "
    "data, tokens, created_at, fingerprint FROM fresh), "
    "touched AS (UPDATE {s}.threads SET updated_at = %(now)s WHERE thread_id = %(thread)s "
    "AND EXISTS (SELECT 1 FROM fresh)), "
    "searched AS (INSERT INTO {s}.message_search (resource_id, thread_id, message_id, search) "
    f"SELECT %(resource)s, %(thread)s, id, to_tsvector('{SEARCH_CONFIG}', search) FROM fresh "
    "WHERE search IS NOT NULL), "
    "cjk AS (INSERT INTO {s}.message_search_cjk (resource_id, thread_id, message_id, search) "
    "SELECT %(resource)s, %(thread)s, id, cjk::tsvector FROM fresh WHERE cjk IS NOT NULL "
    "ON CONFLICT (thread_id, message_id) DO NOTHING) "
    "SELECT owner, created_at AT TIME ZONE 'UTC' AS created_at, last, version, "
    "updated_at AT TIME ZONE 'UTC' AS updated_at, ARRAY(SELECT id FROM fresh ORDER BY seq) AS added FROM head"
)
_LOCK_THEN_HEAD_APPEND = "SELECT pg_advisory_xact_lock(hashtext(%(thread)s)); " + HEAD_APPEND_SQL


def rows_json(resource_id: str, thread_id: str, rows: Sequence[tuple[NewMessage, str]]) -> str:
    """The rows as one JSON array for ``HEAD_APPEND_SQL``: each row's columns, its keyword index texts
    (``search_entries``, ``cjk_entries``) and its data as the JSON text the row stores."""
    entries: list[SearchRow] = []
    for message, _ in rows:
        entries.extend(search_entries(resource_id, thread_id, message.id, message.data, message.kind))
    searched = {entry[2]: entry[3] for entry in entries}
    vectors = {entry[2]: entry[3] for entry in cjk_entries(entries)}
    parts = []
    for n, (message, text) in enumerate(rows):
        columns = json.dumps({
            "n": n, "id": message.id, "kind": message.kind, "tokens": message.tokens,
            "created_at": u.iso(message.created_at), "fingerprint": stored_fingerprint(message.data),
            "search": searched.get(message.id), "cjk": vectors.get(message.id),
        })
        parts.append(f"{columns[:-1]}, \"data\": {stored_json_text(text, message.data)}}}")
    return f"[{', '.join(parts)}]"


class PostgresHeadAppend(PostgresConnection):
    """``SupportsHeadAppend`` on PostgreSQL: a warm step's append in one round trip."""

    async def aappend_with_head(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime,
        record_thread: str | None, at_most: int | None = None,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        """``SupportsHeadAppend``: the lock, the checks, the rows and the head in one simple query."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        _, record_thread = u.check_record_ids(resource_id, record_thread)
        limit = u.check_optional_count(at_most, "at_most")
        encoded = u.check_messages_json(messages)
        if not isinstance(born, datetime) or born.utcoffset() is None:
            return None  # no stored incarnation equals a naive (or missing) instant
        batch: dict[str, tuple[NewMessage, str]] = {}
        for message, text in encoded:  # an id given twice is stored once, at its first place
            batch.setdefault(message.id, (message, text))
        params = {
            "thread": thread_id, "resource": resource_id, "key": record_key(resource_id, record_thread),
            "born": born, "at_most": limit, "now": utcnow(),
            "rows": rows_json(resource_id, thread_id, list(batch.values())),
        }
        async with self._script() as cur:
            await cur.execute(self._q(_LOCK_THEN_HEAD_APPEND), params)
            cur.nextset()  # past the lock's row
            found = await cur.fetchone()
        assert found is not None  # one row whatever is stored
        if found["owner"] != resource_id or to_utc(found["created_at"]) != born:
            return None  # another incarnation (or none): nothing was written, the caller re-checks
        stamp = (int(found["version"]), to_utc(found["updated_at"])) if found["version"] is not None else None
        last = int(found["last"])
        added = list(found["added"] or ())
        inserted = []
        for index, mid in enumerate(added, start=1):
            message = batch[mid][0]
            inserted.append(StoredMessage(id=mid, thread_id=thread_id, resource_id=resource_id, seq=last + index,
                                          data=message.data, tokens=message.tokens, created_at=message.created_at,
                                          kind=message.kind))
        return inserted, (last + len(inserted), stamp)
