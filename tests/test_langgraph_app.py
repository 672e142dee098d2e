"""examples/langgraph_app under ``langgraph dev`` (issue 18, point 3).

The test starts the example with the LangGraph CLI on a free loopback port (offline: no
browser, no analytics, the scripted models), streams runs with ``langgraph_sdk`` as a client
would, checks OM's ``data-om-*`` payloads on the custom stream and OM's state in its store
(SQLite by default, PostgreSQL when a DSN is set), then stops the server it started.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
from conftest import drop_pg_schema, require_pg_dsn
from ui_client import free_port

from langchain_om.engine import ObservationalMemory
from langchain_om.store import OMStore, PostgresStore, SQLiteStore
from langchain_om.testing import ScriptedObserverModel

APP = Path(__file__).resolve().parent.parent / "examples" / "langgraph_app"
TURNS = 8


def _example_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"langgraph_app_{name}", APP / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


dev_server = _example_module("dev_server")  # the port the server and its client use, from one place


def turn_text(i: int) -> str:
    return f"Turn {i}: my favourite lamp is model {i} and my budget is {i * 10} dollars. " + "detail " * 30


@contextmanager
def langgraph_dev(tmp_path: Path, env: dict[str, str], *flags: str) -> Iterator[str]:
    """``langgraph dev --no-reload`` on the example; yields the server URL and always stops it."""
    cli = Path(sys.executable).parent / "langgraph"
    if not cli.exists():
        pytest.fail('the langgraph CLI is missing: pip install "langgraph-cli[inmem]" (a test extra)', pytrace=False)
    env = {**env, "LANGGRAPH_PORT": str(free_port())}  # the example's one place for the port
    state_dir = APP / ".langgraph_api"  # the dev server's own store of threads and runs, in its cwd
    had_state = state_dir.exists()
    log = (tmp_path / "langgraph-dev.log").open("w")
    environment = {**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1", "LANGSMITH_TRACING": "false",
                   "LANGCHAIN_TRACING_V2": "false", "OM_EXAMPLE_MESSAGE_TOKENS": "300", **env,
                   # the langchain_om under test, whatever the environment has installed
                   "PYTHONPATH": os.pathsep.join(filter(None, [str(APP.parent.parent),
                                                                os.environ.get("PYTHONPATH")]))}
    for key in ("OM_EXAMPLE_MODEL", "OM_EXAMPLE_OM_MODEL"):
        environment.pop(key, None)  # the offline scripted models
    process = subprocess.Popen(  # as the README says: python dev_server.py (it notes the port for client.py)
        [sys.executable, "dev_server.py", *flags],
        cwd=APP, env=environment, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    url = dev_server.url(environment)
    try:
        deadline = time.monotonic() + 90  # ~5 s here; slow CI machines get slack
        while True:
            if process.poll() is not None:
                pytest.fail(f"langgraph dev exited early:\n{(tmp_path / 'langgraph-dev.log').read_text()[-3000:]}")
            try:
                if httpx.get(f"{url}/ok", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not answer:\n{(tmp_path / 'langgraph-dev.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)  # the group of the server this test started
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=5)
        log.close()
        if not had_state:
            shutil.rmtree(state_dir, ignore_errors=True)


async def stream_turns(url: str, turns: int, configurable: dict[str, Any] | None = None) -> tuple[str, list[Any]]:
    """Run ``turns`` user turns on one new thread; returns its id and every custom payload."""
    from langgraph_sdk import get_client

    client = get_client(url=url)
    thread = await client.threads.create()
    payloads: list[Any] = []
    for i in range(turns):
        async for part in client.runs.stream(
            thread["thread_id"], "agent", input={"messages": [{"role": "user", "content": turn_text(i)}]},
            stream_mode=["custom", "messages-tuple"], config={"configurable": configurable or {}},
        ):
            assert part.event != "error", part.data
            if part.event == "custom":
                payloads.append(part.data)
    return thread["thread_id"], payloads


def check_payloads(thread_id: str, payloads: list[Any]) -> None:
    statuses = [p for p in payloads if p["type"] == "data-om-status"]
    assert len(statuses) >= TURNS, "one status part per agent step"
    assert {p["id"] for p in statuses} == {f"om-status:{thread_id}"} and all(p["transient"] for p in statuses)
    assert statuses[-1]["data"]["threadId"] == thread_id
    cycles = [p for p in payloads if p["type"] != "data-om-status"]
    kinds = {p["type"] for p in cycles}
    assert {"data-om-buffering-start", "data-om-buffering-end", "data-om-activation"} <= kinds, kinds
    assert all(p["type"].startswith("data-om-") and p["id"] == p["data"]["cycleId"] for p in cycles)


async def check_store(store: OMStore, thread_id: str) -> None:
    """After the server stopped, OM's observation log for the thread is in the store."""
    om = ObservationalMemory(store, model=ScriptedObserverModel())
    try:
        record = await om.aget_record(thread_id)
        assert record.groups or record.buffered_chunks, "OM's log lives in its own store"
        assert record.thread_id == thread_id
    finally:
        await om.aclose()


