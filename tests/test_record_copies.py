"""A cycle edits a copy of the record (``state.editable``): its metadata is copied deeply, by a
walk of JSON-shaped data that hands anything else to ``copy.deepcopy`` (issue 33, item 3)."""

from __future__ import annotations

from dataclasses import dataclass, field

from langchain_om.engine.state import copied, editable
from langchain_om.store.base import OMRecord


@dataclass
class Custom:
    values: list[int] = field(default_factory=list)


def test_an_edited_copy_never_reaches_the_record_it_came_from() -> None:
    record = OMRecord(resource_id="利用者", thread_id="スレッド", scope="thread", metadata={
        "spend": {"observer": {"calls": 1, "models": {"scripted/om": {"input_tokens": 10}}}},
        "pinned": {"スレッド": ["h1", 3]}, "current_task": "京都旅行の予算を決める 🗾",
        "om": {"extracted": {"custom": Custom([1, 2]), "tuple": (1, [2])}}, "ratio": 0.5, "flag": None,
    })
    before = record.model_dump()
    updated = editable(record)
    assert updated.metadata == record.metadata
    updated.metadata["spend"]["observer"]["models"]["scripted/om"]["input_tokens"] += 5
    updated.metadata["pinned"]["スレッド"][1] = 9
    updated.metadata["om"]["extracted"]["custom"].values.append(3)
    updated.metadata["om"]["extracted"]["tuple"][1].append(4)
    updated.metadata["current_task"] += "!"
    assert record.model_dump() == before, "the original is untouched, objects of any type included"


def test_plain_data_is_copied_as_equal_fresh_containers() -> None:
    data = {"a": [1, {"b": "English"}, ["日本語", 2.5, True, None]], "c": {}}
    copy = copied(data)
    assert copy == data
    assert copy is not data and copy["a"] is not data["a"] and copy["a"][1] is not data["a"][1]
    assert copy["a"][2] is not data["a"][2] and copy["c"] is not data["c"]
