"""PostgreSQL's ``SupportsFieldLookup`` (see ``known.py``): the field is extracted in SQL."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _util as u
from ..known import FINGERPRINT_PATH, MessageField
from .connection import PostgresConnection
from .fingerprints import FINGERPRINT_SQL


class PostgresFieldLookup(PostgresConnection):
    async def aget_message_fields(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str], path: Sequence[str]
    ) -> list[MessageField]:
        """``SupportsFieldLookup``: PostgreSQL extracts the field; no row is parsed in Python."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)
        keys = [str(key) for key in path]
        if not wanted:
            return []
        async with self._tx() as cur:
            if tuple(keys) == FINGERPRINT_PATH:  # OM's fingerprint is a column (v9, postgres_fingerprints)
                await cur.execute(self._q(f"SELECT id, seq, kind, {FINGERPRINT_SQL} AS value FROM {{s}}.messages "
                                          "WHERE thread_id = %s AND id = ANY(%s) AND resource_id = %s"),
                                  (thread_id, wanted, resource_id))
            else:
                await cur.execute(self._q("SELECT id, seq, kind, CASE WHEN jsonb_typeof(data #> %s) = 'string' "
                                          "THEN data #>> %s END AS value FROM {s}.messages "
                                          "WHERE thread_id = %s AND id = ANY(%s) AND resource_id = %s"),
                                  (keys, keys, thread_id, wanted, resource_id))
            return [MessageField(row["id"], row["seq"], row["kind"], row["value"]) for row in await cur.fetchall()]
