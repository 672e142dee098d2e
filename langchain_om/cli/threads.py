"""``langchain-om threads``: find a thread (``langgraph dev`` names them with UUIDs), and the
"did you mean" of ``inspect`` on an id that is not there."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from .literal import json_text, literal

SUGGESTION_SCAN = 5000
"""Thread ids read (by key, newest activity first) to look for the closest ones to a missing id."""


def add_threads_parser(sub: Any, identifier: Any, positive_int: Any, default_db_help: str) -> None:
    threads = sub.add_parser("threads", help="list the threads in a database, most recent activity first",
                             description="List threads with their title, message count and last activity, "
                                         "most recent first. Without --resource: the threads used without a "
                                         "resource (the usual case under langgraph dev).")
    threads.add_argument("--db", type=identifier("--db"), default=None, help=default_db_help)
    threads.add_argument("--resource", type=identifier("--resource"), default=None,
                         help="list this resource's threads (the user id the app passed as resource_id/user_id)")
    threads.add_argument("--limit", type=positive_int, default=50, help="at most this many threads (default 50)")
    threads.add_argument("--json", action="store_true", help="print the threads as JSON (snake_case keys)")


async def cmd_threads(args: argparse.Namespace, db: str, console: Console) -> int:
    from ..store.sqlite import SQLiteStore

    store = SQLiteStore(db)
    await store.asetup()
    try:
        summaries = await store.alist_thread_summaries(args.resource, limit=args.limit)
        more = bool(summaries) and len(summaries) == args.limit and bool(
            await store.alist_thread_summaries(args.resource, after=summaries[-1], limit=1))
    finally:
        await store.aclose()
    if args.json:
        payload = {"threads": [s.model_dump(mode="json") for s in summaries], "more": more}
        sys.stdout.write(json_text(payload) + "\n")
        return 0
    owner = f"resource {args.resource!r}" if args.resource else "threads without a resource"
    if not summaries:
        console.print(literal(f"No threads for {owner} in {db}."))
        return 0
    table = Table(title=literal(f"Threads ({owner}), most recent activity first"))
    for column in ("thread_id", "title", "messages", "last activity"):
        table.add_column(column, overflow="fold", justify="right" if column == "messages" else "left")
    for s in summaries:
        table.add_row(literal(s.thread_id), literal(s.title or ""), str(s.message_count),  # stored text: never markup
                      s.last_activity.strftime("%Y-%m-%d %H:%M:%S UTC"))
    console.print(table)
    if more:
        console.print(f"(first {args.limit}; --limit shows more)", highlight=False)
    console.print(literal("Inspect one with: langchain-om inspect THREAD_ID"
                          + (f" --resource {args.resource}" if args.resource else "")))
    return 0


async def closest_thread_ids(store: Any, resource_id: str | None, thread_id: str, n: int = 3) -> list[str]:
    """The ids nearest to ``thread_id`` among the resource's threads (or those without a resource):
    ids it is a prefix of first (a UUID typed in part), then ``difflib``'s closest matches."""
    ids: list[str] = []
    after = None
    while len(ids) < SUGGESTION_SCAN:
        page = await store.alist_thread_summaries(resource_id, after=after, limit=500)
        ids.extend(s.thread_id for s in page)
        if len(page) < 500:
            break
        after = page[-1]
    prefixed = [i for i in ids if i.startswith(thread_id)][:n]
    close = [i for i in difflib.get_close_matches(thread_id, ids, n=n, cutoff=0.6) if i not in prefixed]
    return (prefixed + close)[:n]
