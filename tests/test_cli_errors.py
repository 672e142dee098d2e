"""What a newcomer hits first in the console script: one-line errors with a non-zero exit for every
bad ``--db`` (never creating directories, never writing to a damaged file), refused empty ids,
``--version``, ``python -m langchain_om``, help that shows defaults, and the offline eval."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from langchain_om.cli.commands import main

ROOT = Path(__file__).resolve().parents[1]
LME_DATA = ROOT / "tests" / "data" / "longmemeval_mini.json"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _one_line_error(err: str, *needles: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") and "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def healthy_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("healthy") / "om.db"
    assert main(["demo", "--db", str(db), "--fast", "--scripted", "--steps", "3"]) == 0
    return db


def _bad_files(tmp_path: Path, healthy: Path) -> dict[str, tuple[Path, str]]:
    (tmp_path / "folder.db").mkdir()
    (tmp_path / "random.db").write_bytes(os.urandom(5000))
    (tmp_path / "text.db").write_text("hello, this is not a database\n")
    (tmp_path / "truncated.db").write_bytes(healthy.read_bytes()[:8192])
    other = tmp_path / "other.db"
    import sqlite3

    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    readonly = tmp_path / "readonly.db"
    shutil.copy(healthy, readonly)
    readonly.chmod(0o444)
    return {
        "directory": (tmp_path / "folder.db", "is a directory"),
        "random bytes": (tmp_path / "random.db", "not a SQLite database"),
        "text": (tmp_path / "text.db", "not a SQLite database"),
        "truncated": (tmp_path / "truncated.db", "left untouched"),
        "another application's database": (other, "another application"),
        "read-only": (readonly, "read-only"),
    }


def test_every_bad_db_fails_in_one_line_and_is_left_untouched(
    tmp_path: Path, healthy_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    for name, (path, reason) in _bad_files(tmp_path, healthy_db).items():
        before = _digest(path) if path.is_file() else None
        code = main(["demo", "--db", str(path), "--fast", "--scripted", "--steps", "1"])
        captured = capsys.readouterr()
        assert code == 1, name
        _one_line_error(captured.err, "--db", reason)
        if before is not None:
            assert _digest(path) == before, f"{name}: the file was changed"
            assert not Path(f"{path}-wal").exists(), f"{name}: SQLite opened it for writing"
    # inspect reads: the damaged ones fail the same way, the read-only healthy copy can be inspected
    for name in ("random bytes", "text", "truncated", "directory"):
        path, reason = _bad_files_cache(tmp_path)[name]
        assert main(["inspect", "demo-trip", "--db", str(path)]) == 1
        _one_line_error(capsys.readouterr().err, "--db", reason)


def _bad_files_cache(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    return {
        "random bytes": (tmp_path / "random.db", "not a SQLite database"),
        "text": (tmp_path / "text.db", "not a SQLite database"),
        "truncated": (tmp_path / "truncated.db", "left untouched"),
        "directory": (tmp_path / "folder.db", "is a directory"),
    }


def test_a_missing_directory_is_an_error_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "no" / "such" / "dir" / "x.db"
    assert main(["demo", "--db", str(target), "--fast", "--scripted", "--steps", "1"]) == 1
    _one_line_error(capsys.readouterr().err, "--db", "does not exist")
    assert not (tmp_path / "no").exists()
    out = tmp_path / "missing" / "results.jsonl"
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "scripted", "--out", str(out)]) == 1
    _one_line_error(capsys.readouterr().err, "--out", "does not exist")
    assert not (tmp_path / "missing").exists()


def test_empty_ids_are_refused_naming_the_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "om.db"
    for argv, name in ((["inspect", "", "--db", str(db)], "thread_id"),
                       (["inspect", "t", "--resource", " ", "--db", str(db)], "--resource"),
                       (["demo", "--thread", "", "--db", str(db)], "--thread")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"argument {name}: must not be empty" in err, err
        assert "resource_id" not in err
    assert not db.exists()  # nothing was replayed under a default thread


def test_a_model_provider_error_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("LANGCHAIN_OM_TRACEBACK", raising=False)
    code = main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "nosuchprovider:some-model",
                 "--out", str(tmp_path / "r.jsonl")])
    assert code == 1
    _one_line_error(capsys.readouterr().err, "nosuchprovider")


def _fresh(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "GOOGLE_API_KEY")}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["COLUMNS"] = "160"
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, text=True, capture_output=True, timeout=180,
                          check=False)


def test_version_and_python_dash_m(tmp_path: Path) -> None:
    from langchain_om import __version__

    result = _fresh("-m", "langchain_om", "--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"langchain-om {__version__}"
    result = _fresh("-m", "langchain_om", "inspect", "t", "--db", "missing.db", cwd=tmp_path)
    assert result.returncode == 1
    _one_line_error(result.stderr, "no such database file")


def test_eval_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["eval", "longmemeval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: longmemeval_results.jsonl)", "(default: 4)", "(default: <out>.om.db)",
                    "(default: 30000)", "(default: 40000)", "(default: the answer model", "'scripted'"):
        assert default in text, default


def test_eval_runs_offline_with_scripted_models(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.jsonl"
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "scripted", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 6 and all(r["judge_parsed"] for r in rows)
    assert "LongMemEval accuracy" in printed and "overall" in printed and "0 failed" in printed
    # the scripted reader answered the dog question from what OM kept of the haystack
    dog = next(r for r in rows if r["question_id"] == "mini_ssu_01")
    assert "Australian Shepherd" in dog["hypothesis"] and dog["correct"]
    abstained = next(r for r in rows if r["question_id"] == "mini_ssu_02_abs")
    assert abstained["correct"]
    # --om-model scripted alone works with a scripted answer model too (the judge follows --model)
    out2 = tmp_path / "r2.jsonl"
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "scripted", "--om-model", "scripted",
                 "--out", str(out2), "--limit", "2"]) == 0
    assert len(out2.read_text().splitlines()) == 2


def _foreign_with_schema_version(path: Path, application_id: int = 0) -> Path:
    """Another application's database that happens to version its schema the way OM does."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute("INSERT INTO schema_version VALUES (3)")
    conn.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, customer TEXT, total REAL)")
    conn.execute("INSERT INTO invoices (customer, total) VALUES ('株式会社テスト', 1200.5)")
    if application_id:
        conn.execute(f"PRAGMA application_id = {application_id}")
    conn.commit()
    conn.close()
    return path


