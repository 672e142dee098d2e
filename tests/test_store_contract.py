"""The store conformance suite: the storage contract, run unchanged against every backend.

Every test taking the ``store`` fixture runs once per backend of ``conftest.STORE_FACTORIES``
(memory, SQLite, PostgreSQL), the way ``langgraph-checkpoint``'s conformance tests run against each
saver. A new backend implements ``OMStore`` in a package of its own under ``langchain_om/store/``
and adds one factory to that parameter; ``test_every_backend_runs_the_conformance_suite`` fails
until it does. What only one backend promises lives beside it: ``test_store_sqlite.py``,
``test_store_postgres.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_om.store import (
    BufferedChunk,
    InvalidStoreInput,
    NewMessage,
    ObservationGroup,
    OMRecord,
    OMStore,
    PostgresStore,
    RecordConflictError,
    SQLiteStore,
    SupportsRecordStamp,
)
from langchain_om.store.base import implicit_resource

REPO_ROOT = Path(__file__).resolve().parents[1]
R1, R2 = "res-1", "res-2"


def msg(mid: str, text: str | None = None, tokens: int = 3, **extra: Any) -> NewMessage:
    return NewMessage(
        id=mid, data={"type": "human", "data": {"content": text or f"content of {mid}"}}, tokens=tokens, **extra
    )


def msgs(prefix: str, n: int, start: int = 1) -> list[NewMessage]:
    return [msg(f"{prefix}{i}") for i in range(start, start + n)]


def record(resource_id: str = R1, thread_id: str | None = "t1", text: str = "obs", **extra: Any) -> OMRecord:
    return OMRecord(
        resource_id=resource_id,
        thread_id=thread_id,
        scope="thread" if thread_id is not None else "resource",
        groups=[ObservationGroup(thread_id=thread_id or "t1", start_id="m1", end_id="m2", text=text, tokens=5)],
        **extra,
    )


def seqs(rows: list[Any]) -> list[int]:
    return [row.seq for row in rows]


# ---- threads ------------------------------------------------------------------------------


async def test_store_satisfies_protocol(store: OMStore) -> None:
    assert isinstance(store, OMStore)
    await store.asetup()  # idempotent


async def test_thread_create_and_get(store: OMStore) -> None:
    created = await store.aensure_thread(R1, "t1", title="Trip planning", metadata={"lang": "en"})
    assert (created.thread_id, created.resource_id, created.title) == ("t1", R1, "Trip planning")
    assert created.metadata == {"lang": "en"}
    assert created.created_at.tzinfo is not None and created.created_at.utcoffset() == timedelta(0)

    fetched = await store.aget_thread(R1, "t1")
    assert fetched == created
    again = await store.aensure_thread(R1, "t1", title="other title")
    assert again == created, "ensuring an existing thread leaves it unchanged"
    assert await store.aget_thread(R2, "t1") is None
    assert await store.aget_thread(R1, "missing") is None


async def test_list_threads_newest_first_with_filters(store: OMStore) -> None:
    made = []
    for i in range(5):
        made.append(await store.aensure_thread(R1, f"t{i}"))
        await asyncio.sleep(0.003)
    await store.aensure_thread(R2, "foreign")

    listed = await store.alist_threads(R1)
    assert [t.thread_id for t in listed] == ["t4", "t3", "t2", "t1", "t0"]
    page = await store.alist_threads(R1, offset=1, limit=2)
    assert [t.thread_id for t in page] == ["t3", "t2"]
    assert await store.alist_threads(R1, offset=10) == []
    assert await store.alist_threads(R1, limit=0) == []
    before = await store.alist_threads(R1, before=made[2].created_at)
    assert [t.thread_id for t in before] == ["t1", "t0"]
    after = await store.alist_threads(R1, after=made[2].created_at)
    assert [t.thread_id for t in after] == ["t4", "t3"]
    window = await store.alist_threads(R1, after=made[0].created_at, before=made[4].created_at)
    assert [t.thread_id for t in window] == ["t3", "t2", "t1"]
    naive_before = made[2].created_at.astimezone(timezone.utc).replace(tzinfo=None)
    assert [t.thread_id for t in await store.alist_threads(R1, before=naive_before)] == ["t1", "t0"]
    assert [t.thread_id for t in await store.alist_threads(R2)] == ["foreign"]
    assert await store.alist_threads("nobody") == []


async def test_update_thread(store: OMStore) -> None:
    await store.aensure_thread(R1, "t1", metadata={"a": 1})
    updated = await store.aupdate_thread(R1, "t1", title="New title", metadata={"b": 2})
    assert updated.title == "New title"
    assert updated.metadata == {"a": 1, "b": 2}
    assert (await store.aget_thread(R1, "t1")) == updated
    only_meta = await store.aupdate_thread(R1, "t1", metadata={"a": 3})
    assert only_meta.title == "New title" and only_meta.metadata == {"a": 3, "b": 2}
    with pytest.raises(InvalidStoreInput) as err:
        await store.aupdate_thread(R2, "t1", title="hijack")
    assert err.value.field == "thread_id"
    with pytest.raises(InvalidStoreInput):
        await store.aupdate_thread(R1, "missing", title="x")
    assert (await store.aget_thread(R1, "t1")).title == "New title"  # type: ignore[union-attr]


async def test_thread_owned_by_another_resource(store: OMStore) -> None:
    await store.aensure_thread("owner-secret", "shared-id")
    await store.aappend_messages("owner-secret", "shared-id", [msg("m1")])
    with pytest.raises(InvalidStoreInput) as err:
        await store.aensure_thread(R2, "shared-id")
    assert err.value.field == "thread_id"
    assert "owner-secret" not in str(err.value), "the error must not reveal the owner"
    with pytest.raises(InvalidStoreInput) as err2:
        await store.aappend_messages(R2, "shared-id", [msg("m2")])
    assert err2.value.field == "thread_id"
    with pytest.raises(InvalidStoreInput):
        await store.aappend_messages(R2, "shared-id", [])
    assert await store.aget_messages(R2, "shared-id") == []
    assert await store.acount_messages(R2, "shared-id") == 0
    assert await store.alast_seq(R2, "shared-id") == 0
    assert await store.alist_threads(R2) == []
    await store.adelete_thread(R2, "shared-id")  # not theirs: silently nothing
    assert seqs(await store.aget_messages("owner-secret", "shared-id")) == [1]


# ---- messages -----------------------------------------------------------------------------


async def test_append_orders_and_is_idempotent(store: OMStore) -> None:
    when = datetime(2024, 5, 1, 12, 30, tzinfo=timezone(timedelta(hours=2)))
    first = await store.aappend_messages(R1, "t1", [msg("m1", created_at=when), msg("m2", tokens=7), msg("m3")])
    assert [(m.id, m.seq) for m in first] == [("m1", 1), ("m2", 2), ("m3", 3)]
    assert first[0].created_at == when and first[0].created_at.utcoffset() == timedelta(0)
    assert await store.aget_thread(R1, "t1") is not None, "appending creates the thread"

    second = await store.aappend_messages(R1, "t1", [msg("m2"), msg("m4"), msg("m4"), msg("m1"), msg("m5")])
    assert [(m.id, m.seq) for m in second] == [("m4", 4), ("m5", 5)], "only new rows are inserted and returned"
    assert await store.aappend_messages(R1, "t1", [msg("m1"), msg("m5")]) == []
    assert await store.aappend_messages(R1, "t1", []) == []

    stored = await store.aget_messages(R1, "t1")
    assert [(m.id, m.seq) for m in stored] == [("m1", 1), ("m2", 2), ("m3", 3), ("m4", 4), ("m5", 5)]
    assert stored[1].tokens == 7
    assert stored[0].data == {"type": "human", "data": {"content": "content of m1"}}
    assert stored[0].created_at == when
    assert all(not m.observed and m.observed_at is None for m in stored)
    assert all((m.resource_id, m.thread_id) == (R1, "t1") for m in stored)
    assert await store.acount_messages(R1, "t1") == 5
    assert await store.alast_seq(R1, "t1") == 5
    assert await store.alast_seq(R1, "empty") == 0


async def test_same_message_id_in_two_threads(store: OMStore) -> None:
    await store.aappend_messages(R1, "a", [msg("m1")])
    inserted = await store.aappend_messages(R1, "b", [msg("m1")])
    assert [(m.thread_id, m.seq) for m in inserted] == [("b", 1)], "ids are unique per thread, not globally"


async def test_temporal_marker_kind_round_trips(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", [msg("m1", kind="temporal-marker")])
    assert (await store.aget_messages(R1, "t1"))[0].kind == "temporal-marker"


async def test_seq_paging(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 10))
    assert seqs(await store.aget_messages(R1, "t1", after_seq=3)) == [4, 5, 6, 7, 8, 9, 10]
    assert seqs(await store.aget_messages(R1, "t1", before_seq=5)) == [1, 2, 3, 4]
    assert seqs(await store.aget_messages(R1, "t1", after_seq=2, before_seq=6, limit=2)) == [3, 4]
    assert seqs(await store.aget_messages(R1, "t1", descending=True, limit=3)) == [10, 9, 8]
    assert seqs(await store.aget_messages(R1, "t1", before_seq=5, descending=True, limit=2)) == [4, 3]
    assert seqs(await store.aget_messages(R1, "t1", after_seq=7, descending=True)) == [10, 9, 8]
    assert await store.aget_messages(R1, "t1", limit=0) == []
    assert await store.aget_messages(R1, "t1", after_seq=10) == []
    assert await store.aget_messages(R1, "t1", after_seq=5, before_seq=5) == []
    assert await store.aget_messages(R2, "t1") == []


async def test_limit_is_capped(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 1005))
    assert len(await store.aget_messages(R1, "t1", limit=10**12)) == 1000
    assert len(await store.aget_messages(R1, "t1")) == 1005, "no limit returns everything"
    assert len(await store.alist_threads(R1, limit=10**12)) == 1


async def test_get_message_is_scoped_by_resource(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", [msg("m1", "secret of r1")])
    await store.aappend_messages(R2, "t2", [msg("other", "secret of r2")])
    found = await store.aget_message(R1, "m1")
    assert found is not None and found.data["data"]["content"] == "secret of r1" and found.seq == 1
    assert await store.aget_message(R2, "m1") is None
    assert await store.aget_message(R1, "other") is None
    assert await store.aget_message(R1, "nope") is None


# ---- records ------------------------------------------------------------------------------


async def test_record_create(store: OMStore) -> None:
    assert await store.aget_record(R1, "t1") is None
    fresh = record(metadata={"current_task": "book flights"})
    created = await store.acommit_record(fresh, expected_version=0)
    assert created.version == 1
    assert created.groups == fresh.groups and created.current_task == "book flights"
    assert await store.aget_record(R1, "t1") == created
    assert await store.aget_record(R2, "t1") is None
    assert await store.aget_record(R1, None) is None, "thread and resource scopes are separate records"
    with pytest.raises(RecordConflictError):
        await store.acommit_record(record(text="second create"), expected_version=0)
    assert await store.aget_record(R1, "t1") == created


async def test_a_committed_record_is_what_a_read_returns_and_owns_its_data(store: OMStore) -> None:
    """The record a commit returns (the engine caches it) equals a later read for any text,
    Japanese, emoji, NUL and a lone surrogate included, and shares nothing the caller can change."""
    odd = "京都の予算は5000円 🔴 NUL\x00 lone\ud800 end"
    mine = record(text=odd, metadata={"om": {"extracted": {"note": odd, "items": [1, "二"]}}})
    committed = await store.acommit_record(mine, expected_version=0)
    assert committed == await store.aget_record(R1, "t1")
    assert committed.groups[0].text == odd and committed.metadata["om"]["extracted"]["items"] == [1, "二"]
    mine.metadata["om"]["extracted"]["items"].append("changed after the commit")
    mine.groups[0].text = "changed too"
    assert committed.metadata["om"]["extracted"]["items"] == [1, "二"] and committed.groups[0].text == odd
    assert await store.aget_record(R1, "t1") == committed


async def test_record_compare_and_swap(store: OMStore) -> None:
    v1 = await store.acommit_record(record(text="v1"), expected_version=0)
    v2 = await store.acommit_record(
        v1.model_copy(update={"groups": [*v1.groups, record(text="more").groups[0]]}), expected_version=1
    )
    assert v2.version == 2 and [g.text for g in v2.groups] == ["v1", "more"]
    assert v2.updated_at >= v1.updated_at

    with pytest.raises(RecordConflictError):
        await store.acommit_record(v1.model_copy(update={"metadata": {"lost": True}}), expected_version=1)
    assert await store.aget_record(R1, "t1") == v2, "a losing commit changes nothing"
    with pytest.raises(RecordConflictError):
        await store.acommit_record(record(thread_id="never-created"), expected_version=3)
    assert await store.aget_record(R1, "never-created") is None


async def test_resource_scope_record(store: OMStore) -> None:
    await store.aappend_messages(R1, "a", msgs("a", 3))
    await store.aappend_messages(R1, "b", msgs("b", 3))
    res = await store.acommit_record(record(thread_id=None), expected_version=0, mark_observed={"a": 2, "b": 1})
    assert res.scope == "resource" and res.version == 1
    assert await store.aget_record(R1, None) == res
    assert await store.aget_record(R2, None) is None
    assert [m.observed for m in await store.aget_messages(R1, "a")] == [True, True, False]
    assert [m.observed for m in await store.aget_messages(R1, "b")] == [True, False, False]


async def test_mark_observed_commits_with_record(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 5))
    await store.aappend_messages(R2, "t2", msgs("x", 2))
    v1 = await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 3, "t2": 2})
    rows = await store.aget_messages(R1, "t1")
    assert [m.observed for m in rows] == [True, True, True, False, False]
    assert all(m.observed_at is not None for m in rows[:3])
    assert all(m.observed_at is None for m in rows[3:])
    assert not any(m.observed for m in await store.aget_messages(R2, "t2")), "another resource's thread is untouched"
    first_observed_at = rows[0].observed_at

    with pytest.raises(RecordConflictError):
        await store.acommit_record(v1.model_copy(update={"groups": []}), expected_version=0, mark_observed={"t1": 5})
    rows = await store.aget_messages(R1, "t1")
    assert [m.observed for m in rows] == [True, True, True, False, False], "a failed commit marks nothing"
    assert await store.aget_record(R1, "t1") == v1

    await store.acommit_record(v1, expected_version=1, mark_observed={"t1": 5})
    rows = await store.aget_messages(R1, "t1")
    assert all(m.observed for m in rows)
    assert rows[0].observed_at == first_observed_at, "already-observed messages keep their timestamp"


async def test_get_messages_by_ids_is_scoped_to_the_thread(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 5))
    await store.aappend_messages(R1, "t2", msgs("m", 2))
    await store.aappend_messages(R2, "t9", msgs("m", 3))
    found = await store.aget_messages_by_ids(R1, "t1", ["m2", "m4", "nope", "m2"])
    assert sorted((m.id, m.thread_id, m.seq) for m in found) == [("m2", "t1", 2), ("m4", "t1", 4)]
    assert await store.aget_messages_by_ids(R2, "t1", ["m1"]) == [], "another resource's thread reads as empty"
    assert await store.aget_messages_by_ids(R1, "t1", []) == []
    many = await store.aget_messages_by_ids(R1, "t1", [f"m{i}" for i in range(1, 1500)])
    assert len(many) == 5


async def test_replace_message_only_while_unobserved(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 4))
    await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 2})
    new = {"type": "human", "data": {"content": "edited"}}
    assert await store.areplace_message(R1, "t1", "m3", new, 9)
    assert not await store.areplace_message(R1, "t1", "m1", new, 9), "an observed message keeps its text"
    assert not await store.areplace_message(R2, "t1", "m4", new, 9), "another resource cannot edit it"
    assert not await store.areplace_message(R1, "t1", "missing", new, 9)
    rows = {m.id: m for m in await store.aget_messages(R1, "t1")}
    assert rows["m3"].data == new and rows["m3"].tokens == 9 and rows["m3"].seq == 3
    assert rows["m1"].data["data"]["content"] == "content of m1"
    assert rows["m4"].data["data"]["content"] == "content of m4"


async def test_mark_observed_touches_only_unobserved_rows(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 6))
    first = await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 3})
    before = {m.id: m.observed_at for m in await store.aget_messages(R1, "t1")}
    await store.acommit_record(first, expected_version=first.version, mark_observed={"t1": 5})
    after = {m.id: (m.observed, m.observed_at) for m in await store.aget_messages(R1, "t1")}
    assert all(after[f"m{i}"] == (True, before[f"m{i}"]) for i in (1, 2, 3)), "observed rows were rewritten"
    assert after["m4"][0] and after["m5"][0] and not after["m6"][0]


async def test_a_mark_past_the_last_row_leaves_later_rows_to_a_later_commit(store: OMStore) -> None:
    """A mark covers the rows stored when it commits: rows appended afterwards with a seq under
    that mark are still unobserved, and the next commit's mark covers them."""
    await store.aappend_messages(R1, "t1", msgs("m", 3))
    first = await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 10})
    await store.aappend_messages(R1, "t1", msgs("m", 4, start=4))
    assert [m.observed for m in await store.aget_messages(R1, "t1")] == [True] * 3 + [False] * 4
    await store.acommit_record(first, expected_version=first.version, mark_observed={"t1": 6})
    assert [m.observed for m in await store.aget_messages(R1, "t1")] == [True] * 6 + [False]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(st.tuples(st.just("append"), st.integers(1, 4)),
                                st.tuples(st.just("commit"), st.integers(0, 14))), min_size=1, max_size=10))
