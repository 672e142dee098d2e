"""A buffering cycle takes the rows it observes from the process's window of the thread when
that window holds them all, instead of reading them back (issue 33, item 3: CPU per cycle).

What it must still do: observe the text stored when it takes its lease (an edit made after it
was scheduled included), take only what another worker has not buffered meanwhile, and read
the store when the window is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.store.base import record_key
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

TEXTS = {
    "english": ("The Lisbon trip budget is {i} hundred euros, booked for May.", "EDITED: Porto instead, {i} euros"),
    "japanese": ("京都旅行の予算は{i}万円で、五月に予約しました。", "訂正：行き先は大阪、予算は{i}万円"),
}


class GatedStore(SQLiteStore):
    """A SQLite store whose buffering lease waits for ``gate`` (a cycle scheduled and not yet
    under its lease), and which counts its message reads."""

    gate: asyncio.Event | None = None
    reads = 0

    async def atry_lease_unless(self, name: str, owner: str, ttl_s: float, blocker: str) -> bool:
        if self.gate is not None:
            await self.gate.wait()
        return await super().atry_lease_unless(name, owner, ttl_s, blocker)

    async def aget_messages(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await super().aget_messages(*args, **kwargs)


def history(lang: str, count: int) -> list[BaseMessage]:
    line = TEXTS[lang][0]
    out: list[BaseMessage] = []
    for i in range(count):
        out += [HumanMessage(line.format(i=i) + " " + "words " * 12, id=f"h{i}"),
                AIMessage(f"noted {i} " + "ok " * 12, id=f"a{i}")]
    return out


async def gated_om(path: Path) -> tuple[GatedStore, ScriptedObserverModel, ObservationalMemory]:
    """A set-up store whose buffering lease can be held at a gate, its Observer and its OM."""
    store = GatedStore(path)
    await store.asetup()
    observer = ScriptedObserverModel()
    return store, observer, om_on(store, observer)


def om_on(store: SQLiteStore, observer: ScriptedObserverModel) -> ObservationalMemory:
    return ObservationalMemory(store, model=observer, token_counter="estimator",
                               observation={"message_tokens": 2000, "buffer_tokens": 100})


def observer_transcripts(observer: ScriptedObserverModel) -> list[str]:
    return ["\n".join(str(m.content) for m in call) for call in observer.calls]


def chunk_seqs(om: ObservationalMemory, record: Any) -> list[int]:
    return [seq for c in record.buffered_chunks for seq in range(c.start_seq, c.end_seq + 1)]


@pytest.mark.parametrize("lang", list(TEXTS))
async def test_a_cycle_observes_the_text_of_an_edit_made_after_it_was_scheduled(tmp_path: Path, lang: str) -> None:
    store, observer, om = await gated_om(tmp_path / "om.db")
    store.gate = asyncio.Event()
    messages = history(lang, 3)
    await om.aprocess("t", messages)  # crosses a buffering boundary: a cycle waits at its lease
    edited = TEXTS[lang][1].format(i=0)
    messages[0] = HumanMessage(edited, id="h0")
    await om.aprocess("t", messages)  # the unobserved message is edited in place
    store.gate.set()
    await om.await_background()
    sent = observer_transcripts(observer)
    assert len(sent) == 1, "one buffering cycle"
    assert edited in sent[0], "the Observer read the stored (edited) text"
    assert TEXTS[lang][0].format(i=0) not in sent[0], "not the scheduling step's copy"
    record = await om.aget_record("t")
    assert record.buffered_chunks and record.buffered_chunks[0].start_id == "h0"
    await om.aclose()


@pytest.mark.parametrize("lang", list(TEXTS))
async def test_a_cycle_takes_nothing_another_worker_buffered_while_it_waited(tmp_path: Path, lang: str) -> None:
    path = tmp_path / "om.db"
    waiting, other = GatedStore(path), GatedStore(path)
    await waiting.asetup()
    observer = ScriptedObserverModel()
    worker_a, worker_b = om_on(waiting, observer), om_on(other, observer)
    waiting.gate = asyncio.Event()
    messages = history(lang, 3)
    await worker_a.aprocess("t", messages)  # A's cycle is scheduled and waits
    await worker_b.aprocess("t", history(lang, 4))  # B brings a turn more and buffers all of it
    await worker_b.await_background()
    assert len(observer.calls) == 1
    waiting.gate.set()
    await worker_a.await_background()
    assert len(observer.calls) == 1, "A found the rows buffered and paid no second Observer call"
    record = await worker_a.aget_record("t")
    seqs = chunk_seqs(worker_a, record)
    assert seqs and len(seqs) == len(set(seqs)), "no row in two chunks"
    await worker_a.aclose()
    await worker_b.aclose()


@pytest.mark.parametrize("lang", list(TEXTS))
async def test_the_rows_come_from_the_window_and_from_the_store_once_it_is_gone(tmp_path: Path, lang: str) -> None:
    store, observer, om = await gated_om(tmp_path / "om.db")
    messages = history(lang, 3)
    store.gate = asyncio.Event()
    await om.aprocess("t", messages)
    reads = store.reads
    store.gate.set()
    await om.await_background()
    assert store.reads == reads, "the window held the rows: none read back"
    first = (await om.aget_record("t")).buffered_chunks
    assert len(first) == 1 and first[0].message_count == 6

    more = messages + history(lang, 6)[6:]
    store.gate = asyncio.Event()
    await om.aprocess("t", more)  # a second cycle waits at its lease
    om.forget_thread(record_key(om.resolve_resource("t", None), "t"))  # evicted meanwhile
    reads = store.reads
    store.gate.set()
    await om.await_background()
    assert store.reads > reads, "no window: the rows were read from the store"
    chunks = (await om.aget_record("t")).buffered_chunks
    assert [(c.start_id, c.end_id) for c in chunks] == [("h0", "a2"), ("h3", "a5")]
    text = observer_transcripts(observer)[-1]
    assert TEXTS[lang][0].format(i=3) in text and TEXTS[lang][0].format(i=2) not in text
    await om.aclose()
