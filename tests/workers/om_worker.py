"""A worker process for the reliability tests: replays a deterministic conversation through OM.

Usage: python om_worker.py STORE_URL THREAD TURNS [--delay S] [--no-buffering] [--resume] [--lease-ttl MS]
STORE_URL is ``sqlite:PATH`` or ``postgres:SCHEMA:DSN``.
Prints ``turn N`` after each step and ``done`` when every turn was processed.
``--resume`` starts at the turn before the newest one stored (a restarted process re-sends the
whole history up to there in its first step) instead of stepping through every earlier turn again.
``--lease-ttl`` shortens ``failure_policy.lease_ttl``, so a restart waits less for a killed
worker's lease to lapse (a live holder renews it every third of the ttl).
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import OMStore, implicit_resource

OBSERVATION = (
    "<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 (09:00) User keeps talking about turn numbers.\n"
    "</observations>\n<current-task>Keep counting.</current-task>"
)


class SlowFake(FakeListChatModel):
    """A scripted Observer that takes a little time, so kills land in the middle of cycles."""

    delay: float = 0.0

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        time.sleep(self.delay)
        return super()._call(messages, stop, run_manager, **kwargs)


def open_store(url: str) -> OMStore:
    kind, _, rest = url.partition(":")
    if kind == "sqlite":
        from langchain_om.store.sqlite import SQLiteStore

        return SQLiteStore(rest)
    schema, _, dsn = rest.partition(":")
    from langchain_om.store.postgres import PostgresStore

    return PostgresStore(dsn, schema=schema)


def history(turns: int) -> list[BaseMessage]:
    messages: list[BaseMessage] = []
    for turn in range(turns):
        words = " ".join(f"w{turn}_{i}" for i in range(25))
        messages.append(HumanMessage(f"turn {turn}: {words}", id=f"h{turn}"))
        messages.append(AIMessage(f"reply {turn}: {words}", id=f"a{turn}"))
    return messages


async def first_turn(store: OMStore, thread: str) -> int:
    """The turn before the newest one whose human message is stored (0 on an empty thread)."""
    await store.asetup()
    stored = await store.aget_messages(implicit_resource(thread), thread)
    turns = [int(m.id[1:]) for m in stored if m.id.startswith("h") and m.id[1:].isdigit()]
    return max(0, max(turns, default=0) - 1)


async def main(url: str, thread: str, turns: int, delay: float, buffering: bool, resume: bool,
               lease_ttl_ms: float) -> None:
    store = open_store(url)
    start = await first_turn(store, thread) if resume else 0
    om = ObservationalMemory(
        store,
        model=SlowFake(responses=[OBSERVATION], delay=delay),
        token_counter="estimator",
        observation={"message_tokens": 300, "buffer_tokens": 100 if buffering else False},
        reflection={"observation_tokens": 1_000_000},
        failure_policy={"lease_ttl": lease_ttl_ms},
    )
    full = history(turns)
    for turn, end in enumerate(range(1, len(full) + 1, 2)):
        if turn < start:
            continue
        await om.aprocess(thread, full[:end])
        # progress lets the test pick its kill point by turn, independent of machine speed
        print(f"turn {turn}", flush=True)
        await asyncio.sleep(0)
    await om.aprocess(thread, full)
    await om.aclose()
    print("done", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    delay = float(args[args.index("--delay") + 1]) if "--delay" in args else 0.0
    lease_ttl_ms = float(args[args.index("--lease-ttl") + 1]) if "--lease-ttl" in args else 10_000.0
    asyncio.run(main(args[0], args[1], int(args[2]), delay, "--no-buffering" not in args, "--resume" in args,
                     lease_ttl_ms))