async def test_marks_interleaved_with_appends_observe_exactly_the_rows_stored_under_a_mark(
    store: OMStore, steps: list[tuple[str, int]]
) -> None:
    """Against a model: a row is observed once a commit ran after its append with a mark >= its seq."""
    thread = f"t-{uuid4_hex()}"
    stored: list[bool] = []  # the model: observed flag per seq - 1
    version = 0
    for kind, n in steps:
        if kind == "append":
            await store.aappend_messages(R1, thread, msgs(f"{len(stored)}-", n))
            stored.extend([False] * n)
        else:
            committed = await store.acommit_record(record(thread_id=thread), expected_version=version,
                                                   mark_observed={thread: n})
            version = committed.version
            stored = [flag or seq <= n for seq, flag in enumerate(stored, start=1)]
    assert [m.observed for m in await store.aget_messages(R1, thread)] == stored


async def test_thread_named_like_the_resource_record_is_refused(store: OMStore) -> None:
    """A thread "*" would share its record key with the resource-scope record, so deleting that
    thread would delete the resource's whole observation log; every entry point refuses the id."""
    await store.aappend_messages(R1, "a", msgs("a", 2))
    kept = await store.acommit_record(record(thread_id=None), expected_version=0, mark_observed={"a": 1})
    for call in (
        lambda: store.adelete_thread(R1, "*"),
        lambda: store.adelete_record(R1, "*"),
        lambda: store.aensure_thread(R1, "*"),
        lambda: store.aappend_messages(R1, "*", msgs("s", 1)),
        lambda: store.aget_record(R1, "*"),
    ):
        with pytest.raises(InvalidStoreInput, match="thread_id"):
            await call()
    assert await store.aget_record(R1, None) == kept
    assert [m.observed for m in await store.aget_messages(R1, "a")] == [True, False]


