"""LoCoMo end to end on a small synthetic file in locomo10.json's shape (the project ships none of
LoCoMo): its data read and checked, LoCoMo's token F1 per category, the harness through OM with
scripted models, resume; and the retrieval benchmark on it and on a LongMemEval file (issue 45)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from rich.console import Console

from benchmarks import longmemeval_recall
from langchain_om.cli.commands import main
from langchain_om.eval.locomo import LoCoMoSettings, arun_locomo, conversation_steps
from langchain_om.eval.locomo_data import LoCoMoDataError, iter_locomo, parse_locomo_date
from langchain_om.eval.locomo_score import LoCoMoScores, score_answer, token_f1
from langchain_om.eval.porter import stem
from langchain_om.testing import ScriptedChatModel

DATA = Path(__file__).parent / "data" / "locomo_mini.json"
LME = Path(__file__).parent / "data" / "longmemeval_mini.json"


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


def test_the_file_is_read_in_locomos_shape() -> None:
    samples = list(iter_locomo(DATA))
    assert [s.sample_id for s in samples] == ["mini-1", "mini-2"]
    first = samples[0]
    assert [s.number for s in first.sessions] == [1, 2]
    assert first.sessions[0].when == parse_locomo_date("1:56 pm on 8 May, 2023")
    assert first.sessions[0].when.hour == 13 and first.sessions[1].when.month == 6
    assert "[shares a photo: a photo of a beagle on a sandy beach]" in first.sessions[0].turns[3].text
    adversarial = [q for q in first.questions if q.adversarial]
    assert len(adversarial) == 1 and adversarial[0].answer == "" and adversarial[0].evidence_sessions == {2}
    assert samples[1].questions[0].answer == "2021"  # a number in the file
    steps = conversation_steps(first)
    assert [[m.type for m in step] for step in steps[0]] == [["human", "ai"], ["human", "ai"]]
    assert str(steps[0][0][0].content).startswith("Aiko: ")


def test_bad_files_name_the_field(tmp_path: Path) -> None:
    raw = json.loads(DATA.read_text())
    raw[1]["conversation"]["session_1_date_time"] = "sometime"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LoCoMoDataError, match=r"data\[1\]\.conversation\.session_1_date_time"):
        list(iter_locomo(bad))
    raw = json.loads(DATA.read_text())
    raw[0]["qa"][2]["category"] = "multi"
    bad.write_text(json.dumps(raw))
    with pytest.raises(LoCoMoDataError, match=r"data\[0\]\.qa\[2\]\.category"):
        list(iter_locomo(bad))


def test_scores_follow_locomos_rules() -> None:
    assert stem("visited") == stem("visits") == "visit" and stem("generalization") == "gener"
    assert token_f1("The pottery class!", "pottery class") == 1.0
    assert token_f1("She joined a class on pottery", "pottery class") == pytest.approx(2 * 0.4 * 1 / 1.4)
    assert token_f1("cello", "pottery class") == 0.0
    # multi-hop: each reference part matched with the best answer part
    assert score_answer("cello, beagle", "beagle, cello", 1) == 1.0
    assert score_answer("beagle", "beagle, cello", 1) == 0.5
    # open-domain: the reference up to ';'
    assert score_answer("museum", "museum; art gallery", 3) == 1.0
    # adversarial: declining is right, any answer wrong
    assert score_answer("Not mentioned in the conversation.", "", 5) == 1.0
    assert score_answer("She ran it in April", "", 5) == 0.0
    scores = LoCoMoScores.of([{"category": 4, "score": 1.0}, {"category": 2, "score": 0.5},
                              {"category": 5, "score": 1.0}])
    assert scores.overall.mean == 0.75 and scores.adversarial.mean == 1.0
    assert list(scores.by_category) == ["temporal", "single-hop", "adversarial"]


def _reader(messages: list[BaseMessage]) -> str:
    """Answers from OM's context only: the fact must be in the prompt, the question last."""
    question = str(messages[-1].content)
    context = "\n".join(str(m.content) for m in messages[:-1])
    facts = {"What class did Aiko join?": ("pottery class", "pottery class"),
             "What is Ben's dog called?": ("Pixel", "Pixel"),
             "Which city did Lena visit?": ("Porto", "2021")}
    if question in facts and facts[question][0] in context:
        return facts[question][1]
    return "Not mentioned in the conversation."


async def test_the_harness_scores_per_category_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "locomo.jsonl"
    answer = ScriptedChatModel(responses=[_reader])
    settings = LoCoMoSettings(data=DATA, model=answer, om_model="scripted", out=out, limit=1,
                              message_tokens=60, prices=["*=1,2"])
    first = await arun_locomo(settings, console=_quiet())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    questions = [r for r in rows if r["kind"] == "question"]
    assert [r["kind"] for r in rows][-1] == "sample" and len(questions) == 6
    by_q = {r["question"]: r for r in questions}
    assert by_q["What class did Aiko join?"]["score"] == 1.0 and by_q["What is Ben's dog called?"]["score"] == 1.0
    assert by_q["What did Aiko say about her marathon?"]["score"] == 1.0  # declined the adversarial question
    assert by_q["When did Aiko join the pottery class?"]["score"] == 0.0
    sample = rows[-1]
    assert sample["om"]["observation_tokens"] > 0 and sample["spend"]["observer"]["calls"] >= 1
    assert first.samples_done == 1 and first.samples_seen == 2
    assert first.scores.by_category["single-hop"].mean == 1.0 and first.scores.adversarial.count == 1
    assert first.projected_cost == pytest.approx(first.cost * 2) and first.cost is not None and first.cost > 0
    # the OM context the questions were asked on holds the conversation, and each question came last
    prompts = answer.calls
    assert all(isinstance(call[-1], HumanMessage) for call in prompts)
    assert not any(isinstance(m, AIMessage) and "Not mentioned" in str(m.content) for call in prompts for m in call)
    # a second run does only the other conversation
    again = await arun_locomo(LoCoMoSettings(data=DATA, model=ScriptedChatModel(responses=[_reader]),
                                             om_model="scripted", out=out), console=_quiet())
    assert again.answered_this_run == 1 and again.samples_done == 2
    assert again.scores.by_category["single-hop"].count == 3 and again.scores.by_category["single-hop"].mean == 1


