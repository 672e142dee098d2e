"""Bookmarks of PostgreSQL's resumable backfills (the v7 CJK index, the v9 fingerprint column).

Each backfill keeps one row per task in ``search_backfill`` and moves it past each committed batch;
a batch claims its task with a transaction-scoped try-lock, so one worker at a time backfills while
the others go on serving.

A batch locks the message rows it reads (``FOR SHARE``) until it commits, so it agrees with the
serving workers: an edit or a thread delete waits for the batch and then replaces or deletes what
it wrote, and a row being changed is read as changed (READ COMMITTED follows the newest
version). The batch never waits long for a row a serving worker holds: ``LOCK_TIMEOUT_MS``, then
the batch is rolled back and tried again (``RETRYABLE``), so it is never the transaction a
serving worker's deadlock ends."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import AsyncCursor, errors, sql

LOCK_TIMEOUT_MS = 200
"""How long a backfill batch waits for a message row another transaction holds before it gives
up (and is tried again): shorter than PostgreSQL's ``deadlock_timeout`` (1 s by default)."""

RETRYABLE = (errors.LockNotAvailable, errors.DeadlockDetected)
"""What a batch that met a serving worker's row raises: roll back, wait a moment, try again."""


async def pg_claim(
    cur: AsyncCursor[dict[str, Any]], q: Callable[[str], sql.Composed], schema: str, name: str
) -> tuple[str, int] | None:
    """Claim the PostgreSQL backfill ``name`` for this transaction and return its bookmark
    ``(after_thread, after_seq)``; None when there is nothing to do: an older schema without the
    table, another worker holding the task (a try-lock, released at commit), or the task done."""
    await cur.execute(
        "SELECT to_regclass(format('%%I.search_backfill', %s::text)) IS NOT NULL AS exists, "
        "pg_try_advisory_xact_lock(hashtext(%s)) AS got",
        (schema, f"langchain_om.{name}:{schema}"),
    )
    got = await cur.fetchone()
    if got is None or not got["exists"] or not got["got"]:
        return None
    await cur.execute(q("SELECT after_thread, after_seq, done FROM {s}.search_backfill WHERE name = %s"), (name,))
    mark = await cur.fetchone()
    if mark is None or mark["done"]:
        return None
    await cur.execute(f"SET LOCAL lock_timeout = '{int(LOCK_TIMEOUT_MS)}ms'")
    return str(mark["after_thread"]), int(mark["after_seq"])