def test_another_application_with_a_schema_version_table_is_left_byte_for_byte(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 30 item 8: a ``schema_version`` table was taken for OM's, and ``inspect`` then created
    OM's tables inside the other application's file."""
    plain = _foreign_with_schema_version(tmp_path / "invoices.db")
    stamped = _foreign_with_schema_version(tmp_path / "stamped.db", application_id=0x12345678)
    # OM's own tables by name, but another application's file (it stamped its own id)
    import sqlite3

    lookalike = tmp_path / "lookalike.db"
    shutil.copy(plain, lookalike)
    conn = sqlite3.connect(lookalike)
    for table in ("threads", "messages", "records", "kv"):
        conn.execute(f"CREATE TABLE {table} (id INTEGER)")
    conn.commit()
    conn.close()
    capsys.readouterr()
    for path in (plain, stamped, lookalike):
        before = _digest(path)
        for argv in (["inspect", "demo-trip", "--db", str(path)],
                     ["demo", "--db", str(path), "--fast", "--scripted", "--steps", "1"]):
            assert main(argv) == 1, (path.name, argv[0])
            _one_line_error(capsys.readouterr().err, "--db", "another application")
            assert _digest(path) == before, f"{path.name}: {argv[0]} changed the file"
            assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()


def test_om_databases_carry_an_application_id_and_older_ones_get_it_on_open(
    tmp_path: Path, healthy_db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    from langchain_om.store.sqlite.schema import APPLICATION_ID

    def application_id(path: Path) -> int:
        conn = sqlite3.connect(path)
        try:
            return int(conn.execute("PRAGMA application_id").fetchone()[0])
        finally:
            conn.close()

    assert application_id(healthy_db) == APPLICATION_ID, "a database the store created is stamped"
    legacy = tmp_path / "legacy.db"  # written before the stamp existed: OM's tables, application_id 0
    shutil.copy(healthy_db, legacy)
    conn = sqlite3.connect(legacy)
    conn.execute("PRAGMA application_id = 0")
    conn.commit()
    conn.close()
    assert application_id(legacy) == 0
    assert main(["inspect", "demo-trip", "--db", str(legacy)]) == 0, capsys.readouterr().err
    assert application_id(legacy) == APPLICATION_ID, "opening it migrated the stamp"
    assert main(["inspect", "demo-trip", "--db", str(legacy)]) == 0


# ----------------------------------------------------------- issue 31, items 4 and 5


def _conversation(path: Path, *texts: str) -> Path:
    entries = []
    for index, text in enumerate(texts):
        entries.append({"role": "user" if index % 2 == 0 else "assistant", "content": text,
                        "timestamp": f"2026-04-0{1 + index // 2}T09:{index:02d}:00+09:00"})
    path.write_text(json.dumps(entries, ensure_ascii=False), encoding="utf-8")
    return path


def test_a_conversation_file_is_replayed_on_its_own_thread_even_beside_the_demo(
    tmp_path: Path, healthy_db: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import sqlite3

    monkeypatch.setenv("COLUMNS", "300")
    db = tmp_path / "om.db"
    shutil.copy(healthy_db, db)  # already holds the bundled demo's first steps
    mine = _conversation(tmp_path / "京都の旅.json", "京都で旅館を予約したいです。", "承知しました。",
                         "Sam can't do long hikes.", "Noted: short walks only.")
    capsys.readouterr()
    assert main(["demo", "--db", str(db), "--fast", "--scripted", "--conversation", str(mine)]) == 0
    out = capsys.readouterr().out
    assert "already replayed" not in out and "4 messages in 2 steps" in out, out
    assert "京都の旅-" in out  # the thread is named after the file
    conn = sqlite3.connect(db)
    rows = conn.execute("SELECT thread_id, count(*) FROM messages GROUP BY thread_id").fetchall()
    conn.close()
    counts = dict(rows)
    assert counts.pop("demo-trip") > 0  # the bundled demo's rows are untouched
    (thread, count), = counts.items()
    assert thread.startswith("京都の旅-") and count == 4
    # the same file again resumes its own thread; --thread names another one
    assert main(["demo", "--db", str(db), "--fast", "--scripted", "--conversation", str(mine)]) == 0
    assert "already replayed" in capsys.readouterr().out
    assert main(["demo", "--db", str(db), "--fast", "--scripted", "--conversation", str(mine),
                 "--thread", "mine"]) == 0
    assert "Thread mine in" in " ".join(capsys.readouterr().out.split())


def test_conversation_file_errors_are_one_line_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "folder.json").mkdir()
    (tmp_path / "latin1.json").write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "blank.json").write_text("  \n")
    (tmp_path / "list.json").write_text("[]")
    db = tmp_path / "om.db"
    for name, reason in (("missing.json", "no such file"), ("folder.json", "is a directory"),
                         ("latin1.json", "not UTF-8"), ("empty.json", "empty"), ("blank.json", "empty"),
                         ("list.json", "empty")):
        assert main(["demo", "--db", str(db), "--fast", "--scripted",
                     "--conversation", str(tmp_path / name)]) == 1, name
        _one_line_error(capsys.readouterr().err, "--conversation", name, reason)
    assert not db.exists()  # refused before the database was created


def test_usage_errors_are_one_line_with_a_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, needle in ((["demo", "--steps", "x"], "argument --steps"), (["demo", "--db", ""], "argument --db"),
                         (["inspect", "t", "--db", " "], "argument --db"), (["threads", "--db", ""], "argument --db"),
                         (["demo", "--bogus"], "--bogus"),
                         (["nosuch"], "invalid choice")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, argv
        _one_line_error(capsys.readouterr().err, needle, "--help")
    assert not (tmp_path / "langchain_om.db").exists()


def test_bare_command_shows_the_help_and_demo_help_describes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = _fresh("-m", "langchain_om", cwd=tmp_path)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    assert "usage: langchain-om" in result.stdout
    assert all(command in result.stdout for command in ("demo", "inspect", "threads", "eval"))
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "Replay a conversation step by step" in text and "thread of its own" in text


def test_a_network_failure_suggests_scripted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    import httpx
    import langchain.chat_models
    import langchain.chat_models.base as chat_base
    import openai
    from langchain_core.messages import BaseMessage
    from om_fakes import CallableFake

    class Offline(CallableFake):
        def _call(self, messages: list[BaseMessage], stop: object = None, run_manager: object = None,
                  **kwargs: object) -> str:
            self.prompts.append(list(messages))
            raise openai.APIConnectionError(request=httpx.Request("POST", "https://api.openai.com/v1/x"))

    model = Offline(fn=lambda _m: "")
    real = langchain.chat_models.init_chat_model

    def fake_init(spec: str, **kwargs: object) -> object:
        return model if spec == "scripted:offline" else real(spec, **kwargs)

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    monkeypatch.setitem(chat_base._BUILTIN_PROVIDERS, "scripted", ("langchain_om", "Offline", fake_init))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-set-but-no-network")
    assert main(["demo", "--db", str(tmp_path / "om.db"), "--model", "scripted:offline", "--fast"]) == 1
    err = capsys.readouterr().err
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "Connection error" in line and "--scripted" in line, line


def test_eval_errors_name_the_flag(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = str(tmp_path / "r.jsonl")
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "openai:gpt-4o-mini", "--out", out]) == 1
    _one_line_error(capsys.readouterr().err, "--model", "OPENAI_API_KEY")
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "scripted",
                 "--judge-model", "openai:gpt-4o-mini", "--out", out]) == 1
    _one_line_error(capsys.readouterr().err, "--judge-model", "OPENAI_API_KEY")
    assert main(["eval", "longmemeval", "--data", str(LME_DATA), "--model", "scripted", "--out", out,
                 "--question-type", "bogus"]) == 1
    _one_line_error(capsys.readouterr().err, "--question-type", "bogus", "single-session-user", "temporal-reasoning")
