"""The quickstart notebook runs top to bottom (issue 3, item 7)."""

from __future__ import annotations

import re
from pathlib import Path

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
