"""The SQLite store's keyword search: BM25 over the English FTS5 index and the CJK bigram index
(``sqlite/cjk``), each bounded to its newest ``RANK_CANDIDATES`` matches, merged in one ranking.

Its own module because ranking across two indexes is a concept apart from storing messages; the
store passes the row reader (``message_of``) so this module needs nothing of it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from ..base import SearchHit, StoredMessage
from ..search import RANK_CANDIDATES, KeywordQuery, fts5_cjk_match, fts5_match, merge_ranked
from .cjk import CJK_TABLE

MESSAGE_COLUMNS = "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"


def search_messages(
    conn: sqlite3.Connection, resource_id: str, thread_id: str | None, terms: KeywordQuery, count: int,
    message_of: Callable[[sqlite3.Row], StoredMessage],
) -> list[SearchHit]:
    """A query holding CJK text ranks from the bigram table first, others from the stemmed English
    index first; the other table fills the remaining places. In each, hits holding every term
    come before those holding some."""

    def ranked(table: str, match: str) -> list[SearchHit]:
        # rank only the newest RANK_CANDIDATES matches: the rowid of the last of them is found
        # by walking the doclists alone (no ranking), then FTS5 ranks rows at or above it
        floor = conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid DESC LIMIT 1 OFFSET ?",
            (match, RANK_CANDIDATES - 1),
        ).fetchone()
        rows = conn.execute(
            f"SELECT {', '.join('m.' + c for c in MESSAGE_COLUMNS.split(', '))}, s.rank AS rank FROM "
            f"(SELECT thread_id, message_id, rank FROM {table} WHERE {table} MATCH ? "
            "AND rowid >= ? ORDER BY rank LIMIT ?) AS s "
            "JOIN messages AS m ON m.thread_id = s.thread_id AND m.id = s.message_id "
            "WHERE m.resource_id = ? ORDER BY s.rank",
            (match, floor[0] if floor is not None else 0, count, resource_id),
        )
        return [SearchHit(message=message_of(row), score=-float(row["rank"])) for row in rows]

    def in_table(table: str, n_terms: int, match: Callable[[bool], str]) -> list[SearchHit]:
        if not n_terms:
            return []
        every = ranked(table, match(True)) if n_terms > 1 else []
        return every if len(every) >= count else merge_ranked(every, ranked(table, match(False)), count)

    def english() -> list[SearchHit]:
        return in_table("message_search", len(terms.english),
                        lambda every: fts5_match(terms.english, resource_id, thread_id, every=every))

    def cjk() -> list[SearchHit]:
        return in_table(CJK_TABLE, len(terms.cjk),
                        lambda every: fts5_cjk_match(terms.cjk, resource_id, thread_id, every=every))

    first, then = (cjk, english) if terms.cjk_first else (english, cjk)
    found = first()
    return found if len(found) >= count else merge_ranked(found, then(), count)