async def test_example_under_langgraph_dev_with_sqlite(tmp_path: Path) -> None:
    db = tmp_path / "om.db"
    # OM's SQLite store runs its sub-millisecond, never-waiting calls inline on the event loop,
    # which the dev server's blocking-call detector flags: SQLite needs --allow-blocking there.
    with langgraph_dev(tmp_path, {"LANGCHAIN_OM_DB": str(db), "LANGCHAIN_OM_PG_DSN": ""}, "--allow-blocking") as url:
        thread_id, payloads = await stream_turns(url, TURNS)
        check_payloads(thread_id, payloads)
        # the documented client (examples/langgraph_app/client.py) finds the port the server took by itself
        port = url.rsplit(":", 1)[1]
        assert port != str(dev_server.DEFAULT_PORT)
        client = await asyncio.create_subprocess_exec(
            sys.executable, "client.py", cwd=APP, env={k: v for k, v in os.environ.items() if k != "LANGGRAPH_PORT"},
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(client.communicate(), timeout=60)
        assert client.returncode == 0, err.decode()
        assert "data-om-status om-status:" in out.decode() and f"on http://127.0.0.1:{port}" in out.decode()
        # a client of @ai-sdk/langchain asks for the payload that package maps onto data-om-* parts
        _, flat = await stream_turns(url, 1, {"om_stream_format": "ai-sdk-langchain"})
    assert flat and flat[0]["type"] == "om-status" and "data" not in flat[0]
    assert {"windows", "recordId", "threadId", "stepNumber", "generationCount"} <= set(flat[0])
    assert db.exists()
    await check_store(SQLiteStore(db), thread_id)


@pytest.mark.postgres
async def test_example_under_langgraph_dev_with_postgres(tmp_path: Path) -> None:
    dsn = require_pg_dsn()
    schema = f"om_app_{uuid.uuid4().hex[:12]}"
    try:
        with langgraph_dev(tmp_path, {"LANGCHAIN_OM_PG_DSN": dsn, "LANGCHAIN_OM_PG_SCHEMA": schema,
                                      "LANGCHAIN_OM_DB": str(tmp_path / "unused.db")}) as url:
            thread_id, payloads = await stream_turns(url, TURNS)
        check_payloads(thread_id, payloads)
        assert not (tmp_path / "unused.db").exists(), "with a DSN, OM does not touch SQLite"
        await check_store(PostgresStore(dsn, schema=schema), thread_id)
    finally:
        await drop_pg_schema(dsn, schema)


def test_a_blank_user_id_from_the_langgraph_server_is_no_resource() -> None:
    """Without auth the LangGraph server sets ``configurable.user_id`` to "": OM must read that as
    "no resource" (the thread's private one), not fail the run on an empty resource id."""
    from langchain_om.foundation.run_ids import ids_from_run_config
    from langchain_om.integrations.graph import ids_from_config

    assert ids_from_config({"configurable": {"thread_id": "t", "user_id": ""}}) == ("t", None)
    assert ids_from_run_config({"configurable": {"thread_id": "t", "user_id": "  "}}) == ("t", None)
    assert ids_from_config({"configurable": {"thread_id": "t", "user_id": "ana"}}) == ("t", "ana")
    assert ids_from_config({"configurable": {"thread_id": "t", "resource_id": "r", "user_id": ""}}) == ("t", "r")


def test_the_example_config_builds_a_deployment_image_recipe(tmp_path: Path) -> None:
    """``langgraph dockerfile`` validates langgraph.json and installs the package from the repo root."""
    cli = Path(sys.executable).parent / "langgraph"
    target = tmp_path / "Dockerfile"
    result = subprocess.run([str(cli), "dockerfile", str(target)], cwd=APP, capture_output=True, text=True,
                            timeout=60, env={**os.environ, "LANGGRAPH_CLI_NO_ANALYTICS": "1"})
    assert result.returncode == 0, result.stdout + result.stderr
    recipe = target.read_text()
    assert "examples/langgraph_app/agent.py:graph" in recipe
    assert "Adding local package ../.." in recipe, "the image installs langchain-om itself"


def test_the_port_comes_from_one_place() -> None:
    """``LANGGRAPH_PORT`` moves the server and the client together; a bad value names the variable."""
    assert dev_server.port({}) == 2024 and dev_server.url({}) == "http://127.0.0.1:2024"
    command = dev_server.dev_command("--allow-blocking", env={"LANGGRAPH_PORT": "8123"})
    assert command[command.index("--port") + 1] == "8123" and command[-1] == "--allow-blocking"
    assert dev_server.url({"LANGGRAPH_PORT": "8123"}) == "http://127.0.0.1:8123"
    for bad in ("x", "0", "70000"):
        with pytest.raises(SystemExit, match="LANGGRAPH_PORT"):
            dev_server.port({"LANGGRAPH_PORT": bad})


def test_the_client_finds_the_port_or_says_in_one_line_which_to_set(tmp_path: Path) -> None:
    """Issue 47, item 7: LANGGRAPH_PORT when set (only that), else the port dev_server.py noted, else 2024 and
    the next few; nothing answering is one line naming LANGGRAPH_PORT."""
    noted = tmp_path / ".langgraph_port"
    up = {2026}
    assert dev_server.find_server({}, noted=noted, probe=up.__contains__) == "http://127.0.0.1:2026"
    noted.write_text("40123\n")
    up.add(40123)
    assert dev_server.find_server({}, noted=noted, probe=up.__contains__) == "http://127.0.0.1:40123"
    with pytest.raises(SystemExit) as info:
        dev_server.find_server({"LANGGRAPH_PORT": "2025"}, noted=noted, probe=up.__contains__)
    message = str(info.value)
    assert "\n" not in message and message.startswith("error: ") and "port 2025:" in message
    assert "set LANGGRAPH_PORT" in message
    assert dev_server.serving_port(["langgraph", "dev", "--port", "2024", "--port", "2031"]) == 2031
    assert dev_server.answers(free_port()) is False, "a closed port does not answer"
