"""Issue 32, item 6: optional dependencies and optional parts load only when used.

``import langchain_om`` (and building OM on SQLite or the in-memory store, with model strings of
providers) must not import psycopg or a provider's integration package; ``PostgresStore`` and a
model call are where they load. The typical-use import (OM, the middleware, SQLite) leaves out
recall, working memory, the extractors, the temporal markers, the vector index and the
Observer's language detection (``LAZY``); building OM and running a step with nothing optional
configured loads only working memory and the extractors of those (the engine builds both).
Checked in a fresh interpreter, since this test process has imported everything already.
Import *time* is a benchmark figure (benchmarks/import_time.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

OPTIONAL = ["psycopg", "psycopg_pool", "langchain_openai", "openai", "langchain_google_genai", "langchain_anthropic",
            "langchain.agents"]
LAZY = ["langchain_om.extensions.recall", "langchain_om.extensions.working_memory",
        "langchain_om.extensions.extractors", "langchain_om.extensions.temporal",
        "langchain_om.extensions.vector_index", "langchain_om.extensions.vector_resident",
        "langchain_om.model_calls.language"]
ROOT = Path(__file__).resolve().parent.parent

SCRIPT = """
import json, os, sys, tempfile
OPTIONAL = {optional!r}
LAZY = {lazy!r}
loaded = lambda: sorted(m for m in OPTIONAL if m in sys.modules)
lazy = lambda: sorted(m for m in LAZY if m in sys.modules)
out = {{}}
import langchain_om
out["import"] = loaded()
from langchain_om import InMemoryStore, ObservationalMemory, SQLiteStore, add_observational_memory
om = ObservationalMemory(SQLiteStore(os.path.join(tempfile.mkdtemp(), "om.db")), model="openai:gpt-5-mini")
other = ObservationalMemory(InMemoryStore(), model="google_genai:gemini-2.5-flash")
ctx = om.process("スレッド", [])
om.close(); other.close()
out["sqlite_and_model_strings"] = loaded()
out["step_lazy"] = lazy()
from langchain_om import ObservationalMemoryMiddleware
out["middleware"] = loaded()
from langchain_om import PostgresStore
out["postgres"] = loaded()
recalling = ObservationalMemory(InMemoryStore(), model="openai:gpt-5-mini", retrieval=True)
recalling.close()
out["retrieval_configured"] = lazy()
print(json.dumps(out))
"""


def test_optional_dependencies_load_only_when_used() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "sk-test", "GOOGLE_API_KEY": "test"}
    done = subprocess.run([sys.executable, "-c", SCRIPT.format(optional=OPTIONAL, lazy=LAZY)], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["import"] == []
    assert loaded["sqlite_and_model_strings"] == []
    assert loaded["step_lazy"] == ["langchain_om.extensions.extractors", "langchain_om.extensions.working_memory"]
    assert "langchain_om.extensions.recall" in loaded["retrieval_configured"]  # the check sees a lazy import
    assert loaded["middleware"] == ["langchain.agents"]  # the middleware is langchain's: it loads with it
    assert "psycopg" in loaded["postgres"]  # the check sees an import when there is one


def test_the_typical_use_import_leaves_the_optional_parts_out() -> None:
    script = ("import sys\nfrom langchain_om import ObservationalMemory, ObservationalMemoryMiddleware, SQLiteStore\n"
              f"print(sorted(m for m in {LAZY!r} if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


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


def test_config_and_event_fields_keep_their_docstrings_as_descriptions() -> None:
    """The models read their attribute docstrings in one pass per module (foundation/field_docs.py) and
    build their schemas on first use: the descriptions are on the fields and in the JSON schema."""
    import json as json_

    from pydantic.errors import PydanticInvalidForJsonSchema

    from langchain_om.foundation import config, events

    in_schemas = 0
    for module, base in ((config, config._Strict), (events, events._Data)):
        for cls in vars(module).values():
            if not (isinstance(cls, type) and issubclass(cls, base) and cls is not base):
                continue
            try:
                schema = json_.dumps(cls.model_json_schema(), ensure_ascii=False)
            except PydanticInvalidForJsonSchema:  # a field holds a callable or a model instance
                schema = None
            for name, info in cls.model_fields.items():
                if info.description and schema is not None:
                    assert json_.dumps(info.description, ensure_ascii=False)[1:-1] in schema, f"{cls.__name__}.{name}"
                    in_schemas += 1
    assert in_schemas > 40, "the check reached the models"