async def test_delete_record(store: OMStore) -> None:
    await store.acommit_record(record(), expected_version=0)
    await store.acommit_record(record(thread_id=None), expected_version=0)
    await store.adelete_record(R2, "t1")
    assert await store.aget_record(R1, "t1") is not None
    await store.adelete_record(R1, "t1")
    assert await store.aget_record(R1, "t1") is None
    assert await store.aget_record(R1, None) is not None
    recreated = await store.acommit_record(record(), expected_version=0)
    assert recreated.version == 1


async def test_record_stamp_follows_every_commit_and_delete(store: OMStore) -> None:
    """The stamp is what lets the engine skip re-parsing an unchanged record, so it must
    change on every commit, stay per resource and scope, and vanish with the record."""
    assert isinstance(store, SupportsRecordStamp)
    assert await store.aget_record_stamp(R1, "t1") is None
    v1 = await store.acommit_record(record(text="v1"), expected_version=0)
    assert await store.aget_record_stamp(R1, "t1") == (1, v1.updated_at)
    stored = await store.aget_record(R1, "t1")
    assert stored is not None and (stored.version, stored.updated_at) == (1, v1.updated_at)
    assert await store.aget_record_stamp(R2, "t1") is None, "another resource sees no stamp"
    assert await store.aget_record_stamp(R1, None) is None, "thread and resource scopes are separate"

    v2 = await store.acommit_record(v1.model_copy(update={"metadata": {"x": 1}}), expected_version=1)
    assert await store.aget_record_stamp(R1, "t1") == (2, v2.updated_at)
    with pytest.raises(RecordConflictError):
        await store.acommit_record(v1, expected_version=1)
    assert await store.aget_record_stamp(R1, "t1") == (2, v2.updated_at), "a losing commit leaves the stamp"

    await store.adelete_record(R1, "t1")
    assert await store.aget_record_stamp(R1, "t1") is None
    again = await store.acommit_record(record(text="again"), expected_version=0)
    stamp = await store.aget_record_stamp(R1, "t1")
    assert stamp == (1, again.updated_at) and stamp != (1, v1.updated_at), "a recreated record has a new stamp"


