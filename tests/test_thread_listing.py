"""Threads can be listed (issue 31, item 2): ``om.alist_threads`` / ``list_threads`` on every
store, ``langchain-om threads`` and the "did you mean" of ``inspect``."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.cli.commands import main
from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store import SQLiteStore
from langchain_om.store.base import BRANCH_MARK, InvalidStoreInput, NewMessage, OMStore, implicit_resource
from langchain_om.store.thread_summaries import ThreadSummary
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


def message(mid: str, text: str, kind: Any = "message") -> NewMessage:
    return NewMessage(id=mid, data={"type": "human", "data": {"content": text}}, tokens=3, kind=kind)


def is_newest_first(page: list[ThreadSummary]) -> bool:
    keys = [(s.last_activity, s.thread_id) for s in page]
    return keys == sorted(keys, reverse=True)


async def test_listing_is_resource_scoped_newest_first_and_paged_by_key(store: OMStore) -> None:
    for i in range(7):
        await store.aappend_messages("alice", f"a-{i}", [message(f"a{i}-{j}", f"話 {j}") for j in range(i + 1)])
    await store.aupdate_thread("alice", "a-3", title="京都の旅 🗾")
    await store.aappend_messages("bob", "b-0", [message("b0", "bob's")])
    await store.aappend_messages("alice", "a-2", [message("a2-marker", "", kind="temporal-marker")])
    await store.aensure_thread("alice", f"a-1{BRANCH_MARK}fork1")  # OM's internal branch: not listed
    everything = await store.alist_thread_summaries("alice", limit=100)
    assert sorted(s.thread_id for s in everything) == [f"a-{i}" for i in range(7)]
    assert is_newest_first(everything)
    by_id = {s.thread_id: s for s in everything}
    assert by_id["a-3"].title == "京都の旅 🗾" and by_id["a-0"].title is None
    assert by_id["a-2"].message_count == 3, "a marker row is not a message"
    assert by_id["a-6"].message_count == 7 and by_id["a-6"].resource_id == "alice"
    for s in everything:
        thread = await store.aget_thread("alice", s.thread_id)
        assert thread is not None and s.last_activity == thread.updated_at
    # pages of 3: each quiet thread once, in order; a thread active meanwhile goes to the top
    first = await store.alist_thread_summaries("alice", limit=3)
    assert first == everything[:3]
    quiet_target = everything[-1].thread_id
    await store.aappend_messages("alice", quiet_target, [message("late", "late news")])
    rest: list[ThreadSummary] = []
    after = first[-1]
    while page := await store.alist_thread_summaries("alice", after=after, limit=3):
        rest.extend(page)
        after = page[-1]
    seen = [s.thread_id for s in first + rest]
    assert len(seen) == len(set(seen)), "no thread twice"
    assert seen == [s.thread_id for s in everything if s.thread_id != quiet_target]
    fresh = await store.alist_thread_summaries("alice", limit=1)
    assert fresh[0].thread_id == quiet_target, "the thread with new activity leads a fresh listing"
    assert [s.thread_id for s in await store.alist_thread_summaries("bob")] == ["b-0"]
    assert await store.alist_thread_summaries("carol") == []


async def test_threads_without_a_resource_are_listed_together(store: OMStore) -> None:
    ids = [str(uuid.uuid4()) for _ in range(3)]
    for tid in ids:
        await store.aappend_messages(implicit_resource(tid), tid, [message(f"{tid}-m", "hello")])
    await store.aappend_messages("alice", "owned", [message("o", "hi")])
    listed = await store.alist_thread_summaries(None)
    assert sorted(s.thread_id for s in listed) == sorted(ids)
    assert all(s.resource_id is None and s.message_count == 1 for s in listed)


async def test_bad_listing_arguments_name_the_field(store: OMStore) -> None:
    with pytest.raises(InvalidStoreInput, match="resource_id"):
        await store.alist_thread_summaries("")
    with pytest.raises(InvalidStoreInput, match="after"):
        await store.alist_thread_summaries("alice", after="a-1")
    with pytest.raises(InvalidStoreInput, match="limit"):
        await store.alist_thread_summaries("alice", limit=0)


async def test_hostile_cursors_are_refused_alike_by_every_store(store: OMStore) -> None:
    """Issue 44, item 7: a cursor is the caller's to build or edit. A date at the calendar's ends gave a
    bare OverflowError, a NUL in its thread id a generic StoreError on PostgreSQL and a normal page on
    the others; now every store refuses both with ``InvalidStoreInput`` naming ``after``."""
    from datetime import datetime, timedelta, timezone

    for i in range(3):
        await store.aappend_messages("alice", f"旅-{i}", [message(f"m{i}", "こんにちは")])
    om = ObservationalMemory(store, model=ScriptedObserverModel())
    (newest, *older) = await om.alist_threads("alice", limit=3)
    east, west = timezone(timedelta(hours=14)), timezone(timedelta(hours=-14))
    hostile = {
        "year 1 at +14:00": {"last_activity": datetime.min.replace(tzinfo=east)},
        "year 9999 at -14:00": {"last_activity": datetime.max.replace(tzinfo=west)},
        "NUL in the id": {"thread_id": "旅-1\x00"},
        "unit separator in the id": {"thread_id": "a\x1fb"},
        "lone surrogate in the id": {"thread_id": "旅\udc80"},
        "empty id": {"thread_id": ""},
        "resource-scope key as id": {"thread_id": "*"},
        "id over 512 characters": {"thread_id": "x" * 513},
    }
    for case, change in hostile.items():
        cursor = newest.model_copy(update=change)
        for listing in (om.alist_threads("alice", after=cursor), store.alist_thread_summaries("alice", after=cursor)):
            with pytest.raises(InvalidStoreInput) as caught:
                await listing
            assert caught.value.field == "after", (case, caught.value)
    # the calendar's own ends are valid keys: everything is older than the last instant, nothing older than the first
    latest = newest.model_copy(update={"last_activity": datetime.max.replace(tzinfo=timezone.utc)})
    earliest = newest.model_copy(update={"last_activity": datetime.min})  # naive: UTC
    assert [s.thread_id for s in await om.alist_threads("alice", after=latest)] == \
        [s.thread_id for s in (newest, *older)]
    assert await om.alist_threads("alice", after=earliest) == []
    assert await om.alist_threads("alice", after=newest) == older


def test_agent_threads_are_found_through_om_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "om.db")
    om = ObservationalMemory(SQLiteStore(db), model=ScriptedObserverModel(), token_counter="estimator")
    agent = create_agent(ScriptedAgentModel(), [], checkpointer=InMemorySaver(),
                         middleware=[ObservationalMemoryMiddleware(om)])
    ids = [str(uuid.uuid4()) for _ in range(3)]
    for n, tid in enumerate(ids):
        for turn in range(n + 1):
            agent.invoke({"messages": [HumanMessage(f"質問 {turn}")]}, {"configurable": {"thread_id": tid}})
    agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": "mine", "user_id": "alice"}})
    listed = om.list_threads()
    assert [s.thread_id for s in listed] == list(reversed(ids)), "newest activity first"
    assert [s.message_count for s in listed] == [6, 4, 2]
    assert [s.thread_id for s in om.list_threads("alice")] == ["mine"]
    second = om.list_threads(after=listed[0], limit=1)
    assert [s.thread_id for s in second] == [ids[1]]
    om.close()

    capsys.readouterr()
    assert main(["threads", "--db", db, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert [t["thread_id"] for t in payload["threads"]] == list(reversed(ids))
    assert payload["threads"][0]["message_count"] == 6 and payload["more"] is False
    assert main(["threads", "--db", db, "--resource", "alice"]) == 0
    out = capsys.readouterr().out
    assert "mine" in out and ids[0] not in out
    assert main(["threads", "--db", db, "--limit", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["more"] is True

    # inspect on a missing id suggests the closest ones: a typo, or a UUID typed in part
    typo = ids[1][:-1] + ("0" if ids[1][-1] != "0" else "1")
    assert main(["inspect", typo, "--db", db]) == 1
    err = capsys.readouterr().err
    assert "did you mean" in err and ids[1] in err and err.count("\n") == 1
    assert main(["inspect", ids[2][:8], "--db", db]) == 1
    assert ids[2] in capsys.readouterr().err
    assert main(["inspect", "zzz", "--db", db, "--resource", "alice"]) == 1
    assert "langchain-om threads" in capsys.readouterr().err
