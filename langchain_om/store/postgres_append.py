"""Appending messages to a PostgreSQL thread in few round trips.

An agent step appends one or two messages; each statement is a network round trip and costs
Python CPU in psycopg, so an append is four round trips whatever it stores: BEGIN with the
thread's advisory lock (one simple query; ``seq`` numbers are assigned by one transaction at a time),
one read that claims the thread and reads its owner, the ids already stored and the last
``seq``, and one write that stores the rows, their keyword index rows (plain and CJK) and the
thread's ``updated_at`` (a statement with data-modifying CTEs), then COMMIT. A large batch (a cold step
handing over a long history) writes with ``executemany`` instead, which psycopg pipelines and
which stays clear of PostgreSQL's limit on parameters per statement.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from psycopg import sql
from psycopg.types.json import Jsonb

from ._util import to_utc
from .base import InvalidStoreInput, utcnow
from .postgres_cjk import INSERT_CJK, cjk_entries
from .postgres_schema import INSERT_SEARCH, SEARCH_CONFIG, Cursor, jsonb

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
