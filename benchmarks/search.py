"""recall search latency at 100k stored messages: keyword and semantic, SQLite and PostgreSQL.

The ``storage`` section's messages (the shared synthetic conversation, ``--messages`` of them in
``--threads`` threads of one resource) are stored, with one embedding per message written to the
store's vectors table in batches (``DeterministicFakeEmbedding``, ``--dim`` dimensions, as if OM
had embedded each message when it was stored). The corpus has a small vocabulary, so common
query words match tens of thousands of messages: a hard case for ranking.

Then, on a *fresh* store object and a fresh ``ObservationalMemory`` (a restart: nothing is
re-indexed, the vectors are read back from the database), ``--queries`` searches are timed:

- keyword: ``RecallTool.arecall(mode="search")`` of an engine without embeddings (the store's
  full-text index, SQLite FTS5 / PostgreSQL tsvector+GIN), and the store's query alone;
- semantic: the stored-vector index alone (``StoreVectorIndex.asearch``), and the tool with
  embeddings configured (keyword and semantic rankings fused). The first semantic query after
  the restart loads the resource's vectors from the database and is reported on its own
  ("cold"); the percentiles are of the queries after it.

Baseline (``--baseline``, on by default): what recall did before, an ``InMemoryVectorStore``
holding the same vectors, searched with the resource filter, and how long re-indexing it takes
after a restart. Targets: keyword p95 < 50 ms and semantic p95 < 100 ms at 100k on both stores.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import RecallInput, _index_text, vector_document_id
from langchain_om.extensions.vector_index import embedding_space
from langchain_om.store.base import NewMessage, OMStore, StoredMessage
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.search import VectorItem, encode_vector
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import Timer, section_main, summary, table, verdicts
from .progress import note
from .storage import RESOURCE, _drop_schema, _rows, _start_private_pg, _stop_private_pg

QUERIES = [
    "Lisbon trip", "quarterly budget euros", "sister's wedding", "garden shed", "Python refactor",
    "marathon training plan", "espresso machine dark roast", "moving flats June", "team offsite",
    "learning Portuguese", "car insurance renewal", "birthday dinner Sam", "vegetarian options",
    "window seats", "trains over planes", "morning meetings", "417 euros", "volcano eruption",
    "What did we decide about the budget?", "search_notes",
]
TARGETS_MS = {"keyword_p95": 50.0, "semantic_p95": 100.0}


def _om(store: OMStore, embeddings: Any | None) -> ObservationalMemory:
    retrieval: Any = {"vector": True, "embeddings": embeddings} if embeddings is not None else True
    return ObservationalMemory(store, model=ScriptedObserverModel(), scope="resource", retrieval=retrieval)


async def fill(store: OMStore, rows: list[NewMessage], threads: int, batch: int,
               embeddings: DeterministicFakeEmbedding, keep: bool = False,
               encoded: dict[str, bytes] | None = None) -> tuple[dict[str, float], list[StoredMessage], int]:
    """Store the messages and one vector per message, a batch at a time; returns timings, the
    stored rows when ``keep`` (only the in-memory baseline needs them: 100k rows held for nothing
    were most of the section's memory) and how many were stored. ``encoded`` caches each text's
    encoded vector across batches and stores: the rows repeat a 5,000-message conversation and the
    fake embedding is a pure function of the text, so embedding 100k texts per store (half a minute
    each) gave the same vectors as embedding the 5,000 once."""
    await store.asetup()
    om = _om(store, None)
    per_thread = len(rows) // threads
    stored: list[StoredMessage] = []
    count = 0
    space = embedding_space(embeddings)
    embed_s = 0.0
    with Timer() as write:
        for t in range(threads):
            part = rows[t * per_thread:(t + 1) * per_thread]
            for start in range(0, len(part), batch):
                inserted = await store.aappend_messages(RESOURCE, f"t{t}", part[start:start + batch])
                count += len(inserted)
                if keep:
                    stored.extend(inserted)
                texts = [(m, _index_text(om, RESOURCE, m)) for m in inserted]
                texts = [(m, text) for m, text in texts if text]
                cache = {} if encoded is None else encoded
                with Timer() as embed:
                    missing = list(dict.fromkeys(text for _, text in texts if text not in cache))
                    if missing:
                        cache.update(zip(missing, map(encode_vector, embeddings.embed_documents(missing)),
                                         strict=True))
                embed_s += embed.ms / 1000
                await store.aput_vectors(RESOURCE, space, [
                    VectorItem(thread_id=m.thread_id, message_id=m.id, vector=cache[text]) for m, text in texts])
    return {"write_s": write.ms / 1000 - embed_s, "embed_s": embed_s}, stored, count


async def time_searches(store: OMStore, embeddings: DeterministicFakeEmbedding, queries: int,
                        seed: int = 3) -> dict[str, Any]:
    """The timed part, on a store object opened after the fill (a restart)."""
    rng = random.Random(seed)
    picks = [QUERIES[rng.randrange(len(QUERIES))] for _ in range(queries)]
    keyword_om = _om(store, None)
    keyword_tool = keyword_om.recall_tool(thread_id="t0", resource_id=RESOURCE)
    semantic_om = _om(store, embeddings)
    semantic_tool = semantic_om.recall_tool(thread_id="t0", resource_id=RESOURCE)
    from langchain_om.extensions.recall import _INDEXES

    index = _INDEXES[semantic_om]
    out: dict[str, Any] = {}
    with Timer() as cold:
        first = await index.asearch(RESOURCE, picks[0], k=10)
    out["semantic_cold_first_query_ms"] = cold.ms
    out["vectors_loaded"] = index._resident[RESOURCE].size  # read back from the database, not re-embedded
    assert first, "the stored vectors were found after the restart"

    async def timed(call: Callable[[str], Any]) -> dict[str, float]:
        samples: list[float] = []
        for query in picks:
            with Timer() as timer:
                await call(query)
            samples.append(timer.ms)
        return summary(samples)

    out["keyword_store_ms"] = await timed(lambda q: store.asearch_messages(RESOURCE, q, limit=20))
    out["keyword_tool_ms"] = await timed(lambda q: keyword_tool.arecall(RecallInput(mode="search", query=q)))
    out["semantic_index_ms"] = await timed(lambda q: index.asearch(RESOURCE, q, k=20))
    out["hybrid_tool_ms"] = await timed(lambda q: semantic_tool.arecall(RecallInput(mode="search", query=q)))
    hits = [await store.asearch_messages(RESOURCE, q, limit=20) for q in QUERIES]
    out["keyword_queries_with_hits"] = sum(1 for h in hits if h)
    return out


async def baseline(stored: list[StoredMessage], embeddings: DeterministicFakeEmbedding, queries: int,
                   seed: int = 3) -> dict[str, Any]:
    """Recall before this change: an InMemoryVectorStore, re-filled after every restart."""
    om = _om(SQLiteStore(":memory:"), None)
    docs = []
    ids = []
    for m in stored:
        text = _index_text(om, RESOURCE, m)
        if text:
            ids.append(vector_document_id(RESOURCE, m.thread_id, m.id))
            docs.append(Document(page_content=text, metadata={"resource_id": RESOURCE, "thread_id": m.thread_id,
                                                               "message_id": m.id}))
    vs = InMemoryVectorStore(embedding=embeddings)
    with Timer() as reindex:
        await vs.aadd_documents(docs, ids=ids)
    rng = random.Random(seed)
    samples: list[float] = []
    for _ in range(queries):
        query = QUERIES[rng.randrange(len(QUERIES))]
        with Timer() as timer:
            await vs.asimilarity_search_with_score(
                query, k=30, filter=lambda doc: doc.metadata.get("resource_id") == RESOURCE)
        samples.append(timer.ms)
    return {"reindex_after_restart_s": reindex.ms / 1000, "documents": len(docs),
            "semantic_ms": summary(samples)}


async def bench_backend(name: str, open_store: Callable[[], OMStore], rows: list[NewMessage],
                        args: argparse.Namespace, keep: bool = False,
                        encoded: dict[str, bytes] | None = None) -> tuple[dict[str, Any], list[StoredMessage]]:
    embeddings = DeterministicFakeEmbedding(size=args.dim)
    store = open_store()
    try:
        fill_times, stored, count = await fill(store, rows, args.threads, args.batch, embeddings,
                                               keep=keep and bool(args.baseline_queries), encoded=encoded)
    finally:
        await store.aclose()
    reopened = open_store()  # the restart: a new store object on the same database
    if isinstance(reopened, PostgresStore):
        # statistics, as autovacuum keeps them on a live database (a bulk load has none yet)
        async with reopened._tx() as cur:
            for name_ in ("message_search", "messages", "message_vectors"):
                await cur.execute(reopened._q(f"ANALYZE {{s}}.{name_}"))
    try:
        result = await time_searches(reopened, embeddings, args.queries)
    finally:
        await reopened.aclose()
    result.update({"messages_stored": count, **fill_times})
    print(f"  {name}: done", flush=True)
    return result, stored


async def run_async(args: argparse.Namespace) -> dict[str, Any]:
    rows = _rows(args.messages)
    backends: dict[str, Any] = {}
    stored: list[StoredMessage] = []
    encoded: dict[str, bytes] = {}  # each distinct text's vector, embedded once for both stores
    with tempfile.TemporaryDirectory(prefix="om-bench-search-") as tmp:
        path = os.path.join(tmp, "search.db")
        note(f"sqlite: {len(rows):,} messages with vectors, then {args.queries} queries after a restart")
        backends["sqlite"], stored = await bench_backend("sqlite", lambda: SQLiteStore(path), rows, args,
                                                         keep=True, encoded=encoded)
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    started: tuple[str, str] | None = None
    if not dsn and not args.no_pg:
        started = _start_private_pg()
        dsn = started[0] if started else None
    if args.no_pg or not dsn:
        backends["postgres"] = {"skipped": "--no-pg" if args.no_pg else
                                "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN) and no private cluster"}
    else:
        schema = f"om_bench_{uuid.uuid4().hex[:8]}"
        try:
            note(f"postgres: {len(rows):,} messages with vectors, then {args.queries} queries after a restart")
            backends["postgres"], _ = await bench_backend(
                "postgres", lambda: PostgresStore(dsn, schema=schema), rows, args, encoded=encoded)
        finally:
            cleanup = PostgresStore(dsn, schema=schema)
            await _drop_schema(cleanup, schema)
            await cleanup.aclose()
            if started:
                _stop_private_pg(started[1])
    before = await baseline(stored, DeterministicFakeEmbedding(size=args.dim), args.baseline_queries) \
        if args.baseline_queries else {"skipped": "--baseline-queries 0"}
    targets: dict[str, Any] = {}
    for name, data in backends.items():
        if "skipped" in data:
            continue
        targets[f"{name} keyword p95 < {TARGETS_MS['keyword_p95']:.0f} ms"] = (
            data["keyword_tool_ms"]["p95"] < TARGETS_MS["keyword_p95"])
        targets[f"{name} semantic p95 < {TARGETS_MS['semantic_p95']:.0f} ms"] = (
            data["hybrid_tool_ms"]["p95"] < TARGETS_MS["semantic_p95"])
    ratios: dict[str, float] = {}
    if "semantic_ms" in before:
        for name, data in backends.items():
            if "semantic_index_ms" in data:
                ratios[f"in-memory baseline / {name} semantic p50"] = (
                    before["semantic_ms"]["p50"] / max(data["semantic_index_ms"]["p50"], 1e-6))
    return {"params": {"messages": args.messages, "threads": args.threads, "batch": args.batch,
                       "queries": args.queries, "dim": args.dim, "baseline_queries": args.baseline_queries},
            "backends": backends, "baseline_in_memory": before, "ratios": ratios, "target": targets}


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_async(args))


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, d in payload["backends"].items():
        if "skipped" in d:
            rows.append([name, "skipped: " + d["skipped"]] + [""] * 8)
            continue
        rows.append([name, d["messages_stored"], d["keyword_store_ms"]["p50"], d["keyword_tool_ms"]["p50"],
                     d["keyword_tool_ms"]["p95"], d["semantic_index_ms"]["p50"], d["semantic_index_ms"]["p95"],
                     d["hybrid_tool_ms"]["p50"], d["hybrid_tool_ms"]["p95"], d["semantic_cold_first_query_ms"]])
    params = payload["params"]
    out = table(f"Search: {params['messages']:,} stored messages, {params['queries']} queries, "
                f"{params['dim']}-dim vectors, timed after a restart (ms)",
                ["backend", "stored", "kw store p50", "kw tool p50", "kw tool p95", "sem index p50",
                 "sem index p95", "hybrid tool p50", "hybrid tool p95", "sem cold 1st"], rows)
    before = payload["baseline_in_memory"]
    if "semantic_ms" in before:
        out += (f"\n  before (InMemoryVectorStore): semantic p50 {before['semantic_ms']['p50']:.0f} ms, "
                f"p95 {before['semantic_ms']['p95']:.0f} ms; re-indexing {before['documents']:,} documents "
                f"after a restart: {before['reindex_after_restart_s']:.1f} s")
    return out + verdicts(payload)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--messages", type=int, default=10_000 if quick else 100_000)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--queries", type=int, default=40 if quick else 100,
                        help="queries timed per kind and store (default 100: a p95 five samples deep; 200 "
                             "took about a minute more on 2 busy cores)")
    parser.add_argument("--dim", type=int, default=384, help="embedding dimensions (384: a small sentence model)")
    parser.add_argument("--baseline-queries", type=int, default=0,
                        help="queries against the old in-memory index (0 skips the baseline)")
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("search", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
