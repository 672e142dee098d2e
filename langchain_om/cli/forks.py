"""``inspect --checkpoint ID`` / ``--branch ID``: the memory of a time-travel fork.

After a run from an earlier checkpoint, OM keeps the fork's memory on a branch of the thread
(``extensions/branches.py``). ``inspect THREAD`` lists the thread's branches; ``--branch`` shows
one, and ``--checkpoint`` shows the memory a LangGraph checkpoint names, read from the
checkpointer's SQLite file (``--checkpoints``, by default the ``--db`` file itself, when the app
keeps OM and its ``SqliteSaver`` in one file).
"""

from __future__ import annotations

import argparse
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..extensions.branches import SNAPSHOT_NAMESPACE
from ..store.base import BRANCH_MARK


def add_fork_arguments(inspect: argparse.ArgumentParser, identifier: Any) -> None:
    target = inspect.add_mutually_exclusive_group()
    target.add_argument("--checkpoint", type=identifier("--checkpoint"), default=None,
                        help="show the memory this LangGraph checkpoint id names (a time-travel fork's own)")
    target.add_argument("--branch", type=identifier("--branch"), default=None,
                        help="show one of the thread's forks (an id `inspect THREAD` lists)")
    inspect.add_argument("--checkpoints", default=None,
                         help="the LangGraph SqliteSaver file holding --checkpoint (default: the --db file)")


@dataclass
class ForkTarget:
    """What ``inspect`` shows: the thread's own memory, a branch, or a checkpoint's position."""

    thread: str
    position: dict[str, Any] | None = None


async def branch_ids(store: Any, resource: str, thread_id: str) -> list[str]:
    """The thread's forks, by the id ``--branch`` takes (the part after the thread id)."""
    registry = await store.aget_value(resource, SNAPSHOT_NAMESPACE, f"thread:{thread_id}")
    found = registry.get("branches", []) if isinstance(registry, Mapping) else []
    return [b.split(BRANCH_MARK, 1)[1] for b in found if isinstance(b, str) and b.startswith(thread_id + BRANCH_MARK)]


async def fork_target(args: argparse.Namespace, store: Any, resource: str, db: str) -> ForkTarget:
    """The thread, branch or checkpoint position ``args`` ask for; a ``ValueError`` naming the flag."""
    if args.branch is not None:
        suffix = args.branch.split("branch:", 1)[-1]
        known = await branch_ids(store, resource, args.thread_id)
        if suffix not in known:
            listed = ", ".join(known) if known else "none"
            raise ValueError(f"--branch: thread {args.thread_id!r} has no fork {args.branch!r} (its forks: {listed})")
        return ForkTarget(f"{args.thread_id}{BRANCH_MARK}{suffix}")
    if args.checkpoint is not None:
        position = _checkpoint_position(args.checkpoints or db, args.thread_id, args.checkpoint)
        return ForkTarget(str(position["branch"]), position)
    if args.checkpoints is not None:
        raise ValueError("--checkpoints: only used with --checkpoint")
    return ForkTarget(args.thread_id)


def _checkpoint_position(path: str, thread_id: str, checkpoint_id: str) -> dict[str, Any]:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    except sqlite3.Error as exc:
        raise ValueError(f"--checkpoints: cannot open {path}: {exc}") from None
    try:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "checkpoints" not in tables:
            raise ValueError(f"--checkpoint: {path} holds no LangGraph checkpoints "
                             "(pass the SqliteSaver's file with --checkpoints)")
        try:
            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError:
            raise ValueError("--checkpoint: needs langgraph-checkpoint-sqlite "
                             "(pip install langgraph-checkpoint-sqlite)") from None
        saver = SqliteSaver(conn)
        saver.is_setup = True  # the tables are there; a read-only file must not be written
        found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": "",
                                                  "checkpoint_id": checkpoint_id}})
    finally:
        conn.close()
    if found is None:
        raise ValueError(f"--checkpoint: no checkpoint {checkpoint_id!r} of thread {thread_id!r} in {path}")
    position = (found.checkpoint.get("channel_values") or {}).get("om_position")
    if not isinstance(position, dict) or not isinstance(position.get("branch"), str):
        raise ValueError(f"--checkpoint: checkpoint {checkpoint_id!r} has no om_position (before OM's first step?)")
    return position
