"""The ``langchain-om`` console script: demo, inspect and eval, in-process and in fresh processes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_om.cli.commands import main
from langchain_om.cli.demo import load_conversation, split_steps

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A fresh interpreter, as the console script would be (no API keys, repo on the path)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "140"
    return subprocess.run([sys.executable, "-m", "langchain_om.cli.commands", *args], cwd=cwd, env=env, text=True,
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
    assert payload["status"]["generation_count"] == record["generation_count"]
    assert payload["last_observed_message"]["id"].startswith("demo-trip:")


def test_inspect_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "nope", "--db", str(tmp_path / "missing.db")]) == 1
    assert "no such database file" in capsys.readouterr().err
    db = str(tmp_path / "om.db")
    assert main(["demo", "--db", db, "--fast", "--scripted", "--steps", "2"]) == 0
    capsys.readouterr()
    assert main(["inspect", "nope", "--db", db]) == 1
    assert "thread 'nope' not found" in capsys.readouterr().err


def test_bad_arguments_exit_with_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--message-tokens", "0"])
    assert exc.value.code == 2
    assert "--message-tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["eval", "longmemeval", "--model", "openai:gpt-5-mini"])  # --data missing
    assert exc.value.code == 2
    capsys.readouterr()
    assert main([]) == 0  # no command: the help, not an error (issue 31)
    assert "usage: langchain-om" in capsys.readouterr().out


def test_eval_reports_a_missing_data_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["eval", "longmemeval", "--data", str(tmp_path / "none.json"), "--model", "openai:gpt-5-mini",
                 "--out", str(tmp_path / "r.jsonl")])
    assert code == 1
    assert "--data" in capsys.readouterr().err


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


# ---------------------------------------------------------------- eval longmemeval, success path

LME_DATA = ROOT / "tests" / "data" / "longmemeval_mini.json"


@pytest.fixture
def scripted_models(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Model strings that ``init_chat_model`` resolves to the scripted answer model, judge and Observer.

    The CLI resolves ``--model``/``--judge-model`` in the harness and ``--om-model`` in OM; both go
    through ``langchain.chat_models.init_chat_model``, so one patch serves all three. Unique names
    keep OM's per-string model cache from handing a model to another test.
    """
    import uuid

    import langchain.chat_models
    from test_longmemeval import scripted_answer, scripted_judge

    from langchain_om.testing import ScriptedChatModel, ScriptedObserverModel

    tag = uuid.uuid4().hex[:8]
    names = {"answer": f"scripted:answer-{tag}", "judge": f"scripted:judge-{tag}", "om": f"scripted:observer-{tag}"}
    factories = {
        names["answer"]: lambda: ScriptedChatModel(responses=[scripted_answer]),
        names["judge"]: lambda: ScriptedChatModel(responses=[scripted_judge]),
        names["om"]: ScriptedObserverModel,
    }
    real = langchain.chat_models.init_chat_model

    def fake_init(model: str, **kwargs: object) -> object:
        if model in factories:
            return factories[model]()
        return real(model, **kwargs)

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    # OM checks model strings at construction against init_chat_model's providers: register ours
    import langchain.chat_models.base as chat_base

    monkeypatch.setitem(chat_base._BUILTIN_PROVIDERS, "scripted", ("langchain_om", "ScriptedObserverModel", fake_init))
    monkeypatch.setenv("COLUMNS", "160")  # rich sizes the accuracy table from it
    return names


def _eval_args(names: dict[str, str], tmp_path: Path, name: str, concurrency: int) -> list[str]:
    return ["eval", "longmemeval", "--data", str(LME_DATA), "--model", names["answer"],
            "--judge-model", names["judge"], "--om-model", names["om"], "--out", str(tmp_path / f"{name}.jsonl"),
            "--concurrency", str(concurrency), "--message-tokens", "300", "--observation-tokens", "400"]


def _rows(path: Path) -> dict[str, dict[str, object]]:
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {str(row["question_id"]): row for row in rows}


def test_eval_longmemeval_prints_accuracy_per_question_type(
    scripted_models: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(_eval_args(scripted_models, tmp_path, "run", 2)) == 0
    out = capsys.readouterr().out
    rows = _rows(tmp_path / "run.jsonl")
    assert len(rows) == 6 and (tmp_path / "run.jsonl.om.db").exists()
    assert "LongMemEval accuracy" in out and "6 questions" in out
    by_type: dict[str, list[bool]] = {}
    for row in rows.values():
        by_type.setdefault(str(row["question_type"]), []).append(bool(row["correct"]))
    assert len(by_type) == 5
    for qtype, hits in by_type.items():
        line = next(ln for ln in out.splitlines() if qtype in ln and "%" in ln)
        assert re.search(rf"\b{sum(hits)}\b.*\b{len(hits)}\b.*{100 * sum(hits) / len(hits):.1f}%", line), line
    correct = sum(hits.count(True) for hits in by_type.values())
    overall = next(ln for ln in out.splitlines() if "overall" in ln)
    assert f"{100 * correct / 6:.1f}%" in overall
    # the facts the scripted answer model can only know from OM's context were answered
    for qid in ("mini_ssu_01", "mini_ku_01", "mini_ms_01", "mini_ssu_02_abs"):
        assert rows[qid]["correct"], rows[qid]["hypothesis"]
    assert "6 answered this run" in out and "0 failed" in out
    # a second run resumes: nothing left to answer, same scores printed
    assert main(_eval_args(scripted_models, tmp_path, "run", 2)) == 0
    again = capsys.readouterr().out
    assert "0 answered this run, 6 resumed" in again
    assert next(ln for ln in again.splitlines() if "overall" in ln) == overall


def test_eval_longmemeval_concurrency_does_not_change_results(
    scripted_models: dict[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same answers, verdicts and scores with 4 questions in flight as with 1.

    OM's own bookkeeping per question (how many buffering cycles ran, hence the exact observation
    tokens) depends on when background buffering gets the event loop, which differs from run to
    run even at concurrency 1, so it is checked for coverage, not compared exactly.
    """
    assert main(_eval_args(scripted_models, tmp_path, "serial", 1)) == 0
    serial_out = capsys.readouterr().out
    assert main(_eval_args(scripted_models, tmp_path, "parallel", 4)) == 0
    parallel_out = capsys.readouterr().out
    assert "concurrency 1" in serial_out and "concurrency 4" in parallel_out
    serial, parallel = _rows(tmp_path / "serial.jsonl"), _rows(tmp_path / "parallel.jsonl")
    assert set(serial) == set(parallel) and len(serial) == 6
    outcome = ("question_type", "abstention", "question", "answer", "question_date", "hypothesis", "correct",
               "judge_reply", "judge_parsed")
    for qid, row in serial.items():
        other = parallel[qid]
        assert {k: row[k] for k in outcome} == {k: other[k] for k in outcome}, qid
        for om in (row["om"], other["om"]):
            assert isinstance(om, dict)
            assert om["steps"] == row["om"]["steps"] and om["sessions"] == row["om"]["sessions"]  # type: ignore[index]
            assert om["observation_tokens"] > 0 and om["groups"] >= 1
    # the printed accuracy table is the same, row by row
    def table_rows(out: str) -> list[str]:
        return [line for line in out.splitlines() if "%" in line and "accuracy" not in line.lower()]

    assert table_rows(serial_out) == table_rows(parallel_out) and len(table_rows(serial_out)) >= 7
