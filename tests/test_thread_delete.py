"""Issue 15, item 4: deleting a thread in resource scope is one transaction, and what the shared
log held only because of that thread leaves with it."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from recall_helpers import T0, chat, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.store import _util
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedObserverModel

PASSPORT = "passport number X1234567"


def resource_om(store: OMStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), scope="resource", token_counter="estimator",
                               observation={"message_tokens": 100_000, "max_tokens_per_batch": 10_000})


async def seed(om: ObservationalMemory) -> None:
    secret = chat("private", 2)
    secret.insert(0, stamped(HumanMessage(f"My {PASSPORT}, please remember it.", id="private-secret"), T0))
    await om.aon_turn_end("private", secret, resource_id="u1")
    await om.aon_turn_end("work", chat("work", 3), resource_id="u1")
    record = await om.aobserve("work", resource_id="u1")
    assert any(PASSPORT in g.text for g in record.groups), "the Observer noted the passport"


async def test_a_deleted_threads_observations_leave_the_shared_log(store: OMStore) -> None:
    om = resource_om(store)
    await seed(om)
    await om.adelete_thread("private", resource_id="u1")
    record = await om.aget_record("work", resource_id="u1")
    assert all(PASSPORT not in g.text for g in record.groups)
    assert "private" not in record.last_observed_seq and record.groups, "the other thread's notes stay"
    context = await om.aprocess("work", chat("work", 4), resource_id="u1")
    assert PASSPORT not in str(context.system_message.content if context.system_message else "")
    # a thread created again under the deleted id starts from its first message
    again = await om.aprocess("private", chat("fresh", 1), resource_id="u1")
    assert [m.id for m in again.messages] == ["fresh-h0", "fresh-a0"]


async def test_a_failure_inside_the_delete_changes_nothing(store: OMStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows, watermark and groups go in one transaction: if any part fails, none of it happened."""
    om = resource_om(store)
    await seed(om)
    before = await store.aget_record("u1", None)
    stored = await store.aget_messages("u1", "private")

    def explode(*_args: Any) -> None:
        raise RuntimeError("crash in the middle of the delete")

    monkeypatch.setattr(_util, "record_without_thread", explode)
    with pytest.raises(Exception, match="crash in the middle"):
        await store.adelete_thread("u1", "private")
    assert await store.aget_record("u1", None) == before
    assert await store.aget_messages("u1", "private") == stored
    assert await store.aget_thread("u1", "private") is not None
