"""The install lines of the README work (issue 31, item 6): ``python -m build`` makes a wheel and an
sdist that ``twine check`` accepts, and the wheel installed into a fresh virtualenv runs the demo
and ``inspect`` through its own console script, away from this checkout."""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, text=True, capture_output=True, timeout=300,
                            check=False)
    assert result.returncode == 0, f"{args}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_build_twine_check_and_a_clean_venv_runs_the_demo(tmp_path: Path) -> None:
    pytest.importorskip("build", reason='the test extra has it: pip install -e ".[test]"')
    pytest.importorskip("twine", reason='the test extra has it: pip install -e ".[test]"')
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=tmp_path)
    wheels, sdists = list(dist.glob("*.whl")), list(dist.glob("*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    _run(sys.executable, "-m", "twine", "check", "--strict", *wheels, *sdists, cwd=tmp_path)
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = wheel.namelist()
        metadata = wheel.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "langchain_om/data/demo_conversation.json" in names and "langchain_om/py.typed" in names
    assert "langchain_om/integrations/inspector.html" in names, "langchain-om serve's page ships in the wheel"
    assert not any(n.startswith(("tests/", "examples/", "docs/")) for n in names)
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    base = [line for line in requires if "extra ==" not in line]
    for optional in ("langchain-openai", "langchain-google-genai", "langchain-postgres", "psycopg", "numpy"):
        assert not any(line.startswith(f"Requires-Dist: {optional}") for line in base), (optional, base)
    for extra, package in (("ui", "fastapi"), ("ui", "uvicorn"), ("docs", "mkdocs-material"),
                           ("openai", "langchain-openai"), ("google", "langchain-google-genai"),
                           ("postgres", "psycopg"), ("postgres", "langchain-postgres"), ("vector", "numpy")):
        assert any(line.startswith(f"Requires-Dist: {package}") and f"extra == '{extra}'" in line
                   for line in requires), (extra, package, requires)

    # A fresh venv holding only the wheel; its dependencies are borrowed from this environment through a
    # path file (not re-downloaded: CI stays fast), which adds their folders without running this
    # environment's own .pth files, so the editable install of the checkout stays out of sight.
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    purelib = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                        cwd=tmp_path).stdout.strip())
    borrowed = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()}
    (purelib / "_borrowed_dependencies.pth").write_text("\n".join(sorted(borrowed)) + "\n")
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", wheels[0], cwd=tmp_path)

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "OPENAI_API_KEY", "GOOGLE_API_KEY", "LANGCHAIN_OM_DB", "VIRTUAL_ENV")}
    env["COLUMNS"] = "200"
    where = _run(python, "-c", "import langchain_om; print(langchain_om.__file__)", cwd=tmp_path, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    cli = venv / "bin" / "langchain-om"
    demo = _run(cli, "demo", "--fast", "--scripted", "--steps", "4", "--db", "trip.db", cwd=tmp_path, env=env)
    assert "What OM did" in demo.stdout and "Final observation log" in demo.stdout
    shown = _run(cli, "inspect", "demo-trip", "--db", "trip.db", "--json", cwd=tmp_path, env=env)
    assert '"stored_messages"' in shown.stdout


STRAYS = (
    "langchain_om.db", "om.db-wal", "examples/chat.sqlite", "tests/scratch.sqlite3", "benchmarks/load.db-shm",
    ".langgraph_api/.langgraph_checkpoint.1.pckl", "examples/langgraph_app/.langgraph_api/store.pckl",
    ".env", "examples/.env", "notes.txt", ".hypothesis/examples/x", ".pytest_cache/v/cache/lastfailed",
    "langchain_om/__pycache__/config.cpython-311.pyc", "benchmarks/results/load.json",
    "notebooks/.ipynb_checkpoints/quickstart-checkpoint.ipynb", "dist/old.tar.gz",
)
"""What a used checkout grows: test and demo databases, the dev server's saved conversations
(``langgraph dev`` writes ``.langgraph_api/``), secrets, notes, caches, old builds."""


def test_the_sdist_of_a_used_checkout_holds_exactly_the_tracked_files(tmp_path: Path) -> None:
    """Issue 44, item 9: built from a used checkout, the sdist held local databases and the dev server's
    saved conversations. Built from a copy of the tracked files plus such strays, it holds the tracked
    files and nothing else."""
    pytest.importorskip("build", reason='the test extra has it: pip install -e ".[test]"')
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout (an unpacked sdist): nothing to compare with")
    tracked = sorted(name for name in listed.stdout.decode("utf-8").split("\0") if name)
    used = tmp_path / "checkout"
    for name in tracked:
        if (ROOT / name).is_file():  # a file deleted in the work tree but still tracked is not built
            (used / name).parent.mkdir(parents=True, exist_ok=True)
            (used / name).write_bytes((ROOT / name).read_bytes())
    for name in STRAYS:
        (used / name).parent.mkdir(parents=True, exist_ok=True)
        (used / name).write_text("local state, not the project\n", encoding="utf-8")
    dist = tmp_path / "dist"
    _run(sys.executable, "-m", "build", "--sdist", "--outdir", dist, used, cwd=tmp_path)
    (sdist,) = dist.glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        names = sorted(member.name.split("/", 1)[1] for member in archive.getmembers() if member.isfile())
    present = [name for name in tracked if (ROOT / name).is_file()]
    assert sorted({*names} - {"PKG-INFO"}) == present, {
        "stray files in the sdist": sorted({*names} - {*present, "PKG-INFO"}),
        "tracked files missing (add their top-level path to only-include)": sorted({*present} - {*names}),
    }
