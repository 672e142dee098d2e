"""Issue 46, item 3: the opt-in local-model tier, and the benchmark that drives it.

``test_om_on_the_local_model`` runs only with ``LANGCHAIN_OM_LOCAL_MODEL=path.gguf`` (or an
``init_chat_model`` string) and never in CI (the ``local_model`` marker, tests/conftest.py). The
other test runs the same benchmark code in every run, with scripted models that misbehave the way
the recorded Qwen2.5 replies did, so the instrument itself cannot rot."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from benchmarks.local_model import arun, local_model
from langchain_om.testing import ScriptedObserverModel

RECORDED = {row["name"]: row["reply"] for row in map(json.loads, (Path(__file__).parent / "data" /
                                                                  "local_model_replies.jsonl").read_text("utf-8")
                                                     .splitlines())}


class MisbehavingModel(ScriptedObserverModel):
    """Answers OM's first prompts as the recorded small model did (a refusal, the transcript echoed
    back), then like a compliant Observer; as the agent, it answers from what it was given."""

    def _reply(self, messages, index):  # type: ignore[no-untyped-def]
        from langchain_core.messages import AIMessage

        if index < 2:
            return AIMessage([RECORDED["refusal"], RECORDED["transcript_echo"]][index])
        if "Observer" in str(messages[0].content)[:80] or "Reflector" in str(messages[0].content)[:80]:
            return super()._reply(messages, index)
        return AIMessage("From memory: " + str(messages[0].content)[-2000:])


async def test_the_local_model_benchmark_reports_refused_and_repaired_replies() -> None:
    result = await arun(MisbehavingModel(), messages=12, message_tokens=300)
    assert result["replies"].get("observer:refused", 0) >= 2, "the refusal and the transcript echo were refused"
    assert "Toronto" in result["observation_log"] and "[2026-03-02 19:" not in result["observation_log"]
    assert all(re.match(r"Date: \d{4}-\d{2}-\d{2} \(\w+\)$", line) for line in result["observation_log"].splitlines()
               if line.startswith("Date:"))
    assert result["wall_s"] >= 0 and len(result["oracle"]) == 3
    assert any(answer["right"] for answer in result["oracle"])


@pytest.mark.local_model
async def test_om_on_the_local_model() -> None:
    """Slow (minutes a call): nothing wrong stored, no crash, every turn bounded by the budget."""
    model = local_model(os.environ["LANGCHAIN_OM_LOCAL_MODEL"])
    result = await arun(model, messages=6, message_tokens=300, turn_budget="15m")
    print(json.dumps(result, ensure_ascii=False, indent=2))
    for line in result["observation_log"].splitlines():
        assert not line.strip() or line.startswith(("Date: ", "* ", "  ")), line
        assert not re.match(r"\s*\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\]", line), "no transcript echo is stored"
    assert result["turn_s"]["max"] <= 15 * 60 + 60

