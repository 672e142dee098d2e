"""The quickstart notebook runs top to bottom (issue 3, item 7)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "quickstart.ipynb"


def test_quickstart_notebook_executes(tmp_path: Path) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])]
    errors = [out for out in outputs if out.get("output_type") == "error"]
    assert not errors
    text = "".join(out.get("text", "") for out in outputs if out.get("output_type") == "stream")
    assert "observation groups:" in text, "the run summary was printed"
    assert "<observations>" in text and "Date:" in text, "the observation log was shown"
    steps = int(re.search(r"agent steps: (\d+)", text).group(1))  # type: ignore[union-attr]
    assert steps > 60, "60 user turns plus the recall tool round trips"
    assert f"data-om-status': {steps}" in text, "one status event per agent step"
    read = re.search(r"recall results read by the model: (\d+) of (\d+)", text)
    assert read is not None and int(read.group(2)) >= 5, "the agent asked for recall several times"
    assert read.group(1) == read.group(2), "a recall result was observed before the model read it"
    images = [out for out in outputs if "image/png" in out.get("data", {})]
    assert len(images) == 1, "the windows plot was drawn inline"
    assert_bounded_and_quiet(outputs)


def assert_bounded_and_quiet(outputs: list[Any]) -> None:
    """The log the agent was shown stayed within its hard limit, and nothing warned (issue 43)."""
    text = "".join(out.get("text", "") for out in outputs if out.get("output_type") == "stream")
    shown = re.search(r"log shown to the agent: at most (\d+) tokens \(hard limit (\d+)\)", text)
    assert shown is not None and int(shown.group(1)) <= int(shown.group(2)) == 1080, text[-600:]
    noise = [out for out in outputs if out.get("output_type") == "stream" and out.get("name") == "stderr"]
    assert not noise and "Warning" not in text and "WARNING" not in text, noise


def test_the_committed_notebook_carries_its_outputs_and_they_tell_the_truth() -> None:
    """Committed executed (nbclient), so a reader sees the run without running it: the chart, the
    log within its hard limit, no warning in any output (issue 43, item 7)."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.get("execution_count") for cell in code), "every code cell was executed"
    outputs = [out for cell in code for out in cell.get("outputs", [])]
    assert [out for out in outputs if "image/png" in out.get("data", {})], "the chart is in the file"
    assert not [out for out in outputs if out.get("output_type") == "error"]
    assert_bounded_and_quiet(outputs)
    chart = next(cell.source for cell in code if "plt.subplots" in cell.source)
    for line in ("stored log", "log shown to the agent", "reflection threshold", "hard limit"):
        assert line in chart, line
    prose = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    assert "It never goes above the\n  **hard limit**" in prose and "**stored log**" in prose


def test_every_cell_has_an_id_and_the_notebook_validates() -> None:
    """nbformat warns about cells without ids today and will refuse them (issue 31, item 8)."""
    import json
    import warnings

    raw = json.loads(NOTEBOOK.read_text(encoding="utf-8"))
    ids = [cell.get("id") for cell in raw["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), ids
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        nbformat.validate(nbformat.from_dict(raw))  # type: ignore[no-untyped-call]


def test_notebook_uses_the_public_api_only() -> None:
    """What a reader copies from the notebook must be the package's public API, with no leftovers."""
    import langchain_om

    notebook = nbformat.read(NOTEBOOK, as_version=4)  # type: ignore[no-untyped-call]
    code = "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "code")
    modules = re.findall(r"^\s*from (langchain_om[\w.]*) import", code, re.MULTILINE)
    assert modules and set(modules) <= {"langchain_om", "langchain_om.testing"}, modules
    imported = re.search(r"from langchain_om import \(([^)]*)\)", code)
    assert imported is not None
    names = [n.strip() for n in imported.group(1).split(",") if n.strip()]
    assert all(name in langchain_om.__all__ for name in names), names
    assert "find_spec" not in code and "when this build ships" not in code
    text = "\n".join(cell.source for cell in notebook.cells)
    assert "when this build ships" not in text
    # both legends sit beside their axes (anchored right of x=1), so they cannot cover a line
    legends = re.findall(r"\.legend\(([^)]*)\)", code)
    assert len(legends) == 2
    for call in legends:
        anchor = re.search(r"bbox_to_anchor=\(([\d.]+),", call)
        assert anchor is not None and float(anchor.group(1)) > 1.0, call


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
