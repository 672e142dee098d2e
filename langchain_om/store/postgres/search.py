"""The PostgreSQL store's keyword search: ``ts_rank`` over the English ``tsvector`` index and the
CJK bigram index (``postgres/cjk``), each bounded to its newest ``RANK_CANDIDATES`` matches,
merged in one ranking.

Its own module because ranking across two indexes is a concept apart from storing messages; the
store passes its query binder and row reader, so this module needs nothing of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from psycopg import sql

from ..base import SearchHit, StoredMessage
from ..cjk import tsquery_cjk
from ..search import RANK_CANDIDATES, KeywordQuery, merge_ranked, tsquery_text
from .cjk import CJK_TABLE
from .schema import SEARCH_CONFIG, Cursor

MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"


def ranked_sql(q: Callable[[str], sql.Composed], table: str, tsquery: str, thread_id: str | None) -> sql.Composed:
    """The newest RANK_CANDIDATES matches of ``table`` (a backward scan of (resource_id, pos)
    that stops early for common words, the GIN index for rare ones), ranked by ts_rank."""
    thread_filter = "" if thread_id is None else " AND thread_id = %(thread)s"
    return q(
        f"SELECT {', '.join('m.' + c for c in MESSAGE_COLUMNS.split(', '))}, r.score FROM ("
        f" SELECT thread_id, message_id, ts_rank(search, {tsquery}) AS score FROM ("
        f"  SELECT thread_id, message_id, search FROM {{s}}.{table}"
        f"  WHERE resource_id = %(resource)s{thread_filter}"
        f"  AND search @@ {tsquery} ORDER BY pos DESC LIMIT %(candidates)s) AS c"
        " ORDER BY score DESC LIMIT %(limit)s) AS r "
        "JOIN {s}.messages AS m ON m.thread_id = r.thread_id AND m.id = r.message_id "
        "WHERE m.resource_id = %(resource)s ORDER BY r.score DESC, m.created_at DESC"
    )


async def search_messages(
    cur: Cursor, q: Callable[[str], sql.Composed], resource_id: str, thread_id: str | None, terms: KeywordQuery,
    count: int, message_of: Callable[[dict[str, Any]], StoredMessage],
) -> list[SearchHit]:
    """A query holding CJK text ranks from the bigram table first, others from the stemmed English
    index first; the other table fills the remaining places. In each, hits holding every term
    come before those holding some."""
    params = {"resource": resource_id, "thread": thread_id, "candidates": RANK_CANDIDATES, "limit": count}

    async def ranked(statement: sql.Composed, query: str) -> list[SearchHit]:
        # never a prepared statement: a generic plan cannot know how common the words are
        await cur.execute(statement, {**params, "q": query}, prepare=False)
        return [SearchHit(message=message_of(row), score=float(row["score"])) for row in await cur.fetchall()]

    async def in_table(statement: sql.Composed, n_terms: int, query: Callable[[bool], str]) -> list[SearchHit]:
        if not n_terms:
            return []
        every = await ranked(statement, query(True)) if n_terms > 1 else []
        return every if len(every) >= count else merge_ranked(every, await ranked(statement, query(False)), count)

    def english() -> Awaitable[list[SearchHit]]:
        statement = ranked_sql(q, "message_search", f"to_tsquery('{SEARCH_CONFIG}', %(q)s)", thread_id)
        return in_table(statement, len(terms.english), lambda every: tsquery_text(terms.english, every=every))

    def cjk() -> Awaitable[list[SearchHit]]:
        statement = ranked_sql(q, CJK_TABLE, "%(q)s::tsquery", thread_id)
        return in_table(statement, len(terms.cjk), lambda every: tsquery_cjk(terms.cjk, every=every))

    first, then = (cjk, english) if terms.cjk_first else (english, cjk)
    found = await first()
    return found if len(found) >= count else merge_ranked(found, await then(), count)
