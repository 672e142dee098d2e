"""A Japanese conversation end to end: the bundled Japanese demo story's user turns through
``create_agent`` + ``ObservationalMemoryMiddleware`` on every store, observed away by OM, then
the agent's ``recall`` search in Japanese brings the raw messages back; plus how CJK renders on
the rest of the path (the demo and ``inspect`` tables, temporal markers, events, recall hints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.cli.commands import main
from langchain_om.cli.demo import bundled_conversation_path, load_conversation, split_steps
from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import RecallInput
from langchain_om.foundation.messages import message_timestamp
from langchain_om.integrations.callbacks import OMEventHandler
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


def japanese_user_turns() -> list[HumanMessage]:
    messages = load_conversation(bundled_conversation_path("ja"), id_prefix="ja")
    return [HumanMessage(str(m.content), response_metadata=m.response_metadata) for m in messages
            if isinstance(m, HumanMessage)]


def test_bundled_japanese_conversation_is_a_multi_day_story_with_tool_calls() -> None:
    messages = load_conversation(bundled_conversation_path("ja"), id_prefix="ja")
    stamps = [message_timestamp(m) for m in messages]
    assert stamps == sorted(stamps)  # type: ignore[type-var]
    assert len({s.date() for s in stamps if s is not None}) >= 5
    calls = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    assert len(calls) >= 8 and sorted(calls) == sorted(m.tool_call_id for m in messages if isinstance(m, ToolMessage))
    text = " ".join(str(m.content) for m in messages)
    assert "やっぱり京都じゃなくて金沢" in text and "訂正" in text  # changes of mind
    assert all(step[0].type == "human" for step in split_steps(messages))


async def test_japanese_conversation_through_create_agent_then_recall_search(store: OMStore) -> None:
    om = ObservationalMemory(store, model=ScriptedObserverModel(), retrieval=True,
                             observation={"message_tokens": 500, "buffer_tokens": False})
    turns = japanese_user_turns()
    searches = {len(turns): ("recall", {"mode": "search", "query": "魚アレルギー"}),
                len(turns) + 2: ("recall", {"mode": "search", "query": "露天風呂"})}
    model = ScriptedAgentModel(tool_calls_on=searches, reply_prefix="承知しました")
    handler = OMEventHandler()
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "家族旅行", "resource_id": "美咲"},
                              "callbacks": [handler]}
    for turn in turns:
        await agent.ainvoke({"messages": [turn]}, config)
        await om.await_background()
    record = await om.aget_record("家族旅行", resource_id="美咲")
    assert record.groups, "the early turns were observed"
    for question in ("両親の還暦", "さっきの話"):
        await agent.ainvoke({"messages": [HumanMessage(question)]}, config)
    first, second = model.calls[len(turns) + 1], model.calls[len(turns) + 3]
    allergy = [m for m in first if isinstance(m, ToolMessage) and m.name == "recall"][-1]
    assert allergy.status == "success"
    assert "母は魚アレルギーで、特にサバとアジがだめです。" in str(allergy.content)  # the raw words, not escaped
    assert "\\u" not in str(allergy.content)
    ryokan = [m for m in second if isinstance(m, ToolMessage) and m.name == "recall"][-1]
    assert "宿は旅館がいいです。露天風呂付きの部屋だと最高。" in str(ryokan.content)
    # the same search by the tool's own entry point, scoped to the resource: another resource finds nothing
    tool = om.recall_tool(thread_id="家族旅行", resource_id="美咲")
    found = await tool.arecall(RecallInput(mode="search", query="新幹線"))
    assert found["count"] >= 1 and "新幹線" in found["results"]
    stranger = om.recall_tool(thread_id="他人", resource_id="someone-else")
    assert (await stranger.arecall(RecallInput(mode="search", query="魚アレルギー")))["count"] == 0
    # events on the wire: camelCase JSON, Japanese text kept as it is
    raw = [event.model_dump_json(by_alias=True) for event in handler.events]
    ends = [json.loads(text) for text in raw if '"data-om-observation-end"' in text]
    assert ends and any("魚アレルギー" in str(part["data"].get("observations")) for part in ends)
    assert any("魚アレルギー" in text for text in raw)  # not \u-escaped
    await om.aclose()


def test_demo_lang_ja_then_inspect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "om.db")
    assert main(["demo", "--lang", "ja", "--db", db, "--fast", "--scripted"]) == 0
    out = capsys.readouterr().out
    assert "demo-trip-ja" in out and "Final observation log" in out
    assert "魚アレルギー" in out and "Date: 2026-04-06" in out
    # tables with East Asian widths: every line of a box is as wide as its border
    for box in _boxes(out):
        assert len({_cells(line) for line in box}) == 1, box
    assert main(["inspect", "demo-trip-ja", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "Observation groups" in out and "demo-trip-ja:" in out
    for box in _boxes(out):
        assert len({_cells(line) for line in box}) == 1, box
    assert main(["demo", "--lang", "ja", "--conversation", str(bundled_conversation_path()), "--db", db]) == 1
    assert "pass one of them" in capsys.readouterr().err


def _cells(line: str) -> int:
    """Terminal columns of a line (East Asian wide and fullwidth characters take two)."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in line)


def _boxes(text: str) -> list[list[str]]:
    """The consecutive lines of each bordered box or table rich printed."""
    boxes: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        if line[:1] in "╭│╰┌├└┏┃┡┣┗╞╘" and line.strip():
            current.append(line.rstrip("\n"))
        elif current:
            boxes.append(current)
            current = []
    if current:
        boxes.append(current)
    return boxes


def test_temporal_markers_and_status_keep_japanese(tmp_path: Path) -> None:
    from langchain_om.store.memory import InMemoryStore

    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), temporal_markers=True,
                             observation={"message_tokens": 200, "buffer_tokens": False})
    steps = split_steps(load_conversation(bundled_conversation_path("ja"), id_prefix="tm"))
    context: Any = None
    for step in steps[:8]:
        context = om.process("tm", step, now=message_timestamp(step[-1]))
    assert context is not None
    system = str(context.system_message.content)
    assert "Date: 2026-04-0" in system and any(word in system for word in ("還暦", "京都", "旅館"))
    assert "\\u" not in system
    om.close()


async def test_thresholds_count_japanese_with_exact_o200k() -> None:
    """The default counter is o200k itself (shipped offline): the message window of a Japanese
    conversation holds exactly the o200k count of its messages, not an estimate."""
    from langchain_om.foundation.tokens import TiktokenCounter, estimate_tokens
    from langchain_om.store.memory import InMemoryStore

    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(),
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    messages = load_conversation(bundled_conversation_path("ja"), id_prefix="count")[:12]
    context = await om.aprocess("count", messages, now=message_timestamp(messages[-1]))
    exact = TiktokenCounter()
    assert context.status.windows.active.messages.tokens == sum(exact.count_message(m) for m in messages)
    assert str(context.status.tokenizer).startswith("tiktoken:o200k")
    text = "".join(str(m.content) for m in messages)
    assert estimate_tokens(text) != len(exact.encoding.encode_ordinary(text))  # so the check above could fail
    await om.aclose()
