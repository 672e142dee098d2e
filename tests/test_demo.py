"""The offline demo: the bundled conversation, both thresholds crossed, a dated log, and resuming a thread."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from rich.console import Console

from langchain_om.cli.demo import (
    SCRIPTED_NOTICE,
    DemoDataError,
    arun_demo,
    bundled_conversation_path,
    choose_model,
    load_conversation,
    split_steps,
)
from langchain_om.foundation.messages import message_timestamp
from langchain_om.store.base import implicit_resource
from langchain_om.store.sqlite import SQLiteStore


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=140, force_terminal=False), buffer


def test_bundled_conversation_is_long_multi_day_and_well_formed() -> None:
    raw = json.loads(bundled_conversation_path().read_text(encoding="utf-8"))
    assert len(raw) >= 150
    messages = load_conversation()
    days = {message_timestamp(m).date() for m in messages}  # type: ignore[union-attr]
    assert len(days) >= 5
    stamps = [message_timestamp(m) for m in messages]
    assert stamps == sorted(stamps), "timestamps must move forward"  # type: ignore[type-var]
    calls = [c["id"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    results = [m.tool_call_id for m in messages if isinstance(m, ToolMessage)]
    assert len(calls) >= 10 and Counter(calls) == Counter(results)
    steps = split_steps(messages)
    assert all(step[0].type == "human" for step in steps)
    assert sum(len(s) for s in steps) == len(messages)


async def test_demo_crosses_both_thresholds_and_resumes_on_the_same_db(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    console, buffer = _console()
    first = await arun_demo(db=db, max_steps=20, fast=True, console=console, env={})
    printed = " ".join(buffer.getvalue().split())
    assert first.scripted and "SCRIPTED Observer/Reflector" in printed
    assert " ".join(SCRIPTED_NOTICE.split()) in printed
    assert first.resumed_from == 0 and len(first.steps) == 20 and not first.complete
    assert first.message_threshold_crossings >= 1

    console, buffer = _console()
    second = await arun_demo(db=db, fast=False, console=console, env={}, step_delay_s=0)
    output = buffer.getvalue()
    assert second.resumed_from == 20 and second.complete
    assert "Resuming: steps 1-20" in output
    steps = first.steps + second.steps
    assert [s.index for s in steps] == list(range(1, second.total_steps + 1))
    # message window: filled past its threshold and emptied by observation, several times
    assert first.message_threshold_crossings + second.message_threshold_crossings >= 3
    assert max(s.messages_tokens for s in steps) > 0.5 * steps[0].messages_threshold
    assert all(s.messages_tokens <= 1.2 * s.messages_threshold for s in steps)
    # observation log: crossed its threshold and was reflected (generation count grows)
    assert first.reflections + second.reflections >= 2
    assert second.generation_count >= 2
    gens = [s.generation_count for s in steps]
    assert gens == sorted(gens) and gens[-1] == second.generation_count
    # reflection keeps the log near its threshold (buffered reflections swap in late by design)
    assert all(s.observation_tokens <= 1.5 * s.observation_threshold for s in steps)
    assert second.failures == 0 and first.failures == 0
    # the final log is non-empty and dated with the conversation's dates, and printed
    log = second.final_log
    assert log.strip()
    assert re.search(r"Date: 2026-03-\d\d \(\w+day\)", log)
    assert re.search(r"\(\d\d:\d\d\)", log)
    assert "Final observation log" in output and "Sam" in output
    assert re.search(r"step +\d+ +messages \d+/1200 +observations \d+/1500 +gen \d+", output)
    # the context stays bounded while every raw message is kept
    assert second.stored_messages == len(load_conversation())
    assert second.context_tokens < second.history_tokens / 2
    assert second.elapsed_s < 60

    # a third run on the same file has nothing to replay and shows the same state
    console, buffer = _console()
    third = await arun_demo(db=db, fast=True, console=console, env={})
    assert third.steps == [] and third.resumed_from == third.total_steps
    assert third.final_log == second.final_log and third.generation_count == second.generation_count
    assert "already replayed" in buffer.getvalue()

    store = SQLiteStore(str(db))
    await store.asetup()
    try:
        stored = await store.aget_messages(implicit_resource("demo-trip"), "demo-trip")
        assert len({m.id for m in stored}) == len(stored) == len(load_conversation())
    finally:
        await store.aclose()


async def test_demo_threshold_options_and_separate_threads(tmp_path: Path) -> None:
    console, _ = _console()
    result = await arun_demo(db=tmp_path / "x.db", thread_id="other", message_tokens=4000,
                             observation_tokens=30_000, max_steps=10, fast=True, console=console, env={})
    assert result.steps[0].messages_threshold == 4000
    assert result.steps[0].observation_threshold == 30_000
    assert result.reflections == 0 and result.generation_count == 0
    with pytest.raises(ValueError, match="message_tokens"):
        await arun_demo(db=tmp_path / "y.db", message_tokens=0, console=console, env={})


def test_model_choice() -> None:
    assert choose_model(None, env={}).scripted
    openai = choose_model(None, env={"OPENAI_API_KEY": "sk-test"})
    assert not openai.scripted and openai.model == "openai:gpt-5-mini"
    google = choose_model(None, env={"GOOGLE_API_KEY": "g"})
    assert google.model == "google_genai:gemini-2.5-flash"
    assert choose_model("openai/gpt-5-mini", env={}).model == "openai:gpt-5-mini"
    assert choose_model("anthropic:claude-sonnet-4-5", env={}).model == "anthropic:claude-sonnet-4-5"
    assert choose_model("openai:gpt-5-mini", env={"OPENAI_API_KEY": "x"}, scripted=True).scripted


def test_malformed_conversation_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "conv.json"
    bad.write_text(json.dumps([{"role": "user", "content": "hi", "timestamp": "2026-03-02T10:00:00Z"},
                               {"role": "assistant", "content": "hello"}]))
    with pytest.raises(DemoDataError, match=r"conversation\[1\]\.timestamp"):
        load_conversation(bad)
    bad.write_text(json.dumps([{"role": "robot", "content": "x", "timestamp": "2026-03-02T10:00:00Z"}]))
    with pytest.raises(DemoDataError, match=r"conversation\[0\]\.role"):
        load_conversation(bad)
    bad.write_text(json.dumps([{"role": "user", "content": "x", "timestamp": "soon"}]))
    with pytest.raises(DemoDataError, match=r"conversation\[0\]\.timestamp"):
        load_conversation(bad)
