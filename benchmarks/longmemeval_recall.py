"""Retrieval on real conversations: does recall's search find the evidence of a LongMemEval or
LoCoMo question?

``python -m benchmarks.longmemeval_recall --data longmemeval_s.json[.xz]`` (or LoCoMo's
``locomo10.json``; the shape is recognised). Each LongMemEval question's haystack is stored as
the threads of one resource (one thread per session, each turn a message dated from its
session); each LoCoMo sample likewise, its questions asked against it. The question is asked
of the store's keyword search exactly as the ``recall`` tool asks it (``keyword_hits``: the question's
subject words, hits of the time it points at ranked up; ``--raw-store-search``: the question as
typed, straight to ``asearch_messages``), of
the stored-vector index when ``--embedder`` is given, and of both fused by reciprocal rank (the
``recall`` tool's ``fuse_rankings``). Sessions are ranked by their best message.

Reported per question type (LoCoMo: category), over questions with evidence (LongMemEval's
abstention questions have none): session recall_any@5/@10 (a gold session among the first k,
the metric of the LongMemEval paper's retrieval tables), recall_all@5/@10, NDCG@10, turn-level
evidence recall@10 (the share of evidence turns among the first 10 messages), and the time to
store a haystack and to answer a query. The data file is the user's: nothing here ships it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from langchain_om.eval.json_stream import iter_json_array
from langchain_om.eval.lme_data import iter_longmemeval, parse_lme_date
from langchain_om.eval.locomo_data import is_locomo, iter_locomo
from langchain_om.extensions.recall.query import keyword_hits
from langchain_om.extensions.recall.search import fuse_rankings
from langchain_om.foundation.messages import dump_message
from langchain_om.store.base import NewMessage, OMStore
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.search import MAX_SEARCH_LIMIT
from langchain_om.store.sqlite import SQLiteStore

KS = (5, 10)
METHODS = ("keyword", "semantic", "hybrid")
PUBLISHED = {  # session recall_any@5 on LongMemEval-S as published by each system's authors, not by the
    # LongMemEval paper: sources and question sets in docs/retrieval-benchmark.md
    "BM25, agentmemory": 0.862, "BM25 + all-MiniLM, agentmemory": 0.952, "all-MiniLM, MemPalace raw": 0.966,
    "best tuned hybrid (issue 45, unsourced)": 0.970, "hybrid v4, MemPalace, held-out": 0.984,
}


@dataclass
class Haystack:
    """One resource's sessions, and the questions asked of it."""

    resource: str
    sessions: list[tuple[str, datetime, list[tuple[str, str, str]]]]
    """(session key, date, [(message id, role, text)])"""
    questions: list[Query] = field(default_factory=list)


@dataclass
class Query:
    question_id: str
    kind: str
    text: str
    gold_sessions: set[str]
    gold_turns: set[str]
    asked_at: datetime | None = None
    """Today's date for the question's relative times (LongMemEval's question date; LoCoMo: the
    last session's, as a conversation continuing after it would have)."""


def longmemeval_haystacks(path: str, limit: int | None) -> Iterator[Haystack]:
    for n, item in enumerate(iter_longmemeval(path)):
        if limit is not None and n >= limit:
            return
        sessions = []
        gold_turns: set[str] = set()
        for s, (sid, stamp, turns) in enumerate(zip(item.haystack_session_ids, item.haystack_dates,
                                                   item.haystack_sessions, strict=True)):
            rows = []
            for t, turn in enumerate(turns):
                mid = f"{s}:{t}"
                rows.append((mid, turn.role, turn.content))
                if turn.has_answer:
                    gold_turns.add(mid)
            sessions.append((sid, parse_lme_date(stamp), rows))
        gold = set(item.answer_session_ids)
        stack = Haystack(resource=f"lme-{item.question_id}", sessions=sessions)
        if gold and not item.abstention:
            stack.questions.append(Query(item.question_id, item.question_type, item.question, gold, gold_turns,
                                         item.asked_at))
        yield stack


def locomo_haystacks(path: str, limit: int | None) -> Iterator[Haystack]:
    for n, sample in enumerate(iter_locomo(path)):
        if limit is not None and n >= limit:
            return
        sessions = [(f"D{s.number}", s.when, [(turn.dia_id, "user" if turn.speaker == sample.speaker_a else "assistant",
                                               f"{turn.speaker}: {turn.text}") for turn in s.turns])
                    for s in sample.sessions]
        stack = Haystack(resource=f"locomo-{sample.sample_id}", sessions=sessions)
        for q in sample.questions:
            if q.evidence_sessions:
                stack.questions.append(Query(q.question_id, q.category_name, q.question,
                                             {f"D{s}" for s in q.evidence_sessions}, set(q.evidence),
                                             sample.sessions[-1].when))
        yield stack


