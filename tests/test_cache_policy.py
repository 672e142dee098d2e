"""More active threads than ``cache_limit`` (issue 32, item 4): sampled eviction keeps most of a
round robin cached, and whatever it evicts is a miss, never an error or another thread's state."""

from __future__ import annotations

import asyncio

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.engine.cache_policy import SampledKeys
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel


def test_a_cycle_over_more_keys_than_the_limit_still_hits() -> None:
    """Strict LRU misses every touch of this cycle; sampled eviction keeps most keys."""
    keys, limit = SampledKeys(seed=3), 50
    hits = 0
    for round_ in range(10):
        for k in range(60):
            hit = f"k{k}" in keys
            evicted = keys.touch(f"k{k}", limit)
            assert f"k{k}" not in evicted and len(keys) <= limit
            hits += hit and round_ > 0
    assert hits > 9 * 60 // 3, hits  # simulated: ~0.6 of the touches after the first round


def test_busy_keys_stay_and_the_bound_returns() -> None:
    keys = SampledKeys()
    busy = {"a", "b"}
    for name in ("a", "b", "c"):
        keys.touch(name, 2, busy=busy.__contains__)
    assert "a" in keys and "b" in keys and "c" in keys  # over the bound while both are busy
    busy.clear()
    evicted = keys.touch("d", 2, busy=busy.__contains__)
    assert len(keys) == 2 and "d" in keys and len(evicted) == 2
    assert all(name not in keys for name in evicted)


def test_a_recent_key_outlives_an_idle_one_on_average() -> None:
    """Recency still counts: the key touched every time is evicted far less than the others."""
    keys = SampledKeys(seed=1)
    lost = 0
    for i in range(2000):
        if i % 5 == 0:
            lost += "hot" not in keys and i > 0
            keys.touch("hot", 20)
        keys.touch(f"idle-{i}", 20)
    # evicting at random would lose it in about 1 cycle of 4 (~90 of 400); the older of two
    # draws rarely picks a key touched within the last 5 (~25)
    assert lost < 50, lost


def _turn(t: int, r: int) -> list[BaseMessage]:
    jp = "東京の天気は晴れです。" if t % 2 else "The weather is fine."
    return [HumanMessage(f"thread {t} round {r}: {jp}", id=f"h-{t}-{r}"),
            AIMessage(f"reply {t}/{r}", id=f"a-{t}-{r}")]


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_many_threads_over_a_small_cache_stay_correct(store_kind: str, tmp_path: object) -> None:
    """40 threads, cache_limit 8, stepped round robin and concurrently: no error, and every
    thread's context and stored messages are its own, complete, in order."""
    store = InMemoryStore() if store_kind == "memory" else SQLiteStore(f"{tmp_path}/om.db")
    om = ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": 400},
                             token_counter="estimator")
    om.cache_limit = 8
    threads, rounds = 40, 4
    history: dict[int, list[BaseMessage]] = {t: [] for t in range(threads)}

    async def step(t: int, r: int) -> None:
        history[t] += _turn(t, r)
        context = await om.aprocess(f"thread-{t}", list(history[t]), resource_id=f"user-{t % 5}")
        assert context.messages[-1].id == f"a-{t}-{r}"
        assert all(m.id is None or f"-{t}-" in str(m.id) for m in context.messages if m.type != "system")

    try:
        for r in range(rounds):
            if r % 2:
                await asyncio.gather(*(step(t, r) for t in range(threads)))
            else:
                for t in range(threads):
                    await step(t, r)
        await om.await_background()
        for t in range(threads):
            stored = await store.aget_messages(f"user-{t % 5}", f"thread-{t}")
            assert [m.id for m in stored] == [m.id for m in history[t]]
            record = await om.aget_record(f"thread-{t}", resource_id=f"user-{t % 5}")
            assert record.thread_id == f"thread-{t}"
        assert len(om._recent_threads) <= om.cache_limit and len(om._known_ids) <= om.cache_limit
    finally:
        await om.aclose()
        await store.aclose()


async def test_a_round_robin_over_a_few_more_threads_than_the_cache_mostly_hits(tmp_path: object) -> None:
    """12 threads over cache_limit 10: with strict LRU (or any per-cache LRU bound evicting a kept
    thread's entry) every step after the first round looks its ids up again as a cold step."""
    store = SQLiteStore(f"{tmp_path}/om.db")
    om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator")
    om.cache_limit = 10
    lookups = 0
    original = store.aget_message_fields

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal lookups
        lookups += 1
        return await original(*args, **kwargs)  # type: ignore[arg-type]

    store.aget_message_fields = counted  # type: ignore[method-assign,assignment]
    try:
        for t in range(12):
            await om.aprocess(f"t{t}", [HumanMessage(f"hello {t}", id=f"h{t}")], resource_id="u")
        lookups = 0
        for r in range(5):
            for t in range(12):
                await om.aprocess(f"t{t}", [HumanMessage(f"round {r} / {t} 東京", id=f"r{r}-{t}")], resource_id="u")
        assert lookups < 60 // 2, lookups
    finally:
        await om.aclose()
        await store.aclose()
