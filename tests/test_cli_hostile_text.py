"""The CLI prints stored text literally (issue 44, item 3).

Thread ids, titles, resource ids, the current task, the suggested response, message ids and the
log come from apps, users and models. Rich must never read them as markup (one ``[/]`` crashed
``threads`` and ``inspect``, hiding every other thread, and the error handler crashed again on the
same text) and the terminal must never receive their control characters (a title holding
ESC ] 0 ; ... BEL would retitle the operator's window, ESC [ 2 J clear the screen).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_om.cli.commands import main
from langchain_om.cli.literal import visible
from langchain_om.store.base import implicit_resource
from langchain_om.store.sqlite import SQLiteStore

ROOT = Path(__file__).resolve().parents[1]

RETITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
CSI_C1 = "\x9b31m"
RAW_CONTROLS = ("\x1b", "\x07", "\x9b", "\x01", "\x7f")

HOSTILE_THREAD = "旅[/]行" + RETITLE  # Japanese, a closing tag and an escape sequence in one id
HOSTILE_TITLES = {
    "plain-thread": "京都の旅館",
    "bracket[/]thread": "[bold red]not bold[/]",
    "[link=https://x.test]click[/link]": "title " + RETITLE + CLEAR + " end",
    "control-thread": "a\x01b\x7f " + CSI_C1 + " lone",
}


@pytest.fixture(autouse=True)
def plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """No colour codes of Rich's own, so any ESC in the output came from stored text; wide lines."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "400")


def _conversation(path: Path) -> Path:
    texts = [
        "東京[/]の旅を計画したい " + RETITLE + " [bold]予算は20万円[/bold]",
        "承知しました [/] " + CLEAR,
        "Sam can't do long hikes [/] " + CSI_C1,
        "Noted: short walks only.",
    ]
    entries = [{"role": "user" if i % 2 == 0 else "assistant", "content": text,
                "timestamp": f"2026-04-0{1 + i // 2}T09:{i:02d}:00+09:00"} for i, text in enumerate(texts)]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return path


def _add_titled_threads(db: Path) -> None:
    async def add() -> None:
        store = SQLiteStore(str(db))
        await store.asetup()
        try:
            for thread_id, title in HOSTILE_TITLES.items():
                await store.aensure_thread(implicit_resource(thread_id), thread_id, title=title)
        finally:
            await store.aclose()

    asyncio.run(add())


def _assert_no_raw_controls(text: str) -> None:
    leaked = [c for c in RAW_CONTROLS if c in text]
    assert not leaked, f"raw control characters reached the terminal: {leaked!r}"
    assert "Traceback" not in text