async def test_delete_thread(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 3))
    await store.aappend_messages(R1, "keep", msgs("k", 2))
    await store.acommit_record(record(), expected_version=0)
    await store.acommit_record(record(thread_id=None), expected_version=0)
    await store.aput_value(R1, "wm", "doc", {"x": 1})

    await store.adelete_thread(R1, "t1")
    assert await store.aget_thread(R1, "t1") is None
    assert await store.aget_messages(R1, "t1") == []
    assert await store.aget_message(R1, "m1") is None
    assert await store.aget_record(R1, "t1") is None
    assert await store.aget_record(R1, None) is not None, "the resource record stays"
    assert await store.acount_messages(R1, "keep") == 2
    assert await store.aget_value(R1, "wm", "doc") == {"x": 1}
    await store.adelete_thread(R1, "t1")  # twice is fine
    reborn = await store.aappend_messages(R1, "t1", [msg("m1")])
    assert seqs(reborn) == [1]


# ---- values -------------------------------------------------------------------------------


async def test_values(store: OMStore) -> None:
    assert await store.aget_value(R1, "wm", "doc") is None
    doc = {"name": "Ada", "tags": ["a", "b"], "n": 1.5, "ok": True, "none": None}
    await store.aput_value(R1, "wm", "doc", doc)
    assert await store.aget_value(R1, "wm", "doc") == doc
    doc["name"] = "mutated after put"
    kept = await store.aget_value(R1, "wm", "doc")
    assert kept is not None and kept["name"] == "Ada"
    await store.aput_value(R1, "wm", "doc", "replaced")
    assert await store.aget_value(R1, "wm", "doc") == "replaced"
    await store.aput_value(R1, "other-ns", "doc", [1, 2])
    assert await store.aget_value(R1, "other-ns", "doc") == [1, 2]
    assert await store.aget_value(R2, "wm", "doc") is None
    await store.aput_value(R1, "wm", "list", [1, {"a": None}])
    assert await store.aget_value(R1, "wm", "list") == [1, {"a": None}]
    with pytest.raises(InvalidStoreInput) as err:
        await store.aput_value(R1, "wm", "bad", {"s": {1, 2}})
    assert err.value.field == "value"
    with pytest.raises(InvalidStoreInput):
        await store.aput_value(R1, "wm", "nan", float("nan"))
    assert await store.aget_value(R1, "wm", "bad") is None


