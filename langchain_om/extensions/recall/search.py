"""``mode="search"``: keyword search through the store's full-text index, semantic search through
the vectors, the two rankings fused by reciprocal rank.

Every hit is re-read from the store within the caller's resource before it is shown (a
vector store's metadata is never trusted on its own). When the embedder fails, the keyword
ranking still answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from langchain_core.tools import ToolException

from ...store.base import StoredMessage, utcnow
from ..branches import on_timeline, timeline_threads
from .args import DEFAULT_LIMIT, MAX_QUERY_CHARS, MAX_SEARCH_RESULTS, RecallInput, check_text
from .indexing import stored_index
from .query import keyword_hits
from .render import OutputBudget, add_truncation, message_parts, message_stamp, role_of, shorten
from .scope import RecallContext

if TYPE_CHECKING:
    from ..host import MemoryHost

logger = logging.getLogger("langchain_om")


def _vector_filter(store: Any, resource_id: str) -> Any:
    from langchain_core.vectorstores import InMemoryVectorStore

    if isinstance(store, InMemoryVectorStore):
        return lambda doc: doc.metadata.get("resource_id") == resource_id
    return {"resource_id": resource_id}


RRF_K = 60
"""Reciprocal rank fusion constant: a message ranked r-th in a list adds 1 / (RRF_K + r)."""


def keyword_search_available(om: MemoryHost) -> bool:
    """Whether the store has its own keyword index (every bundled store does; SQLite needs FTS5)."""
    return bool(getattr(om.store, "keyword_search_available", False))


def semantic_search_available(om: MemoryHost) -> bool:
    """Whether search can rank by meaning (a stored index or the user's vector store)."""
    retrieval = om.config.retrieval
    return retrieval is not None and retrieval.vector and (
        retrieval.vector_store is not None or stored_index(om) is not None
    )


HitKey = tuple[str, str]
"""``(thread_id, message_id)`` of a search hit."""


async def _keyword_ranking(
    ctx: RecallContext, query: str, k: int, found: dict[HitKey, StoredMessage]
) -> list[tuple[HitKey, float]]:
    """Messages by the store's full-text rank (best first) with their scores; the rows go to ``found``."""
    if not keyword_search_available(ctx.om):
        return []
    now = await conversation_now(ctx)
    hits = []
    for thread in _searched_threads(ctx):
        hits.extend(await keyword_hits(ctx.om.store, ctx.resource_id, query, thread_id=thread, limit=k, now=now))
    hits.sort(key=lambda hit: hit.score, reverse=True)  # one thread's ranking, or threads of one history
    for hit in hits:
        found[(hit.message.thread_id, hit.message.id)] = hit.message
    return [((hit.message.thread_id, hit.message.id), hit.score) for hit in hits]


async def conversation_now(ctx: RecallContext) -> datetime:
    """Today for the question's relative times: the current thread's newest message (the step's
    time, as OM's context states it), else the clock."""
    newest = await ctx.om.store.aget_messages(ctx.resource_id, ctx.thread_id, limit=1, descending=True)
    return newest[0].created_at if newest else utcnow()


def _searched_threads(ctx: RecallContext) -> list[str | None]:
    """Every thread of the resource (None), or in thread scope the stored threads the current
    thread's history is read from: on a branch, its ancestors up to the fork too, as paging reads."""
    return list(timeline_threads(ctx.store, ctx.thread_id)) if ctx.thread_only else [None]


async def _semantic_ranking(ctx: RecallContext, query: str, k: int) -> list[tuple[HitKey, float]]:
    """Message ids by embedding similarity (best first): OM's stored index, or the user's vector store."""
    retrieval = ctx.om.config.retrieval
    if retrieval is None or not retrieval.vector:
        return []
    index = stored_index(ctx.om)
    if index is not None:
        hits = [hit for thread in _searched_threads(ctx)
                for hit in await index.asearch(ctx.resource_id, query, k=k, thread_id=thread)]
        hits.sort(key=lambda hit: hit.score, reverse=True)
        return [((hit.thread_id, hit.message_id), hit.score) for hit in hits]
    vs = retrieval.vector_store
    if vs is None:
        return []
    try:
        hits = await vs.asimilarity_search_with_score(query, k=k * 3, filter=_vector_filter(vs, ctx.resource_id))
    except (TypeError, NotImplementedError, ValueError):
        hits = await vs.asimilarity_search_with_score(query, k=k * 10)
    ranking: list[tuple[HitKey, float]] = []
    for doc, score in hits:
        meta = doc.metadata or {}
        message_id, thread_id = meta.get("message_id"), meta.get("thread_id")
        if meta.get("resource_id") == ctx.resource_id and isinstance(message_id, str) and isinstance(thread_id, str):
            ranking.append(((thread_id, message_id), float(score)))  # re-checked against the store before shown
    return ranking


def fuse_rankings(rankings: Sequence[Sequence[tuple[HitKey, float]]]) -> list[tuple[HitKey, float]]:
    """One ranking from several: a list's own scores when it is the only one that found
    anything, else reciprocal rank fusion (scores of different methods are not comparable)."""
    found = [ranking for ranking in rankings if ranking]
    if len(found) == 1:
        return list({key: score for key, score in reversed(found[0])}.items())[::-1]  # first of duplicates
    fused: dict[HitKey, float] = {}
    for ranking in found:
        seen: set[HitKey] = set()
        for rank, (key, _) in enumerate(ranking, start=1):
            if key not in seen:
                seen.add(key)
                fused[key] = fused.get(key, 0.0) + 1.0 / (RRF_K + rank)
    return sorted(fused.items(), key=lambda item: item[1], reverse=True)


async def search_mode(ctx: RecallContext, args: RecallInput, budget: OutputBudget) -> dict[str, Any]:
    """``mode="search"``: the fused hits grouped by thread, each with the cursor that opens it."""
    keyword, semantic = keyword_search_available(ctx.om), semantic_search_available(ctx.om)
    if not keyword and not semantic:
        raise ToolException(
            'mode: "search" is not available here (no keyword index in this store and no embeddings); '
            'use mode="threads" and mode="messages" instead'
        )
    if args.query is None:
        raise ToolException('query: required for mode="search"')
    query = check_text(args.query, "query", MAX_QUERY_CHARS)
    retrieval = ctx.om.config.retrieval
    default = retrieval.search_limit if retrieval is not None else DEFAULT_LIMIT
    k = min(args.limit if args.limit != DEFAULT_LIMIT else default, MAX_SEARCH_RESULTS)
    found: dict[HitKey, StoredMessage] = {}
    keyword_hits, semantic_hits = await asyncio.gather(_keyword_ranking(ctx, query, k * 2, found),
                                                       _semantic_ranking(ctx, query, k * 2),
                                                       return_exceptions=True)
    if isinstance(keyword_hits, BaseException):
        raise keyword_hits
    if isinstance(semantic_hits, BaseException):
        if not keyword or not isinstance(semantic_hits, Exception):
            raise semantic_hits
        # the embedder (often a remote API) failed: the keyword ranking still answers
        logger.warning("langchain-om recall: semantic search failed, keyword results only: %s", semantic_hits)
        semantic_hits = []
    grouped: dict[str, list[tuple[float, StoredMessage]]] = {}
    total = 0
    for key, score in fuse_rankings([keyword_hits, semantic_hits]):
        stored = found.get(key) or next(iter(await ctx.om.store.aget_messages_by_ids(ctx.resource_id, key[0],
                                                                                     [key[1]])), None)
        if stored is None or stored.thread_id != key[0] or stored.kind != "message":
            continue  # deleted, or not this resource's: never shown
        # as paging reads the current thread: its history (a branch's ancestors up to the fork
        # included) is the current thread; another branch of it, the future a run from an earlier
        # checkpoint left behind, never happened here
        stored = on_timeline(ctx.store, ctx.thread_id, stored)
        if stored is None or (ctx.thread_only and stored.thread_id != ctx.thread_id):
            continue
        grouped.setdefault(stored.thread_id, []).append((score, stored))
        total += 1
        if total >= k:
            break
    blocks: list[str] = []
    for thread_id, items in grouped.items():
        info = await ctx.store.aget_thread(ctx.resource_id, thread_id)
        title = shorten(info.title, 120) if info is not None and info.title else "(untitled)"
        head = f"Thread {title} (id: {thread_id})" + (" ← current" if thread_id == ctx.thread_id else "")
        lines = [head]
        for score, stored in items:
            parts = message_parts(ctx.om.message_of(ctx.resource_id, stored))
            preview = shorten(" ".join(p.text for p in parts if p.kind in ("text", "tool-result")), 160)
            lines.append(f"  [score {score:.3f}] {role_of(stored)} · {message_stamp(stored)}: {preview}\n"
                         f"    cursor: {stored.id}")
        blocks.append("\n".join(lines))
    kept = budget.fit(blocks)
    result: dict[str, Any] = {"results": "\n\n".join(kept) if kept else "(no matching messages)", "count": total}
    add_truncation(result, budget)
    return result
