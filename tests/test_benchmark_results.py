"""Benchmarks a user can run and trust (issue 32, item 8).

The suite's machinery: progress lines on stderr, a section's duration and peak RSS, verdicts
stated with their run-to-run spread, agent_step's bounded memory, and the generated results page
that every benchmark figure quoted in README.md and docs/benchmarks.md must come from.
No timing assertions: these check what is reported, not how fast anything is.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any, cast

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from benchmarks import __main__ as suite
from benchmarks import results_page
from benchmarks.agent_step import keep_latest_checkpoint
from benchmarks.common import spread, verdict_with_spread
from benchmarks.progress import measure_section, note, track
from langchain_om.testing import ScriptedAgentModel

ROOT = Path(__file__).resolve().parents[1]
REGION = re.compile(r"<!-- benchmark-figures -->(.*?)<!-- /benchmark-figures -->", re.DOTALL)
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?![\w])")

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _numbers(text: str) -> list[str]:
    return [n.rstrip(",") for n in NUMBER.findall(text)]


def _generated(page: str) -> list[float]:
    return [float(n.replace(",", "")) for n in _numbers(page)]


def _is_generated(quoted: str, generated: list[float]) -> bool:
    """A quoted figure is a generated one rounded to the quote's decimals (16.2 matches 16.24)."""
    value = float(quoted.replace(",", ""))
    decimals = len(quoted.split(".", 1)[1]) if "." in quoted else 0
    return any(round(g, decimals) == value for g in generated)


def _stray_figures(text: str, page: str) -> list[str]:
    generated = _generated(page)
    return [q for region in REGION.findall(text) for q in _numbers(region) if not _is_generated(q, generated)]


def test_progress_lines_name_the_section_and_go_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with measure_section("demo-ß-日本") as run:
        assert list(track(["一", "two"], lambda item: f"case {item}")) == ["一", "two"]
        ballast = bytearray(64 * 2**20)  # 64 MiB, touched, that the progress line samples
        ballast[::4096] = b"x" * len(ballast[::4096])
        note("記録 done")
        del ballast
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["1/2 case 一", "2/2 case two", "記録 done"]
    assert all(line.lstrip().startswith("[demo-ß-日本 ") and "MiB]" in line for line in lines)
    assert run.seconds > 0 and run.peak_rss_mib >= run.rss_before_mib + 60
    assert set(run.as_dict()) == {"seconds", "peak_rss_mib", "rss_before_mib", "load_at_start", "quick"}


def test_a_verdict_whose_repeats_straddle_the_line_says_so() -> None:
    assert verdict_with_spread([0.05, 0.08, 0.09], 0.1) == "met"
    assert verdict_with_spread([0.11, 0.3], 0.1) == "MISSED"
    assert verdict_with_spread([0.08, 0.1, 0.13], 0.1) == "within spread"
    assert verdict_with_spread([], 0.1) == "MISSED"
    stats = spread([0.13, 0.08, 0.1, 0.09, 0.2])
    assert (stats["median"], stats["min"], stats["max"], stats["n"]) == (0.1, 0.08, 0.2, 5.0)
    assert stats["q1"] == pytest.approx(0.09) and stats["q3"] == pytest.approx(0.13)


def test_agent_step_keeps_one_checkpoint_and_the_thread_still_resumes() -> None:
    """InMemorySaver kept every step's checkpoint (each with the whole message list): the section
    grew to 2.2 GB. Pruning between steps keeps one, and the next step still sees every message."""

    async def scenario() -> tuple[int, int, int, list[str]]:
        saver = InMemorySaver()
        agent = create_agent(ScriptedAgentModel(), [], checkpointer=saver)
        config = cast(RunnableConfig, {"configurable": {"thread_id": "t"}})
        texts = ["最初の質問です", "second question 🙂", "三番目"]
        for text in texts:
            await agent.ainvoke({"messages": [HumanMessage(text)]}, config)
        unpruned = len(saver.blobs)
        keep_latest_checkpoint(saver)
        checkpoints = sum(len(c) for ns in saver.storage.values() for c in ns.values())
        await agent.ainvoke({"messages": [HumanMessage("four")]}, config)
        state = (await agent.aget_state(config)).values["messages"]
        return unpruned, checkpoints, len(saver.blobs), [m.text for m in state if m.type == "human"]

    unpruned, checkpoints, after_next_step, humans = asyncio.run(scenario())
    assert checkpoints == 1
    assert humans == ["最初の質問です", "second question 🙂", "三番目", "four"]
    assert after_next_step < unpruned, "one step's blobs added to one checkpoint's, not to every earlier one"


def test_the_run_writes_a_results_page_with_the_machine_and_each_sections_cost(tmp_path: Path) -> None:
    suite.main(["--quick", "--only", "token_counting", "--out", str(tmp_path), "--messages", "200",
                "--huge-chars", "300000"])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["sections"]["token_counting"]["seconds"] > 0
    assert summary["sections"]["token_counting"]["peak_rss_mib"] > 0
    data = json.loads((tmp_path / "token_counting.json").read_text())
    assert data["run"]["quick"] is True and "estimator" in data["report"]
    assert data["machine"]["cpus"] and "load_average" in data["machine"]
    page = (tmp_path / "benchmarks-results.md").read_text(encoding="utf-8")
    assert "## token_counting" in page and data["report"].splitlines()[0] in page
    assert f"| {data['machine']['measured_at']} |" in page and "(quick)" in page
    assert f"Python {data['machine']['python']}" in page and f"{data['machine']['cpus']} CPUs" in page
    assert results_page.page_path(tmp_path, quick=False) == tmp_path / "benchmarks-results.md"
    assert results_page.page_path(results_page.RESULTS_DIR, quick=True) != results_page.PAGE


