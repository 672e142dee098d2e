"""``wire_json`` never raises, and one bad custom part never ends a UI response (issue 44, item 6).

``wire_json`` promised "any Python value, never an exception", yet an int over Python's
int-to-text digit limit, an object whose ``repr``/``str`` raises and a pydantic model or dataclass
holding itself all raised; in ``ui_message_sse`` that turned one bad custom part into an ``error``
part that ended the whole response (the reply's text after it never reached the browser).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import pytest
from langchain_core.messages import AIMessageChunk
from pydantic import BaseModel

from langchain_om.integrations.ui import ui_message_sse
from langchain_om.integrations.wire_json import wire_json


class _NoRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr is broken")


class _NoStr:
    def __str__(self) -> str:
        raise RuntimeError("str is broken")

    def __hash__(self) -> int:
        return 7


class _Node(BaseModel):
    name: str = "節点"
    next: Any = None


@dataclasses.dataclass
class _Link:
    name: str
    other: Any = None


class _UnreadableDict(dict[str, Any]):
    """A payload that fails while it is read (``get`` and ``items`` raise)."""

    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("get is broken")

    def items(self) -> Any:
        raise RuntimeError("items is broken")


def _hostile_values() -> dict[str, Any]:
    node = _Node()
    node.next = node
    link = _Link("輪")
    link.other = link
    return {"huge": 10**5000, "negative_huge": -(10**5000), "no_repr": _NoRepr(), "model_cycle": node,
            "dataclass_cycle": link, "keys": {_NoStr(): "a key whose str raises", 10**5000: "huge key"}}


def test_wire_json_never_raises_and_always_writes_valid_utf8_json() -> None:
    values = _hostile_values()
    for value in values.values():
        text = wire_json(value)  # raised on main for every one of these
        text.encode("utf-8")
        json.loads(text)
    whole = json.loads(wire_json(values))
    assert whole["huge"] == hex(10**5000) and int(whole["huge"], 16) == 10**5000, "exact, in hex"
    assert whole["negative_huge"] == hex(-(10**5000))
    assert whole["no_repr"] == "<unprintable _NoRepr>"
    assert whole["model_cycle"] == {"name": "節点", "next": "[circular]"}
    assert whole["dataclass_cycle"] == {"name": "輪", "other": "[circular]"}
    assert whole["keys"] == {"<unprintable _NoStr>": "a key whose str raises", hex(10**5000): "huge key"}
    assert json.loads(wire_json(_UnreadableDict(a=1))) == "{'a': 1}", "a mapping that fails while read: its repr"


def test_the_digit_limit_in_force_is_the_one_respected() -> None:
    if not hasattr(sys, "set_int_max_str_digits"):  # pragma: no cover - Python < 3.11
        pytest.skip("no int-to-text digit limit")
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(640)  # the lowest limit Python allows
    try:
        assert json.loads(wire_json({"n": 10**700, "small": 10**600})) == {"n": hex(10**700), "small": 10**600}
    finally:
        sys.set_int_max_str_digits(before)


async def test_one_bad_custom_part_does_not_end_the_response() -> None:
    async def run() -> Any:
        yield ("messages", (AIMessageChunk(content="東京の", id="r1"), {"tags": []}))
        for name, value in _hostile_values().items():
            yield ("custom", {"type": "progress", "id": name, "value": value})
        yield ("custom", _UnreadableDict(type="data-x", data=1))  # the translator cannot even read it
        yield ("messages", (AIMessageChunk(content="天気は晴れ", id="r1"), {"tags": []}))

    events = [e async for e in ui_message_sse(run(), message_id="m")]
    assert events[-1] == "data: [DONE]\n\n"
    chunks = [json.loads(e[6:]) for e in events[:-1]]
    assert [c for c in chunks if c["type"] == "error"] == []
    assert chunks[-1] == {"type": "finish", "finishReason": "stop"}
    text = "".join(c["delta"] for c in chunks if c["type"] == "text-delta")
    assert text == "東京の天気は晴れ", "the reply's text after the bad parts arrives"
    progress = {c["id"]: c["data"]["value"] for c in chunks if c["type"] == "data-progress"}
    assert set(progress) == set(_hostile_values())
    assert progress["huge"] == hex(10**5000) and progress["no_repr"] == "<unprintable _NoRepr>"
    assert sum(c["type"] == "data-custom" for c in chunks) == 1
