"""Keyword search in Japanese beside English, in one run: 100k stored messages of each, SQLite
and PostgreSQL, the store's query (``asearch_messages``, limit 20) timed after a restart.

The Japanese corpus is the English one's twin (``common.conversation``'s topics, preferences,
days and sentence shapes, written in Japanese, with the same small vocabulary, so common words
match tens of thousands of messages), including one- and two-character words, katakana, and
English words and digits inside Japanese sentences. Queries are what a model would pass to
``recall``: nouns of one to six characters, mixed scripts, a question, a word never said.

Also measured (docs/search.md): the size of each keyword index; on SQLite, how long the v7
migration's backfill takes to index the stored Japanese messages; and the alternative the issue
names, FTS5's ``trigram`` tokenizer over the same texts, with a ``LIKE`` scan for the one- and
two-character words a trigram index cannot answer. Target: Japanese p95 within 2x of English.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import tempfile
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from langchain_om.store.base import NewMessage, OMStore
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.search import search_text
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.store.sqlite import cjk as sqlite_cjk

from .common import START, Timer, section_main, summary, table, verdicts
from .progress import note
from .storage import RESOURCE, _drop_schema, _rows

_TOPICS = ["リスボン旅行", "四半期の予算", "妹の結婚式", "庭の物置", "Pythonのリファクタリング", "マラソンの練習計画",
           "新しいエスプレッソマシン", "6月の引っ越し", "チームの合宿", "ポルトガル語の勉強", "車の保険の更新",
           "サムの誕生日ディナー", "京都の旅館", "上海出張"]
_PREFS = ["窓側の席", "ベジタリアン料理", "朝の会議", "飛行機より電車", "深煎り", "メール"]
_DAYS = ["月曜日", "火曜日", "来週の金曜日", "14日", "明日", "月末"]
_USER = [
    "{topic}を手伝ってもらえますか？{day}までに終わらせたいです。",
    "{topic}では{pref}が好みです。覚えておいてください。",
    "前回{topic}について何を決めましたっけ？予算は{n}ユーロだったと思います。",
    "{topic}の件、{day}に変更になりました。{n}人来ます。",
    "{pref}は全然好きじゃないです。{topic}は別の方法にしましょう。",
    "{topic}について{n}ステップの簡単な計画を作ってください。",
]
_ASSISTANT = [
    "{topic}についての提案はこちらです。",
    "まず、日程、予算（{n}ユーロ）、参加が必要な人という固定の条件を洗い出しましょう。",
    "{day}に近づくと値段が上がるので、早く売り切れるものから予約してください。",
    "{pref}がお好みとのこと、覚えておきます。",
    "何か変わったら教えてください。計画を一つずつ調整します。",
    "日付を確定し、予約し、全員に詳細を送る、という順番が妥当です。",
    "{day}前後に{topic}が他の予定と重なるリスクがあります。",
]
QUERIES_JA = ["リスボン", "予算", "妹の結婚式", "京都", "旅館", "窓側の席", "ベジタリアン", "マラソン", "エスプレッソ",
              "引っ越し", "保険", "誕生日", "417ユーロ", "火山", "予算はどうなった？", "search_notes", "京", "妹",
              "上海", "Python"]
QUERIES_EN = ["Lisbon trip", "quarterly budget euros", "sister's wedding", "garden shed", "Python refactor",
              "marathon training plan", "espresso machine dark roast", "moving flats June", "team offsite",
              "learning Portuguese", "car insurance renewal", "birthday dinner Sam", "vegetarian options",
              "window seats", "trains over planes", "morning meetings", "417 euros", "volcano eruption",
              "What did we decide about the budget?", "search_notes"]
TARGET_RATIO = 2.0


def japanese_rows(count: int, seed: int = 5) -> list[NewMessage]:
    """``count`` messages of a deterministic Japanese multi-topic chat (user, assistant, a tool call
    every ninth turn), sized like ``common.conversation``'s."""
    rng = random.Random(seed)
    rows: list[NewMessage] = []
    i = 0
    while len(rows) < count:
        turn = i // 2
        when = START + timedelta(minutes=3 * turn)
        values = {"topic": rng.choice(_TOPICS), "pref": rng.choice(_PREFS), "day": rng.choice(_DAYS),
                  "n": rng.randint(2, 900)}
        if i % 2 == 0:
            data: dict[str, Any] = {"type": "human", "data": {"content": rng.choice(_USER).format(**values)}}
        elif turn % 9 == 0:
            data = {"type": "ai", "data": {"content": "", "tool_calls": [
                {"name": "search_notes", "args": {"query": values["topic"]}, "id": f"c{i}"}]}}
        else:
            text = "".join(rng.choice(_ASSISTANT).format(**values) for _ in range(rng.randint(3, 7)))
            data = {"type": "ai", "data": {"content": text}}
        rows.append(NewMessage(id=f"j{i}", data=data, tokens=len(str(data)) // 2, created_at=when))
        i += 1
    return rows


async def fill(store: OMStore, rows: list[NewMessage], threads: int, batch: int) -> float:
    await store.asetup()
    per_thread = len(rows) // threads
    with Timer() as write:
        for t in range(threads):
            part = rows[t * per_thread:(t + 1) * per_thread]
            for start in range(0, len(part), batch):
                await store.aappend_messages(RESOURCE, f"t{t}", part[start:start + batch])
    return write.ms / 1000


async def fill_and_close(store: OMStore, rows: list[NewMessage], threads: int, batch: int) -> float:
    try:
        return await fill(store, rows, threads, batch)
    finally:
        await store.aclose()


async def time_queries(store: OMStore, queries: list[str], count: int, seed: int = 3) -> dict[str, Any]:
    rng = random.Random(seed)
    picks = [queries[rng.randrange(len(queries))] for _ in range(count)]
    await store.asearch_messages(RESOURCE, picks[0])  # open and warm the connection
    samples: list[float] = []
    for query in picks:
        with Timer() as timer:
            await store.asearch_messages(RESOURCE, query, limit=20)
        samples.append(timer.ms)
    with_hits = 0
    for query in queries:
        with_hits += bool(await store.asearch_messages(RESOURCE, query, limit=20))
    return {"ms": summary(samples), "queries_with_hits": with_hits, "queries": len(queries)}


def sqlite_sizes(path: str) -> dict[str, float]:
    """MB of each keyword index (FTS5 shadow tables), from the ``dbstat`` virtual table."""
    conn = sqlite3.connect(path)
    try:
        sizes: dict[str, float] = {}
        for name in ("message_search", sqlite_cjk.CJK_TABLE):
            row = conn.execute(
                "SELECT SUM(pgsize) FROM dbstat WHERE name IN (?, ?, ?, ?, ?)",
                tuple(f"{name}_{part}" for part in ("data", "idx", "content", "docsize", "config"))).fetchone()
            sizes[name] = round((row[0] or 0) / 1e6, 1)
        return sizes
    except sqlite3.OperationalError:
        return {}
    finally:
        conn.close()


def sqlite_backfill_seconds(path: str) -> float:
    """Drop the CJK index, mark the file as version 6, and time the reopen that rebuilds it."""
    conn = sqlite3.connect(path)
    conn.execute(f"DROP TABLE {sqlite_cjk.CJK_TABLE}")
    conn.execute("DROP TABLE search_backfill")
    conn.execute("UPDATE schema_version SET version = 6")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    with Timer() as timer:
        asyncio.run(store.asetup())
    asyncio.run(store.aclose())
    return timer.ms / 1000


def trigram_alternative(rows: list[NewMessage], queries: list[str], count: int, seed: int = 3) -> dict[str, Any]:
    """FTS5 ``trigram`` over the same texts (one table, no scope column): its size, and query
    times, with queries under three characters answered by ``LIKE '%word%'`` (a scan)."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE tri USING fts5(body, tokenize = 'trigram')")
    conn.executemany("INSERT INTO tri (body) VALUES (?)",
                     [(text,) for row in rows if (text := search_text(row.data))])
    size = conn.execute("SELECT SUM(pgsize) FROM dbstat WHERE name LIKE 'tri_%'").fetchone()[0] or 0
    rng = random.Random(seed)
    long_ms: list[float] = []
    short_ms: list[float] = []
    words = [w for q in queries for w in q.replace("？", " ").split()]
    for _ in range(count):
        word = words[rng.randrange(len(words))]
        with Timer() as timer:
            if len(word) >= 3:
                conn.execute("SELECT rowid FROM tri WHERE tri MATCH ? ORDER BY rank LIMIT 20",
                             ('"' + word + '"',)).fetchall()
            else:
                # (body || '') so SQLite scans: FTS5's own LIKE returns no row for a pattern under 3 characters
                conn.execute("SELECT rowid FROM tri WHERE (body || '') LIKE ? ORDER BY rowid DESC LIMIT 20",
                             (f"%{word}%",)).fetchall()
        (long_ms if len(word) >= 3 else short_ms).append(timer.ms)
    with Timer() as miss:  # a two-character word said nowhere: the scan reads every row
        conn.execute("SELECT rowid FROM tri WHERE (body || '') LIKE ? LIMIT 20", ("%火山%",)).fetchall()
    conn.close()
    return {"index_mb": round(size / 1e6, 1), "match_ms": summary(long_ms) if long_ms else {},
            "like_scan_ms": summary(short_ms) if short_ms else {}, "like_scan_miss_ms": miss.ms}


async def pg_sizes(store: PostgresStore) -> dict[str, float]:
    async with store._tx() as cur:
        sizes: dict[str, float] = {}
        for table_ in ("message_search", "message_search_cjk"):
            await cur.execute(store._q(f"SELECT pg_total_relation_size('{{s}}.{table_}'::regclass) AS n"))
            row = await cur.fetchone()
            sizes[table_] = round((row["n"] if row else 0) / 1e6, 1)
        return sizes


async def bench_pg(dsn: str, rows: list[NewMessage], queries: list[str], args: argparse.Namespace) -> dict[str, Any]:
    schema = f"om_bench_{uuid.uuid4().hex[:8]}"
    store = PostgresStore(dsn, schema=schema)
    try:
        write_s = await fill(store, rows, args.threads, args.batch)
        async with store._tx() as cur:
            for table_ in ("message_search", "message_search_cjk", "messages"):
                await cur.execute(store._q(f"ANALYZE {{s}}.{table_}"))
        await store.aclose()
        reopened = PostgresStore(dsn, schema=schema)
        try:
            out = await time_queries(reopened, queries, args.queries)
            out.update(write_s=write_s, index_mb=await pg_sizes(reopened))
        finally:
            await reopened.aclose()
        return out
    finally:
        await _drop_schema(store, schema)
        await store.aclose()


def run(args: argparse.Namespace) -> dict[str, Any]:
    # One corpus at a time, on both stores, then let it go: holding both 100k-row corpora for the
    # whole section was most of its memory.
    corpora: dict[str, tuple[Callable[[int], list[NewMessage]], list[str]]] = {
        "en": (_rows, QUERIES_EN), "ja": (japanese_rows, QUERIES_JA)}
    out: dict[str, Any] = {"sqlite": {}, "postgres": {}}
    dsn = args.pg_dsn or os.environ.get("LANGCHAIN_OM_TEST_PG_DSN")
    if args.no_pg or not dsn:
        out["postgres"] = {"skipped": "--no-pg" if args.no_pg else "no DSN (--pg-dsn / LANGCHAIN_OM_TEST_PG_DSN)"}
    with tempfile.TemporaryDirectory(prefix="om-bench-lang-") as tmp:
        for lang, (make_rows, queries) in corpora.items():
            rows = make_rows(args.messages)
            path = os.path.join(tmp, f"{lang}.db")
            write_s = asyncio.run(fill_and_close(SQLiteStore(path), rows, args.threads, args.batch))

            async def timed(path: str = path, queries: list[str] = queries) -> dict[str, Any]:
                store = SQLiteStore(path)
                try:
                    return await time_queries(store, queries, args.queries)
                finally:
                    await store.aclose()

            result = asyncio.run(timed())
            result.update(write_s=write_s, index_mb=sqlite_sizes(path))
            if lang == "ja":
                result["backfill_s"] = sqlite_backfill_seconds(path)
                result["trigram_alternative"] = trigram_alternative(rows, queries, args.queries)
            out["sqlite"][lang] = result
            os.remove(path)
            note(f"sqlite {lang}: done")
            if "skipped" not in out["postgres"]:
                out["postgres"][lang] = asyncio.run(bench_pg(str(dsn), rows, queries, args))
                note(f"postgres {lang}: done")
            del rows
    ratios: dict[str, float] = {}
    targets: dict[str, bool] = {}
    for backend, data in out.items():
        if "skipped" in data:
            continue
        ratio = data["ja"]["ms"]["p95"] / max(data["en"]["ms"]["p95"], 1e-6)
        ratios[f"{backend} ja/en keyword p95"] = ratio
        targets[f"{backend} Japanese p95 within {TARGET_RATIO:.0f}x of English"] = ratio <= TARGET_RATIO
    return {"params": {"messages": args.messages, "threads": args.threads, "queries": args.queries},
            "backends": out, "ratios": ratios, "target": targets}


def report(payload: dict[str, Any]) -> str:
    rows: list[list[Any]] = []
    for backend, data in payload["backends"].items():
        if "skipped" in data:
            rows.append([backend, "skipped: " + data["skipped"], "", "", "", "", ""])
            continue
        for lang in ("en", "ja"):
            d = data[lang]
            rows.append([backend, lang, d["ms"]["p50"], d["ms"]["p95"], f"{d['queries_with_hits']}/{d['queries']}",
                         d["write_s"], " ".join(f"{k}={v}" for k, v in d["index_mb"].items())])
    params = payload["params"]
    out = table(f"Keyword search, English vs Japanese: {params['messages']:,} messages each, "
                f"{params['queries']} queries, store query after a restart (ms)",
                ["backend", "lang", "p50", "p95", "queries with hits", "write s", "index MB"], rows)
    sqlite = payload["backends"].get("sqlite", {}).get("ja", {})
    if "backfill_s" in sqlite:
        out += f"\n  sqlite: the v7 backfill indexed the stored Japanese messages in {sqlite['backfill_s']:.1f} s"
    alt = sqlite.get("trigram_alternative")
    if alt:
        out += (f"\n  alternative, FTS5 trigram: index {alt['index_mb']} MB; MATCH (>= 3 chars) p95 "
                f"{alt['match_ms'].get('p95', 0):.1f} ms; LIKE scan (1-2 chars) p95 "
                f"{alt['like_scan_ms'].get('p95', 0):.1f} ms, a word found nowhere {alt['like_scan_miss_ms']:.0f} ms")
    return out + verdicts(payload, digits=2)


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--messages", type=int, default=10_000 if quick else 100_000)
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--queries", type=int, default=40 if quick else 200)
    parser.add_argument("--pg-dsn", default=None)
    parser.add_argument("--no-pg", action="store_true", help="skip PostgreSQL")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("search_languages", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
