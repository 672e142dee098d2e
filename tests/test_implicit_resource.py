"""Issue 15, item 1: a call without a resource never reaches another user's memory.

Before, a call without ``resource_id`` (or ``configurable.user_id``) used the thread id as
its resource, so a caller who chose the thread id ``"alice"`` read the working memory and,
through ``recall``, the threads of the user whose resource id is ``"alice"``. Now such a call
gets the thread's private resource (``implicit_resource``), a name explicit ids cannot spell.
Each integration is tested end to end; then the schema migration that moves data stored the
old way (fixture ``tests/data/om_v1.sqlite``, written by the version 1 code).
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from om_fakes import conversation

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.history import ObservationalChatMessageHistory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import IMPLICIT_RESOURCE_PREFIX, SCHEMA_VERSION, InvalidStoreInput, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

SECRET = "passport number P-7731"
VICTIM = "alice"  # a real user's resource id, which an attacker uses as a thread id
FIXTURE = Path(__file__).parent / "data" / "om_v1.sqlite"


def make_om(store: Any = None, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "model": ScriptedObserverModel(), "observation": {"message_tokens": 400},
        "reflection": {"observation_tokens": 10_000}, "token_counter": "estimator",
        "working_memory": {"agent_managed": True}, "retrieval": True,
    }
    options.update(overrides)
    return ObservationalMemory(store or InMemoryStore(), **options)


async def seed_victim(om: ObservationalMemory) -> None:
    """Alice, passing her resource id, has working memory and an observed thread."""
    assert om.working_memory is not None
    await om.working_memory.aset("alice-trip", f"# Alice\n- {SECRET}", resource_id=VICTIM)
    for history in conversation(12):
        await om.aprocess("alice-trip", history, resource_id=VICTIM)
    assert SECRET in text(await om.aprocess("alice-trip", [], resource_id=VICTIM))


def text(context_or_messages: Any) -> str:
    """Everything a model would read: an OMContext's system message and messages, or a message list."""
    messages = list(getattr(context_or_messages, "messages", context_or_messages))
    system = getattr(context_or_messages, "system_message", None)
    return "\n".join(str(m.content) for m in ([system] if system is not None else []) + messages)


async def test_engine_call_without_resource_does_not_reach_the_same_named_resource() -> None:
    om = make_om()
    await seed_victim(om)
    attacker = await om.aprocess(VICTIM, [HumanMessage("what do you know about me?", id="x1")])
    assert SECRET not in text(attacker)
    assert om.working_memory is not None
    assert await om.working_memory.aget(VICTIM) is None
    with pytest.raises(InvalidStoreInput) as err:  # the private namespace cannot be named explicitly
        await om.aprocess("t2", [], resource_id=IMPLICIT_RESOURCE_PREFIX + "alice-trip")
    assert err.value.field == "resource_id"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def test_graph_nodes_without_user_id_do_not_see_the_same_named_users_memory() -> None:
    om = make_om()
    await seed_victim(om)
    seen: list[list[BaseMessage]] = []
    model = ScriptedAgentModel()

    async def agent(state: State) -> dict[str, Any]:
        seen.append(list(state["messages"]))
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    builder.add_edge("agent", END)
    graph = add_observational_memory(builder, om).compile()
    await graph.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": VICTIM}})
    assert seen and SECRET not in text(seen[-1])
    # the same graph with the user's id does see it: the test would notice a graph that sees nothing
    await graph.ainvoke({"messages": [HumanMessage("hi")]},
                        {"configurable": {"thread_id": "alice-trip", "user_id": VICTIM}})
    assert SECRET in text(seen[-1])


async def test_middleware_without_user_id_does_not_see_the_same_named_users_memory() -> None:
    om = make_om()
    await seed_victim(om)
    model = ScriptedAgentModel()
    agent = create_agent(model, tools=[], middleware=[ObservationalMemoryMiddleware(om)])
    await agent.ainvoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": VICTIM}})
    assert model.calls and SECRET not in text(model.calls[-1])
    await agent.ainvoke({"messages": [HumanMessage("hi")]},
                        {"configurable": {"thread_id": "alice-2", "user_id": VICTIM}})
    assert SECRET in text(model.calls[-1])


def test_chat_history_without_resource_does_not_see_the_same_named_users_memory() -> None:
    om = make_om()
    om._loop.run(seed_victim(om))
    try:
        history = ObservationalChatMessageHistory(om, VICTIM)
        history.add_messages([HumanMessage("hello")])
        assert SECRET not in text(history.messages)
        assert SECRET in text(ObservationalChatMessageHistory(om, "alice-3", resource_id=VICTIM).messages)
    finally:
        om.close()


async def test_recall_without_resource_does_not_list_the_same_named_users_threads() -> None:
    om = make_om()
    await seed_victim(om)
    await om.aprocess(VICTIM, [HumanMessage("hi", id="x1")])
    tool = om.recall_tool()
    config: RunnableConfig = {"configurable": {"thread_id": VICTIM}}
    listed = await tool.ainvoke({"mode": "threads"}, config)
    assert "alice-trip" not in str(listed)
    victims = await tool.ainvoke({"mode": "threads"}, {"configurable": {"thread_id": "alice-trip",
                                                                         "user_id": VICTIM}})
    assert "alice-trip" in str(victims)


