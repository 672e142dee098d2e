"""Every in-process cache of the engine has a bound (issue 19, item 3): a process that serves
more threads than the bound levels off instead of keeping state for every thread it ever saw."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedObserverModel

LIMIT = 8


def cache_sizes(om: ObservationalMemory) -> dict[str, int]:
    return {
        "known ids": len(om._known_ids),
        "caller lists": len(om._caller_lists),
        "thread incarnations": len(om._thread_born),
        "parsed messages": len(om._message_cache),
        "windows": len(om._windows),
        "records": len(om._records),
        "rendered logs": len(om._rendered),
        "instructions": len(om._instruction_cache),
        "recent threads": len(om._recent_threads),
        "recent records": len(om._recent_records),
        "locks": len(om._locks),
        "step numbers": len(om._step_numbers),
        "pending events": len(om._pending_events),
        "background tasks": len(om._tasks._tasks),
    }


async def test_caches_level_off_past_the_bound() -> None:
    options: dict[str, Any] = {"model": ScriptedObserverModel(), "observation": {"message_tokens": 200},
                               "token_counter": "estimator"}
    om = ObservationalMemory(InMemoryStore(), **options)
    om.cache_limit = LIMIT
    threads = 5 * LIMIT
    for round_ in range(3):
        for t in range(threads):
            history = [HumanMessage(f"round {r} thread {t}: " + "words " * 40, id=f"h{t}-{r}")
                       for r in range(round_ + 1)]
            history = [m for h in history for m in (h, AIMessage("ok " * 40, id=f"a{h.id}"))]
            await om.aprocess(f"thread-{t}", history, resource_id=f"user-{t}")
        await om.await_background()
    # the next step of a long-running process sweeps what the background work held on to
    await om.aprocess("one-more", [HumanMessage("hi", id="h-more")], resource_id="user-more")
    await om.await_background()
    sizes = cache_sizes(om)
    over = {name: size for name, size in sizes.items() if size > LIMIT}
    assert not over, over
    assert sizes["recent threads"] == LIMIT and sizes["known ids"] == LIMIT, "the bound is used, not avoided"
    # an evicted thread starts cold and still gets its whole context back
    ctx = await om.aprocess("thread-0", [HumanMessage("back again", id="h-back")], resource_id="user-0")
    assert ctx.messages[-1].content == "back again"
    assert (await om.aget_record("thread-0", resource_id="user-0")).groups
