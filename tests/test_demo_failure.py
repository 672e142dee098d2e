"""Issue 16, item 6: the demo fails honestly when OM's model calls fail."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import BaseMessage
from om_fakes import CallableFake

from langchain_om.cli.commands import main

_REQUEST = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")


class Unauthorized(CallableFake):
    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(list(messages))
        raise openai.AuthenticationError("Incorrect API key provided: sk-wrong",
                                         response=httpx.Response(401, request=_REQUEST), body=None)


@pytest.fixture
def broken_model(monkeypatch: pytest.MonkeyPatch) -> tuple[str, Unauthorized]:
    import langchain.chat_models
    import langchain.chat_models.base as chat_base

    name = f"scripted:broken-{uuid.uuid4().hex[:8]}"
    model = Unauthorized(fn=lambda _m: "")
    real = langchain.chat_models.init_chat_model

    def fake_init(spec: str, **kwargs: object) -> object:
        return model if spec == name else real(spec, **kwargs)

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    monkeypatch.setitem(chat_base._BUILTIN_PROVIDERS, "scripted", ("langchain_om", "Unauthorized", fake_init))
    monkeypatch.setenv("COLUMNS", "200")
    return name, model


def test_a_failing_model_stops_the_demo_with_one_line_and_a_rerun_continues(
    broken_model: tuple[str, Unauthorized], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, model = broken_model
    db = str(tmp_path / "demo.db")
    assert main(["demo", "--db", db, "--model", name, "--fast"]) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("error:")]  # errors go to stderr
    assert len(errors) == 1 and "AuthenticationError" in errors[0] and "rerun" in errors[0]
    assert (captured.out + captured.err).count("Incorrect API key") == 1, "said once, not once per step"
    assert len(model.prompts) == 1, "stopped at the first failure instead of replaying every step"
    assert main(["demo", "--db", db, "--scripted", "--fast"]) == 0
    rerun = capsys.readouterr().out
    assert "already replayed" not in rerun
    assert "Resuming" in rerun


def test_a_missing_key_is_reported_before_any_step(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    db = tmp_path / "demo.db"
    assert main(["demo", "--db", str(db), "--model", "openai:gpt-5-mini", "--fast"]) == 1
    captured = capsys.readouterr()
    assert "OPENAI_API_KEY" in captured.err
    assert len([line for line in (captured.out + captured.err).splitlines() if line.strip()]) <= 3


def test_inspect_shows_the_running_spend_of_the_thread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    db = str(tmp_path / "om.db")
    monkey_columns = pytest.MonkeyPatch()
    monkey_columns.setenv("COLUMNS", "200")
    try:
        assert main(["demo", "--db", db, "--fast", "--scripted", "--steps", "30"]) == 0
        capsys.readouterr()
        assert main(["inspect", "demo-trip", "--db", db, "--json"]) == 0
        spend = json.loads(capsys.readouterr().out)["status"]["spend"]
        assert spend["observer"]["calls"] >= 1 and spend["observer"]["input_tokens"] > 0
        assert main(["inspect", "demo-trip", "--db", db]) == 0
        out = capsys.readouterr().out
        assert f"observer: {spend['observer']['calls']} calls" in out
    finally:
        monkey_columns.undo()
