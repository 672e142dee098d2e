"""A SQLite database with a conversation OM has observed, and the inspector served on it over real
HTTP (uvicorn in a thread), for tests/test_inspector.py and tests/test_inspector_browser.py."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage
from ui_client import serve

from langchain_om import ObservationalMemory, SQLiteStore
from langchain_om.testing import ScriptedObserverModel

THREAD, RESOURCE = "trip", "user-42"
HOSTILE = "<img src=x onerror=\"document.title='owned'\"><b>bold?</b>"
"""A user message holding markup: the page must show it as written, never run or render it."""
TURNS = [
    "My budget is 2,500 CAD for the whole trip to Japan.",
    f"Please keep this exactly as I typed it: {HOSTILE}",
    "We land in Tokyo on April 4 and leave on April 14.",
    "東京では浅草の旅館に泊まりたいです。",
    "I'm vegetarian and Sam can't do long hikes.",
]


def observing_memory(db: Path) -> ObservationalMemory:
    """OM on ``db`` with a small message window and no buffering: every turn past the threshold observes."""
    return ObservationalMemory(SQLiteStore(db), model=ScriptedObserverModel(),
                               observation={"message_tokens": 80, "buffer_tokens": False})


def talk(om: ObservationalMemory, text: str, n: int) -> None:
    om.process(THREAD, [HumanMessage(text, id=f"h{n}"), AIMessage(f"Noted, turn {n}.", id=f"a{n}")],
               resource_id=RESOURCE)


def seeded_db(path: Path, turns: int = len(TURNS)) -> Path:
    om = observing_memory(path)
    for n, text in enumerate(TURNS[:turns]):
        talk(om, text, n)
    om.close()
    return path


@contextmanager
def serving(db: Path) -> Iterator[str]:
    """The inspector app on ``db`` at a free port of 127.0.0.1; yields its base URL."""
    from langchain_om.integrations.inspector import create_inspector_app

    with serve(create_inspector_app(SQLiteStore(db)), lifespan="on") as url:
        yield url
