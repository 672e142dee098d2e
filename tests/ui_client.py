"""The AI SDK's own client for tests: ``npm install ai`` once per session, a uvicorn server on a
free loopback port, and ``tests/js/chat_client.mjs`` driving ``AbstractChat`` (useChat's engine)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import in_ci

SCRIPTS = Path(__file__).parent / "js"
CLIENT_SCRIPT = SCRIPTS / "chat_client.mjs"
AI_VERSION = os.environ.get("LANGCHAIN_OM_TEST_AI_VERSION", "7")
"""The ``ai`` major the tests install (ai 6 with ``@ai-sdk/langchain`` 2 passes too: set both)."""
AI_LANGCHAIN_VERSION = os.environ.get("LANGCHAIN_OM_TEST_AI_LANGCHAIN_VERSION", "3")
"""The ``@ai-sdk/langchain`` major that goes with ``ai`` 7 (its 2.x goes with ``ai`` 6)."""


def require_node() -> str:
    """The node binary; skips without one locally, fails in CI (``.ci/run`` must have it)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node and npm:
        return node
    message = "node/npm are not installed: the AI SDK client tests need Node 18+ and npm"
    if in_ci():
        pytest.fail(f"CI=true but {message}", pytrace=False)
    pytest.skip(message)


def install_ai(folder: Path, *extra: str) -> Path:
    """``npm install ai`` (and ``extra`` packages) into ``folder``; returns it, with the scripts."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "package.json").write_text(json.dumps({"name": "om-ui-test", "private": True, "type": "module"}))
    result = subprocess.run(
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", f"ai@{AI_VERSION}", *extra],
        cwd=folder, capture_output=True, text=True, timeout=300,
    )
    if result.returncode != 0:
        pytest.fail(f"npm install ai@{AI_VERSION} {' '.join(extra)} failed:\n{result.stderr[-2000:]}",
                    pytrace=False)
    for script in SCRIPTS.glob("*.mjs"):
        shutil.copy(script, folder / script.name)
    return folder


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(app: Any, *, lifespan: str = "off") -> Iterator[str]:
    """Run an ASGI app with uvicorn on a free loopback port in a thread; yields its base URL
    (``lifespan="on"`` for an app that opens and closes what it serves, as the inspector does)."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def run_chat(folder: Path, url: str, chat_id: str, turns: list[str]) -> dict[str, Any]:
    """Send ``turns`` one by one through the AI SDK chat client; returns what it kept and heard."""
    config = folder / f"chat-{chat_id}.json"
    config.write_text(json.dumps({"url": url, "chatId": chat_id, "turns": turns}))
    result = subprocess.run([require_node(), str(folder / CLIENT_SCRIPT.name), str(config)], cwd=folder,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout)
    return out


def run_langchain_adapter(folder: Path, events: list[Any]) -> dict[str, Any]:
    """Replay LangGraph stream ``events`` through ``@ai-sdk/langchain``'s ``toUIMessageStream``
    and the AI SDK's ``readUIMessageStream``; returns the final UI message and any errors."""
    path = folder / f"events-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(events))
    result = subprocess.run([require_node(), str(folder / "langchain_adapter.mjs"), str(path)], cwd=folder,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out: dict[str, Any] = json.loads(result.stdout)
    return out
