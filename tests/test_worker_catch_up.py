"""A worker that steps a thread after other workers did learns their turns in one read (issue 32, item 5).

A load balancer may deal one user's turns round-robin over several workers: each step then
lands on a worker whose caches are several turns behind, and the caller hands it those turns.
The worker must show the model every stored message once, in order, with the observations
another worker wrote, and must not count, serialise and append again what is already stored
(``EngineCore.acatch_up``): its append carries only the new messages, and it reads no row back
by id. A copy that differs from the stored row is still an edit. Every backend, English and
Japanese.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel

TEXTS = {
    "en": ("I booked the Lisbon trip for {n} people on the 14th.", "Noted: {n} travellers, Lisbon, the 14th."),
    "ja": ("{n}人で14日にリスボン旅行を予約しました。", "承知しました：{n}人、リスボン、14日ですね。"),
}


def make_om(store: OMStore, message_tokens: int) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": message_tokens, "buffer_tokens": False},
                               reflection={"observation_tokens": 40_000})


def history(lang: str, turns: int) -> list[BaseMessage]:
    """``turns`` user/assistant pairs, then the next user message: what an agent step is handed."""
    ask, answer = TEXTS[lang]
    out: list[BaseMessage] = []
    for n in range(1, turns + 1):
        out.append(HumanMessage(ask.format(n=n), id=f"h{n}"))
        out.append(AIMessage(answer.format(n=n), id=f"a{n}"))
    out.append(HumanMessage(ask.format(n=turns + 1), id=f"h{turns + 1}"))
    return out


class Spy:
    """Which store methods a block called, and the ids each append was handed."""

    def __init__(self, store: OMStore) -> None:
        self.store, self.calls, self.appended = store, Counter[str](), list[str]()
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> Spy:
        for name in ("aappend_messages", "aappend_to_incarnation", "aappend_with_head", "aget_messages_by_ids",
                     "aget_messages"):
            method = getattr(self.store, name, None)
            if method is None:
                continue
            self._saved[name] = method
            setattr(self.store, name, self._wrap(name, method))
        return self

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name.startswith("aappend"):
                self.appended.extend(row.id for row in args[2])
            return await method(*args, **kwargs)
        return call

    def __exit__(self, *exc: object) -> None:
        for name in self._saved:
            delattr(self.store, name)  # the instance attribute goes: the class's method is back


def stored_contents(rows: list[Any]) -> list[str]:
    return [str(row.data["data"]["content"]) for row in rows]


@pytest.mark.parametrize("lang", ["en", "ja"])
async def test_a_stale_worker_sees_the_turns_and_observations_another_stored(store: OMStore, lang: str) -> None:
    worker_a, worker_b = make_om(store, 120), make_om(store, 120)
    await worker_b.aprocess("t", history(lang, 0))  # B's caches are warm, then fall behind
    for turns in range(1, 6):
        await worker_a.aprocess("t", history(lang, turns))
    owner = worker_a._resource_for("t", None)
    log_by_a = (await worker_a.aget_record("t")).observations
    assert log_by_a, "worker A observed the early turns"

    handed = history(lang, 6)
    with Spy(store) as spy:
        context = await worker_b.aprocess("t", handed)
    # only the turn B is the first to see is appended; nothing is read back by id
    assert spy.appended == ["a6", "h7"]
    assert spy.calls["aget_messages_by_ids"] == 0

    rows = await store.aget_messages(owner, "t")
    assert [row.id for row in rows] == [m.id for m in handed], "each message stored once, in order"
    assert stored_contents(rows) == [str(m.content) for m in handed]
    record = await worker_b.aget_record("t")
    assert record.observations.startswith(log_by_a[:40])
    assert context.system_message is not None
    assert "リスボン" in str(context.system_message.content) if lang == "ja" else \
        "Lisbon" in str(context.system_message.content)
    # the model sees the unobserved rows exactly: another worker's turns included, none twice
    unobserved = [row for row in rows if row.seq > record.last_observed_seq.get("t", 0)]
    assert [m.id for m in context.messages] == [row.id for row in unobserved]
    assert [str(m.content) for m in context.messages] == stored_contents(unobserved)
    assert str(context.messages[-1].content) == str(handed[-1].content)

    # B's next step is warm again: one new message, one append of it
    handed = [*handed, AIMessage(TEXTS[lang][1].format(n=7), id="a7"), HumanMessage("👍 " + lang, id="h8")]
    with Spy(store) as spy:
        context = await worker_b.aprocess("t", handed)
    assert spy.appended == ["a7", "h8"]
    assert [m.id for m in context.messages][-2:] == ["a7", "h8"]


@pytest.mark.parametrize("lang", ["en", "ja"])
async def test_a_stale_worker_handed_a_changed_copy_applies_it_as_an_edit(store: OMStore, lang: str) -> None:
    worker_a, worker_b = make_om(store, 100_000), make_om(store, 100_000)
    await worker_b.aprocess("t", history(lang, 0))
    for turns in range(1, 4):
        await worker_a.aprocess("t", history(lang, turns))

    handed = history(lang, 4)
    changed = "（訂正）" if lang == "ja" else "(corrected) "
    handed[5] = AIMessage(changed + str(handed[5].content), id=handed[5].id)  # a3, stored by A
    with Spy(store) as spy:
        context = await worker_b.aprocess("t", handed)
    assert spy.appended == ["a4", "h5"]

    rows = await store.aget_messages(worker_a._resource_for("t", None), "t")
    assert [row.id for row in rows] == [m.id for m in handed]
    assert stored_contents(rows) == [str(m.content) for m in handed], "the unobserved row took the new text"
    assert [str(m.content) for m in context.messages] == [str(m.content) for m in handed]
