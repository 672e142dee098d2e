"""Issue 47, item 5: the memory inspector's routes over real HTTP (the page itself runs in a real
browser in tests/test_inspector_browser.py): threads, a thread's log with ages, the windows, the
cycles, the spend, the raw messages behind a group; read-only; 127.0.0.1 by default; a missing
``[ui]`` extra named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from inspector_support import HOSTILE, RESOURCE, THREAD, TURNS, observing_memory, seeded_db, serving, talk

from langchain_om.cli.commands import build_parser
from langchain_om.integrations.inspector import page_html

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("uvicorn", reason='the [ui] extra: pip install -e ".[ui]"')


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read().decode("utf-8"))


def test_the_routes_show_threads_log_windows_cycles_spend_and_raw_messages(tmp_path: Path) -> None:
    db = seeded_db(tmp_path / "om.db")
    with serving(db) as base:
        with urllib.request.urlopen(base + "/", timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/html")
            assert "memory inspector" in response.read().decode("utf-8")
        threads = _get(f"{base}/api/threads?resource={RESOURCE}")
        assert [t["threadId"] for t in threads["threads"]] == [THREAD]
        assert threads["threads"][0]["messageCount"] == 2 * len(TURNS)
        assert _get(f"{base}/api/threads")["threads"] == [], "a resource's threads are not listed without it"
        thread = _get(f"{base}/api/thread?thread={THREAD}&resource={RESOURCE}")
        log = "\n".join(group["text"] for group in thread["log"])
        assert re.search(r"^Date: \d{4}-\d{2}-\d{2} \(\w+\) \[today\]$", log, re.MULTILINE), log[:300]
        assert "2,500 CAD" in log and "浅草" in log and HOSTILE[:20] in log
        windows = thread["status"]["windows"]["active"]
        assert windows["messages"]["threshold"] == 30_000 and windows["observations"]["tokens"] > 0
        assert {event["kind"] for event in thread["timeline"]} == {"observation"}
        assert thread["status"]["spend"]["observer"]["calls"] >= 2
        group = thread["log"][0]
        raw = _get(f"{base}/api/messages?thread={THREAD}&resource={RESOURCE}&group={group['id']}")
        assert [m["role"] for m in raw["messages"]][:2] == ["human", "ai"]
        assert raw["messages"][0]["text"] == TURNS[0] and raw["messages"][0]["observed"] is True
        missing = urllib.request.Request(f"{base}/api/thread?thread=nope&resource={RESOURCE}")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(missing, timeout=30)
        assert info.value.code == 404 and "nope" in json.loads(info.value.read())["error"]
        for method in ("POST", "PUT", "DELETE"):  # read-only: no route takes a write
            with pytest.raises(urllib.error.HTTPError) as info:
                urllib.request.urlopen(urllib.request.Request(f"{base}/api/thread?thread={THREAD}", method=method,
                                                              data=b"{}"), timeout=30)
            assert info.value.code == 405

        version = thread["version"]
        om = observing_memory(db)  # another writer on the database, as an agent's process would be
        talk(om, "One more thing: we also want a day trip to Nikko.", 99)
        om.close()
        after = _get(f"{base}/api/thread?thread={THREAD}&resource={RESOURCE}")
        assert after["version"] != version and after["storedMessages"] == thread["storedMessages"] + 2


def test_serve_binds_to_loopback_and_names_the_ui_extra_when_it_is_missing(tmp_path: Path) -> None:
    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1" and args.port == 8765
    db = seeded_db(tmp_path / "om.db", turns=1)
    script = ("import sys\nsys.modules['starlette'] = None\nsys.modules['uvicorn'] = None\n"
              f"from langchain_om.cli.commands import main\nsys.exit(main(['serve', '--db', {str(db)!r}]))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
    assert done.returncode == 1
    assert 'pip install "langchain-om[ui]"' in done.stderr and done.stderr.startswith("error: "), done.stderr


def test_the_page_never_inserts_stored_text_as_html() -> None:
    page = page_html()
    assert "innerHTML" not in page and "outerHTML" not in page and "insertAdjacentHTML" not in page
    assert "document.write" not in page and "eval(" not in page
    assert "textContent" in page or "createTextNode" in page


async def test_the_inspectors_today_is_the_agents_on_the_conversations_clock(tmp_path: Path) -> None:
    """A user at -05:00 in the evening, replies stamped in UTC (already the next day there): the
    agent's context says "Today is" the user's date (issue 43, one clock), and the inspector dates
    the log's ages from that same day, not from the UTC date of the newest row."""
    from langchain_core.messages import AIMessage, HumanMessage

    from langchain_om import ObservationalMemory, SQLiteStore
    from langchain_om.foundation.messages import TIMESTAMP_KEY
    from langchain_om.integrations.inspector import Inspector
    from langchain_om.testing import ScriptedObserverModel

    store = SQLiteStore(tmp_path / "om.db")
    om = ObservationalMemory(store, model=ScriptedObserverModel(),
                             observation={"message_tokens": 60, "buffer_tokens": False})
    history: list[Any] = []
    for n, text in enumerate(["夕食は19時に浅草で予約しました。", "My budget is 2,500 CAD for the trip.",
                              "We land in Tokyo on April 4."]):
        history += [HumanMessage(text, id=f"h{n}", response_metadata={TIMESTAMP_KEY: f"2026-03-02T19:0{n}:00-05:00"}),
                    AIMessage(f"Noted {n}.", id=f"a{n}", response_metadata={TIMESTAMP_KEY: f"2026-03-03T00:1{n}:00Z"})]
        context = await om.aprocess(THREAD, history, resource_id=RESOURCE)
    assert "Today is Monday, 2026-03-02." in str(context.system_message.content if context.system_message else "")
    thread = await Inspector(store).athread(THREAD, RESOURCE)
    assert thread["today"] == "2026-03-02"
    assert all("[tomorrow]" not in group["text"] for group in thread["log"])
    await om.aclose()
