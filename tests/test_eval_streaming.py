"""Benchmark files read one element at a time, compressed or not (LongMemEval M is 2.7 GB), and
what a run spends per role with the cost a user's price table projects (issue 45)."""

from __future__ import annotations

import gzip
import io
import json
import lzma
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from langchain_om.cli.commands import main
from langchain_om.eval import json_stream
from langchain_om.eval.json_stream import JSONStreamError, iter_json_array
from langchain_om.eval.longmemeval import EvalSettings, LongMemEvalDataError, arun_longmemeval, iter_longmemeval
from langchain_om.eval.spend import PriceTable, load_prices, parse_price

DATA = Path(__file__).parent / "data" / "longmemeval_mini.json"


def _quiet() -> Console:
    return Console(file=io.StringIO(), width=120)


@pytest.mark.parametrize("suffix", [".json", ".json.xz", ".json.gz"])
def test_elements_stream_across_chunk_boundaries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 suffix: str) -> None:
    values: list[Any] = [{"text": "日本語 🎉 " * 50, "n": i} for i in range(5)]
    values += [12345678, "a string, with [brackets] and \"quotes\"", [1, [2, 3]], None, 3.25, 987654321]
    text = " [ \n" + " ,\n".join(json.dumps(v, ensure_ascii=False) for v in values) + "\n] \n"
    path = tmp_path / f"data{suffix}"
    opener: Any = {".json": open, ".json.xz": lzma.open, ".json.gz": gzip.open}[suffix]
    with opener(path, "wt", encoding="utf-8") as handle:
        handle.write(text)
    monkeypatch.setattr(json_stream, "CHUNK_CHARS", 7)  # every element spans many reads
    assert list(iter_json_array(path)) == values


def test_elements_are_read_lazily(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first element is yielded before the reader has gone far past it: never the whole file."""
    path = tmp_path / "big.json"
    path.write_text("[" + ",".join(json.dumps({"i": i, "pad": "x" * 1000}) for i in range(2000)) + "]")
    monkeypatch.setattr(json_stream, "CHUNK_CHARS", 4096)
    opened: list[Any] = []
    real_open = json_stream.open_text

    def counting(p: Any) -> Any:
        handle = real_open(p)
        opened.append(handle)
        return handle

    monkeypatch.setattr(json_stream, "open_text", counting)
    stream = iter_json_array(path)
    assert next(stream)["i"] == 0
    assert opened[0].tell() < 20_000 < path.stat().st_size


@pytest.mark.parametrize("text, message", [
    ('{"a": 1}', "must hold a JSON list"),
    ('[{"a": 1}, {"a": ', "element 1 is not valid JSON"),
    ('[{"a": 1} {"a": 2}]', "expected ',' or ']' after element 0"),
    ('[{"a": 1}] trailing', "text after the end"),
    ('[{"a": 1},', "ends inside the list"),
])
def test_malformed_files_name_the_element(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(JSONStreamError, match=message):
        list(iter_json_array(path))


def test_longmemeval_reads_xz_and_names_bad_items(tmp_path: Path) -> None:
    raw = json.loads(DATA.read_text())
    packed = tmp_path / "lme.json.xz"
    with lzma.open(packed, "wt", encoding="utf-8") as handle:
        json.dump(raw, handle)
    assert [i.question_id for i in iter_longmemeval(packed)] == [r["question_id"] for r in raw]
    raw[2]["haystack_dates"] = raw[2]["haystack_dates"][:1]
    bad = tmp_path / "bad.json.gz"
    with gzip.open(bad, "wt", encoding="utf-8") as handle:
        json.dump(raw, handle)
    stream = iter_longmemeval(bad)
    assert next(stream).question_id == raw[0]["question_id"]  # the good ones come before the error
    with pytest.raises(LongMemEvalDataError, match=r"data\[2\]"):
        list(stream)


def test_prices_parse_and_cost() -> None:
    assert parse_price("openai:gpt-4o-mini=0.15,0.6") == ("openai:gpt-4o-mini", parse_price("x=0.15,0.6")[1])
    for bad in ("gpt=1", "=1,2", "gpt=a,b", "gpt=-1,2"):
        with pytest.raises(ValueError, match="price"):
            parse_price(bad)
    table = PriceTable.build(entries=["observer=1,2", "openai:gpt-4o=10,20"],
                             models={"observer": "scripted", "answer": "openai:gpt-4o", "judge": "x"})
    assert table is not None
    spend = {"observer": {"input_tokens": 1_000_000, "output_tokens": 500_000},
             "answer": {"input_tokens": 100_000, "output_tokens": 1_000}, "judge": {"input_tokens": 10}}
    assert table.cost(spend) == pytest.approx(1 + 1 + 1 + 0.02)  # the judge has no price: left out, and said so
    assert table.unpriced(spend) == ["judge"]


def test_price_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"*": {"input": 0.5, "output": 1.5}, "answer": [2, 8]}))
    prices = load_prices(path)
    assert prices["*"].input == 0.5 and prices["answer"].output == 8
    path.write_text(json.dumps({"answer": {"input": "cheap"}}))
    with pytest.raises(ValueError, match="answer"):
        load_prices(path)


async def test_rows_carry_tokens_per_role_and_the_summary_projects_the_cost(tmp_path: Path) -> None:
    settings = EvalSettings(data=DATA, model="scripted", out=tmp_path / "r.jsonl", limit=2, concurrency=2,
                            message_tokens=300, observation_tokens=400,
                            prices=["observer=1,4", "reflector=1,4", "answer=2,8", "judge=0.5,1"])
    summary = await arun_longmemeval(settings, console=_quiet())
    rows = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        spend = row["spend"]
        assert spend["answer"]["calls"] == 1 and spend["answer"]["input_tokens"] > 0
        assert spend["judge"]["calls"] >= 1 and spend["observer"]["calls"] >= 1
        assert spend["observer"]["input_tokens"] > 0 and spend["observer"]["output_tokens"] > 0
        assert row["cost_usd"] > 0
    assert summary.selected == 6 and summary.overall.total == 2
    assert summary.cost == pytest.approx(sum(r["cost_usd"] for r in rows), rel=1e-4)
    assert summary.projected_cost == pytest.approx(summary.cost / 2 * 6)
    assert summary.spend["observer"]["input_tokens"] == sum(r["spend"]["observer"]["input_tokens"] for r in rows)


def test_cli_prints_tokens_and_projection(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    assert main(["eval", "longmemeval", "--data", str(DATA), "--model", "scripted", "--out", str(out),
                 "--limit", "1", "--message-tokens", "300", "--price", "*=1,2"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "Tokens spent" in printed and "observer" in printed and "projected for all 6 questions" in printed
    assert main(["eval", "longmemeval", "--data", str(DATA), "--model", "scripted", "--out", str(out),
                 "--price", "nonsense"]) == 1
    assert "--price" in capsys.readouterr().err
