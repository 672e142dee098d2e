"""Issue 32, item 3: a process's first step handed the whole state (another worker's request, a
client that sends its full history) reads each stored message's fingerprint, not the whole row.

The fast path (``SupportsFieldLookup``, SQLite and PostgreSQL) must still tell new messages from
stored ones and edits from unchanged ones exactly as reading whole rows does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import STORE_FACTORIES
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.store.known import SupportsFieldLookup, json_path
from langchain_om.testing import ScriptedObserverModel

THREAD = "冷たいスレッド"


def _om(store: OMStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": 100_000},
                               reflection={"observation_tokens": 100_000}, token_counter="estimator")


def _history() -> list[BaseMessage]:
    return [HumanMessage("My train leaves at nine", id="h1"), AIMessage("Noted: nine o'clock.", id="a1"),
            HumanMessage("東京駅で待ち合わせです", id="h2"), AIMessage("承知しました。", id="a2")]


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_a_cold_step_handed_the_whole_state_reads_no_row_whole(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with STORE_FACTORIES[kind](request) as store:
        first = _om(store)
        await first.aprocess(THREAD, _history())
        await first.aclose()

        whole_rows: list[Any] = []
        original = type(store).aget_messages_by_ids

        async def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
            rows = await original(self, *args, **kwargs)
            whole_rows.extend(rows)
            return rows

        monkeypatch.setattr(type(store), "aget_messages_by_ids", spy)
        assert isinstance(store, SupportsFieldLookup)
        cold = _om(store)  # another process: nothing cached
        handed = _history()
        handed[2] = HumanMessage("東京駅ではなく新宿駅で待ち合わせです", id="h2")  # the client edited it
        context = await cold.aprocess(THREAD, [*handed, HumanMessage("What time again?", id="h3")])
        await cold.aclose()

        assert whole_rows == []  # fingerprints came from the store's field lookup
        rows = await store.aget_messages(implicit_resource(THREAD), THREAD)
        assert [r.id for r in rows] == ["h1", "a1", "h2", "a2", "h3"]  # nothing doubled, the new one stored
        edited = next(r for r in rows if r.id == "h2")
        assert "新宿駅" in str(edited.data)  # the unobserved message took its new content
        assert "新宿駅" in "\n".join(str(m.content) for m in context.messages)


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
async def test_field_lookup_returns_only_strings_of_the_thread(kind: str, request: pytest.FixtureRequest) -> None:
    from langchain_om.store.base import NewMessage

    async with STORE_FACTORIES[kind](request) as store:
        assert isinstance(store, SupportsFieldLookup)
        await store.aensure_thread("r1", "t1")
        await store.aensure_thread("r1", "t2")
        await store.aappend_messages("r1", "t1", [
            NewMessage(id="m1", data={"data": {"meta": {"hash": "abc"}}}, tokens=1),
            NewMessage(id="m2", data={"data": {"meta": {"hash": 7}}}, tokens=1),
            NewMessage(id="m3", data={"data": {}}, tokens=1),
        ])
        await store.aappend_messages("r1", "t2", [NewMessage(id="m4", data={"data": {"meta": {"hash": "x"}}},
                                                             tokens=1)])
        found = await store.aget_message_fields("r1", "t1", ["m1", "m2", "m3", "m4", "nope"],
                                                ("data", "meta", "hash"))
        assert sorted((f.id, f.seq, f.kind, f.value) for f in found) == [
            ("m1", 1, "message", "abc"), ("m2", 2, "message", None), ("m3", 3, "message", None)]
        assert await store.aget_message_fields("r2", "t1", ["m1"], ("data",)) == []  # another resource
    with pytest.raises(ValueError, match="path"):
        json_path(['a"b'])
