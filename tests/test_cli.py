"""The ``langchain-om`` console script: demo, inspect and eval, in-process and in fresh processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_om.cli import main
from langchain_om.demo import load_conversation, split_steps

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter, as the console script would be (no API keys, repo on the path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "140"
    return subprocess.run([sys.executable, "-m", "langchain_om.cli", *args], cwd=cwd, env=env, text=True,
                          capture_output=True, timeout=120, check=False)


def test_demo_then_inspect_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "om.db")
    assert main(["demo", "--db", db, "--fast", "--scripted", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "SCRIPTED" in out and "Final observation log" in out
    assert main(["inspect", "demo-trip", "--db", db]) == 0
    out = capsys.readouterr().out
    assert "Observation groups" in out and "generation" in out
    assert "/ 1200 tokens" in out and "/ 1500 tokens" in out  # the demo's thresholds, recorded on the thread
    assert "Date: 2026-03-" in out

    assert main(["inspect", "demo-trip", "--db", db, "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    steps = split_steps(load_conversation())
    assert payload["stored_messages"] == sum(len(s) for s in steps[:30])
    record = payload["record"]
    assert record["groups"] and all(g["start_id"].startswith("demo-trip:") for g in record["groups"])
    assert payload["status"]["windows"]["active"]["messages"]["threshold"] == 1200
    assert payload["status"]["generationCount"] == record["generation_count"]


def test_inspect_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "nope", "--db", str(tmp_path / "missing.db")]) == 1
    assert "no such database file" in capsys.readouterr().out
    db = str(tmp_path / "om.db")
    assert main(["demo", "--db", db, "--fast", "--scripted", "--steps", "2"]) == 0
    capsys.readouterr()
    assert main(["inspect", "nope", "--db", db]) == 1
    assert "thread 'nope' not found" in capsys.readouterr().out


def test_bad_arguments_exit_with_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--message-tokens", "0"])
    assert exc.value.code == 2
    assert "--message-tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "longmemeval", "--model", "openai:gpt-5-mini"])  # --data missing
    assert exc.value.code == 2
    with pytest.raises(SystemExit):
        main([])


def test_eval_reports_a_missing_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "longmemeval", "--data", str(tmp_path / "none.json"), "--model", "openai:gpt-5-mini",
                 "--out", str(tmp_path / "r.jsonl")])
    assert code == 1
    assert "--data" in capsys.readouterr().out


def test_restart_in_new_processes_continues_the_thread(tmp_path: Path) -> None:
    """Process 1 replays 25 steps and exits; process 2 continues; process 3 inspects the same file."""
    first = _run("demo", "--db", "om.db", "--steps", "25", "--fast", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "SCRIPTED" in first.stdout  # no API key in the environment -> scripted, and it says so
    second = _run("demo", "--db", "om.db", "--fast", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert "Resuming: steps 1-25" in second.stdout
    inspected = _run("inspect", "demo-trip", "--db", "om.db", "--json", cwd=tmp_path)
    assert inspected.returncode == 0, inspected.stderr
    payload = json.loads(inspected.stdout)
    assert payload["stored_messages"] == len(load_conversation())
    assert payload["record"]["generation_count"] >= 2
    ids = [g["start_id"] for g in payload["record"]["groups"]]
    assert len(ids) == len(set(ids))


def test_help_lists_the_commands(tmp_path: Path) -> None:
    result = _run("--help", cwd=tmp_path)
    assert result.returncode == 0
    for command in ("demo", "inspect", "eval"):
        assert command in result.stdout
