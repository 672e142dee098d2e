"""A newcomer's first hour, replayed: from a fresh folder, the demo, then the ``inspect`` command
exactly as the demo printed it, then the offline eval; through the repository's wrapper scripts and
through a bare interpreter. Plus the demo's own wording (point 9 of issue 17)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_om.cli.demo import SCRIPTED_NOTICE, load_conversation, merge_repeated_dates, run_demo
from langchain_om.cli.hints import LAUNCHER_ENV, cli_prefix

ROOT = Path(__file__).resolve().parents[1]
LME_DATA = ROOT / "tests" / "data" / "longmemeval_mini.json"
IN_VENV = sys.prefix != sys.base_prefix  # outside a venv the interpreter's folder (/usr/bin) must stay on PATH


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY", "VIRTUAL_ENV", LAUNCHER_ENV, "LANGCHAIN_OM_DB")}
    if IN_VENV:  # a shell where the venv is not active: the console script's folder is not on PATH
        bindir = os.path.dirname(os.path.abspath(sys.executable))
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != bindir)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "200"
    env.update(extra)
    return env


def _shell(command: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, shell=True, cwd=cwd, env=env, text=True, capture_output=True, timeout=300,
                          check=False)


def _printed_inspect(stdout: str) -> str:
    match = re.search(r"Inspect it any time: (.+)$", stdout, re.MULTILINE)
    assert match, stdout[-2000:]
    return match.group(1).strip()


def test_newcomer_without_an_active_venv(tmp_path: Path) -> None:
    home = tmp_path / "my-folder"
    home.mkdir()
    env = _env()
    python = shlex.quote(sys.executable)
    demo = _shell(f"{python} -m langchain_om demo --fast --db mine.db", home, env)
    assert demo.returncode == 0, demo.stderr
    assert (home / "mine.db").exists()  # in the user's folder
    command = _printed_inspect(demo.stdout)
    assert "mine.db" in command
    if IN_VENV:
        assert "langchain-om inspect" not in command  # not on PATH in this shell: not printed bare
    inspected = _shell(command, home, env)
    assert inspected.returncode == 0, inspected.stderr
    assert "Observation groups" in inspected.stdout and "last observed message" in inspected.stdout
    evaluated = _shell(f"{python} -m langchain_om eval longmemeval --data {shlex.quote(str(LME_DATA))} "
                       "--model scripted --out lme.jsonl", home, env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert "LongMemEval accuracy" in evaluated.stdout and "overall" in evaluated.stdout
    assert (home / "lme.jsonl").exists() and (home / "lme.jsonl.om.db").exists()


def _fake_checkout(tmp_path: Path) -> Path:
    """The repository's scripts over a ``.venv`` that is already set up (its python and console script
    point at this interpreter), so the wrappers run without installing anything."""
    repo = tmp_path / "checkout"
    shutil.copytree(ROOT / "scripts", repo / "scripts")
    (repo / "pyproject.toml").write_text("[project]\nname = 'fake'\n")
    bindir = repo / ".venv" / "bin"
    bindir.mkdir(parents=True)
    (bindir / "python").symlink_to(sys.executable)
    (bindir / "activate").write_text(f'export PATH="{bindir}:$PATH"\nexport PYTHONPATH="{ROOT}"\n')
    console = bindir / "langchain-om"
    console.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m langchain_om "$@"\n')
    console.chmod(console.stat().st_mode | stat.S_IXUSR)
    (repo / ".venv" / ".langchain-om-installed").write_text("openai,google\n")  # the extras demo.sh installs
    os.utime(repo / "pyproject.toml", (1, 1))  # older than the install stamp: nothing to reinstall
    return repo


@pytest.mark.skipif(shutil.which("bash") is None, reason="the wrappers are bash scripts")
def test_a_first_install_says_what_it_does_and_how_to_use_the_command_after(tmp_path: Path) -> None:
    """Issue 47, item 2: the first run is not silent (what is installed, roughly how long, how long it took),
    and it ends saying how to use ``langchain-om`` afterwards. pip is a stand-in here that takes 16 s, so the
    "still installing" line shows; the extras the demo asks for are the ones passed to pip."""
    repo = _fake_checkout(tmp_path)
    (repo / ".venv" / ".langchain-om-installed").unlink()
    python = repo / ".venv" / "bin" / "python"
    python.unlink()
    python.write_text(f'#!/bin/sh\nif [ "$1 $2" = "-m pip" ]; then echo "$@" >> "{repo}/pip.log"; '
                      'case "$*" in *"-e .[openai,google]") sleep 16;; esac; exit 0; fi\n'
                      f'exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    home = tmp_path / "elsewhere"
    home.mkdir()
    demo = _shell(f"{shlex.quote(str(repo / 'scripts' / 'demo.sh'))} --fast --steps 4 --db mine.db", home, _env())
    assert demo.returncode == 0, demo.stderr
    assert "installing the package with extras [openai,google] into ./.venv: about 1 minute" in demo.stderr
    assert "still installing (15 s)" in demo.stderr
    assert re.search(r"installed in 1[6-9] s\. The langchain-om command is in \./\.venv: run 'source "
                     r"\.venv/bin/activate' first, or call \./scripts/langchain-om\.sh", demo.stderr), demo.stderr
    assert '-e .[openai,google]' in (repo / "pip.log").read_text()
    assert demo.stderr.rstrip().endswith(f"without activating: {repo}/scripts/langchain-om.sh --help")
    assert (repo / ".venv" / ".langchain-om-installed").read_text().strip() == "openai,google"
    tests = _shell(f"{shlex.quote(str(repo / 'scripts' / 'test.sh'))} --version", home, _env())
    assert "extras [openai,google,test,docs,all]" in tests.stderr and "3-5 minutes" in tests.stderr
    assert "about 11 minutes on 2 cores" in tests.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="the wrappers are bash scripts")
def test_newcomer_through_the_wrapper_scripts(tmp_path: Path) -> None:
    repo = _fake_checkout(tmp_path)
    home = tmp_path / "elsewhere"
    home.mkdir()
    env = _env()
    demo = _shell(f"{shlex.quote(str(repo / 'scripts' / 'demo.sh'))} --fast --steps 20 --db mine.db", home, env)
    assert demo.returncode == 0, demo.stderr
    assert (home / "mine.db").exists() and not (repo / "mine.db").exists()  # --db is relative to the user
    command = _printed_inspect(demo.stdout)
    assert command.startswith(str(repo / "scripts" / "langchain-om.sh")), command
    inspected = _shell(command, home, env)
    assert inspected.returncode == 0, inspected.stderr
    assert "Thread demo-trip" in inspected.stdout
    evaluated = _shell(f"{shlex.quote(str(repo / 'scripts' / 'langchain-om.sh'))} eval longmemeval --data "
                       f"{shlex.quote(str(LME_DATA))} --model scripted --out lme.jsonl --limit 2", home, env)
    assert evaluated.returncode == 0, evaluated.stderr
    assert (home / "lme.jsonl").exists()


def test_cli_prefix_choices(tmp_path: Path) -> None:
    wrapper = tmp_path / "scripts" / "langchain-om.sh"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\n")
    assert cli_prefix({LAUNCHER_ENV: str(wrapper), "PATH": ""}, cwd=tmp_path) == "./scripts/langchain-om.sh"
    other = tmp_path / "other"
    other.mkdir()
    assert cli_prefix({LAUNCHER_ENV: str(wrapper), "PATH": ""}, cwd=other) == str(wrapper)
    assert cli_prefix({"PATH": ""}, cwd="/").endswith(" -m langchain_om")
    assert cli_prefix({"PATH": os.path.dirname(sys.executable)}, cwd="/") in (
        "langchain-om", f"{sys.executable} -m langchain_om")


# ----------------------------------------------------------------------------- the demo's wording


def _demo(tmp_path: Path, **kwargs: object) -> tuple[str, object]:
    from io import StringIO

    from rich.console import Console

    buffer = StringIO()
    result = run_demo(db=str(tmp_path / "om.db"), scripted=True, console=Console(file=buffer, width=200),
                      step_delay_s=0, env={}, **kwargs)
    return buffer.getvalue(), result


def test_demo_wording_fast_and_rerun(tmp_path: Path) -> None:
    out, first = _demo(tmp_path, fast=True)
    assert "model='provider:model'" not in out and "--model provider:model" in " ".join(out.split())
    assert " ".join(SCRIPTED_NOTICE.split()) in " ".join(out.split())
    assert "resumed after step 0" not in out
    assert not re.search(r"^step +\d+  messages", out, re.MULTILINE) and "↳" not in out  # --fast: no per-step lines
    assert first.buffered > 0 and first.buffered_reflections > 0  # counted apart
    assert f"{first.buffered} chunk(s) buffered" in out
    assert f"{first.reflections} applied ({first.buffered_reflections} buffered" in out
    # since issue 43 the scripted Reflector condenses the bundled run's log under its threshold, so
    # no buffered reflection is left waiting and the demo says none is (the line's wording when one
    # is: test_demo_says_when_a_reflection_is_pending)
    assert first.pending_reflection is None and "reflection is ready" not in out
    # the panel shows each day's header once per run of groups
    panel = out[out.index("Final observation log"):]
    dates = re.findall(r"Date: (\S+)", panel)
    assert all(dates[i] != dates[i + 1] for i in range(len(dates) - 1)), dates
    # a rerun on the same state reports the same context size
    again, second = _demo(tmp_path, fast=True)
    assert not second.steps and second.context_tokens == first.context_tokens
    assert "resumed after step 58" in again


def test_scripted_notes_never_cut_a_word(tmp_path: Path) -> None:
    _, result = _demo(tmp_path, fast=True)
    said = [" ".join(str(m.content).split()) for m in load_conversation() if m.type == "human"]
    cut = [line.split("User said: ", 1)[1][:-1].rstrip() for line in result.final_log.splitlines()
           if "User said: " in line and line.endswith("…")]
    assert cut
    for prefix in cut:
        source = next((s for s in said if s.startswith(prefix)), None)
        assert source is not None, prefix
        following = source[len(prefix):len(prefix) + 1]
        assert following in ("", " ", ",", ".", ";", ":", "!", "?"), (prefix, source)


def test_merge_repeated_dates() -> None:
    log = "Date: 2026-03-02 (Monday)\n* a\n\nDate: 2026-03-02 (Monday)\n* b\n\nDate: 2026-03-03 (Tuesday)\n* c"
    assert merge_repeated_dates(log) == "Date: 2026-03-02 (Monday)\n* a\n* b\n\nDate: 2026-03-03 (Tuesday)\n* c"


def test_demo_says_when_a_reflection_is_pending() -> None:
    from types import SimpleNamespace

    from langchain_om.cli.demo import _pending_reflection

    def status(tokens: int, buffered: str) -> object:
        log = SimpleNamespace(tokens=tokens, threshold=1500)
        reflection = SimpleNamespace(status=buffered)
        return SimpleNamespace(windows=SimpleNamespace(active=SimpleNamespace(observations=log),
                                                       buffered=SimpleNamespace(reflection=reflection)))

    assert _pending_reflection(status(1500, "complete")) is None
    ready = _pending_reflection(status(1827, "complete"))
    assert ready and "(1827 tokens) is over its reflection threshold (1500)" in ready
    assert "buffered reflection is ready" in ready
    assert "the Reflector runs" in str(_pending_reflection(status(1827, "idle")))