def _twin(store: OMStore) -> OMStore:
    """A second store object on the same database (another worker's connection), or the store itself."""
    if isinstance(store, SQLiteStore):
        return SQLiteStore(store.path)
    if isinstance(store, PostgresStore):
        return PostgresStore(os.environ["LANGCHAIN_OM_TEST_PG_DSN"], schema=store.schema)
    return store


async def test_update_value_is_an_atomic_read_modify_write(store: OMStore) -> None:
    seen: list[Any] = []

    def first(current: Any) -> Any:
        seen.append(current)
        return {"a": 1}

    assert await store.aupdate_value(R1, "wm", "doc", first) == {"a": 1}
    assert seen == [None], "a missing value is passed as None"
    assert await store.aupdate_value(R1, "wm", "doc", lambda cur: {**cur, "b": 2}) == {"a": 1, "b": 2}
    assert await store.aget_value(R1, "wm", "doc") == {"a": 1, "b": 2}
    assert await store.aget_value(R2, "wm", "doc") is None, "values stay in their resource"

    def refuse(current: Any) -> Any:
        raise ValueError("the update refuses")

    with pytest.raises(ValueError, match="the update refuses"):
        await store.aupdate_value(R1, "wm", "doc", refuse)
    with pytest.raises(InvalidStoreInput) as err:
        await store.aupdate_value(R1, "wm", "doc", lambda cur: {"s": {1, 2}})
    assert err.value.field == "value"
    assert await store.aget_value(R1, "wm", "doc") == {"a": 1, "b": 2}, "a failed update writes nothing"
    with pytest.raises(InvalidStoreInput) as err:
        await store.aupdate_value(R1, "wm", "doc", "not callable")  # type: ignore[arg-type]
    assert err.value.field == "update"


async def test_concurrent_value_updates_lose_no_field(store: OMStore) -> None:
    other = _twin(store)
    try:
        async def add(target: OMStore, key: str, field: str) -> None:
            def with_field(current: Any) -> Any:
                return {**(current or {}), field: True}

            await target.aupdate_value(R1, "wm", key, with_field)

        for round_ in range(5):
            key = f"doc{round_}"
            fields = [f"f{i}" for i in range(8)]
            await asyncio.gather(*(add(store if i % 2 else other, key, f) for i, f in enumerate(fields)))
            assert await store.aget_value(R1, "wm", key) == {f: True for f in fields}
    finally:
        if other is not store:
            await other.aclose()


# ---- isolation of returned objects ---------------------------------------------------------


async def test_returned_objects_are_copies(store: OMStore) -> None:
    data = {"type": "human", "data": {"content": "original"}}
    await store.aappend_messages(R1, "t1", [NewMessage(id="m1", data=data)])
    data["data"]["content"] = "mutated input"  # type: ignore[index]
    got = (await store.aget_messages(R1, "t1"))[0]
    got.data["data"]["content"] = "mutated output"
    assert (await store.aget_messages(R1, "t1"))[0].data["data"]["content"] == "original"

    created = await store.acommit_record(record(), expected_version=0)
    created.groups[0].text = "mutated"
    created.metadata["x"] = 1
    fetched = await store.aget_record(R1, "t1")
    assert fetched is not None and fetched.groups[0].text == "obs" and fetched.metadata == {}

    thread = await store.aensure_thread(R1, "t2", metadata={"k": "v"})
    thread.metadata["k"] = "changed"
    assert (await store.aget_thread(R1, "t2")).metadata == {"k": "v"}  # type: ignore[union-attr]


# ---- hostile input ------------------------------------------------------------------------

HOSTILE_IDS = [
    "x'; DROP TABLE messages;--",
    'x"; DROP TABLE threads; --',
    "%s %(x)s {s} {} ?",
    "Robert'); DELETE FROM records WHERE ('1'='1",
    "\\' OR 1=1 --",
    "ünïcødé 🧵 ids",
    " leading and trailing ",
]


