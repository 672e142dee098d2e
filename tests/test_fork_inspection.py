"""A fork can be inspected (issue 31, item 3): ``get_record`` / ``astatus`` given a checkpoint
read the memory that checkpoint names, and ``inspect --checkpoint`` / ``--branch`` do the same."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver

from langchain_om.cli.commands import main
from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.checkpoint_view import CheckpointPositionError
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store import SQLiteStore
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

COLOURS = ("red", "blue", "green", "pink", "gold")
JAPANESE = {"red": "赤", "blue": "青", "green": "緑", "pink": "桃色", "gold": "金"}


def turn(colour: str) -> HumanMessage:
    return HumanMessage(f"My favourite colour is {colour} ({JAPANESE[colour]}が好き). " + "More words. " * 20)


def colours(text: str) -> list[str]:
    return [c for c in COLOURS if f"colour is {c}" in text]


def run_five_turns_and_fork(om: ObservationalMemory, agent: Any, config: Any) -> list[Any]:
    after: list[Any] = []
    for colour in COLOURS:
        agent.invoke({"messages": [turn(colour)]}, config)
        after.append(agent.get_state(config).config)
    agent.invoke({"messages": [HumanMessage("Which colours did I mention? どの色?")]}, after[1])
    return after


def make_om(store: Any) -> ObservationalMemory:
    return ObservationalMemory(store, model=ScriptedObserverModel(), observation={"message_tokens": 150},
                               token_counter="estimator")


def test_get_record_and_status_read_the_memory_a_checkpoint_names() -> None:
    om = make_om(InMemoryStore())
    try:
        agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                             checkpointer=InMemorySaver())
        config = {"configurable": {"thread_id": "chat-1", "resource_id": "user-1"}}
        after = run_five_turns_and_fork(om, agent, config)
        fork = agent.get_state(config)  # the thread's latest checkpoint is the fork's
        original = om.get_record("chat-1", resource_id="user-1")
        assert colours(original.observations)[:4] == ["red", "blue", "green", "pink"]
        forked = om.get_record("chat-1", resource_id="user-1", checkpoint=fork)
        seen = colours(forked.observations)
        assert seen and seen == ["red", "blue"][: len(seen)], "the fork's memory: of turns 1-2 only"
        assert "赤" in forked.observations and forked.id != original.id
        # the same through a checkpoint config and the graph (or its saver), and through the raw state
        assert om.get_record("chat-1", checkpoint=fork.config, checkpointer=agent) == forked
        assert om.get_record("chat-1", checkpoint=fork.config, checkpointer=agent.checkpointer) == forked
        assert om.get_record("chat-1", checkpoint=fork.values) == forked
        # the first line's last checkpoint still names the first line's memory
        first_line = om.get_record("chat-1", checkpoint=after[4], checkpointer=agent)
        assert "pink" in colours(first_line.observations)
        status = om.status("chat-1", checkpoint=fork)
        assert status.record_id == forked.id and status.thread_id != "chat-1"
        assert status.windows.active.observations.tokens == forked.observation_tokens
        with pytest.raises(CheckpointPositionError, match="thread 'chat-1', not 'other'"):
            om.get_record("other", checkpoint=fork)
        with pytest.raises(CheckpointPositionError, match="om_position"):
            om.get_record("chat-1", checkpoint={"messages": []})
        with pytest.raises(CheckpointPositionError, match="checkpointer"):
            om.get_record("chat-1", checkpoint=fork.config)
        with pytest.raises(ValueError, match="resource_id"):
            om.get_record("chat-1", resource_id="someone-else", checkpoint=fork)
    finally:
        om.close()


def test_inspect_checkpoint_and_branch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "app.db")  # one SQLite file for OM and the LangGraph checkpointer
    om = make_om(SQLiteStore(db))
    conn = sqlite3.connect(db, check_same_thread=False)
    try:
        agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                             checkpointer=SqliteSaver(conn))
        config = {"configurable": {"thread_id": "chat-2"}}
        after = run_five_turns_and_fork(om, agent, config)
        fork = agent.get_state(config)
        branch = fork.values["om_position"]["branch"]
        checkpoint_id = fork.config["configurable"]["checkpoint_id"]
        first_id = after[4]["configurable"]["checkpoint_id"]
    finally:
        om.close()
        conn.close()
    capsys.readouterr()
    assert main(["inspect", "chat-2", "--db", db, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "pink" in colours(json.dumps(plain["record"])), "without a flag: the thread's original line"
    suffix = branch.split("branch:", 1)[1]
    assert any(suffix in b for b in plain["branches"]), "inspect lists the thread's forks"
    assert main(["inspect", "chat-2", "--db", db, "--checkpoint", checkpoint_id, "--json"]) == 0
    at_fork = json.dumps(json.loads(capsys.readouterr().out)["record"], ensure_ascii=False)
    assert colours(at_fork) and set(colours(at_fork)) <= {"red", "blue"} and "赤" in at_fork
    assert main(["inspect", "chat-2", "--db", db, "--branch", suffix, "--json"]) == 0
    on_branch = json.dumps(json.loads(capsys.readouterr().out)["record"], ensure_ascii=False)
    assert colours(on_branch) and set(colours(on_branch)) <= {"red", "blue"}
    assert main(["inspect", "chat-2", "--db", db, "--checkpoint", first_id]) == 0
    assert "pink" in capsys.readouterr().out
    assert main(["inspect", "chat-2", "--db", db, "--checkpoint", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error:") and "--checkpoint" in err and err.count("\n") == 1
    assert main(["inspect", "chat-2", "--db", db, "--branch", "nope"]) == 1
    assert "--branch" in capsys.readouterr().err
