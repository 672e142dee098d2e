"""SQLite's ``SupportsFieldLookup`` (see ``known.py``): the field is extracted in SQL (OM's
fingerprint is read from its column, ``sqlite/fingerprints``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from .. import _util as u
from ..known import FINGERPRINT_PATH, MessageField, json_path
from .connection import SQLiteConnection
from .fingerprints import FINGERPRINT_SQL

_ID_CHUNK = 500  # ids per IN (...) list: well under SQLite's 32,766 bound variables


class SQLiteFieldLookup(SQLiteConnection):
    async def aget_message_fields(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str], path: Sequence[str]
    ) -> list[MessageField]:
        """``SupportsFieldLookup``: SQLite extracts the field; no row is parsed in Python."""
        resource_id, thread_id = u.check_ids(resource_id, thread_id)
        wanted = u.check_message_ids(message_ids)
        where = json_path(path)
        # OM's fingerprint is a column (v9, sqlite/fingerprints); any other path is extracted from the JSON
        fingerprint = tuple(path) == FINGERPRINT_PATH
        value = FINGERPRINT_SQL if fingerprint else "CASE json_type(data, ?) WHEN 'text' THEN json_extract(data, ?) END"
        head = [] if fingerprint else [where, where]

        def run(conn: sqlite3.Connection) -> list[MessageField]:
            rows: list[MessageField] = []
            for start in range(0, len(wanted), _ID_CHUNK):
                chunk = wanted[start:start + _ID_CHUNK]
                marks = ", ".join("?" * len(chunk))
                # tuples straight from the cursor (C); only a JSON string counts as a value
                rows.extend(map(MessageField._make, conn.execute(
                    f"SELECT id, seq, kind, {value} FROM messages WHERE thread_id = ? AND id IN ({marks}) "
                    "AND +resource_id = ?", [*head, thread_id, *chunk, resource_id])))
            return rows

        if not wanted:
            return []
        # a handful of ids (a cache miss's new messages) is one short read: no worker-thread hop
        return await (self._run_inline(run) if len(wanted) <= _ID_CHUNK else self._run(run))
