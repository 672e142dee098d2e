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
QUICKSTARTS = ("standalone", "langgraph_nodes", "agent_middleware", "chat_history", "chat_frontend")
"""One per integration, in the README; the recall tool and time travel have theirs in docs/."""


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
    # issue 47, item 7: no warning a user would take for a fault (an oversize message, a deprecation)
    assert result.stderr.strip() == "", result.stderr[-3000:]
    if script.stem in QUICKSTARTS:  # a conversation of several turns
        assert result.stdout.count("assistant: ") >= 4
    assert list(tmp_path.iterdir()) == []  # nothing written to the user's folder
    if "Observation log" in result.stdout:  # the examples that print the log have observed something
        log = result.stdout.split("Observation log:", 1)[1]
        assert "Date: " in log and "User said:" in log
    if script.stem == "chat_frontend":  # the [ui] app's / is the memory inspector over the same store
        assert "inspector at /: ['chat-1']" in result.stdout
    if script.stem == "recall_tool":
        assert "4471" in result.stdout.split("recall returned:", 1)[1]


def test_every_example_is_in_the_readme_with_the_same_code() -> None:
    """Every example is shown, on the README or a documentation page, exactly as the file is; every
    Python block of those pages is such a block; the README's Quickstart shows every top-level example
    that is an integration's quickstart."""
    sync = _sync_module()
    shown: dict[str, list[str]] = {}
    for page in sync.pages():
        text = page.read_text(encoding="utf-8")
        blocks = sync.readme_examples(text)
        for path, code in blocks:
            assert code == sync.shown_code(ROOT / path), f"{page.name}'s block for {path} differs: run " \
                                                         "python scripts/sync_readme_examples.py"
            shown.setdefault(path, []).append(page.name)
        python_blocks = len(re.findall(r"^```python$", text, re.MULTILINE))
        assert python_blocks == len(blocks), (
            f"{page.name}: a Python block that is not from examples/: put the code in examples/NAME.py (a test "
            "runs it) and mark the block with <!-- example: examples/NAME.py -->, then run "
            "python scripts/sync_readme_examples.py")
    assert {ROOT / path for path in shown} >= set(EXAMPLES), "an example no page shows"
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = {path for path, _ in sync.readme_examples(_quickstart(readme))}
    assert quickstart == {f"examples/{name}.py" for name in QUICKSTARTS}
    assert len(re.findall(r"^```python$", _quickstart(readme), re.MULTILINE)) == len(quickstart)


def test_examples_switch_to_a_real_model_with_one_variable() -> None:
    for script in EXAMPLES:
        text = script.read_text(encoding="utf-8")
        if "Scripted" in text:  # an example with a model in it: the same script runs on a real one
            assert 'os.environ.get("LANGCHAIN_OM_EXAMPLE_MODEL")' in text, script
        assert "import langchain_om." not in text.replace("from langchain_om.testing", "")
