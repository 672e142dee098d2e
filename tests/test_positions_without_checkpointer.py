"""A run without a checkpointer keeps its positions' record snapshots in the process, not the store.

No later run can resume from a checkpoint that was never saved, so only the rest of the same run
reads its positions back (``branches.aposition(checkpointed=False)``). Storing a snapshot of every
new record version cost a store transaction and the record as JSON for nothing. With a
checkpointer (LangGraph hands every node one in the config) the snapshots are stored as before.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.branches import (
    POSITION_KEY,
    SNAPSHOT_NAMESPACE,
    BranchRun,
    aposition,
    aresolve,
    is_checkpointed,
)
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TURNS = [
    "My favourite colour is teal, and I keep telling you details so the window fills up quickly.",
    "私の好きな色は藍色です。窓がすぐにいっぱいになるように、細かいことを話し続けます。🎨",
    "I moved to Lisbon in March and I take the train to work every single weekday morning.",
    "来月は京都で友人の結婚式があり、予算は五万円くらいに抑えたいと思っています。",
    "My sister's birthday is on the ninth and she likes dark chocolate and old jazz records.",
]


def make_om(store: OMStore) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": 60, "buffer_tokens": False},
                               reflection={"observation_tokens": 4000})


async def snapshot_of(store: OMStore, resource: str, position: dict[str, Any]) -> Any:
    return await store.aget_value(resource, SNAPSHOT_NAMESPACE, f"record:{position['record']}:{position['version']}")


@pytest.mark.parametrize("checkpointer", [False, True], ids=["no-checkpointer", "checkpointer"])
async def test_the_agents_positions_are_snapshotted_in_the_store_only_with_a_checkpointer(
        store: OMStore, checkpointer: bool) -> None:
    om = make_om(store)
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver() if checkpointer else None)
    config: Any = {"configurable": {"thread_id": "t-pos", "resource_id": "u-pos"}}
    positions = []
    for index, text in enumerate(TURNS):
        result = await agent.ainvoke({"messages": [HumanMessage(text, id=f"h{index}")]}, config)
        positions.append(result[POSITION_KEY])
    versions = {(p["record"], p["version"]) for p in positions}
    assert len(versions) > 1, "observation should have moved the record on"
    stored = [await snapshot_of(store, "u-pos", p) for p in positions]
    if checkpointer:
        assert all(s is not None for s in stored)
        assert stored[-1]["version"] == positions[-1]["version"]
    else:
        assert stored == [None] * len(positions)
    # the memory itself is the same either way: observed, and readable
    record = await om.aget_record("t-pos", resource_id="u-pos")
    assert "teal" in record.observations
    await om.aclose()


async def test_a_fork_within_a_run_without_a_checkpointer_starts_from_the_kept_snapshot(store: OMStore) -> None:
    """A position read back later in the same run (a fork from it) finds its record in the process."""
    om = make_om(store)
    messages: list[BaseMessage] = []
    for index, text in enumerate(TURNS[:3]):
        messages.append(HumanMessage(text, id=f"m{index}"))
        await om.aprocess("t-fork", list(messages), resource_id="u-fork")
    at_position = await om.aget_record("t-fork", resource_id="u-fork")
    assert at_position.observations, "the first turns should be observed"
    position = await aposition(om, BranchRun("t-fork", "t-fork", "u-fork"), checkpointed=False)
    assert await snapshot_of(store, "u-fork", position) is None  # kept in the process only
    later = list(messages)
    for index, text in enumerate(TURNS[3:], start=3):  # the thread moves on past the position
        later.append(HumanMessage(text, id=f"m{index}"))
        await om.aprocess("t-fork", list(later), resource_id="u-fork")
    assert (await om.aget_record("t-fork", resource_id="u-fork")).version > at_position.version
    # back at the position with another next message: a fork, whose record is the position's
    diverging = [*messages, HumanMessage("違う話をしましょう: the fork", id="m-fork")]
    run = await aresolve(om, "t-fork", "u-fork", position, diverging)
    assert run.forked and run.branch != "t-fork"
    forked = await om.aget_record(run.branch, resource_id="u-fork")
    assert forked.observations == at_position.observations
    assert "Lisbon" not in forked.observations and "京都" not in forked.observations
    await om.aclose()


def test_is_checkpointed_reads_the_checkpointer_langgraph_hands_each_node() -> None:
    saver = InMemorySaver()
    assert is_checkpointed({"configurable": {"__pregel_checkpointer": saver}})
    assert not is_checkpointed({"configurable": {"__pregel_checkpointer": None}})
    assert not is_checkpointed({"configurable": {"thread_id": "t"}})
    assert not is_checkpointed(None)


async def test_inspecting_a_position_of_a_run_without_a_checkpointer_reads_its_own_snapshot(store: OMStore) -> None:
    """Issue 44, item 5: ``aget_record(checkpoint=...)`` read only the store's snapshots, so for a run
    without a checkpointer it showed the newest record as the state's. It now reads the snapshot the
    state names where the process keeps it, and says so where none exists (another process)."""
    from langchain_om.extensions.checkpoint_view import CheckpointPositionError

    om = make_om(store)
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)])
    config: Any = {"configurable": {"thread_id": "t-see", "resource_id": "u-see"}}
    states, records = [], []
    for index, text in enumerate(TURNS):
        states.append(await agent.ainvoke({"messages": [HumanMessage(text, id=f"s{index}")]}, config))
        records.append(await om.aget_record("t-see", resource_id="u-see"))
    early = next(i for i, r in enumerate(records) if r.observations)  # the first observed state
    assert records[-1].version > records[early].version and "京都" in records[-1].observations
    assert "京都" not in records[early].observations
    for index in (early, len(TURNS) - 1):
        shown = await om.aget_record("t-see", resource_id="u-see", checkpoint=states[index])
        assert shown == records[index], f"turn {index}: the state's own memory, not the newest"
        status = await om.astatus("t-see", resource_id="u-see", checkpoint=states[index])
        assert status.windows.active.observations.tokens == records[index].observation_tokens
    # another process never saw the run: the branch's record is still the newest state's, but an
    # earlier state's memory is nowhere, and it says so instead of showing the newest
    elsewhere = make_om(store)
    assert await elsewhere.aget_record("t-see", resource_id="u-see", checkpoint=states[-1]) == records[-1]
    with pytest.raises(CheckpointPositionError, match=r"checkpoint: .*not available.*without a checkpointer"):
        await elsewhere.aget_record("t-see", resource_id="u-see", checkpoint=states[early])
    await om.aclose()
    await elsewhere.aclose()
