"""A worker process for the resume tests: runs turns of a LangGraph graph with OM and a real checkpointer.

Usage::

    python graph_worker.py REPORT.json --backend sqlite --dir DIR --thread T --turns N
        [--mode sync|async] [--first-turn K] [--headroom TOKENS] [--message ID=TEXT]
    python graph_worker.py REPORT.json --backend postgres --dsn DSN --schema SCHEMA ...

``sqlite`` keeps the checkpoints in ``DIR/checkpoints.db`` (``SqliteSaver`` / ``AsyncSqliteSaver``)
and OM's store in ``DIR/om.db`` (``SQLiteStore``); ``postgres`` uses ``PostgresSaver`` /
``AsyncPostgresSaver`` and a ``PostgresStore`` in ``SCHEMA``. ``--message ID=TEXT`` sends that
message (with that id) before the numbered turns. ``--headroom`` keeps running turns after the
last numbered one until the message window has at least that many tokens left below its
threshold and the log is under its own, so the next process's first step runs no cycle (its
context must equal this state).

The report (JSON) holds every model input (``seen``), the final checkpointed state
(``state``), the record version before the first and after the last turn, and the turns run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AnyMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.store.base import OMStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

MESSAGE_TOKENS = 600
OBSERVATION_TOKENS = 900
MAX_EXTRA_TURNS = 20


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def user_turn(i: int) -> HumanMessage:
    return HumanMessage(f"Turn {i}: I prefer option {i} and my budget is {i * 10} dollars. " + "context " * 25,
                        id=f"human-{i}")


def dump(messages: list[BaseMessage]) -> list[dict[str, Any]]:
    return [{"id": m.id, "type": m.type, "content": m.content} for m in messages]


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.model = ScriptedAgentModel()
        self.seen: list[list[dict[str, Any]]] = []
        self.om = ObservationalMemory(
            self.open_store(), model=ScriptedObserverModel(), token_counter="estimator",
            observation={"message_tokens": MESSAGE_TOKENS}, reflection={"observation_tokens": OBSERVATION_TOKENS},
        )
        self.config: RunnableConfig = {"configurable": {"thread_id": args.thread, "resource_id": "resume-user"}}

    def open_store(self) -> OMStore:
        if self.args.backend == "sqlite":
            from langchain_om.store.sqlite import SQLiteStore

            return SQLiteStore(Path(self.args.dir) / "om.db")
        from langchain_om.store.postgres import PostgresStore

        return PostgresStore(self.args.dsn, schema=self.args.schema)

    def builder(self) -> StateGraph[Any, Any, Any, Any]:
        model, seen = self.model, self.seen

        def agent(state: State) -> dict[str, Any]:
            seen.append(dump(state["messages"]))
            return {"messages": [model.invoke(state["messages"])]}

        async def aagent(state: State) -> dict[str, Any]:
            seen.append(dump(state["messages"]))
            return {"messages": [await model.ainvoke(state["messages"])]}

        builder: StateGraph[Any, Any, Any, Any] = StateGraph(State)
        builder.add_node("agent", agent if self.args.mode == "sync" else aagent)
        builder.add_edge(START, "agent")
        builder.add_edge("agent", END)
        return add_observational_memory(builder, self.om)

    def inputs(self) -> Iterator[HumanMessage]:
        if self.args.message:
            message_id, _, text = self.args.message.partition("=")
            yield HumanMessage(text, id=message_id)
        for i in range(self.args.first_turn, self.args.first_turn + self.args.turns):
            yield user_turn(i)

    async def headroom(self) -> int:
        await self.om.await_background()
        status = await self.om.astatus(self.args.thread, resource_id="resume-user")
        active = status.windows.active
        # no observation and no reflection may be due at the next step. The next process adds one
        # short message and no observation, so the log only has to be under its threshold; the
        # message window needs the full headroom. (Requiring the full headroom of the log too
        # waited for a reflection to land far below the threshold, which a Reflector that keeps
        # every 🔴 note of a one-day log never does: the scripted one stops near 85% of it.)
        if active.observations.tokens >= active.observations.threshold:
            return -1
        return active.messages.threshold - active.messages.tokens

    def report(self, state: list[BaseMessage], version_before: int, version_after: int, turns: int) -> None:
        Path(self.args.report).write_text(json.dumps({
            "seen": self.seen, "state": dump(state), "version_before": version_before,
            "version_after": version_after, "turns_run": turns,
        }))

    # ------------------------------------------------------------------ sync

    @contextmanager
    def sync_saver(self) -> Iterator[BaseCheckpointSaver[Any]]:
        if self.args.backend == "sqlite":
            from langgraph.checkpoint.sqlite import SqliteSaver

            with SqliteSaver.from_conn_string(str(Path(self.args.dir) / "checkpoints.db")) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(self.args.dsn) as pg_saver:
                pg_saver.setup()
                yield pg_saver

    def run_sync(self) -> None:
        om = self.om
        try:
            with self.sync_saver() as saver:
                graph = self.builder().compile(checkpointer=saver)
                version_before = om.get_record(self.args.thread, resource_id="resume-user").version
                turns = 0
                for message in self.inputs():
                    graph.invoke({"messages": [message]}, self.config)
                    turns += 1
                extra = self.args.first_turn + self.args.turns
                while self.args.headroom and om._loop.run(self.headroom()) < self.args.headroom:
                    if turns >= self.args.turns + MAX_EXTRA_TURNS:
                        raise SystemExit("no headroom after the extra turns")
                    graph.invoke({"messages": [user_turn(extra)]}, self.config)
                    extra += 1
                    turns += 1
                om._loop.run(om.await_background())
                version_after = om.get_record(self.args.thread, resource_id="resume-user").version
                self.report(graph.get_state(self.config).values["messages"], version_before, version_after, turns)
        finally:
            om.close()

    # ------------------------------------------------------------------ async

    @asynccontextmanager
    async def async_saver(self) -> AsyncIterator[BaseCheckpointSaver[Any]]:
        if self.args.backend == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            async with AsyncSqliteSaver.from_conn_string(str(Path(self.args.dir) / "checkpoints.db")) as saver:
                yield saver
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

            async with AsyncPostgresSaver.from_conn_string(self.args.dsn) as pg_saver:
                await pg_saver.setup()
                yield pg_saver

    async def run_async(self) -> None:
        om = self.om
        try:
            async with self.async_saver() as saver:
                graph = self.builder().compile(checkpointer=saver)
                version_before = (await om.aget_record(self.args.thread, resource_id="resume-user")).version
                turns = 0
                for message in self.inputs():
                    await graph.ainvoke({"messages": [message]}, self.config)
                    turns += 1
                extra = self.args.first_turn + self.args.turns
                while self.args.headroom and await self.headroom() < self.args.headroom:
                    if turns >= self.args.turns + MAX_EXTRA_TURNS:
                        raise SystemExit("no headroom after the extra turns")
                    await graph.ainvoke({"messages": [user_turn(extra)]}, self.config)
                    extra += 1
                    turns += 1
                await om.await_background()
                version_after = (await om.aget_record(self.args.thread, resource_id="resume-user")).version
                state = await graph.aget_state(self.config)
                self.report(state.values["messages"], version_before, version_after, turns)
        finally:
            await om.aclose()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("report")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    parser.add_argument("--dir")
    parser.add_argument("--dsn")
    parser.add_argument("--schema")
    parser.add_argument("--thread", required=True)
    parser.add_argument("--turns", type=int, default=0)
    parser.add_argument("--first-turn", type=int, default=0)
    parser.add_argument("--headroom", type=int, default=0)
    parser.add_argument("--message")
    args = parser.parse_args()
    worker = Worker(args)
    if args.mode == "sync":
        worker.run_sync()
    else:
        asyncio.run(worker.run_async())


if __name__ == "__main__":
    main()