@pytest.mark.parametrize("hostile", HOSTILE_IDS)
async def test_sql_metacharacters_are_plain_ids(store: OMStore, hostile: str) -> None:
    await store.aappend_messages(R1, "innocent", [msg("i1")])
    await store.acommit_record(record(thread_id="innocent"), expected_version=0)

    thread = await store.aensure_thread(hostile, hostile, title=hostile, metadata={hostile: hostile})
    assert (thread.resource_id, thread.thread_id, thread.title) == (hostile, hostile, hostile)
    inserted = await store.aappend_messages(hostile, hostile, [msg(hostile, hostile)])
    assert seqs(inserted) == [1]
    assert (await store.aget_message(hostile, hostile)).data["data"]["content"] == hostile  # type: ignore[union-attr]
    await store.acommit_record(record(hostile, hostile), expected_version=0, mark_observed={hostile: 1})
    assert (await store.aget_messages(hostile, hostile))[0].observed
    await store.aput_value(hostile, hostile, hostile, hostile)
    assert await store.aget_value(hostile, hostile, hostile) == hostile
    assert [t.thread_id for t in await store.alist_threads(hostile)] == [hostile]

    # nothing leaked into, or was destroyed in, the other resource
    assert await store.aget_message(hostile, "i1") is None
    assert seqs(await store.aget_messages(R1, "innocent")) == [1]
    assert await store.aget_record(R1, "innocent") is not None
    assert [t.thread_id for t in await store.alist_threads(R1)] == ["innocent"]
    await store.adelete_thread(hostile, hostile)
    assert seqs(await store.aget_messages(R1, "innocent")) == [1]


BAD_IDS: list[Any] = ["", "   ", "a\x00b", "a\x1fb", None, 42, b"bytes", "x" * 513]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_invalid_ids_are_rejected_with_field(store: OMStore, bad: Any) -> None:
    checks: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("resource_id", lambda: store.aensure_thread(bad, "t1")),
        ("thread_id", lambda: store.aensure_thread(R1, bad)),
        ("thread_id", lambda: store.aget_messages(R1, bad)),
        ("resource_id", lambda: store.aget_messages(bad, "t1")),
        ("resource_id", lambda: store.acount_messages(bad, "t1")),
        ("message_id", lambda: store.aget_message(R1, bad)),
        ("namespace", lambda: store.aget_value(R1, bad, "k")),
        ("key", lambda: store.aput_value(R1, "ns", bad, 1)),
        ("resource_id", lambda: store.alist_threads(bad)),
        ("resource_id", lambda: store.aget_record(bad, None)),
    ]
    if bad is not None:
        checks.append(("thread_id", lambda: store.aget_record(R1, bad)))
    if isinstance(bad, str):
        checks += [
            ("messages[0].id", lambda: store.aappend_messages(R1, "t1", [NewMessage(id=bad, data={})])),
            ("mark_observed", lambda: store.acommit_record(record(), expected_version=0, mark_observed={bad: 1})),
        ]
    for field, call in checks:
        with pytest.raises(InvalidStoreInput) as err:
            await call()
        assert err.value.field == field, (field, err.value)
    assert await store.alist_threads(R1) == []
    assert await store.aget_record(R1, "t1") is None


async def test_bad_numbers_are_rejected_with_field(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 3))
    cases: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
        ("limit", lambda: store.aget_messages(R1, "t1", limit=-1)),
        ("after_seq", lambda: store.aget_messages(R1, "t1", after_seq=-5)),
        ("before_seq", lambda: store.aget_messages(R1, "t1", before_seq=-1)),
        ("limit", lambda: store.alist_threads(R1, limit=-10**30)),
        ("offset", lambda: store.alist_threads(R1, offset=-1)),
        ("limit", lambda: store.alist_threads(R1, limit="10")),  # type: ignore[arg-type]
        ("limit", lambda: store.aget_messages(R1, "t1", limit=True)),
        ("expected_version", lambda: store.acommit_record(record(), expected_version=-1)),
        ("mark_observed['t1']", lambda: store.acommit_record(record(), expected_version=0, mark_observed={"t1": -2})),
        ("messages[0].tokens", lambda: store.aappend_messages(R1, "t1", [msg("neg", tokens=-1)])),
        ("before", lambda: store.alist_threads(R1, before="yesterday")),  # type: ignore[arg-type]
        ("title", lambda: store.aensure_thread(R1, "t9", title="nul\x00title")),
        ("metadata", lambda: store.aensure_thread(R1, "t9", metadata={"bad": object()})),
        ("messages[0].data", lambda: store.aappend_messages(R1, "t1", [NewMessage(id="m9", data={"x": object()})])),
    ]
    for field, call in cases:
        with pytest.raises(InvalidStoreInput) as err:
            await call()
        assert err.value.field == field, (field, err.value)
    assert await store.aget_record(R1, "t1") is None
    assert await store.acount_messages(R1, "t1") == 3
    assert await store.aget_thread(R1, "t9") is None


async def test_huge_numbers_do_not_crash(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 3))
    assert await store.aget_messages(R1, "t1", after_seq=10**30) == []
    assert seqs(await store.aget_messages(R1, "t1", before_seq=10**30)) == [1, 2, 3]
    assert await store.alist_threads(R1, offset=10**30) == []
    created = await store.acommit_record(record(), expected_version=0, mark_observed={"t1": 10**30})
    assert all(m.observed for m in await store.aget_messages(R1, "t1"))
    with pytest.raises(RecordConflictError):
        await store.acommit_record(created, expected_version=10**30)


