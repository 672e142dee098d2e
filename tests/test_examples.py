"""README's Quickstart is executed: every script in examples/ runs offline, and the README shows
exactly their code (scripts/sync_readme_examples.py rewrites the blocks; this test only checks)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_readme_examples", ROOT / "scripts" / "sync_readme_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _quickstart(readme: str) -> str:
    return readme[readme.index("## Quickstart\n"):readme.index("\n## ", readme.index("## Quickstart\n") + 5)]


@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_offline(script: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "LANGCHAIN_OM_EXAMPLE_MODEL")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True, capture_output=True,
                            timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("assistant: ") >= 4
    assert list(tmp_path.iterdir()) == []  # nothing written to the user's folder
    if "Observation log" in result.stdout:  # the examples that print the log have observed something
        log = result.stdout.split("Observation log:", 1)[1]
        assert "Date: " in log and "User said:" in log
    if script.stem == "recall_tool":
        assert "4471" in result.stdout.split("recall returned:", 1)[1]


def test_every_example_is_in_the_readme_with_the_same_code() -> None:
    sync = _sync_module()
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    shown = sync.readme_examples(readme)
    assert sorted(ROOT / path for path, _ in shown) == EXAMPLES
    for path, code in shown:
        assert code == sync.shown_code(ROOT / path), f"README's block for {path} differs: run " \
                                                     "python scripts/sync_readme_examples.py"
    # and the Quickstart holds no other Python than those scripts
    quickstart = _quickstart(readme)
    assert len(re.findall(r"^```python$", quickstart, re.MULTILINE)) == len(sync.readme_examples(quickstart))


def test_examples_switch_to_a_real_model_with_one_variable() -> None:
    for script in EXAMPLES:
        text = script.read_text(encoding="utf-8")
        assert 'os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")' in text, script
        assert "import langchain_om." not in text.replace("from langchain_om.testing", "")
