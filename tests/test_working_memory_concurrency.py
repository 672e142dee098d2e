"""Concurrent working memory updates never lose a field (issue 15, item 5).

Two updates of different fields (the agent's tool on two workers, or the tool and the
Observer) used to read the document, merge, and write it back with no check in between:
the later write dropped the earlier field. The merge now runs inside the store's atomic
read-modify-write, on every backend.
"""

from __future__ import annotations

import asyncio
from typing import Any

from pydantic import BaseModel

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel

ROUNDS = 20


class Person(BaseModel):
    name: str | None = None
    city: str | None = None
    diet: str | None = None


class SlowReads:
    """Delegates to a store; every value read waits a little before and after, as a read does
    on a loaded server, so two read-modify-write updates overlap the way they do in production."""

    def __init__(self, inner: OMStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any:
        await asyncio.sleep(0.005)
        value = await self.inner.aget_value(resource_id, namespace, key)
        await asyncio.sleep(0.005)
        return value


def worker(store: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",  # type: ignore[arg-type]
                               observation={"message_tokens": 400, "buffer_tokens": False},
                               working_memory={"schema": Person, "scope": "resource"})


async def test_two_concurrent_field_updates_both_survive(store: OMStore) -> None:
    slow = SlowReads(store)
    first, second = worker(slow), worker(slow)
    assert first.working_memory is not None and second.working_memory is not None
    lost = 0
    for round_ in range(ROUNDS):
        resource = f"user-{round_}"
        [tool_a] = first.working_memory_tools(thread_id="t1", resource_id=resource)
        [tool_b] = second.working_memory_tools(thread_id="t2", resource_id=resource)
        await asyncio.gather(
            tool_a.ainvoke({"name": f"Aiko {round_}"}),
            tool_b.ainvoke({"city": f"Kyoto {round_}"}),
        )
        document = await first.working_memory.aget("t1", resource_id=resource)
        assert isinstance(document, dict)
        if document != {"name": f"Aiko {round_}", "city": f"Kyoto {round_}", "diet": None}:
            lost += 1
    assert lost == 0, f"{lost} of {ROUNDS} rounds lost a field"


async def test_many_concurrent_updates_keep_every_field(store: OMStore) -> None:
    om = worker(SlowReads(store))
    assert om.working_memory is not None
    memory = om.working_memory
    await asyncio.gather(
        memory.aset("t1", {"name": "Ren"}, resource_id="u", merge=True),
        memory.aset("t1", {"city": "Osaka"}, resource_id="u", merge=True),
        memory.aset("t1", {"diet": "vegan"}, resource_id="u", merge=True),
    )
    assert await memory.aget("t1", resource_id="u") == {"name": "Ren", "city": "Osaka", "diet": "vegan"}


async def test_a_refused_update_leaves_the_document_as_it_was(store: OMStore) -> None:
    om = worker(store)
    assert om.working_memory is not None
    await om.working_memory.aset("t1", {"name": "Ren"}, resource_id="u", merge=True)
    try:
        await om.working_memory.aset("t1", {"name": ["not", "a", "name"]}, resource_id="u", merge=True)
    except ValueError as exc:
        assert "working memory field name" in str(exc)
    else:
        raise AssertionError("a value the schema refuses must raise")
    assert await om.working_memory.aget("t1", resource_id="u") == {"name": "Ren", "city": None, "diet": None}
