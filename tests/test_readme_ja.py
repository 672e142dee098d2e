"""README.ja.md, the Japanese guide, is executed like README.md: every script in examples/ja/
runs offline in Japanese, and the guide shows exactly the code of the scripts it names (its own
and the language-neutral English ones), with no other Python in it."""

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
GUIDE = ROOT / "README.ja.md"
EXAMPLES_JA = sorted((ROOT / "examples" / "ja").glob("*.py"))


def _sync_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sync_readme_examples", ROOT / "scripts" / "sync_readme_examples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", EXAMPLES_JA, ids=[p.stem for p in EXAMPLES_JA])
def test_japanese_example_runs_offline(script: Path, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "LANGCHAIN_OM_EXAMPLE_MODEL")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["PYTHONIOENCODING"] = "utf-8"
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, text=True, encoding="utf-8",
                            capture_output=True, timeout=180, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    # issue 47, item 7: no warning a user would take for a fault (an oversize message, a deprecation)
    assert result.stderr.strip() == "", result.stderr[-3000:]
    assert result.stdout.count("assistant: ") >= 4
    assert list(tmp_path.iterdir()) == []
    if "Observation log:" in result.stdout:
        log = result.stdout.split("Observation log:", 1)[1]
        assert "魚アレルギー" in log and "Date: " in log
    if script.stem == "recall_search":
        recalled = result.stdout.split("recall returned:", 1)[1]
        assert "嵐山 翠月庵" in recalled and "\\u" not in recalled  # found by a Japanese word, shown as written


def test_guide_shows_the_code_of_the_scripts_it_names() -> None:
    sync = _sync_module()
    assert GUIDE in sync.READMES
    text = GUIDE.read_text(encoding="utf-8")
    shown = sync.readme_examples(text)
    named = {ROOT / path for path, _ in shown}
    assert set(EXAMPLES_JA) <= named, "every Japanese example is in the guide"
    for path, code in shown:
        assert code == sync.shown_code(ROOT / path), f"README.ja.md's block for {path} differs: run " \
                                                     "python scripts/sync_readme_examples.py"
    assert len(re.findall(r"^```python$", text, re.MULTILINE)) == len(shown), "no Python the tests do not run"
    for section in ("セットアップ", "demo と inspect", "ミドルウェア", "LangGraph", "チャット履歴", "recall",
                    "camelCase", "イベント", "日本語での検索"):
        assert section in text, section