async def test_awkward_content_round_trips(store: OMStore) -> None:
    """NUL, lone surrogates and look-alikes of internal encodings survive every backend unchanged."""
    contents: list[Any] = [
        "nul \x00 inside",
        "lone surrogate \ud800 here",
        "literal backslash-u \\u0000",
        {"__langchain_om_b64__": "looks like the wrapper"},
        "'; DROP TABLE messages;--",
        "x" * 200_000,
    ]
    batch = [NewMessage(id=f"m{i}", data={"content": c, "nested": [c]}) for i, c in enumerate(contents)]
    await store.aappend_messages(R1, "t1", batch)
    stored = await store.aget_messages(R1, "t1")
    assert [m.data for m in stored] == [m.data for m in batch]
    await store.aput_value(R1, "ns", "k", contents)
    assert await store.aget_value(R1, "ns", "k") == contents
    rec = await store.acommit_record(record(text="obs \x00 with nul", metadata={"m": contents}), expected_version=0)
    assert (await store.aget_record(R1, "t1")) == rec
    assert rec.groups[0].text == "obs \x00 with nul"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    resource=st.text(min_size=1, max_size=40).filter(lambda s: s.strip() and not set(s) & {"\x00", "\x1e", "\x1f"}),
    thread=st.text(min_size=1, max_size=40).filter(
        lambda s: s.strip() and s != "*" and not set(s) & {"\x00", "\x1e", "\x1f"}
    ),
)
async def test_any_valid_id_round_trips(store: OMStore, resource: str, thread: str) -> None:
    await store.aappend_messages(resource, thread, [msg("m1")])
    await store.aappend_messages(resource, thread, [msg("m1"), msg("m2")])
    assert [m.id for m in await store.aget_messages(resource, thread)] == ["m1", "m2"]
    assert (await store.aget_thread(resource, thread)) is not None
    other = resource + "-other"
    assert await store.aget_messages(other, thread) == []
    await store.adelete_thread(resource, thread)
    assert await store.aget_thread(resource, thread) is None


# ---- concurrency --------------------------------------------------------------------------


async def test_concurrent_commits_one_winner_per_version(store: OMStore) -> None:
    await store.aappend_messages(R1, "t1", msgs("m", 10))

    async def create(i: int) -> OMRecord | None:
        try:
            return await store.acommit_record(record(text=f"creator {i}"), expected_version=0)
        except RecordConflictError:
            return None

    created = [r for r in await asyncio.gather(*(create(i) for i in range(12))) if r is not None]
    assert len(created) == 1 and created[0].version == 1

    async def update(i: int) -> OMRecord | None:
        try:
            return await store.acommit_record(
                created[0].model_copy(update={"metadata": {"writer": i}}),
                expected_version=1,
                mark_observed={"t1": i + 1},
            )
        except RecordConflictError:
            return None

    winners = [r for r in await asyncio.gather(*(update(i) for i in range(12))) if r is not None]
    assert len(winners) == 1, f"exactly one commit wins version 1, got {len(winners)}"
    final = await store.aget_record(R1, "t1")
    assert final == winners[0] and final.version == 2
    writer = final.metadata["writer"]
    observed = [m.observed for m in await store.aget_messages(R1, "t1")]
    assert observed == [i < writer + 1 for i in range(10)], "only the winner's marks were applied"


async def test_concurrent_increments_lose_no_update(store: OMStore) -> None:
    await store.acommit_record(record(metadata={"count": 0}), expected_version=0)

    async def increment() -> int:
        attempts = 0
        while True:
            attempts += 1
            current = await store.aget_record(R1, "t1")
            assert current is not None
            bumped = current.model_copy(update={"metadata": {"count": current.metadata["count"] + 1}})
            try:
                await store.acommit_record(bumped, expected_version=current.version)
                return attempts
            except RecordConflictError:
                await asyncio.sleep(0)

    await asyncio.gather(*(increment() for _ in range(8)))
    final = await store.aget_record(R1, "t1")
    assert final is not None and final.metadata["count"] == 8 and final.version == 9


async def test_concurrent_appends_never_duplicate_seq(store: OMStore) -> None:
    async def writer(w: int) -> None:
        for b in range(5):
            batch = [msg(f"w{w}-{b}-{i}") for i in range(3)] + [msg("shared")]
            await store.aappend_messages(R1, "t1", batch)

    await asyncio.gather(*(writer(w) for w in range(6)))
    rows = await store.aget_messages(R1, "t1")
    assert seqs(rows) == list(range(1, 6 * 5 * 3 + 2))
    assert len({m.id for m in rows}) == len(rows)
    assert [m.id for m in rows].count("shared") == 1


# ---- issue 15: instants, ids, resource-scope deletes, keyset paging -------------------------

_ANY_OFFSET = st.integers(min_value=-(23 * 60 + 59), max_value=23 * 60 + 59).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(moment=st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(None)),
       zone=_ANY_OFFSET)
async def test_every_instant_round_trips(store: OMStore, moment: datetime, zone: timezone) -> None:
    """Years 1..9999 at any UTC offset (SQLite once wrote year 999 as '999-', unreadable forever)."""
    aware = moment.replace(tzinfo=zone)
    thread = f"t-{uuid4_hex()}"
    await store.aappend_messages(R1, thread, [NewMessage(id="m1", data={"x": 1}, created_at=aware)])
    stored = await store.aget_messages(R1, thread)
    assert stored[0].created_at == aware and stored[0].created_at.utcoffset() == timedelta(0)
    assert await store.aget_message(R1, "m1") is not None
    listed = await store.alist_threads(R1, before=aware, limit=1)
    assert all(t.created_at < aware for t in listed)


@pytest.mark.parametrize("moment", [
    datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=5))),
    datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))),
])
async def test_an_instant_outside_utc_years_is_refused_naming_the_field(store: OMStore, moment: datetime) -> None:
    with pytest.raises(InvalidStoreInput) as err:
        await store.aappend_messages(R1, "t1", [NewMessage(id="m1", data={}, created_at=moment)])
    assert err.value.field == "messages[0].created_at"
    with pytest.raises(InvalidStoreInput) as err2:
        await store.alist_threads(R1, before=moment)
    assert err2.value.field == "before"
    assert await store.aget_thread(R1, "t1") is None


