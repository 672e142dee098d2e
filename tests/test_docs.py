"""The documentation is a site and the README an overview (issue 31, item 9): the MkDocs site builds
with ``--strict`` (no broken link, no missing page, the API pages render), its reference tables are
generated from the models and current, every option is documented, and the README stays short and
links every page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import in_ci

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        message = 'mkdocs is not installed: pip install -e ".[docs]"'
        if in_ci():
            pytest.fail(f"CI=true but {message}: the site must build in CI", pytrace=False)
        pytest.skip(message)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                            cwd=ROOT, env=env, text=True, capture_output=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    api = (tmp_path / "site" / "api" / "index.html").read_text(encoding="utf-8")
    assert "aprocess" in api and "ObservationalMemoryMiddleware" in api, "mkdocstrings rendered the API"
    config = (tmp_path / "site" / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "observation.messageTokens" in config
    flow = (tmp_path / "site" / "how-it-works" / "index.html").read_text(encoding="utf-8")
    assert flow.count('<pre class="mermaid">') == 2, "Material's mermaid fence rendered the diagrams"
    results = (tmp_path / "site" / "benchmarks-results" / "index.html").read_text(encoding="utf-8")
    assert 'src="../benchmark-plots/step_cost.png"' in results
    assert (tmp_path / "site" / "benchmark-plots" / "step_cost.png").is_file()


def test_generated_reference_tables_are_current() -> None:
    assert _script("gen_reference").main(["--check"]) == 0, "run python scripts/gen_reference.py"


def test_every_option_and_wire_field_is_in_the_reference() -> None:
    from langchain_om.foundation import config, events

    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for model in (config.OMConfig, config.ObservationConfig, config.ReflectionConfig, config.RetrievalConfig,
                  config.FailurePolicyConfig, config.ModelSettings):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name} has no docstring"
            assert re.search(rf"`(\w+\.)*{name}`", page), f"{model.__name__}.{name} is not in the reference"
    for upstream in ("observation.messageTokens", "observation.bufferActivation", "reflection.observationTokens",
                     "shareTokenBudget", "activateAfterIdle", "observation.modelSettings.maxOutputTokens"):
        assert f"`{upstream}`" in page, upstream
    wire = (ROOT / "docs" / "events.md").read_text(encoding="utf-8")
    for type_name in events.EVENT_TYPES:
        assert f"### `{type_name}`" in wire, type_name
    for field in ("cycleId", "triggeredBy", "windows.buffered.observations.projectedMessageRemoval", "stepNumber"):
        assert f"`{field}`" in wire, field


def test_the_readme_is_an_overview_linking_every_page() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 450
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = re.findall(r"^\s+- [^:]+: (\S+\.md)$", nav, re.MULTILINE)
    missing = {page for page in pages if not (ROOT / "docs" / page).is_file()}
    assert not missing, f"the nav names pages that do not exist: {sorted(missing)}"
    unlisted = {path.name for path in (ROOT / "docs").glob("*.md")} - set(pages)
    assert not unlisted, f"pages missing from mkdocs.yml's nav: {sorted(unlisted)}"
    for page in pages:
        if page != "index.md":
            assert f"(docs/{page}" in readme, f"README does not link docs/{page}"
    assert "(notebooks/quickstart.ipynb)" in readme
    assert "./scripts/demo.sh" in readme and "./scripts/test.sh" in readme
    assert "pip install langchain-om " not in readme, "the package is not on an index"
    for page in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        prose = re.sub(r"^```.*?^```$", "", page.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
        prose = "\n".join(line for line in prose.splitlines() if not line.lstrip().startswith("|"))
        sentences = [s for s in re.split(r"(?<=[.:;])\s+", " ".join(prose.split())) if len(s) > 50]
        repeated = {s for s in sentences if sentences.count(s) > 1}
        assert not repeated, f"{page.name} repeats itself: {sorted(repeated)[:3]}"


NAV_GROUPS = ["Start", "Integrations", "Concepts", "Reference", "Operations", "Benchmarks"]


def test_the_site_opens_on_getting_started_with_the_nav_grouped_and_no_page_twice() -> None:
    """Issue 47, item 3: a site people can enter."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1].split("\n\n", 1)[0]
    nav = nav.split("\nmarkdown_extensions:", 1)[0]
    groups = re.findall(r"^  - (\w[^:]*):$", nav, re.MULTILINE)
    assert groups == NAV_GROUPS
    assert not re.search(r"^  - [^:]+: \S+\.md$", nav, re.MULTILINE), "every page sits in a group"
    pages = re.findall(r"^      - [^:]+: (\S+\.md)$", nav, re.MULTILINE)
    assert pages[0] == "index.md" and len(pages) == len(set(pages)), pages
    start = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert start.startswith("# Getting started")
    for section in ("## 1. Install", "## 2. A first agent with memory", "## 3. What you will see"):
        assert section in start, section


def _links(text: str) -> list[str]:
    text = re.sub(r"^```.*?^```$", "", text, flags=re.MULTILINE | re.DOTALL)
    inline = re.findall(r"\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)", text)
    reference = re.findall(r"^\s*\[[^\]]+\]:\s+(\S+)", text, re.MULTILINE)
    html = re.findall(r"(?:href|src)=\"([^\"]+)\"", text)
    return [*inline, *reference, *html]


def test_no_link_points_at_a_file_that_is_not_in_the_repository() -> None:
    pages = [ROOT / "README.md", ROOT / "README.ja.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "examples").rglob("*.md")), *sorted((ROOT / "benchmarks").glob("*.md"))]
    checked, broken = 0, []
    for page in pages:
        for target in _links(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a web address or an anchor of the page itself
            path = target.split("#", 1)[0].split("?", 1)[0]
            checked += 1
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert checked > 50, "the check reached the links"
    assert broken == []
    assert sorted(_links('[a](missing.md)\n[b]: other.md\n<img src="x.png">')) == ["missing.md", "other.md", "x.png"]


def test_the_diagrams_are_mermaid_fences_material_renders() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "format: !!python/name:pymdownx.superfences.fence_code_format" in config and "name: mermaid" in config
    flow = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    assert flow.count("```mermaid") == 2
    for step in ("buffer", "activate", "observe now", "reflect", "message_tokens", "observation_tokens"):
        assert step in flow, step
    assert "```mermaid" in (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
