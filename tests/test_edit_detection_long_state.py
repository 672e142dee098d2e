"""Edits deep inside a long checkpointed state are still seen (issue 32 item 2).

A checkpointer hands the middleware fresh copies of every message on each invocation; OM
compares them with the previous step's list field by field in C instead of walking them in
Python. These tests edit one message in the middle of a long state and check the edit reaches
the store and the model: a comparison that skipped the head of the list would miss it.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory
from langchain_om.foundation.inputs import CallerList, KnownMessage, message_fingerprint, release_copies, sort_inputs
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TEXTS = {
    "en": ("Turn {i}: my favourite colour today is blue.", "My budget is 900 dollars, not 100."),
    "ja": ("{i}番目の話題：今日は青い色が好きです。", "予算は百ドルではなく九百ドルです。"),
}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Any) -> Any:
    return InMemoryStore() if request.param == "memory" else SQLiteStore(str(tmp_path / "om.db"))


@pytest.mark.parametrize("language", ["en", "ja"])
async def test_update_state_edit_in_the_middle_of_a_long_state_is_stored(store: Any, language: str) -> None:
    turn, edited = TEXTS[language]
    # nothing gets observed: the whole conversation stays in the checkpointed state
    om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 1_000_000, "buffer_tokens": False})
    model = ScriptedAgentModel()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": f"t-long-{language}", "resource_id": "alice"}}
    for i in range(30):
        await agent.ainvoke({"messages": [HumanMessage(turn.format(i=i), id=f"h{i}")]}, config)
    state = (await agent.aget_state(config)).values["messages"]
    assert len(state) == 60, "precondition: the state holds the whole conversation"
    await agent.aupdate_state(config, {"messages": [HumanMessage(edited, id="h13")]})
    await agent.ainvoke({"messages": [HumanMessage(turn.format(i=30), id="h30")]}, config)
    stored = {m.id: m for m in await store.aget_messages("alice", f"t-long-{language}")}
    assert stored["h13"].data["data"]["content"] == edited, "the edit in the middle of the state was missed"
    assert next(m for m in model.calls[-1] if m.id == "h13").content == edited, "the model read the old text"
    # neighbours untouched, nothing stored twice
    assert stored["h12"].data["data"]["content"] == turn.format(i=12)
    assert len(stored) == 62
    await om.aclose()


def _history(count: int, language: str) -> list[BaseMessage]:
    turn = TEXTS[language][0]
    out: list[BaseMessage] = []
    for i in range(count):
        out.append(HumanMessage(turn.format(i=i), id=f"h{i}"))
        out.append(AIMessage("", id=f"a{i}", tool_calls=[{"name": "look", "args": {"q": str(i)}, "id": f"c{i}"}]))
        out.append(ToolMessage(turn.format(i=i), tool_call_id=f"c{i}", id=f"t{i}"))
    return out


def _known(messages: list[BaseMessage]) -> dict[str, KnownMessage]:
    return {str(m.id): KnownMessage(message_fingerprint(m), seq) for seq, m in enumerate(messages, 1)}


@pytest.mark.parametrize("kept", [list, CallerList])
@pytest.mark.parametrize("language", ["en", "ja"])
def test_fresh_copies_with_one_edit_deep_inside_are_walked(language: str, kept: type[list[BaseMessage]]) -> None:
    history = _history(200, language)
    known, seen = _known(history), {}
    previous: list[BaseMessage] = kept()
    sort_inputs(history, known, seen, previous)
    assert previous == history

    # a checkpointer's copies, unchanged: nothing new, nothing edited, and the copies are remembered
    copies = [m.model_copy(deep=True) for m in history]
    out = sort_inputs(copies, known, seen, previous)
    assert not out.fresh and not out.edited
    assert all(a is b for a, b in zip(previous, copies, strict=True))

    # the caller's own objects plus a new message (pointers), then copies of all with the newest edited
    extra = HumanMessage(TEXTS[language][0].format(i=999), id="h-new")
    out = sort_inputs([*copies, extra], known, seen, previous)
    assert [m.id for m in out.fresh] == ["h-new"]
    known["h-new"] = KnownMessage(message_fingerprint(extra), 10_000)
    again = [m.model_copy(deep=True) for m in [*history, extra]]
    again[-1] = again[-1].model_copy(update={"content": TEXTS[language][1]})
    assert [m.id for m in sort_inputs(again, known, seen, previous).edited] == ["h-new"]
    history = [*history, extra]

    # copies again, one message's text edited in the middle
    copies = [m.model_copy(deep=True) for m in history]
    copies[300] = copies[300].model_copy(update={"content": TEXTS[language][1]})
    out = sort_inputs(copies, known, seen, previous)
    assert [m.id for m in out.edited] == ["h100"]

    # copies again, only a tool call's arguments changed (what the fingerprint also covers)
    copies = [m.model_copy(deep=True) for m in history]
    changed = copies[304]
    assert isinstance(changed, AIMessage)
    copies[304] = changed.model_copy(update={"tool_calls": [{**changed.tool_calls[0], "args": {"q": "別の質問"}}]})
    out = sort_inputs(copies, known, seen, previous)
    assert [m.id for m in out.edited] == ["a101"]


@pytest.mark.parametrize("kept", [list, CallerList])
def test_fresh_copies_with_a_changed_name_or_id_are_walked(kept: type[list[BaseMessage]]) -> None:
    history = _history(50, "en")
    known, seen = _known(history), {}
    previous: list[BaseMessage] = kept()
    sort_inputs(history, known, seen, previous)
    copies = [m.model_copy(deep=True) for m in history]
    copies[60] = copies[60].model_copy(update={"name": "someone-else"})
    assert [m.id for m in sort_inputs(copies, known, seen, previous).edited] == ["h20"]
    # a message the caller put back in place of another (a new id in the middle) is not new: it
    # is older than known ones; the walk decides and nothing known is reported edited
    copies = [m.model_copy(deep=True) for m in history]
    copies[90] = HumanMessage("brought back", id="h-other")
    out = sort_inputs(copies, known, seen, previous)
    assert not out.edited and not out.fresh


@pytest.mark.parametrize("language", ["en", "ja"])
def test_released_copies_still_catch_an_edit(language: str) -> None:
    history = _history(100, language)
    known, seen = _known(history), {}
    previous = CallerList()
    sort_inputs(history, known, seen, previous)
    release_copies(previous)
    assert len(previous) == 300, "a caller handing the same objects keeps them (pointer compares)"

    sort_inputs([m.model_copy(deep=True) for m in history], known, seen, previous)
    release_copies(previous)  # a caller handing copies: only what was read of them is kept
    assert len(previous) == 0 and previous.released == 300

    unchanged = [m.model_copy(deep=True) for m in history]
    out = sort_inputs(unchanged, known, seen, previous)
    assert not out.fresh and not out.edited
    assert all(a is b for a, b in zip(previous, unchanged, strict=True)), "the new copies are the baseline"
    release_copies(previous)

    edited = [m.model_copy(deep=True) for m in history]
    edited[150] = edited[150].model_copy(update={"content": TEXTS[language][1]})
    assert [m.id for m in sort_inputs(edited, known, seen, previous).edited] == ["h50"]