def haystacks(path: str, limit: int | None) -> Iterator[Haystack]:
    first = next(iter(iter_json_array(path)), None)
    return (locomo_haystacks if is_locomo(first) else longmemeval_haystacks)(path, limit)


# ------------------------------------------------------------------------------- metrics


def session_ranking(hits: Sequence[tuple[str, str]], session_of: dict[str, str]) -> list[str]:
    """Sessions in the order of their best-ranked message."""
    ranked: list[str] = []
    for thread, _ in hits:
        session = session_of[thread]
        if session not in ranked:
            ranked.append(session)
    return ranked


def ndcg(ranked: Sequence[str], gold: set[str], k: int) -> float:
    dcg = sum(1 / math.log2(i + 2) for i, key in enumerate(ranked[:k]) if key in gold)
    ideal = sum(1 / math.log2(i + 2) for i in range(min(len(gold), k)))
    return dcg / ideal if ideal else 0.0


def score(query: Query, hits: Sequence[tuple[str, str]], session_of: dict[str, str]) -> dict[str, float]:
    sessions = session_ranking(hits, session_of)
    row: dict[str, float] = {}
    for k in KS:
        top = set(sessions[:k])
        row[f"r_any@{k}"] = float(bool(top & query.gold_sessions))
        row[f"r_all@{k}"] = float(query.gold_sessions <= top)
    row["ndcg@10"] = ndcg(sessions, query.gold_sessions, 10)
    if query.gold_turns:
        found = {message for _, message in hits[:10]}
        row["turn@10"] = len(found & query.gold_turns) / len(query.gold_turns)
    return row


# ------------------------------------------------------------------------------- running


def load_embedder(spec: str) -> Any:
    """``module:attribute`` naming an ``Embeddings`` instance or a factory of one (a function, or
    a class built with no arguments); ``fake`` is LangChain's deterministic fake (it checks the
    mechanics, its ranking means nothing)."""
    if spec == "fake":
        from langchain_core.embeddings import DeterministicFakeEmbedding

        return DeterministicFakeEmbedding(size=256)
    module, _, attribute = spec.partition(":")
    if not attribute:
        raise SystemExit(f"--embedder: expected module:attribute or 'fake', got {spec!r}")
    value = getattr(importlib.import_module(module), attribute)
    # a class has embed_query too, as a function: it is a factory, not an instance
    factory = isinstance(value, type) or (callable(value) and not hasattr(value, "embed_query"))
    return value() if factory else value


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from langchain_om.extensions.vector_index import StoreVectorIndex

    store: OMStore
    tmp = tempfile.TemporaryDirectory()
    if args.store == "memory":
        store = InMemoryStore()
    elif args.store == "postgres":
        from langchain_om.store.postgres import PostgresStore

        store = PostgresStore(args.pg_dsn, schema=f"lme_recall_{int(time.time())}")
    else:
        store = SQLiteStore(str(Path(tmp.name) / "recall.db"))
    await store.asetup()
    embedder = load_embedder(args.embedder) if args.embedder else None
    index = StoreVectorIndex(store, embedder) if embedder is not None else None
    methods = ["keyword"] + (["semantic", "hybrid"] if index is not None else [])
    rows: dict[str, list[tuple[str, dict[str, float]]]] = {m: [] for m in methods}
    ingest_s: list[float] = []
    query_s: dict[str, list[float]] = {m: [] for m in methods}
    for stack in haystacks(args.data, args.limit):
        started = time.perf_counter()
        session_of: dict[str, str] = {}
        for s, (key, when, turns) in enumerate(stack.sessions):
            thread = f"{stack.resource}:s{s}"
            session_of[thread] = key
            await store.aensure_thread(stack.resource, thread)
            batch = []
            for t, (mid, role, text) in enumerate(turns):
                message = HumanMessage(content=text, id=mid) if role == "user" else AIMessage(content=text, id=mid)
                batch.append(NewMessage(id=mid, data=dump_message(message), created_at=when + timedelta(minutes=t)))
            await store.aappend_messages(stack.resource, thread, batch)
            if index is not None:
                await index.aadd(stack.resource, thread, [(mid, text) for mid, _, text in turns if text.strip()])
        ingest_s.append(time.perf_counter() - started)
        for query in stack.questions:
            rankings: dict[str, list[tuple[tuple[str, str], float]]] = {}
            t0 = time.perf_counter()
            if args.raw_store_search:  # the store's own ranking of the question as typed (before issue 45)
                hits = await store.asearch_messages(stack.resource, query.text, limit=MAX_SEARCH_LIMIT)
            else:  # as the recall tool asks it
                hits = await keyword_hits(store, stack.resource, query.text, limit=MAX_SEARCH_LIMIT,
                                          now=query.asked_at)
            rankings["keyword"] = [((h.message.thread_id, h.message.id), h.score) for h in hits]
            query_s["keyword"].append(time.perf_counter() - t0)
            if index is not None:
                t0 = time.perf_counter()
                found = await index.asearch(stack.resource, query.text, k=MAX_SEARCH_LIMIT)
                rankings["semantic"] = [((h.thread_id, h.message_id), h.score) for h in found]
                query_s["semantic"].append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                rankings["hybrid"] = fuse_rankings([rankings["keyword"], rankings["semantic"]])
                query_s["hybrid"].append(time.perf_counter() - t0 + query_s["keyword"][-1] + query_s["semantic"][-1])
            for method in methods:
                keys = [key for key, _ in rankings[method]]
                rows[method].append((query.kind, score(query, keys, session_of)))
        if args.progress:
            print(f"  {stack.resource}: {len(stack.questions)} questions", file=sys.stderr)
    await store.aclose()
    tmp.cleanup()
    return {"data": str(args.data), "store": args.store, "raw_store_search": bool(args.raw_store_search),
            "methods": {m: aggregate(rows[m]) for m in methods},
            "ingest_ms": _timing(ingest_s), "query_ms": {m: _timing(query_s[m]) for m in methods},
            "haystacks": len(ingest_s)}


