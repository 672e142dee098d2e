"""Issue 47, item 1: a lean install. The base install holds what the embedded SQLite default needs;
providers and PostgreSQL are extras, and a missing one is reported by an error naming the extra.

Checked in a fresh interpreter where the extras' modules cannot be imported (``sys.modules[name] =
None`` makes ``import name`` fail as an absent package does), so this environment, which has every
extra installed, shows what a base install does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ["numpy", "langchain_openai", "openai", "langchain_google_genai", "google.genai", "psycopg", "psycopg_pool",
           "langchain_postgres", "starlette", "fastapi", "uvicorn"]

SCRIPT = """
import json, os, sys, tempfile
for name in {blocked!r}:
    sys.modules[name] = None
out = {{}}
from langchain_om import ObservationalMemory, OMConfigError, SQLiteStore
from langchain_om.testing import ScriptedObserverModel
from langchain_core.messages import HumanMessage, AIMessage
om = ObservationalMemory(SQLiteStore(os.path.join(tempfile.mkdtemp(), "om.db")), model=ScriptedObserverModel(),
                         observation={{"message_tokens": 200}})
for i in range(4):
    om.process("t", [HumanMessage(f"I moved to Lisbon in March, note {{i}}. " * 5), AIMessage("Noted.")])
out["observed"] = bool(om.get_record("t").observations)
om.close()
for spec in ("openai:gpt-5-mini", "google_genai:gemini-2.5-flash"):
    try:
        ObservationalMemory(SQLiteStore(os.path.join(tempfile.mkdtemp(), "x.db")), model=spec)
    except OMConfigError as exc:
        out[spec] = str(exc)
from langchain_om.model_calls.models import _model_from_string
try:
    _model_from_string("openai:gpt-5-mini")
except ImportError as exc:
    out["first_call"] = str(exc)
from langchain_core.embeddings import DeterministicFakeEmbedding
try:
    ObservationalMemory(SQLiteStore(os.path.join(tempfile.mkdtemp(), "v.db")), model=ScriptedObserverModel(),
                        retrieval={{"vector": True, "embeddings": DeterministicFakeEmbedding(size=8)}})
except OMConfigError as exc:
    out["vector"] = str(exc)
try:
    from langchain_om import PostgresStore
except ImportError as exc:
    out["postgres"] = str(exc)
print(json.dumps(out))
"""


def _run_without_extras() -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test", "GOOGLE_API_KEY": "test"}
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(blocked=BLOCKED)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, str] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_sqlite_default_works_and_each_missing_extra_is_named() -> None:
    out = _run_without_extras()
    assert out["observed"], "OM observed on SQLite with no extra installed"
    assert 'pip install "langchain-om[openai]"' in out["openai:gpt-5-mini"]
    assert "model: " in out["openai:gpt-5-mini"], "the error names the option"
    assert 'pip install "langchain-om[google]"' in out["google_genai:gemini-2.5-flash"]
    assert 'pip install "langchain-om[openai]"' in out["first_call"], out["first_call"]
    assert out["vector"].startswith("retrieval.embeddings: ") and 'pip install "langchain-om[vector]"' in out["vector"]
    assert 'pip install "langchain-om[postgres]"' in out["postgres"] and "PostgresStore" in out["postgres"]


def test_the_base_dependencies_leave_providers_and_postgres_to_extras() -> None:
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = " ".join(project["dependencies"])
    for optional in ("langchain-openai", "langchain-google-genai", "langchain-postgres", "psycopg", "fastapi", "numpy"):
        assert optional not in base, optional
    extras = project["optional-dependencies"]
    assert any(d.startswith("langchain-openai") for d in extras["openai"])
    assert any(d.startswith("langchain-google-genai") for d in extras["google"])
    assert {d.split(">")[0].split("[")[0] for d in extras["postgres"]} >= {"psycopg", "psycopg-pool",
                                                                           "langchain-postgres"}
    assert extras["all"] == ["langchain-om[openai,google,postgres,vector,ui]"]
    assert "langchain-om[all]" in extras["test"], "the suite tests every supported integration"
    for script in (ROOT / ".ci" / "run", ROOT / "scripts" / "test.sh"):
        assert "test,docs,all" in script.read_text(encoding="utf-8"), f"{script} installs every extra tested"
