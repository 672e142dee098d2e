"""Store round trips of a warm turn, pinned (issue 33, item 3).

On PostgreSQL each store call is a pool checkout and each SQL statement a network round trip;
both cost Python CPU in psycopg and the event loop, which made a turn there cost twice SQLite's.
A warm turn through ``create_agent`` + ``ObservationalMemoryMiddleware`` (no observation due)
is counted here: store calls on every backend, SQL statements on SQLite and PostgreSQL. The
figures are exact, so a change that adds a round trip fails here and has to say why. Counts,
not times: speed lives in ``python -m benchmarks.load``.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om import ObservationalMemory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

# (store calls, SQL statements of an English turn, of a Japanese turn: it also writes the CJK
# index) of one warm turn; statements are counted where SQL runs
PINNED: dict[tuple[str, bool], tuple[int, int, int]] = {
    ("memory", False): (17, 0, 0),
    ("sqlite", False): (17, 59, 61),
    ("postgres", False): (17, 35, 37),
    ("memory", True): (15, 0, 0),
    ("sqlite", True): (15, 57, 59),
    ("postgres", True): (15, 33, 35),
}


class Trips:
    """What one turn asked of the store: calls by method, statements by text."""

    def __init__(self) -> None:
        self.on = False
        self.calls: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()

    def statement(self, text: Any) -> None:
        if self.on:
            self.statements[" ".join(str(text).split())[:120]] += 1

    def reset(self) -> None:
        self.calls.clear()
        self.statements.clear()


def _count_calls(store: OMStore, trips: Trips) -> None:
    for name in dir(type(store)):
        method = getattr(store, name, None)
        if not name.startswith("a") or name in ("asetup", "aclose") or not inspect.iscoroutinefunction(method):
            continue

        def counted(method: Callable[..., Any] = method, name: str = name) -> Callable[..., Any]:
            async def call(*args: Any, **kwargs: Any) -> Any:
                if trips.on:
                    trips.calls[name] += 1
                return await method(*args, **kwargs)
            return call

        setattr(store, name, counted())


@contextmanager
def _count_statements(store: OMStore, kind: str, trips: Trips, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    if kind == "sqlite":
        conn = store._conn  # type: ignore[attr-defined]
        # statements SQLite runs for a trigger or an FTS index start with "--": not the caller's
        conn.set_trace_callback(lambda text: None if text.startswith("--") else trips.statement(text))
        try:
            yield
        finally:
            conn.set_trace_callback(None)
        return
    if kind == "postgres":
        import psycopg
        from psycopg._connection_base import BaseConnection

        execute, executemany, command = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.executemany, \
            BaseConnection._exec_command

        async def counted_execute(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(query.as_string(self) if hasattr(query, "as_string") else query)
            return await execute(self, query, *args, **kwargs)

        async def counted_executemany(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(query.as_string(self) if hasattr(query, "as_string") else query)
            return await executemany(self, query, *args, **kwargs)

        def counted_command(self: Any, text: Any, *args: Any, **kwargs: Any) -> Any:
            trips.statement(text)  # BEGIN, COMMIT: a round trip each
            return command(self, text, *args, **kwargs)

        monkeypatch.setattr(psycopg.AsyncCursor, "execute", counted_execute)
        monkeypatch.setattr(psycopg.AsyncCursor, "executemany", counted_executemany)
        monkeypatch.setattr(BaseConnection, "_exec_command", counted_command)
    yield


def _ask(user: int, turn: int) -> HumanMessage:
    if turn % 2:
        return HumanMessage(f"京都旅行の相談です、その{turn}。予算は{turn}万円。", id=f"h-{user}-{turn}")
    return HumanMessage(f"Planning the Lisbon trip, part {turn}; trains preferred.", id=f"h-{user}-{turn}")


@pytest.mark.parametrize("checkpointer", [False, True], ids=["stateless", "checkpointer"])
async def test_a_warm_turn_makes_the_pinned_number_of_store_round_trips(
    store: OMStore, store_kind: str, checkpointer: bool, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # thresholds no turn reaches: every warm turn does the same work (store, context, position)
    om = ObservationalMemory(store, model=ScriptedObserverModel(), token_counter="estimator",
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om)],
                         checkpointer=InMemorySaver() if checkpointer else None)
    config: Any = {"configurable": {"thread_id": "trips"}}
    trips = Trips()
    _count_calls(store, trips)
    per_turn: list[tuple[int, int]] = []
    with _count_statements(store, store_kind, trips, monkeypatch):
        for turn in range(6):
            trips.reset()
            trips.on = True
            result = await agent.ainvoke({"messages": [_ask(0, turn)]}, config)
            trips.on = False
            assert result["messages"][-1].content  # the agent answered
            per_turn.append((sum(trips.calls.values()), sum(trips.statements.values())))
    await om.aclose()
    # turns 2..5 are warm (caches filled); English and Japanese turns alternate
    assert per_turn[2] == per_turn[4] and per_turn[3] == per_turn[5], (per_turn, trips.calls)
    assert per_turn[2][0] == per_turn[3][0], per_turn
    figures = (per_turn[2][0], per_turn[2][1], per_turn[3][1])
    detail = f"last turn: calls {dict(trips.calls)}; statements {dict(trips.statements)}"
    assert figures == PINNED[(store_kind, checkpointer)], \
        f"(store calls, statements EN, statements JA) per warm turn {figures}, pinned " \
        f"{PINNED[(store_kind, checkpointer)]}: {detail}"
    stored = await store.aget_messages(om.resolve_resource("trips", None), "trips")
    assert [r.id for r in stored if r.data.get("type") == "human"] == [f"h-0-{t}" for t in range(6)]