@pytest.mark.parametrize("field", ["resource_id", "thread_id", "message id"])
async def test_ids_with_lone_surrogates_are_refused_naming_the_field(store: OMStore, field: str) -> None:
    bad = "user-\ud800"
    ids = {"resource_id": (bad, "t1", "m1"), "thread_id": (R1, bad, "m1"), "message id": (R1, "t1", bad)}[field]
    with pytest.raises(InvalidStoreInput) as err:
        await store.aappend_messages(ids[0], ids[1], [msg(ids[2])])
    assert "surrogate" in str(err.value)
    assert err.value.field == {"resource_id": "resource_id", "thread_id": "thread_id",
                               "message id": "messages[0].id"}[field]
    with pytest.raises(InvalidStoreInput):
        await store.aput_value(bad, "ns", "k", 1)
    assert await store.alist_threads(R1) == []


async def test_explicit_ids_cannot_name_a_threads_private_resource(store: OMStore) -> None:
    private = implicit_resource("t1")
    await store.aappend_messages(private, "t1", [msg("m1")])
    assert [m.id for m in await store.aget_messages(private, "t1")] == ["m1"]
    assert await store.aget_messages("t1", "t1") == []
    for bad in ("\x1ethread:t1", "a\x1eb"):
        with pytest.raises(InvalidStoreInput) as err:
            await store.aappend_messages(R1, bad, [msg("m2")])
        assert err.value.field == "thread_id"
    with pytest.raises(InvalidStoreInput):
        await store.aget_messages(implicit_resource("t1") + "\x1e", "t1")


def _group(thread_id: str, text: str, thread_ids: list[str] | None = None) -> ObservationGroup:
    return ObservationGroup(thread_id=thread_id, start_id="m1", end_id="m2", text=text, thread_ids=thread_ids or [])


async def test_deleting_a_thread_forgets_it_in_the_resource_record_in_the_same_transaction(store: OMStore) -> None:
    for thread in ("doomed", "kept"):
        await store.aappend_messages(R1, thread, msgs(f"{thread}-", 3))
    shared = OMRecord(
        resource_id=R1, thread_id=None, scope="resource",
        groups=[_group("doomed", "passport 123"), _group("kept", "likes tea"),
                _group("doomed", "both threads", ["doomed", "kept"])],
        last_observed_seq={"doomed": 3, "kept": 3}, last_observed_id={"doomed": "doomed-3", "kept": "kept-3"},
        buffered_chunks=[BufferedChunk(thread_id="doomed", start_seq=4, end_seq=4, start_id="x", end_id="x",
                                       message_count=1, message_tokens=1, observations="o", observation_tokens=1)],
    )
    created = await store.acommit_record(shared, expected_version=0)
    await store.adelete_thread(R1, "doomed")
    after = await store.aget_record(R1, None)
    assert after is not None and after.version == created.version + 1, "one write, versioned like any commit"
    assert [g.text for g in after.groups] == ["likes tea", "both threads"], "a mixed group stays whole"
    assert after.last_observed_seq == {"kept": 3} and after.last_observed_id == {"kept": "kept-3"}
    assert after.buffered_chunks == []
    assert await store.aget_messages(R1, "doomed") == []
    assert len(await store.aget_messages(R1, "kept")) == 3
    with pytest.raises(RecordConflictError):  # a worker holding the old record must reload
        await store.acommit_record(created, expected_version=created.version)
    await store.adelete_thread(R2, "kept")  # another resource's delete touches nothing
    assert await store.aget_record(R1, None) == after


async def test_thread_id_keyset_paging_never_repeats_or_skips(store: OMStore) -> None:
    for name in ("b", "d", "f", "h"):
        await store.aensure_thread(R1, name)
    await store.aensure_thread(R2, "c-foreign")
    first = await store.alist_thread_ids(R1, limit=2)
    assert first == ["b", "d"]
    await store.aensure_thread(R1, "a")  # created between two page reads, sorts before the cursor
    await store.aensure_thread(R1, "e")  # and one after it
    second = await store.alist_thread_ids(R1, after_id=first[-1], limit=2)
    third = await store.alist_thread_ids(R1, after_id=second[-1], limit=2)
    seen = first + second + third
    assert seen == ["b", "d", "e", "f", "h"], "no thread twice, none of the old ones skipped"
    assert await store.alist_thread_ids(R1, after_id="h") == []
    assert await store.alist_thread_ids(R1, limit=0) == []
    assert await store.alist_thread_ids(R2) == ["c-foreign"]


def uuid4_hex() -> str:
    import uuid

    return uuid.uuid4().hex[:12]


# ---- the suite itself ------------------------------------------------------------------------


def test_every_backend_runs_the_conformance_suite() -> None:
    """Each backend package under ``langchain_om/store/`` is a parameter of ``store`` (same name),
    and each ships an ``OMStore``: a backend added without its factory fails here."""
    import importlib
    import pkgutil

    from conftest import STORE_FACTORIES

    import langchain_om.store as store_package

    backends = sorted(info.name for info in pkgutil.iter_modules(store_package.__path__) if info.ispkg)
    assert backends == sorted(STORE_FACTORIES)
    for name in backends:
        package = importlib.import_module(f"{store_package.__name__}.{name}")
        stores = [getattr(package, n) for n in package.__all__ if n.endswith("Store")]
        assert len(stores) == 1, name
        assert all(callable(getattr(stores[0], method, None)) for method in ("asetup", "aappend_messages",
                                                                             "acommit_record", "aclose")), name
