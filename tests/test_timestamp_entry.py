"""Issue 15, item 2: any instant a caller can date a message with either round-trips or is
refused at the entry with an error naming ``created_at``; never a thread that cannot be read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel


def make_om(store: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                               observation={"message_tokens": 300, "buffer_tokens": False}, retrieval=True)


def dated(text: str, when: Any, mid: str) -> HumanMessage:
    return HumanMessage(text, id=mid, response_metadata={TIMESTAMP_KEY: when})


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    return InMemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "om.db")


async def test_messages_dated_before_year_1000_keep_their_thread_readable(store: Any) -> None:
    om = make_om(store)
    history: list[Any] = []
    for i, when in enumerate(["0999-03-01T10:00:00+00:00", "0001-01-01T00:00:00+00:00", 5.0,
                              "9999-12-31T23:59:59.999999+00:00", "2026-11-30T09:00:00-11:30"]):
        history += [dated(f"question {i} " + "words " * 40, when, f"h{i}"), AIMessage("ok " * 40, id=f"a{i}")]
        await om.aprocess("t1", history)
    status = await om.astatus("t1")  # reads the whole thread back (SQLite once could not, forever)
    assert status is not None
    record = await om.aget_record("t1")
    assert record.groups, "the thread went on to be observed"
    await om.aclose()


@pytest.mark.parametrize("when", [float("nan"), float("inf"), float("-inf"), 1e20, -1e20,
                                  "0001-01-01T00:30:00+05:00", "9999-12-31T23:00:00-05:00"])
async def test_created_at_out_of_range_is_refused_naming_it(store: Any, when: Any) -> None:
    om = make_om(store)
    await om.aprocess("t1", [dated("fine", "2026-11-30T09:00:00+00:00", "h0")])
    with pytest.raises(ValueError, match="created_at") as err:
        await om.aprocess("t1", [dated("fine", "2026-11-30T09:00:00+00:00", "h0"), dated("bad", when, "h1")])
    assert not isinstance(err.value, (OverflowError, OSError))
    context = await om.aprocess("t1", [dated("fine", "2026-11-30T09:00:00+00:00", "h0")])
    assert [m.id for m in context.messages] == ["h0"], "nothing was stored for the refused step"
    await om.aclose()


@pytest.mark.parametrize(("args", "field"), [
    ({"before": "0001-01-01T00:00:00+05:00"}, "before"),
    ({"after": "9999-12-31T23:59:59-05:00"}, "after"),
])
async def test_recall_dates_past_the_calendar_get_an_argument_error(args: dict[str, str], field: str) -> None:
    om = make_om(InMemoryStore())
    await om.aprocess("t1", [dated("hello", "2026-11-30T09:00:00+00:00", "h0")], resource_id="u1")
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    reply = str(await tool.ainvoke({"mode": "threads", **args}))
    assert reply.startswith(f"recall error: {field}:") and "calendar" in reply and "Overflow" not in reply
    edge = str(await tool.ainvoke({"mode": "threads", "before": "9999-12-31", "after": "0001-01-01"}))
    assert "t1" in edge, "the calendar's own ends are valid bounds"
