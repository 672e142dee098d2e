"""Issue 32, item 6: optional dependencies load only when used.

``import langchain_om`` (and building OM on SQLite or the in-memory store, with model strings of
providers) must not import psycopg or a provider's integration package; ``PostgresStore`` and a
model call are where they load. Checked in a fresh interpreter, since this test process has
imported everything already. Import *time* is a benchmark figure (benchmarks/import_time.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OPTIONAL = ["psycopg", "psycopg_pool", "langchain_openai", "openai", "langchain_google_genai", "langchain_anthropic",
            "langchain.agents"]
ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, os, sys, tempfile
OPTIONAL = {optional!r}
loaded = lambda: sorted(m for m in OPTIONAL if m in sys.modules)
out = {{}}
import langchain_om
out["import"] = loaded()
from langchain_om import InMemoryStore, ObservationalMemory, SQLiteStore, add_observational_memory
om = ObservationalMemory(SQLiteStore(os.path.join(tempfile.mkdtemp(), "om.db")), model="openai:gpt-5-mini")
other = ObservationalMemory(InMemoryStore(), model="google_genai:gemini-2.5-flash")
ctx = om.process("スレッド", [])
om.close(); other.close()
out["sqlite_and_model_strings"] = loaded()
from langchain_om import ObservationalMemoryMiddleware
out["middleware"] = loaded()
from langchain_om import PostgresStore
out["postgres"] = loaded()
print(json.dumps(out))
"""


def test_optional_dependencies_load_only_when_used() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test", "GOOGLE_API_KEY": "test"}
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(optional=OPTIONAL)], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["import"] == []
    assert loaded["sqlite_and_model_strings"] == []
    assert loaded["middleware"] == ["langchain.agents"]  # the middleware is langchain's: it loads with it
    assert "psycopg" in loaded["postgres"]  # the check sees an import when there is one


def test_lazy_names_resolve_to_the_defining_modules() -> None:
    import langchain_om
    from langchain_om.engine import ObservationalMemory
    from langchain_om.store.postgres import PostgresStore

    assert langchain_om.ObservationalMemory is ObservationalMemory
    assert langchain_om.PostgresStore is PostgresStore
    assert set(langchain_om.__all__) <= set(dir(langchain_om))
    try:
        langchain_om.NoSuchName  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchName" in str(exc)
    else:
        raise AssertionError("an unknown name must raise AttributeError")