def test_cli_runs_locomo_offline_and_names_bad_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    assert main(["eval", "locomo", "--data", str(DATA), "--model", "scripted", "--out", str(out),
                 "--category", "4", "--category", "5"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "LoCoMo" in printed and "single-hop" in printed and "adversarial" in printed and "temporal" not in printed
    assert main(["eval", "locomo", "--data", str(DATA), "--model", "scripted", "--out", str(out),
                 "--category", "9"]) == 1
    assert "--category" in capsys.readouterr().err


@pytest.mark.parametrize("data", [LME, DATA])
def test_retrieval_benchmark_finds_the_evidence(data: Path, tmp_path: Path) -> None:
    payload = longmemeval_recall.main(["--data", str(data), "--store", "memory", "--embedder", "fake",
                                       "--json", str(tmp_path / "r.json")])
    keyword = payload["methods"]["keyword"]
    assert set(payload["methods"]) == {"keyword", "semantic", "hybrid"}
    total = keyword["all"]
    # the mini files' evidence shares words with the questions (but for LoCoMo's "What pets and
    # instruments are mentioned?", whose evidence says "beagle" and "cello"): keyword search finds it
    assert total["r_any@10"] >= 0.85 and total["r_any@5"] >= 0.8 and 0 < total["ndcg@10"] <= 1
    assert 0 < total["turn@10"] <= 1
    if data == LME:  # abstention questions have no evidence and are left out
        assert total["n"] == 5 and "temporal-reasoning" in keyword
    else:
        assert total["n"] == 7 and "adversarial" in keyword
    assert payload["ingest_ms"]["p50"] > 0 and payload["query_ms"]["keyword"]["p50"] > 0
    assert json.loads((tmp_path / "r.json").read_text())["methods"]["keyword"]["all"]["n"] == total["n"]


def test_ranking_metrics() -> None:
    assert longmemeval_recall.ndcg(["a", "b", "c"], {"a"}, 10) == 1.0
    assert longmemeval_recall.ndcg(["x", "a"], {"a"}, 10) == pytest.approx(1 / 1.584962500721156)
    assert longmemeval_recall.session_ranking([("t1", "m1"), ("t2", "m2"), ("t1", "m3")],
                                              {"t1": "s1", "t2": "s2"}) == ["s1", "s2"]


def test_embedder_spec_accepts_an_instance_a_function_or_a_class(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_embedders.py").write_text(
        "from langchain_core.embeddings import DeterministicFakeEmbedding\n"
        "class Small(DeterministicFakeEmbedding):\n"
        "    def __init__(self) -> None:\n"
        "        super().__init__(size=8)\n"
        "def factory():\n"
        "    return DeterministicFakeEmbedding(size=16)\n"
        "instance = DeterministicFakeEmbedding(size=32)\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sizes = {name: len(longmemeval_recall.load_embedder(f"my_embedders:{name}").embed_query("camera"))
             for name in ("Small", "factory", "instance")}
    assert sizes == {"Small": 8, "factory": 16, "instance": 32}
    with pytest.raises(SystemExit, match="module:attribute"):
        longmemeval_recall.load_embedder("my_embedders")


def test_cli_prints_a_samples_own_id_literally(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A sample id is the data's text: Rich markup in it is printed as it is, an escape sequence
    never reaches the terminal (as every other command prints stored text, issue 44)."""
    samples = json.loads(DATA.read_text(encoding="utf-8"))
    samples[0]["sample_id"] = "conv-[/]\x1b[2J"
    data = tmp_path / "hostile.json"
    data.write_text(json.dumps(samples), encoding="utf-8")
    assert main(["eval", "locomo", "--data", str(data), "--model", "scripted", "--out", str(tmp_path / "r.jsonl"),
                 "--limit", "1"]) == 0
    printed = capsys.readouterr().out
    assert "conv-[/]" in printed and "\x1b[2J" not in printed


@pytest.mark.parametrize(("field", "value"), [("concurrency", 0), ("limit", 0), ("message_tokens", 0),
                                              ("observation_tokens", -5), ("categories", [9])])
def test_settings_name_the_field_they_refuse(field: str, value: object) -> None:
    """The checks every harness shares (``RunSettings``) and LoCoMo's own: a zero threshold used to
    pass here and be dropped silently (``if settings.message_tokens``)."""
    settings = LoCoMoSettings(data="locomo10.json", model="scripted", **{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=field.rstrip("s") if field == "categories" else field):
        settings.validate()
