"""The PostgreSQL store's ``fingerprint`` column (schema version 9) and its resumable backfill.

Why the column: see ``sqlite/fingerprints``. Existing schemas get it empty in the v9 migration
(``ADD COLUMN`` without a default rewrites nothing) with a bookmark in ``search_backfill``;
``backfill_batch`` then fills it in ``(thread_id, seq)`` order, one committed batch at a time,
so a worker killed half-way resumes where the last batch committed. One worker at a time
backfills (a try-lock: the others go on serving). Until a row is reached, lookups read its JSON
(``FINGERPRINT_SQL``; a row stored wrapped, see ``_util.to_jsonb_safe``, is then read whole by
the engine, as before v9), so the backfill never changes an answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg import AsyncCursor, sql

from .. import _util as u
from ..known import FINGERPRINT_PATH, stored_fingerprint
from .backfill import pg_claim

BACKFILL_BATCH = 5000
"""Messages filled per committed backfill transaction."""
_PATH = "{{" + ",".join(FINGERPRINT_PATH) + "}}"  # braces doubled: every statement goes through ``_q``
_FROM_JSON = f"CASE WHEN jsonb_typeof(data #> '{_PATH}') = 'string' THEN data #>> '{_PATH}' END"
FINGERPRINT_SQL = f"COALESCE(fingerprint, {_FROM_JSON})"
"""A row's fingerprint: the column, else (a row the backfill has not reached) its JSON's (a ``_q`` template)."""

SCHEMA_V9 = [
    "ALTER TABLE {s}.messages ADD COLUMN IF NOT EXISTS fingerprint TEXT",
    "INSERT INTO {s}.search_backfill (name, after_thread, after_seq, done) VALUES ('fingerprint', '', 0, FALSE) "
    "ON CONFLICT (name) DO NOTHING",
]


async def backfill_batch(cur: AsyncCursor[dict[str, Any]], q: Callable[[str], sql.Composed], schema: str) -> bool:
    """Fill the column of the next ``BACKFILL_BATCH`` messages and move the bookmark (inside the
    caller's transaction). Returns whether nothing is left (or another worker holds the task)."""
    mark = await pg_claim(cur, q, schema, "fingerprint")
    if mark is None:  # an older schema version, another worker's task, or done
        return True
    await cur.execute(
        q("SELECT thread_id, seq, data FROM {s}.messages WHERE (thread_id, seq) > (%s, %s) "
          "ORDER BY thread_id, seq LIMIT %s FOR SHARE"),  # the rows read stay as read (postgres/backfill)
        (*mark, BACKFILL_BATCH),
    )
    rows = await cur.fetchall()
    # read in Python, as an append computes it: a row jsonb could not hold as is is stored wrapped
    # (``_util.to_jsonb_safe``), and SQL cannot see inside it
    values = [(fingerprint, row["thread_id"], row["seq"]) for row in rows
              if (fingerprint := stored_fingerprint(u.from_jsonb_safe(row["data"]))) is not None]
    if values:
        await cur.executemany(
            q("UPDATE {s}.messages SET fingerprint = %s WHERE thread_id = %s AND seq = %s AND fingerprint IS NULL"),
            values)
    done = len(rows) < BACKFILL_BATCH
    last = (rows[-1]["thread_id"], rows[-1]["seq"]) if rows else mark
    await cur.execute(
        q("UPDATE {s}.search_backfill SET after_thread = %s, after_seq = %s, done = %s WHERE name = 'fingerprint'"),
        (*last, done),
    )
    return done