def test_a_section_run_alone_in_a_fresh_clone_leaves_the_committed_page_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The results are not committed: with only some sections' JSON in the default directory,
    the page goes beside them, not over docs/benchmarks-results.md."""
    monkeypatch.setattr(results_page, "RESULTS_DIR", tmp_path)
    defaults = [name for name in results_page.SECTIONS if name not in results_page.OPT_IN]
    (tmp_path / "load.json").write_text("{}", encoding="utf-8")
    assert results_page.page_path(tmp_path, quick=False) == tmp_path / "benchmarks-results.md"
    assert "load" not in results_page.missing_sections(tmp_path) and "search" in results_page.missing_sections(tmp_path)
    for name in defaults:
        (tmp_path / f"{name}.json").write_text("{}", encoding="utf-8")
    assert results_page.missing_sections(tmp_path) == []
    assert results_page.page_path(tmp_path, quick=False) == results_page.PAGE
    assert results_page.page_path(tmp_path, quick=True) != results_page.PAGE


def test_a_figure_not_on_the_results_page_is_caught() -> None:
    page = "p50 16.24 ms, 1,880 s, ratio 0.092"
    quoted = ("<!-- benchmark-figures -->16.2 ms, 1,880 s and 0.09<!-- /benchmark-figures --> "
              "1999 outside the region")
    assert _stray_figures(quoted, page) == []
    assert _stray_figures(quoted.replace("16.2", "16.3"), page) == ["16.3"]


@pytest.mark.parametrize("document", ["README.md", "docs/benchmarks.md", "benchmarks/README.md"])
def test_every_benchmark_figure_quoted_is_on_the_generated_page(document: str) -> None:
    text = (ROOT / document).read_text(encoding="utf-8")
    regions = REGION.findall(text)
    assert regions and all(_numbers(region) for region in regions), f"{document} marks its benchmark figures"
    page = results_page.PAGE.read_text(encoding="utf-8")
    assert not _stray_figures(text, page), (
        f"{document} quotes figures that docs/{results_page.PAGE_NAME} does not hold: rerun the benchmarks "
        "and quote the page")


def test_the_results_page_is_what_the_results_render_to(tmp_path: Path) -> None:
    """The committed page renders from its own JSON format: a section's report appears verbatim."""
    payload: dict[str, Any] = {"benchmark": "storage", "report": "Storage\n  ratio = 1.50x",
                               "machine": {"cpus": 2, "python": "3.11", "platform": "Linux", "cpu_model": None,
                                           "measured_at": "2026-12-05T12:00:00+00:00", "commit": "abc1234",
                                           "load_average": [1.0, 2.0, 3.0]},
                               "run": {"seconds": 12.5, "peak_rss_mib": 300.0, "load_at_start": [1.0, 2.0, 3.0]}}
    (tmp_path / "storage.json").write_text(json.dumps(payload))
    (tmp_path / "old.json").write_text(json.dumps({"benchmark": "old", "machine": {}}))  # no report: left out
    page = results_page.render(tmp_path)
    assert "```text\nStorage\n  ratio = 1.50x\n```" in page and "## old" not in page
    assert "| [storage](#storage) | 2026-12-05T12:00:00+00:00 | abc1234 | 12.5 | 300.0 | 1.00 / 2.00 / 3.00 |" in page


def test_the_committed_page_shows_a_plot_drawn_from_each_plotted_sections_own_table(tmp_path: Path) -> None:
    """Issue 47, item 3: benchmark results as plots, generated by the run from the same report text the
    table prints, committed beside the page."""
    from benchmarks import plots

    page = results_page.PAGE.read_text(encoding="utf-8")
    sections = {match.group(1): match.group(2) for match in plots.SECTION.finditer(page)}
    assert set(plots.PLOTS) <= set(sections)
    for name in plots.PLOTS:
        assert plots.image_line(name) in page, name
        assert (results_page.PAGE.parent / plots.PLOT_DIR / f"{name}.png").is_file(), name
    step_cost = plots.parse_table(sections["step_cost"])
    first = step_cost[0]
    assert first["strategy"] == "om-sqlite" and first["history"] == "1,000" and float(first["p50"]) > 0
    copy = tmp_path / "benchmarks-results.md"
    copy.write_text(page.replace(plots.image_line("scale") + "\n\n", ""), encoding="utf-8")
    assert plots.redraw_page(copy) == set(plots.PLOTS)
    assert copy.read_text(encoding="utf-8") == page, "redrawing puts back the image links the page has"
    assert (tmp_path / plots.PLOT_DIR / "scale.png").read_bytes()[:4] == b"\x89PNG"


def test_a_run_draws_its_sections_plots_beside_the_page(tmp_path: Path) -> None:
    from benchmarks import plots

    report = ("Buffering: wait\nstrategy  p50   p95   mean  max\n--------  ----  ----  ----  ----\n"
              "om        1.50  7.00  9.00  20.0\nsync      2.00  900   100   2000\n  a note\n")
    (tmp_path / "buffering.json").write_text(json.dumps({"report": report, "machine": {}, "run": {}}))
    page = results_page.write_page(tmp_path).read_text(encoding="utf-8")
    assert f"## buffering\n\n{plots.image_line('buffering')}\n\n```text" in page
    assert (tmp_path / plots.PLOT_DIR / "buffering.png").stat().st_size > 1000
    assert plots.parse_table(report)[1] == {"strategy": "sync", "p50": "2.00", "p95": "900", "mean": "100",
                                            "max": "2000"}
