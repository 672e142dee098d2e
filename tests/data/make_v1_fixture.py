"""Builds ``om_v1.sqlite``: a database written by langchain-om at schema version 1.

Run once against the code of commit 1d88cf9 (the last one before schema version 2):
``PYTHONPATH=. python tests/data/make_v1_fixture.py tests/data/om_v1.sqlite``. The file is
committed; running this script with newer code would write a newer schema, so it is kept
only to show how the fixture was made.

What it holds (every case the version 2 migration must tell apart):

* ``solo``: a thread used without a resource (v1 stored it under resource ``solo``): messages,
  an observation, a thread-scope record and thread-scope working memory.
* ``user-1``: an explicit resource with two threads, one of them named ``user-1`` too.
* ``team``: an explicit resource in resource scope whose only thread is also named ``team``.
* ``carol``: an explicit resource with thread ``c-1`` and resource-scope working memory.
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime, timedelta, timezone

from langchain_core.messages import AIMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.store.sqlite import SQLiteStore

OBSERVATION = (
    "<observations>\nDate: 2026-11-30 (Monday)\n* 🔴 (09:00) User mentioned turn {n}.\n</observations>\n"
    "<current-task>Keep going.</current-task>"
)


def turns(prefix: str, count: int) -> list[list[object]]:
    start = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
    history: list[object] = []
    out: list[list[object]] = []
    for turn in range(count):
        moment = (start + timedelta(minutes=turn)).isoformat()
        words = " ".join(f"{prefix}{turn}_{i}" for i in range(30))
        history.append(HumanMessage(f"{prefix} turn {turn}: {words}", id=f"{prefix}-h{turn}",
                                    response_metadata={TIMESTAMP_KEY: moment}))
        out.append(list(history))
        history.append(AIMessage(f"{prefix} reply {turn}: {words}", id=f"{prefix}-a{turn}",
                                 response_metadata={TIMESTAMP_KEY: moment}))
    return out


async def main(path: str) -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    model = FakeListChatModel(responses=[OBSERVATION.format(n=i) for i in range(50)])
    common = {"token_counter": "estimator", "observation": {"message_tokens": 300, "buffer_tokens": False},
              "reflection": {"observation_tokens": 1_000_000}}
    store = SQLiteStore(path)
    thread_om = ObservationalMemory(store, model=model, working_memory=True, **common)
    for history in turns("solo", 8):
        await thread_om.aprocess("solo", history)  # no resource: v1 used the thread id
    assert thread_om.working_memory is not None
    await thread_om.working_memory.aset("solo", "# Solo\n- secret: solo's own note")
    for history in turns("u1", 8):
        await thread_om.aprocess("user-1", history, resource_id="user-1")
    for history in turns("u2", 3):
        await thread_om.aprocess("chat-2", history, resource_id="user-1")
    await thread_om.working_memory.aset("c-1", "# Carol\n- city: Lyon", resource_id="carol")
    for history in turns("c", 3):
        await thread_om.aprocess("c-1", history, resource_id="carol")
    await thread_om.aclose()
    resource_om = ObservationalMemory(SQLiteStore(path), model=model, scope="resource", **common)
    for history in turns("team", 8):
        await resource_om.aprocess("team", history, resource_id="team")
    await resource_om.aclose()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
