"""The LongMemEval harness on a small synthetic file with scripted models.

The scripted answer model answers only when the evidence for the question is in the
prompt OM built (so a correct answer proves the memory carried the fact); the scripted
judge compares the response with the reference inside the judge prompt.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from rich.console import Console

from langchain_om.eval.longmemeval import (
    EvalSettings,
    LongMemEvalDataError,
    arun_longmemeval,
    haystack_steps,
    load_longmemeval,
    parse_lme_date,
    read_results,
)
from langchain_om.eval.prompts import judge_prompt, parse_verdict
from langchain_om.testing import ScriptedChatModel, ScriptedObserverModel

DATA = Path(__file__).parent / "data" / "longmemeval_mini.json"

# question -> (phrases that must be in the prompt for the scripted model to answer, its answer)
EVIDENCE: dict[str, tuple[tuple[str, ...], str]] = {
    "What breed is my dog?": (("Australian Shepherd",), "Your dog Biscuit is an Australian Shepherd."),
    "What was the pasta dish you recommended for my dinner party?": (("cacio e pepe",), "I recommended cacio e pepe."),
    "How many days passed between starting my pottery class and finishing my first vase?": (
        ("started a pottery class", "finished my first vase", "2023-04-03", "2023-04-15"), "12 days."),
    "Where do I work now?": (("Lumen Robotics",), "You work at Lumen Robotics now."),
    "How many musical instruments do I currently own?": (("ukulele", "cello", "keyboard"),
                                                         "You own 3 instruments: a ukulele, a cello and a keyboard."),
    "What is the name of my cat?": (("my cat is named",), "Your cat is called Whiskers."),
}
DONT_KNOW = "I don't know; that was never mentioned."


def _text(message: BaseMessage) -> str:
    return message.content if isinstance(message.content, str) else str(message.content)


def scripted_answer(messages: list[BaseMessage]) -> str:
    question = _text([m for m in messages if isinstance(m, HumanMessage)][-1])
    phrases, reply = EVIDENCE[question]
    prompt = "\n".join(_text(m) for m in messages).lower()
    return reply if all(p.lower() in prompt for p in phrases) else DONT_KNOW


def _tag(text: str, name: str) -> str:
    match = re.search(rf"<{name}>\n(.*?)\n</{name}>", text, re.DOTALL)
    assert match, f"judge prompt lacks <{name}>"
    return match.group(1)


def scripted_judge(messages: list[BaseMessage]) -> str:
    prompt = _text(messages[-1])
    response = _tag(prompt, "response").lower()
    if "unanswerable" in prompt:
        return "yes" if "don't know" in response else "no"
    return "Yes." if _tag(prompt, "reference-answer").lower() in response else "No"


def _settings(tmp_path: Path, **overrides: Any) -> tuple[EvalSettings, ScriptedChatModel, ScriptedChatModel]:
    answer = ScriptedChatModel(responses=[scripted_answer])
    judge = ScriptedChatModel(responses=[scripted_judge])
    base: dict[str, Any] = dict(data=DATA, model=answer, judge_model=judge, om_model=ScriptedObserverModel(),
                                out=tmp_path / "results.jsonl", concurrency=3, message_tokens=300,
                                observation_tokens=400)
    base.update(overrides)
    return EvalSettings(**base), answer, judge


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_dataset_matches_the_published_format() -> None:
    items = load_longmemeval(DATA)
    assert len(items) == 6
    assert {i.question_type for i in items} >= {"single-session-user", "single-session-assistant",
                                                "temporal-reasoning", "knowledge-update", "multi-session"}
    assert [i.question_id for i in items if i.abstention] == ["mini_ssu_02_abs"]
    steps = haystack_steps(items[2])
    first = steps[0][0][0]
    assert first.response_metadata["created_at"].startswith("2023-04-03T19:30")
    assert all(m.type == "human" for session in steps for m in [s[0] for s in session])


async def test_full_run_scores_by_type_and_memory_carries_the_evidence(tmp_path: Path) -> None:
    settings, answer, judge = _settings(tmp_path)
    summary = await arun_longmemeval(settings, console=_quiet())
    rows = _lines(tmp_path / "results.jsonl")
    assert len(rows) == 6 and summary.errors == 0
    by_id = {r["question_id"]: r for r in rows}
    # OM really observed the haystack: the answer prompt holds observations, not the whole raw history
    for row in rows:
        assert row["om"]["observation_tokens"] > 0, row["question_id"]
        assert row["om"]["groups"] >= 1
    assert any(r["om"]["generation_count"] >= 1 for r in rows), "no question crossed the reflection threshold"
    # user facts (🔴 in the scripted observer) survive observation and reflection
    for qid in ("mini_ssu_01", "mini_ku_01", "mini_ms_01"):
        assert by_id[qid]["correct"], by_id[qid]["hypothesis"]
    assert by_id["mini_ssu_02_abs"]["correct"] and by_id["mini_ssu_02_abs"]["hypothesis"] == DONT_KNOW
    # each verdict agrees with what the answer model could see
    prompts = {_text([m for m in call if isinstance(m, HumanMessage)][-1]): call for call in answer.calls}
    for row in rows:
        call = prompts[row["question"]]
        assert isinstance(call[0], SystemMessage)
        # the production context: one system message (instructions, then OM's context stating the
        # question's date); no harness-only date line, no dates pasted into the messages
        asked = parse_lme_date(row["question_date"])
        assert f"Today is {asked:%A}, {asked.date().isoformat()}." in _text(call[0])
        assert row["question_date"] not in _text(call[0])
        assert sum(isinstance(m, SystemMessage) for m in call) == 1
        expected = scripted_answer(call)
        assert row["hypothesis"] == expected
    # the summary is exactly the rows' tally
    assert summary.overall.total == 6
    assert summary.overall.correct == sum(r["correct"] for r in rows)
    for qtype, score in summary.by_type.items():
        assert score.total == sum(1 for r in rows if r["question_type"] == qtype)
        assert score.correct == sum(1 for r in rows if r["question_type"] == qtype and r["correct"])
    assert summary.abstention.total == 1
    assert len(judge.calls) == 6


async def test_resume_after_interruption_answers_each_question_once(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    settings, _, _ = _settings(tmp_path, limit=2, concurrency=2)
    first = await arun_longmemeval(settings, console=_quiet())
    assert first.answered_this_run == 2 and first.pending == 4
    done_first = {r["question_id"] for r in _lines(out)}
    assert len(done_first) == 2
    # an interrupted write leaves half a line behind
    with out.open("a") as handle:
        handle.write('{"question_id": "mini_tr_01", "question_ty')
    settings2, answer2, _ = _settings(tmp_path)
    second = await arun_longmemeval(settings2, console=_quiet())
    assert second.skipped == 2 and second.answered_this_run == 4 and second.pending == 0
    asked_again = {_text([m for m in c if isinstance(m, HumanMessage)][-1]) for c in answer2.calls}
    questions = {i.question_id: i.question for i in load_longmemeval(DATA)}
    assert not asked_again & {questions[q] for q in done_first}
    results = read_results(out)
    ids = [json.loads(line)["question_id"] for line in out.read_text().splitlines()
           if line.strip() and line.strip().endswith("}")]
    assert sorted(ids) == sorted(questions) and len(ids) == len(set(ids)) == 6
    assert set(results) == set(questions)
    # a third run has nothing left to do and reports the same totals
    settings3, answer3, _ = _settings(tmp_path)
    third = await arun_longmemeval(settings3, console=_quiet())
    assert third.answered_this_run == 0 and answer3.calls == []
    assert third.overall.total == 6 and third.overall.correct == second.overall.correct


async def test_a_failing_question_is_reported_and_retried_next_run(tmp_path: Path) -> None:
    def flaky(messages: list[BaseMessage]) -> str:
        if "pottery" in _text(messages[-1]):
            raise RuntimeError("provider down")
        return scripted_answer(messages)

    settings, _, _ = _settings(tmp_path, model=ScriptedChatModel(responses=[flaky]))
    summary = await arun_longmemeval(settings, console=_quiet())
    assert summary.errors == 1 and "mini_tr_01" in summary.error_messages[0]
    assert "mini_tr_01" not in read_results(tmp_path / "results.jsonl")
    settings2, _, _ = _settings(tmp_path)
    again = await arun_longmemeval(settings2, console=_quiet())
    assert again.answered_this_run == 1 and again.overall.total == 6


def test_bad_data_names_the_field(tmp_path: Path) -> None:
    raw = json.loads(DATA.read_text())
    raw[1]["haystack_dates"] = raw[1]["haystack_dates"][:1]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LongMemEvalDataError, match=r"data\[1\]"):
        load_longmemeval(bad)
    raw = json.loads(DATA.read_text())
    raw[0]["question_date"] = "yesterday"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LongMemEvalDataError, match=r"data\[0\]\.question_date"):
        load_longmemeval(bad)
    raw = json.loads(DATA.read_text())
    raw[3]["haystack_sessions"][0][0]["role"] = "system"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LongMemEvalDataError, match=r"data\[3\]\.haystack_sessions\.0\.0\.role"):
        load_longmemeval(bad)
    with pytest.raises(FileNotFoundError, match="--data"):
        load_longmemeval(tmp_path / "missing.json")


async def test_settings_are_validated(tmp_path: Path) -> None:
    settings, _, _ = _settings(tmp_path, concurrency=0)
    with pytest.raises(ValueError, match="concurrency"):
        await arun_longmemeval(settings, console=_quiet())
    settings, _, _ = _settings(tmp_path, question_types=["no-such-type"])
    with pytest.raises(ValueError, match="question_type"):
        await arun_longmemeval(settings, console=_quiet())


def test_dates_and_verdicts() -> None:
    moment = parse_lme_date("2023/05/30 (Tue) 23:40")
    assert (moment.year, moment.month, moment.day, moment.hour, moment.minute) == (2023, 5, 30, 23, 40)
    assert parse_lme_date("2023-05-30T10:00:00+02:00").hour == 10
    with pytest.raises(ValueError):
        parse_lme_date("next tuesday")
    assert parse_verdict("Yes.") is True
    assert parse_verdict("no, the response names a different city") is False
    assert parse_verdict("The answer is correct") is None
    abstain = judge_prompt(question="q", answer="not enough info", response="r", question_type="multi-session",
                           abstention=True)
    assert "unanswerable" in abstain
    temporal = judge_prompt(question="q", answer="a", response="r", question_type="temporal-reasoning",
                            abstention=False)
    assert "off by one" in temporal