def _timing(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    return {"p50": 1000 * statistics.median(ordered), "p95": 1000 * ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)],
            "mean": 1000 * statistics.fmean(ordered)}


def aggregate(rows: list[tuple[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """Mean of each metric per question type and over all ('all'); 'n' counts the questions."""
    groups: dict[str, list[dict[str, float]]] = {}
    for kind, row in rows:
        groups.setdefault(kind, []).append(row)
        groups.setdefault("all", []).append(row)
    out: dict[str, dict[str, float]] = {}
    for kind, group in sorted(groups.items(), key=lambda item: (item[0] == "all", item[0])):
        metrics = {key for row in group for key in row}
        out[kind] = {"n": len(group), **{m: statistics.fmean(r[m] for r in group if m in r) for m in sorted(metrics)}}
    return out


def report(payload: dict[str, Any]) -> str:
    lines = [f"recall on {payload['data']} ({payload['haystacks']} haystacks, {payload['store']} store)"]
    columns = ("r_any@5", "r_any@10", "r_all@5", "r_all@10", "ndcg@10", "turn@10")
    for method, table in payload["methods"].items():
        lines.append(f"\n{method}:")
        lines.append(f"  {'type':28} {'n':>4} " + " ".join(f"{c:>8}" for c in columns))
        for kind, values in table.items():
            cells = " ".join(f"{values[c]:8.3f}" if c in values else f"{'-':>8}" for c in columns)
            lines.append(f"  {kind:28} {int(values['n']):4d} {cells}")
    lines.append("\nsession recall_any@5 beside published retrievers (LongMemEval-S, their own question sets):")
    for name, value in PUBLISHED.items():
        lines.append(f"  {name:36} {value:.3f}")
    for method, table in payload["methods"].items():
        lines.append(f"  {'this run, ' + method:36} {table['all']['r_any@5']:.3f}")
    ingest = payload["ingest_ms"]
    lines.append(f"\ningest per haystack: p50 {ingest['p50']:.0f} ms, p95 {ingest['p95']:.0f} ms")
    for method, timing in payload["query_ms"].items():
        lines.append(f"query ({method}): p50 {timing['p50']:.1f} ms, p95 {timing['p95']:.1f} ms")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.longmemeval_recall", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="LongMemEval (S, M, oracle) or LoCoMo JSON; .xz/.gz too")
    parser.add_argument("--store", choices=("sqlite", "memory", "postgres"), default="sqlite")
    parser.add_argument("--pg-dsn", default=None, help="PostgreSQL DSN for --store postgres")
    parser.add_argument("--embedder", default=None,
                        help="module:attribute of a LangChain Embeddings (or a factory); 'fake' for the mechanics")
    parser.add_argument("--limit", type=int, default=None, help="first N haystacks only")
    parser.add_argument("--raw-store-search", action="store_true",
                        help="ask the store's keyword search the question as typed, not recall's query handling")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    parser.add_argument("--progress", action="store_true", help="one line per haystack on stderr")
    args = parser.parse_args(argv)
    if args.store == "postgres" and not args.pg_dsn:
        parser.error("--store postgres needs --pg-dsn")
    payload = asyncio.run(run(args))
    print(report(payload))
    if args.json is not None:
        args.json.write_text(json.dumps(payload, indent=2))
    return payload


if __name__ == "__main__":
    main()
