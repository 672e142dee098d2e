"""vector_restart: the first semantic recall query after a restart, and the p95 after it (issue 32, item 7).

``--vector-messages`` messages (default 100k) in ``--vector-threads`` threads of one resource,
each with a ``--vector-dim``-dimensional vector (``DeterministicFakeEmbedding``), are written
straight through the store API (``aappend_messages`` + ``aput_vectors``: no model, no
middleware), on SQLite and PostgreSQL. Then, side by side in one run, for each way of loading a
resource's vectors:

* ``table scan``: every row of ``message_vectors`` read one by one (how the index loaded before
  vector segments; still the path of a store without them);
* ``segments``: the persisted vector segments (``store.vector_segments``), plus the rows no
  segment holds yet (fewer than ``SEGMENT_ROWS``).

each timed on a **fresh store object and a fresh index** (a restart: nothing cached in the
process): the first query (which loads the resource), then ``--vector-queries`` more (p50/p95).
The one-off cost of writing the segments (the first search of an index over rows that have
none) is reported on its own, as is the segments' size. The top hits of the two loads are
compared for every query (they must be identical: both are exact). Target: first query and
p95 under 100 ms on both stores.

    python -m benchmarks.vector_restart                       # 100k messages, SQLite + PostgreSQL
    python -m benchmarks.vector_restart --quick --no-pg       # 10k messages, SQLite only
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import HumanMessage, message_to_dict

from langchain_om.extensions import vector_index
from langchain_om.extensions.vector_index import StoreVectorIndex
from langchain_om.store import OMStore, PostgresStore, SQLiteStore
from langchain_om.store.base import NewMessage
from langchain_om.store.search import VectorItem, encode_vector

from .common import Timer, chunks, ratio, section_main, summary, table, verdicts
from .progress import note

RESOURCE = "bench-vectors"
TARGET_MS = 100.0
WORDS = ["budget", "trip", "Lisbon", "meeting", "予算", "旅行", "会議", "cat", "train", "invoice", "🐈", "deadline"]


def _text(i: int) -> str:
    return f"message {i}: " + " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 9))


async def fill(store: OMStore, messages: int, threads: int, embeddings: DeterministicFakeEmbedding,
               space: str) -> float:
    """Messages and vectors through the store API; returns the seconds it took."""
    await store.asetup()
    with Timer() as timer:
        per_thread = messages // threads
        for t in range(threads):
            ids = list(range(t * per_thread, (t + 1) * per_thread))
            for part in chunks(ids, 2000):
                await store.aappend_messages(RESOURCE, f"t{t}", [
                    NewMessage(id=f"m{i}", data=message_to_dict(HumanMessage(_text(i), id=f"m{i}"))) for i in part])
                vectors = embeddings.embed_documents([_text(i) for i in part])
                await store.aput_vectors(RESOURCE, space, [
                    VectorItem(thread_id=f"t{t}", message_id=f"m{i}", vector=encode_vector(v))
                    for i, v in zip(part, vectors, strict=True)])
    return timer.ms / 1000


async def restart(open_store: Callable[[], OMStore], embeddings: DeterministicFakeEmbedding, queries: list[str],
                  segments: bool) -> dict[str, Any]:
    """A fresh store object and index: the first query, then the others."""
    store = open_store()
    await store.asetup()
    try:
        index = StoreVectorIndex(store, embeddings)
        if not segments:
            index._segments = None  # the table scan: what the index did before segments
        with Timer() as first:
            hits = [await index.asearch(RESOURCE, queries[0], k=10)]
        samples = []
        for query in queries[1:]:
            with Timer() as timer:
                hits.append(await index.asearch(RESOURCE, query, k=10))
            samples.append(timer.ms)
        return {"first_query_ms": first.ms, "queries_ms": summary(samples),
                "loaded": index._resident[RESOURCE].size,
                "top_hits": [[h.message_id for h in found] for found in hits]}
    finally:
        await store.aclose()


async def bench(open_store: Callable[[], OMStore], args: argparse.Namespace) -> dict[str, Any]:
    embeddings = DeterministicFakeEmbedding(size=args.vector_dim)
    space = vector_index.embedding_space(embeddings)
    store = open_store()
    out: dict[str, Any] = {"fill_s": await fill(store, args.vector_messages, args.vector_threads, embeddings, space)}
    await store.aclose()
    queries = [f"{WORDS[q % len(WORDS)]} {WORDS[(q * 5) % len(WORDS)]} {q}" for q in range(args.vector_queries + 1)]
    out["table_scan"] = await restart(open_store, embeddings, queries, segments=False)
    store = open_store()
    await store.asetup()
    index = StoreVectorIndex(store, embeddings)
    with Timer() as write:
        await index.asearch(RESOURCE, queries[0], k=10)  # the first search ever over these rows writes segments
    out["segments_written_once_ms"] = write.ms
    kept = await store.aget_vector_segments(RESOURCE, space)  # type: ignore[attr-defined]
    out["segments"] = {"count": len(kept), "rows": sum(s.rows for s in kept),
                       "mb": round(sum(len(s.body) for s in kept) / 1e6, 1)}
    await store.aclose()
    out["segmented"] = await restart(open_store, embeddings, queries, segments=True)
    out["same_top_hits"] = out["table_scan"].pop("top_hits") == out["segmented"].pop("top_hits")
    out["ratios"] = {"first_query_table_over_segments": ratio(out["table_scan"]["first_query_ms"],
                                                              out["segmented"]["first_query_ms"])}
    return out


async def run_async(args: argparse.Namespace) -> dict[str, Any]:
    backends: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "vectors.db"
        note(f"sqlite: {args.vector_messages:,} messages ...")
        backends["sqlite"] = await bench(lambda: SQLiteStore(path), args)
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    if args.no_pg or not dsn:
        backends["postgres"] = {"skipped": "--no-pg" if args.no_pg else "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)"}
    else:
        schema = f"bench_vec_{uuid.uuid4().hex[:8]}"
        note(f"postgres: {args.vector_messages:,} messages ...")
        try:
            backends["postgres"] = await bench(lambda: PostgresStore(dsn, schema=schema), args)
        finally:
            import psycopg

            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    measured = {k: v for k, v in backends.items() if "skipped" not in v}
    return {
        "params": {"messages": args.vector_messages, "threads": args.vector_threads, "dim": args.vector_dim,
                   "queries": args.vector_queries, "segment_rows": vector_index.SEGMENT_ROWS},
        "backends": backends,
        "ratios": {f"{k}_first_query_table_over_segments": v["ratios"]["first_query_table_over_segments"]
                   for k, v in measured.items()},
        "target": {f"{k}_under_{TARGET_MS:.0f}ms": v["segmented"]["first_query_ms"] < TARGET_MS
                   and v["segmented"]["queries_ms"]["p95"] < TARGET_MS and v["same_top_hits"]
                   for k, v in measured.items()},
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(run_async(args))


def report(payload: dict[str, Any]) -> str:
    rows = []
    for name, d in payload["backends"].items():
        if "skipped" in d:
            rows.append([name, "skipped: " + d["skipped"]] + [""] * 4)
            continue
        for load in ("table_scan", "segmented"):
            rows.append([name, load.replace("_", " "), d[load]["first_query_ms"], d[load]["queries_ms"]["p50"],
                         d[load]["queries_ms"]["p95"], d[load]["loaded"]])
    params = payload["params"]
    out = table(f"Semantic recall after a restart: {params['messages']:,} messages, {params['dim']}-dim vectors, "
                f"{params['queries']} queries after the first (ms)",
                ["store", "load", "first query", "p50", "p95", "vectors"], rows)
    for name, d in payload["backends"].items():
        if "skipped" not in d:
            out += (f"\n  {name}: segments written once in {d['segments_written_once_ms']:.0f} ms "
                    f"({d['segments']['count']} segments, {d['segments']['rows']:,} rows, {d['segments']['mb']} MB); "
                    f"same top hits both ways: {d['same_top_hits']}; fill {d['fill_s']:.0f} s")
    return out + verdicts(payload)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--vector-messages", type=int, default=10_000 if quick else 100_000)
    parser.add_argument("--vector-threads", type=int, default=10)
    parser.add_argument("--vector-dim", type=int, default=256)
    parser.add_argument("--vector-queries", type=int, default=20)
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("vector_restart", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
