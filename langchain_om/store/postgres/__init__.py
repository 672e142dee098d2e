"""The multi-worker backend: PostgreSQL through psycopg 3 (async) and a connection pool.

Importing this package loads psycopg, so ``langchain_om.store`` imports it only on first use of
``PostgresStore`` (install the ``[postgres]`` extra). Layout (the same in every backend package):

- ``store``: ``PostgresStore`` itself: threads, messages and the calls of the store contract;
- ``connection``: the pool, setup and transactions;
- ``schema``: tables and the versioned migrations run on open (under an advisory lock);
- ``records``: OM records, leases and values (row locks, compare-and-swap commits);
- ``append``, ``search``, ``cjk``: appends in one round trip, full-text search, the CJK index;
- ``vectors``: stored embeddings and their segments;
- ``known``, ``fingerprints``, ``threads``, ``backfill``: field lookups, content fingerprints,
  thread listings and the resumable backfills' claims.

``DSN_ENV``, ``MIGRATIONS``, ``SEARCH_CONFIG``, ``MARK_OBSERVED_SQL`` and ``MARK_THREAD_OBSERVED_SQL``
are re-exported here, where the flat layout had them.
"""

from .connection import DSN_ENV
from .records import MARK_OBSERVED_SQL, MARK_THREAD_OBSERVED_SQL
from .schema import MIGRATIONS, SEARCH_CONFIG
from .store import PostgresStore

__all__ = ["DSN_ENV", "MARK_OBSERVED_SQL", "MARK_THREAD_OBSERVED_SQL", "MIGRATIONS", "SEARCH_CONFIG", "PostgresStore"]
