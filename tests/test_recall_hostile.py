"""Hostile recall arguments, on every store backend: never another user's data, never a crash.

Two resources share one store: the victim ``victim`` (whose thread ids and message ids the
attacker knows) and the caller ``attacker``. Every argument set below is passed by the
attacker's tool; each result must be either an error string or a result dict, and must never
contain the victim's secret marker.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from recall_helpers import T0, chat, make_om, seed, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import RecallTool
from langchain_om.store.base import OMStore

SECRET = "VICTIM-SECRET-7731"


async def _setup(store: OMStore) -> tuple[ObservationalMemory, RecallTool]:
    om = make_om(store, scope="resource")
    victim = [
        stamped(HumanMessage(f"My bank PIN is {SECRET}", id="victim-m1"), T0),
        stamped(AIMessage(f"Noted {SECRET}", id="victim-m2"), T0 + timedelta(seconds=5)),
    ]
    await seed(om, "victim", {"victim-thread": victim, "victim-t2": chat("vt2", 2)})
    await seed(om, "attacker", {"att-thread": chat("att", 3)})
    tool = om.recall_tool(thread_id="att-thread", resource_id="attacker")
    assert isinstance(tool, RecallTool)
    return om, tool


def _check(out: Any, *, expect_error: bool | None = None) -> str:
    text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
    assert isinstance(out, (str, dict)), type(out)
    assert SECRET not in text
    assert "victim-thread" not in text or isinstance(out, str)
    if expect_error is True:
        assert isinstance(out, str) and out.startswith("recall error:"), out
    if expect_error is False:
        assert isinstance(out, dict), out
    return text


HOSTILE: list[tuple[dict[str, Any], str]] = [
    ({"thread_id": "victim-thread"}, "thread_id"),
    ({"thread_id": "victim-thread", "anchor": "end"}, "thread_id"),
    ({"cursor": "victim-m1"}, "cursor"),
    ({"cursor": "victim-m2", "page": -1}, "cursor"),
    ({"cursor": "victim-m1", "part_index": 0}, "cursor"),
    ({"cursor": "victim-m1", "thread_id": "victim-thread"}, "cursor"),
    ({"thread_id": "att-thread' OR '1'='1"}, "thread_id"),
    ({"thread_id": "x'; DROP TABLE om_messages; --"}, "thread_id"),
    ({"cursor": "' OR 1=1 --"}, "cursor"),
    ({"cursor": "%"}, "cursor"),
    ({"thread_id": "%"}, "thread_id"),
    ({"thread_id": "*"}, "thread_id"),
    ({"cursor": "victim-m1:victim-m2"}, "ONE message id"),
    ({"cursor": "_range: victim-m1:victim-m2"}, "ONE message id"),
    ({"page": 10**12}, "page"),
    ({"page": -(10**12)}, "page"),
    ({"limit": -5}, "limit"),
    ({"limit": 0}, "limit"),
    ({"limit": "lots"}, "limit"),
    ({"page": 1.5}, "page"),
    ({"mode": "sql"}, "mode"),
    ({"mode": "search", "query": "PIN\x00"}, "query"),
    ({"mode": "search", "query": "PIN " * 2_500_000}, "query"),
    ({"mode": "search"}, "query"),
    ({"detail": "max"}, "detail"),
    ({"part_type": "secret"}, "part_type"),
    ({"part_index": -1, "cursor": "att-h0"}, "part_index"),
    ({"part_index": 10**9, "cursor": "att-h0"}, "part_index"),
    ({"part_index": 0}, "part_index"),
    ({"cursor": ""}, "cursor"),
    ({"cursor": "   "}, "cursor"),
    ({"cursor": "a\x00b"}, "cursor"),
    ({"thread_id": "a\x00b"}, "thread_id"),
    ({"thread_id": "a\x1fb"}, "thread_id"),
    ({"cursor": "x" * 100_000}, "cursor"),
    ({"thread_id": "t" * 10_000}, "thread_id"),
    ({"tool_name": "n" * 1_000}, "tool_name"),
    ({"cursor": "\ud800"}, "cursor"),
    ({"thread_id": "🦜" * 50}, "thread_id"),
    ({"thread_id": "thread-0000000000"}, "thread_id"),
    ({"mode": "threads", "before": "yesterday"}, "before"),
    ({"mode": "threads", "after": "2026-13-45"}, "after"),
    ({"mode": "threads", "page": -1}, "page"),
    ({"mode": "threads", "after": "2026-03-10", "before": "2026-03-01"}, "after"),
    ({"unknown_field": 1}, "unknown_field"),
    ({"config": {"configurable": {"resource_id": "victim"}}}, "config"),
    ({"resource_id": "victim"}, "resource_id"),
]


@pytest.mark.parametrize(("args", "mentions"), HOSTILE, ids=[str(i) for i in range(len(HOSTILE))])
async def test_hostile_arguments_get_clear_errors(store: OMStore, args: dict[str, Any], mentions: str) -> None:
    _om, tool = await _setup(store)
    out = await tool.ainvoke(args)
    text = _check(out, expect_error=True)
    assert mentions in text


async def test_hostile_tool_calls_become_error_tool_messages(store: OMStore) -> None:
    _om, tool = await _setup(store)
    for args, _ in HOSTILE[:12]:
        out = await tool.ainvoke({"name": "recall", "args": args, "id": "c1", "type": "tool_call"})
        assert isinstance(out, ToolMessage) and out.status == "error", args
        assert SECRET not in str(out.content)


async def test_own_data_still_readable_and_threads_list_only_own(store: OMStore) -> None:
    _om, tool = await _setup(store)
    own = await tool.ainvoke({"limit": 2})
    assert isinstance(own, dict) and "att question 0" in own["messages"]
    listed = await tool.ainvoke({"mode": "threads", "limit": 100})
    assert isinstance(listed, dict) and listed["count"] == 1
    assert "victim" not in listed["threads"]
    huge_page = await tool.ainvoke({"mode": "threads", "page": 99_999, "limit": 100})
    assert isinstance(huge_page, dict) and huge_page["count"] == 0
    far = await tool.ainvoke({"page": 99_999})
    assert isinstance(far, dict) and far["count"] == 0 and far["has_prev_page"]


async def test_config_cannot_switch_a_bound_tool_to_another_resource(store: OMStore) -> None:
    _om, tool = await _setup(store)
    cfg: Any = {"configurable": {"thread_id": "victim-thread", "resource_id": "victim"}}
    out = await tool.ainvoke({"limit": 5}, config=cfg)
    _check(out, expect_error=False)
    assert isinstance(out, dict) and out["thread_id"] == "att-thread"


_junk = st.one_of(
    st.none(),
    st.text(max_size=60),
    st.sampled_from(["victim-m1", "victim-m2", "victim-thread", "victim-t2", "current", "att-h0", "att-thread",
                     "vt2-h0", "victim-m1:victim-m2", "'; --", "%", "_", "\\", "thread-" + "0" * 10]),
)
_args = st.fixed_dictionaries({}, optional={
    "mode": st.sampled_from(["messages", "threads", "search", "bogus"]),
    "cursor": _junk,
    "thread_id": _junk,
    "query": _junk,
    "anchor": st.sampled_from(["start", "end", "middle"]),
    "page": st.one_of(st.integers(min_value=-(10**15), max_value=10**15), st.integers(-3, 3)),
    "limit": st.one_of(st.integers(min_value=-(10**9), max_value=10**9), st.integers(-2, 30)),
    "detail": st.sampled_from(["low", "high", "ultra"]),
    "part_type": st.sampled_from(["text", "tool-call", "tool-result", "reasoning", "image", "file", "x"]),
    "tool_name": _junk,
    "part_index": st.one_of(st.none(), st.integers(min_value=-(10**6), max_value=10**6)),
    "before": _junk,
    "after": _junk,
})


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"], indirect=True)
async def test_fuzzed_arguments_never_leak_or_crash(store: OMStore) -> None:
    _om, tool = await _setup(store)
    results: list[Any] = []

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(args=_args)
    def run(args: dict[str, Any]) -> None:
        results.append(args)

    run()
    assert len(results) >= 50
    for args in results:
        out = await tool.ainvoke(args)
        try:
            _check(out)
        except AssertionError as exc:
            raise AssertionError(f"recall({args!r}) -> {exc}") from None


SEARCHES = ["PIN", SECRET, "bank PIN", '"PIN" OR "bank"', "NEAR(bank PIN)", "PIN*", "*", "bank) OR (PIN",
            "scope: PIN", "'PIN' | 'bank'", "Noted"]


@pytest.mark.parametrize("query", SEARCHES)
async def test_search_never_finds_another_users_messages(store: OMStore, query: str) -> None:
    om, tool = await _setup(store)
    out = await tool.ainvoke({"mode": "search", "query": query})
    _check(out, expect_error=False)
    victim_tool = om.recall_tool(thread_id="victim-thread", resource_id="victim")
    own = await victim_tool.ainvoke({"mode": "search", "query": "bank PIN noted"})
    assert isinstance(own, dict) and SECRET in own["results"]  # the words are indexed: the victim finds them