async def test_working_memory_tool_without_resource_cannot_overwrite_the_same_named_users_memory() -> None:
    om = make_om()
    await seed_victim(om)
    (tool,) = om.working_memory_tools()
    await tool.ainvoke({"content": "# Hijacked"}, {"configurable": {"thread_id": VICTIM}})
    assert om.working_memory is not None
    assert SECRET in str(await om.working_memory.aget("alice-trip", resource_id=VICTIM))
    assert "Hijacked" in str(await om.working_memory.aget(VICTIM))


# ---- migration 2 ----------------------------------------------------------------------------


def rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(query).fetchall()


async def test_sqlite_fixture_written_by_version_1_is_migrated(tmp_path: Path) -> None:
    path = tmp_path / "om.db"
    shutil.copy(FIXTURE, path)
    assert rows(path, "SELECT version FROM schema_version") == [(1,)]
    before = dict(rows(path, "SELECT thread_id, resource_id FROM threads"))
    counts = dict(rows(path, "SELECT thread_id, COUNT(*) FROM messages GROUP BY thread_id"))
    store = SQLiteStore(path)
    await store.asetup()
    await store.aclose()
    assert rows(path, "SELECT version FROM schema_version") == [(SCHEMA_VERSION,)]
    after = dict(rows(path, "SELECT thread_id, resource_id FROM threads"))
    # implicit: solo (and the single-thread resource named like its thread would be too);
    # explicit: user-1 (has another thread), team (resource scope), carol (different name)
    assert after == {**before, "solo": implicit_resource("solo")}
    await check_migrated(SQLiteStore(path), counts)
    # idempotent: opening again changes nothing
    again = SQLiteStore(path)
    await again.asetup()
    await again.aclose()
    assert dict(rows(path, "SELECT thread_id, resource_id FROM threads")) == after


async def check_migrated(store: Any, counts: dict[str, int]) -> None:
    """What a migrated version 1 database must serve through today's engine."""
    om = make_om(store, observation={"message_tokens": 300, "buffer_tokens": False},
                 working_memory=True, retrieval=False)
    try:
        solo = await om.aget_record("solo")
        assert solo.groups and solo.resource_id == implicit_resource("solo"), "the implicit thread kept its log"
        stored = await store.aget_messages(implicit_resource("solo"), "solo")
        assert len(stored) == counts["solo"] and stored[0].observed
        assert om.working_memory is not None
        assert "solo's own note" in str(await om.working_memory.aget("solo"))
        assert await store.aget_value("solo", "working_memory", "resource") is None
        user1 = await om.aget_record("user-1", resource_id="user-1")
        assert user1.groups and len(await store.aget_messages("user-1", "chat-2")) == counts["chat-2"]
        assert "Lyon" in str(await om.working_memory.aget("c-1", resource_id="carol"))
        team = await store.aget_record("team", None)
        assert team is not None and team.groups and team.resource_id == "team"
        # the engine serves the migrated log and working memory to a call without a resource
        context = await om.aprocess("solo", [])
        assert "User mentioned turn" in text(context) and "solo's own note" in text(context)
        assert all(m.id not in {s.id for s in stored if s.observed} for m in context.messages)
    finally:
        await om.aclose()


async def test_postgres_schema_at_version_1_is_migrated(pg_dsn: str, pg_schema: str) -> None:
    """The v1 tables built from migration 1's SQL, filled with the fixture's rows, then opened."""
    import psycopg
    from psycopg import sql

    from langchain_om.store.postgres import MIGRATIONS, PostgresStore

    v1 = MIGRATIONS[1]
    assert isinstance(v1, list)
    with sqlite3.connect(FIXTURE) as lite, psycopg.connect(pg_dsn, autocommit=True) as conn:
        ident = sql.Identifier(pg_schema)
        with conn.transaction():
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
            for statement in v1:
                conn.execute(sql.SQL(statement).format(s=ident))
            conn.execute(sql.SQL("CREATE TABLE {}.schema_version (version INTEGER NOT NULL)").format(ident))
            conn.execute(sql.SQL("INSERT INTO {}.schema_version VALUES (1)").format(ident))
            for table, columns in (
                ("threads", "thread_id, resource_id, title, created_at, updated_at, metadata"),
                ("messages", "id, resource_id, thread_id, seq, kind, data, tokens, created_at, observed, observed_at"),
                ("records", "key, resource_id, thread_id, scope, version, body, updated_at"),
                ("kv", "resource_id, namespace, key, value, updated_at"),
            ):
                marks = ", ".join(["%s"] * len(columns.split(",")))
                insert = sql.SQL(f"INSERT INTO {{}}.{table} ({columns}) VALUES ({marks})").format(ident)
                for row in lite.execute(f"SELECT {columns} FROM {table}"):
                    conn.execute(insert, [bool(v) if c.strip() == "observed" else v
                                          for c, v in zip(columns.split(","), row, strict=True)])
        counts = dict(lite.execute("SELECT thread_id, COUNT(*) FROM messages GROUP BY thread_id").fetchall())
    store = PostgresStore(pg_dsn, schema=pg_schema)
    await store.asetup()
    await store.aclose()
    with psycopg.connect(pg_dsn) as conn:
        version = conn.execute(sql.SQL("SELECT version FROM {}.schema_version").format(sql.Identifier(pg_schema)))
        assert version.fetchall() == [(SCHEMA_VERSION,)]
        owners = dict(conn.execute(sql.SQL("SELECT thread_id, resource_id FROM {}.threads").format(
            sql.Identifier(pg_schema))).fetchall())
    assert owners == {"solo": implicit_resource("solo"), "user-1": "user-1", "chat-2": "user-1", "c-1": "carol",
                      "team": "team"}
    await check_migrated(PostgresStore(pg_dsn, schema=pg_schema), counts)
