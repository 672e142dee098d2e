"""Issue 32, item 1: a caller with no checkpointer (a chat API, a queue worker) sends only its new
message each step; the step must read the same rows whatever the stored history's length.

Without a checkpointer the state never holds OM's position, so branch resolution has to tell
"continues the thread" from "runs from an old checkpoint" without it. It used to page the whole
stored thread newest-first looking for a message the state holds. These tests count the rows the
store hands back during one step at two history lengths, through the public integrations
(``create_agent`` + middleware, graph nodes), and check that memory still continues the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.branches import BRANCH_MARK
from langchain_om.foundation.messages import dump_message
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import NewMessage, ObservationGroup, OMRecord, StoredMessage, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

THREAD = "stateless"
TAIL = 6  # unobserved messages left at the end of the seeded history


class CountingStore(InMemoryStore):
    """Counts the message rows the store hands back (what a step pays to read)."""

    rows_read = 0

    async def aget_messages(self, *args: Any, **kwargs: Any) -> list[StoredMessage]:
        rows = await super().aget_messages(*args, **kwargs)
        self.rows_read += len(rows)
        return rows

    async def aget_messages_by_ids(self, *args: Any, **kwargs: Any) -> list[StoredMessage]:
        rows = await super().aget_messages_by_ids(*args, **kwargs)
        self.rows_read += len(rows)
        return rows


def _history(count: int) -> list[BaseMessage]:
    out: list[BaseMessage] = []
    for i in range(count // 2):
        if i % 2:
            out.append(HumanMessage(f"東京の予定 {i}: 木曜日に会議があります", id=f"h{i}"))
        else:
            out.append(HumanMessage(f"Trip note {i}: the train leaves at nine", id=f"h{i}"))
        out.append(AIMessage(f"Noted {i}.", id=f"a{i}"))
    out.append(HumanMessage("The latest stored note: my locker code is 4417", id="h-last"))
    return out


async def _seeded(count: int) -> CountingStore:
    """A store holding ``count`` messages as if OM had run all along: all but the tail observed."""
    store = CountingStore()
    await store.asetup()
    resource = implicit_resource(THREAD)
    await store.aensure_thread(resource, THREAD)
    history = _history(count)
    rows = [NewMessage(id=str(m.id), data=dump_message(m), tokens=10) for m in history]
    await store.aappend_messages(resource, THREAD, rows)
    cut = len(rows) - TAIL
    group = ObservationGroup(thread_id=THREAD, start_id=rows[0].id, end_id=rows[cut - 1].id,
                             text="* 🟡 (09:00) User plans a trip; 東京で会議", tokens=20)
    record = OMRecord(resource_id=resource, thread_id=THREAD, scope="thread", groups=[group],
                      last_observed_seq={THREAD: cut}, last_observed_id={THREAD: rows[cut - 1].id})
    await store.acommit_record(record, expected_version=0, mark_observed={THREAD: cut})
    return store


def _om(store: CountingStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": 100_000},
                               reflection={"observation_tokens": 100_000}, token_counter="estimator")


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _runnable(kind: str, om: ObservationalMemory, model: ScriptedAgentModel) -> Any:
    if kind == "agent":
        return create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)])

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    add_observational_memory(builder, om, before="agent")
    return builder.compile()


async def _rows_read_by_a_stateless_step(kind: str, count: int) -> tuple[int, str, Sequence[str]]:
    store = await _seeded(count)
    om = _om(store)
    model = ScriptedAgentModel()
    runnable = _runnable(kind, om, model)
    config = {"configurable": {"thread_id": THREAD}}
    try:
        await runnable.ainvoke({"messages": [HumanMessage("First new question", id="new-1")]}, config)
        await om.await_background()
        store.rows_read = 0
        await runnable.ainvoke({"messages": [HumanMessage("金曜日の予定は?", id="new-2")]}, config)
        await om.await_background()
        read = store.rows_read
        prompt = "\n".join(str(m.content) for m in model.calls[-1])
        threads = await store.alist_thread_ids(implicit_resource(THREAD))
    finally:
        await om.aclose()
        await store.aclose()
    return read, prompt, threads


@pytest.mark.parametrize("kind", ["agent", "graph"])
async def test_a_stateless_step_reads_the_same_rows_at_any_history_length(kind: str) -> None:
    short_read, short_prompt, _ = await _rows_read_by_a_stateless_step(kind, 40)
    long_read, long_prompt, threads = await _rows_read_by_a_stateless_step(kind, 1200)
    assert long_read == short_read, (short_read, long_read)
    assert long_read < 100
    # the step continued the stored thread (no fork): the tail and the new messages reach the model
    for prompt in (short_prompt, long_prompt):
        assert "my locker code is 4417" in prompt
        assert "First new question" in prompt and "金曜日の予定は?" in prompt
        assert "東京で会議" in prompt  # the observation log
    assert threads == [THREAD]
    assert not any(BRANCH_MARK in t for t in threads)
