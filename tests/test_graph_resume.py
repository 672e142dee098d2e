"""Resume in a new process (issue 3, item 1): a graph with ``add_observational_memory`` and a real
checkpointer runs 30 turns in one subprocess; a second subprocess continues the same thread.

The second process's first model input must be exactly what the first process's final state
says: the same OM system message (observation log) and the same message ids, plus the new
message. Nothing may be stored twice in OM's store.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.store.base import OMStore
from langchain_om.store.postgres import PostgresStore
from langchain_om.store.sqlite import SQLiteStore

WORKER = str(Path(__file__).parent / "workers" / "graph_worker.py")
FIRST_TURNS = 30
SECOND_TURNS = 6
RESUME_ID = "resume-question"
RESUME_TEXT = "What did I tell you about my budget?"


def run_worker(report: Path, backend_args: list[str], *args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, WORKER, str(report), *backend_args, *args],
                          capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, f"worker failed:\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(report.read_text())
    return result


async def check_resume(tmp_path: Path, backend_args: list[str], mode: str, open_store: Callable[[], OMStore]) -> None:
    thread = f"resume-{uuid.uuid4().hex[:8]}"
    first = run_worker(tmp_path / "first.json", backend_args, "--mode", mode, "--thread", thread,
                       "--turns", str(FIRST_TURNS), "--headroom", "150")
    assert first["turns_run"] >= FIRST_TURNS
    assert len(first["seen"]) == first["turns_run"]
    state = first["state"]
    assert state[0]["id"] == OM_CONTEXT_MESSAGE_ID and "<observations>" in state[0]["content"], \
        "the first process observed: its state starts with the OM system message"
    assert state[-1]["type"] == "ai"
    assert len(state) < first["turns_run"], "the checkpointed state is bounded"
    assert [m["id"] for m in first["seen"][-1]] == [m["id"] for m in state[:-1]]

    second = run_worker(tmp_path / "second.json", backend_args, "--mode", mode, "--thread", thread,
                        "--message", f"{RESUME_ID}={RESUME_TEXT}", "--first-turn", str(first["turns_run"]),
                        "--turns", str(SECOND_TURNS))
    assert second["version_before"] == first["version_after"], "the second process reads the same record"
    resumed = second["seen"][0]
    # the second process's first model input is the first process's final state plus the new message
    assert [m["id"] for m in resumed] == [m["id"] for m in state] + [RESUME_ID]
    assert resumed[0]["content"] == state[0]["content"], "same observation log and hints"
    assert resumed[-1]["content"] == RESUME_TEXT
    assert [m["content"] for m in resumed[1:-1]] == [m["content"] for m in state[1:]]
    for index, seen in enumerate(second["seen"]):
        ids = [m["id"] for m in seen]
        assert len(ids) == len(set(ids)), f"call {index}: no message twice in the model input"
        assert [m["type"] for m in seen].count("system") == 1 and seen[0]["id"] == OM_CONTEXT_MESSAGE_ID
        assert seen[-1]["type"] == "human"

    # OM's store holds every message exactly once (the last reply is stored by the next step)
    store = open_store()  # opened only after both processes exited
    await store.asetup()
    try:
        stored = await store.aget_messages("resume-user", thread)
    finally:
        await store.aclose()
    counts = Counter(m.id for m in stored)
    assert [mid for mid, n in counts.items() if n > 1] == [], "no message stored twice"
    total_turns = first["turns_run"] + 1 + SECOND_TURNS
    assert len(stored) == 2 * total_turns - 1
    human_ids = [m.id for m in stored if m.data.get("type") == "human"]
    assert human_ids[first["turns_run"]] == RESUME_ID
    assert human_ids[:3] == ["human-0", "human-1", "human-2"]
    final = second["state"]
    assert final[0]["id"] == OM_CONTEXT_MESSAGE_ID
    assert [m["id"] for m in second["seen"][-1]] == [m["id"] for m in final[:-1]]


@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_resume_in_a_new_process_sqlite_saver(mode: str, tmp_path: Path) -> None:
    backend = ["--backend", "sqlite", "--dir", str(tmp_path)]
    await check_resume(tmp_path, backend, mode, lambda: SQLiteStore(tmp_path / "om.db"))


@pytest.mark.postgres
@pytest.mark.parametrize("mode", ["sync", "async"])
async def test_resume_in_a_new_process_postgres_saver(mode: str, tmp_path: Path, pg_dsn: str, pg_schema: str) -> None:
    backend = ["--backend", "postgres", "--dsn", pg_dsn, "--schema", pg_schema]
    await check_resume(tmp_path, backend, mode, lambda: PostgresStore(pg_dsn, schema=pg_schema))