@pytest.fixture
def hostile_db(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    db = tmp_path / "om.db"
    code = main(["demo", "--db", str(db), "--fast", "--scripted", "--thread", HOSTILE_THREAD,
                 "--conversation", str(_conversation(tmp_path / "c.json")), "--message-tokens", "30"])
    out = capsys.readouterr()
    assert code == 0, out.err
    _assert_no_raw_controls(out.out + out.err)
    assert visible(HOSTILE_THREAD) in " ".join(out.out.split())  # the id as stored, controls shown
    _add_titled_threads(db)
    return db


def test_threads_lists_every_hostile_thread_literally(hostile_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["threads", "--db", str(hostile_db)]) == 0
    captured = capsys.readouterr()
    _assert_no_raw_controls(captured.out + captured.err)
    for thread_id, title in {**HOSTILE_TITLES, HOSTILE_THREAD: ""}.items():
        assert visible(thread_id) in captured.out, thread_id  # no thread hidden by another's text
        if title:
            assert visible(title) in captured.out, title
    assert "\\x1b]0;pwned\\x07\\x1b[2J" in captured.out and "\\x01b\\x7f" in captured.out
    # --json keeps the exact text (JSON escapes it), for scripts
    assert main(["threads", "--db", str(hostile_db), "--json"]) == 0
    listed = {t["thread_id"]: t["title"] for t in json.loads(capsys.readouterr().out)["threads"]}
    assert {k: listed[k] for k in HOSTILE_TITLES} == HOSTILE_TITLES


def test_inspect_shows_task_hints_ids_and_log_literally(hostile_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", HOSTILE_THREAD, "--db", str(hostile_db)]) == 0
    captured = capsys.readouterr()
    _assert_no_raw_controls(captured.out + captured.err)
    out = captured.out
    assert f"Thread {visible(HOSTILE_THREAD)}" in out
    said = "東京[/]の旅を計画したい \\x1b]0;pwned\\x07 [bold]予算は20万円[/bold]"
    for row in ("current task", "suggested response"):  # the hints quote the message, as does the log
        assert any(row in line and said in line for line in out.splitlines()), row
    assert out.split("Observation log", 1)[1].count(said) == 1
    assert visible(HOSTILE_THREAD) + ":" in out  # message ids in the groups' ranges
    for thread_id, title in HOSTILE_TITLES.items():
        assert main(["inspect", thread_id, "--db", str(hostile_db)]) == 0
        shown = capsys.readouterr()
        _assert_no_raw_controls(shown.out + shown.err)
        assert visible(title) in shown.out


def test_error_lines_quote_hostile_ids_literally(hostile_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    near_miss = HOSTILE_THREAD[:-1]  # "did you mean" quotes the stored id
    assert main(["inspect", near_miss, "--db", str(hostile_db)]) == 1
    captured = capsys.readouterr()
    _assert_no_raw_controls(captured.out + captured.err)
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: thread_id: thread '旅[/]行"), lines
    assert "did you mean" in lines[0] and "[/]" in lines[0]
    assert main(["inspect", "[/]" + CLEAR, "--db", str(hostile_db), "--branch", "x[/]"]) == 1
    err = capsys.readouterr().err
    _assert_no_raw_controls(err)
    assert err.startswith("error: ") and "[/]" in err


def test_fresh_process_prints_hostile_threads_without_a_traceback(hostile_db: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "400"
    for args in (["threads"], ["inspect", "bracket[/]thread"], ["inspect", "bracket[/]threa"]):
        done = subprocess.run([sys.executable, "-m", "langchain_om", *args, "--db", str(hostile_db)], env=env,
                              capture_output=True, timeout=120, check=False)
        out, err = done.stdout.decode("utf-8"), done.stderr.decode("utf-8")
        assert done.returncode == (1 if args[-1].endswith("threa") else 0), err
        _assert_no_raw_controls(out + err)
        assert "[bold red]not bold[/]" in out or "did you mean 'bracket[/]thread'" in err


def test_visible_shows_every_control_and_keeps_text() -> None:
    assert visible("東京 [/] café 🙂") == "東京 [/] café 🙂"
    assert visible("a\x1b]0;t\x07\x9b\x7f\u2028\n\t\ud800") == "a\\x1b]0;t\\x07\\x9b\\x7f\\u2028\\n\\t\\ud800"
    assert visible("line one\n\tline two\x1b[2J", keep_lines=True) == "line one\n\tline two\\x1b[2J"


def test_json_output_escapes_lone_surrogates_for_a_strict_utf8_stream(tmp_path: Path) -> None:
    """``--json`` keeps the exact text: a lone surrogate in stored metadata is written as its JSON escape
    (it crashed a strict UTF-8 stdout, or came out as a raw byte that is not UTF-8)."""
    db = tmp_path / "om.db"

    async def add() -> None:
        store = SQLiteStore(str(db))
        await store.asetup()
        try:
            await store.aensure_thread(implicit_resource("s[/]"), "s[/]", title="題名",
                                       metadata={"file": "report-\udcff.txt", "日本語": "東京\udc80"})
        finally:
            await store.aclose()

    asyncio.run(add())
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")}
    env.update(PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""), PYTHONIOENCODING="utf-8:strict")
    for args in (["inspect", "s[/]", "--json"], ["threads", "--json"]):
        done = subprocess.run([sys.executable, "-m", "langchain_om", *args, "--db", str(db)], env=env,
                              capture_output=True, timeout=120, check=False)
        assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
        payload = json.loads(done.stdout.decode("utf-8"))  # strict: the bytes are UTF-8
        if args[0] == "inspect":
            assert payload["thread"]["metadata"] == {"file": "report-\udcff.txt", "日本語": "東京\udc80"}
        else:
            assert [t["title"] for t in payload["threads"]] == ["題名"]


def test_the_console_handler_shows_a_hostile_title_literally() -> None:
    """``OMConsoleHandler`` prints the Observer's proposed title: ``[/]`` in it raised MarkupError inside
    the callback, and its escape sequences reached the terminal raw."""
    import io

    from rich.console import Console

    from langchain_om.foundation.events import ThreadUpdateData, ThreadUpdateEvent
    from langchain_om.integrations.callbacks import OMConsoleHandler

    title = "旅行[/]計画 " + RETITLE + CLEAR
    event = ThreadUpdateEvent(data=ThreadUpdateData(cycle_id="c1", thread_id="t", new_title=title,
                                                    timestamp="2026-12-05T09:00:00Z"))
    out = io.StringIO()
    OMConsoleHandler(Console(file=out, width=200, color_system=None)).handle(event)  # a log, not a terminal
    assert out.getvalue() == f"✎ thread title: {visible(title)}\n"
    console = Console(file=io.StringIO(), width=200, force_terminal=True, record=True, color_system=None)
    with OMConsoleHandler(console) as live:  # the live panel
        live.handle(event)
    console.print(live.render())
    shown = console.export_text()
    assert visible(title) in shown
    _assert_no_raw_controls(shown)
