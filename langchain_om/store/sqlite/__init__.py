"""The embedded default backend: one SQLite file, stdlib ``sqlite3`` only.

Layout (the same in every backend package):

- ``store``: ``SQLiteStore`` itself: threads, messages and the calls of the store contract;
- ``connection``: the one connection, its lock, worker-thread hops and ``BEGIN IMMEDIATE``;
- ``schema``: tables and the versioned migrations run on open;
- ``records``: OM records, leases and values (compare-and-swap commits);
- ``search``, ``cjk``, ``keyword_queue``: keyword search (FTS5, the CJK index, batched indexing);
- ``vectors``: stored embeddings and their segments;
- ``known``, ``fingerprints``, ``threads``, ``backfill``: field lookups, content fingerprints,
  thread listings and the resumable backfills' bookmarks.

``MARK_OBSERVED_SQL`` and ``MIGRATIONS`` are re-exported here, where the flat layout had them.
"""

from .records import MARK_OBSERVED_SQL
from .schema import MIGRATIONS
from .store import SQLiteStore

__all__ = ["MARK_OBSERVED_SQL", "MIGRATIONS", "SQLiteStore"]
