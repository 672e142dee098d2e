"""wirings: the whole step in every way OM is wired, at 152 / 2k / 10k stored messages (issue 32).

OM's promise is a step that costs the same at message 10,000 as at message 100, however it is
wired. This section times a whole step, everything but model calls (every model is scripted
and clocked; its time is subtracted), of each integration on a thread whose stored history is
written through the store first (as if OM had run all along: old messages observed, a log of
about 2k tokens, an unobserved tail of about 3k tokens, the same at every size):

* ``agent+saver``: ``create_agent`` + ``ObservationalMemoryMiddleware`` with an ``InMemorySaver``;
  each step sends only the new message (the checkpointer holds the rest);
* ``agent``: the same with no checkpointer, a stateless caller (a chat API, a queue worker) that
  sends only the new message;
* ``graph+saver`` / ``graph``: ``add_observational_memory`` nodes in a ``StateGraph`` with and
  without a checkpointer, new message only;
* ``history``: ``ObservationalChatMessageHistory``: add the user message, read the context,
  add the reply;
* ``ui+saver``: the AI SDK adapter: a ``useChat`` body holding the *whole* conversation as UI
  messages, ``last_user_message(body)``, the agent's ``astream`` through ``ui_message_sse``.

Each wiring runs on its own copy of the same preloaded SQLite file, one size after another in
the same process; background buffering is awaited after each step, outside the timed region.
The first step of each case (a cold process-level cache) is reported apart. Target: at the
largest size each wiring's median step at most 1.3x its median at the smallest.

    python -m benchmarks.wirings                       # 152, 2000, 10000; 20 steps each
    python -m benchmarks.wirings --wiring-sizes 152,2000 --wiring-steps 10
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations.graph import add_observational_memory
from langchain_om.integrations.history import ObservationalChatMessageHistory
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.integrations.ui import last_user_message, ui_message_sse
from langchain_om.store.base import implicit_resource
from langchain_om.store.sqlite import SQLiteStore

from .agent_step import ClockedAgentModel, ClockedObserverModel, ModelClock
from .common import conversation, ratio, section_main, spread, summary, table, turn_messages, verdict_with_spread
from .history import THREAD, bench_counter, preload_om, tempdir
from .progress import track

TARGET = 1.3
WIRINGS = ("agent+saver", "agent", "graph+saver", "graph", "history", "ui+saver")
MESSAGE_TOKENS = 30_000  # no step of the run crosses it: every timed step is a plain one
UNOBSERVED_TOKENS = 3_000
LOG_TOKENS = 2_000

Step = Callable[[int], Awaitable[None]]


def _config() -> RunnableConfig:
    return cast(RunnableConfig, {"configurable": {"thread_id": THREAD}})


def _ui(message: BaseMessage) -> dict[str, Any]:
    role = "user" if isinstance(message, HumanMessage) else "assistant"
    text = message.content if isinstance(message.content, str) else ""
    return {"id": message.id, "role": role, "parts": [{"type": "text", "text": text}]}


async def _tail(store: SQLiteStore, history: list[BaseMessage]) -> list[BaseMessage]:
    """The unobserved messages: what a checkpointed state holds after OM trimmed it."""
    resource = implicit_resource(THREAD)
    record = await store.aget_record(resource, THREAD)
    after = record.last_observed_seq.get(THREAD, 0) if record else 0
    ids = {row.id for row in await store.aget_messages(resource, THREAD, after_seq=after)}
    return [m for m in history if m.id in ids]


def _graph(om: ObservationalMemory, model: ClockedAgentModel, saver: InMemorySaver | None) -> Any:
    async def agent(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("agent", agent)
    builder.add_edge(START, "agent")
    add_observational_memory(builder, om, before="agent")
    return builder.compile(checkpointer=saver)


def _stepper(wiring: str, om: ObservationalMemory, model: ClockedAgentModel, tail: list[BaseMessage],
             history: list[BaseMessage]) -> Step:
    """``step(turn)``: one request of ``wiring``; turn 0 (the cold step) hands over the trimmed state."""
    config = _config()
    saver = InMemorySaver() if wiring.endswith("+saver") else None
    if wiring in ("agent+saver", "agent", "ui+saver"):
        runnable = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver)
    elif wiring in ("graph+saver", "graph"):
        runnable = _graph(om, model, saver)
    if wiring == "history":
        chat = ObservationalChatMessageHistory(om, THREAD)

        async def history_step(turn: int) -> None:
            human, _ = turn_messages(turn)
            await chat.aadd_messages([human])
            reply = await model.ainvoke(await chat.aget_messages())
            await chat.aadd_messages([AIMessage(content=reply.content, id=f"step{turn}a")])

        return history_step
    if wiring == "ui+saver":
        body: dict[str, Any] = {"id": THREAD, "messages": [_ui(m) for m in history]}

        async def ui_step(turn: int) -> None:
            human, _ = turn_messages(turn)
            body["messages"].append(_ui(human))
            inputs = [*tail, last_user_message(body)] if turn == 0 else [last_user_message(body)]
            stream = runnable.astream({"messages": inputs}, config, stream_mode=["messages", "custom"])
            text = []
            async for event in ui_message_sse(stream):
                text.append(event)
            body["messages"].append({"id": f"reply{turn}", "role": "assistant",
                                     "parts": [{"type": "text", "text": "".join(text)[-80:]}]})

        return ui_step

    async def invoke_step(turn: int) -> None:
        human, _ = turn_messages(turn)
        # the cold step of a checkpointed wiring hands over the state it would hold; a stateless
        # caller has no state to hand over: it sends its new message, every step
        inputs = [*tail, human] if turn == 0 and saver is not None else [human]
        await runnable.ainvoke({"messages": inputs}, config)

    return invoke_step


async def run_case(wiring: str, size: int, seeded: str, steps: int, tmp: str) -> dict[str, Any]:
    case_dir = os.path.join(tmp, f"{wiring.replace('+', '-')}-{size}")
    os.makedirs(case_dir)
    try:
        return await _run_case(wiring, size, seeded, steps, case_dir)
    finally:
        shutil.rmtree(case_dir, ignore_errors=True)


async def _run_case(wiring: str, size: int, seeded: str, steps: int, case_dir: str) -> dict[str, Any]:
    for name in os.listdir(os.path.dirname(seeded)):
        if name.startswith(os.path.basename(seeded)):
            shutil.copy(os.path.join(os.path.dirname(seeded), name), case_dir)
    store = SQLiteStore(os.path.join(case_dir, os.path.basename(seeded)))
    clock = ModelClock()
    history = conversation(size)
    tail = await _tail(store, history)
    om = ObservationalMemory(store, model=ClockedObserverModel(clock=clock),
                             observation={"message_tokens": MESSAGE_TOKENS},
                             reflection={"observation_tokens": 40_000}, token_counter=bench_counter())
    step = _stepper(wiring, om, ClockedAgentModel(clock=clock), tail, history)
    del history
    step_ms: list[float] = []
    try:
        clock.ms = 0.0
        started = time.perf_counter()
        await step(0)
        cold_ms = (time.perf_counter() - started) * 1000 - clock.ms
        await om.await_background()
        for turn in range(1, steps + 1):
            clock.ms = 0.0
            started = time.perf_counter()
            await step(turn)
            step_ms.append((time.perf_counter() - started) * 1000 - clock.ms)
            await om.await_background()
        stored = await store.acount_messages(implicit_resource(THREAD), THREAD)
    finally:
        await om.aclose(cancel=True)
        await store.aclose()
    return {"wiring": wiring, "history": size, "stored_after": stored, "step_ms": summary(step_ms),
            "cold_ms": cold_ms}


async def _seed(size: int, tmp: str) -> str:
    path = os.path.join(tmp, f"seed-{size}", "om.db")
    os.makedirs(os.path.dirname(path))
    store = SQLiteStore(path)
    try:
        await preload_om(store, conversation(size), bench_counter(), unobserved_tokens=UNOBSERVED_TOKENS,
                         observation_tokens=LOG_TOKENS)
    finally:
        await store.aclose()
    return path


async def collect(sizes: list[int], steps: int, wirings: list[str], progress: bool = True,
                  rounds: int = 1) -> list[dict[str, Any]]:
    """Every wiring at every size, ``rounds`` times (each round a case of its own, ``"round"``)."""
    out = []
    with tempdir() as tmp:
        seeds = {size: await _seed(size, tmp) for size in sizes}
        plan = [(round_, wiring, size) for round_ in range(rounds)
                for wiring in wirings for size in sizes]  # one wiring's sizes side by side in time
        for round_, wiring, size in track(plan, lambda case: f"{case[1]} at {case[2]:,} messages, round "
                                          f"{case[0] + 1} of {rounds}") if progress else plan:
            case = await run_case(wiring, size, seeds[size], steps, os.path.join(tmp, f"round{round_}"))
            out.append({**case, "round": round_})
    return out


def payload_from(cases: list[dict[str, Any]], sizes: list[int], steps: int) -> dict[str, Any]:
    """The table shows the first round's cases; each verdict is taken on the ratio's median over
    the rounds, with its min-max, "within spread" when the rounds straddle the target (the
    InMemorySaver wiring sat at 1.39 against 1.3 in one run)."""
    by = {(c["wiring"], c["history"], c.get("round", 0)): c for c in cases}
    rounds = sorted({c.get("round", 0) for c in cases})
    ratios: dict[str, float | None] = {}
    verdicts = []
    for wiring in dict.fromkeys(c["wiring"] for c in cases):
        runs = []
        for round_ in rounds:
            first, last = by.get((wiring, sizes[0], round_)), by.get((wiring, sizes[-1], round_))
            value = ratio(last["step_ms"]["p50"], first["step_ms"]["p50"]) if first and last else None
            if value is not None:
                runs.append(value)
        if not runs:
            continue
        stats = spread(runs)
        ratios[f"{wiring}: p50 at {sizes[-1]} / p50 at {sizes[0]} (flat = 1)"] = stats["median"]
        verdict = verdict_with_spread(runs, TARGET)
        verdicts.append({"wiring": wiring, "ratio": stats["median"], "runs": runs, "spread": stats,
                         "verdict": verdict, "met": verdict == "met"})
    return {"params": {"sizes": sizes, "steps": steps, "rounds": len(rounds), "message_tokens": MESSAGE_TOKENS,
                       "unobserved_tokens": UNOBSERVED_TOKENS, "log_tokens": LOG_TOKENS},
            "cases": [c for c in cases if c.get("round", 0) == rounds[0]],
            "other_rounds": [c for c in cases if c.get("round", 0) != rounds[0]], "ratios": ratios,
            "target": {"largest_over_smallest_at_most": TARGET, "verdicts": verdicts,
                       "met_all": bool(verdicts) and all(v["met"] for v in verdicts)}}


def report(payload: dict[str, Any]) -> str:
    sizes = payload["params"]["sizes"]
    by = {(c["wiring"], c["history"]): c for c in payload["cases"]}
    rows = []
    for wiring in dict.fromkeys(c["wiring"] for c in payload["cases"]):
        row: list[Any] = [wiring]
        row += [by[(wiring, s)]["step_ms"]["p50"] if (wiring, s) in by else None for s in sizes]
        row += [by[(wiring, s)]["step_ms"]["p95"] if (wiring, s) in by else None for s in sizes]
        row += [by[(wiring, s)]["cold_ms"] if (wiring, s) in by else None for s in sizes]
        rows.append(row)
    header = (["wiring"] + [f"p50 {s:,}" for s in sizes] + [f"p95 {s:,}" for s in sizes]
              + [f"cold {s:,}" for s in sizes])
    out = table(f"Whole step per wiring, ms minus model time, {payload['params']['steps']} steps per case "
                "(SQLite store)", header, rows)
    for verdict in payload["target"]["verdicts"]:
        value = verdict["ratio"]
        shown = f"{value:.2f}" if value is not None else "n/a"
        runs = verdict.get("runs") or []
        if len(runs) > 1:
            shown += (f" (median of {len(runs)} rounds, min-max {verdict['spread']['min']:.2f}-"
                      f"{verdict['spread']['max']:.2f})")
        outcome = verdict.get("verdict") or ("met" if verdict["met"] else "MISSED")
        if outcome == "within spread":
            outcome = "within spread: the rounds straddle the target, no verdict"
        out += (f"\n  {verdict['wiring']}: p50 at {sizes[-1]:,} / at {sizes[0]:,} = {shown} "
                f"(target <= {TARGET:g}) -> {outcome}")
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--wiring-sizes", dest="wiring_sizes", type=lambda v: [int(x) for x in v.split(",")],
                        default=[152, 2000] if quick else [152, 2000, 10_000])
    parser.add_argument("--wiring-steps", dest="wiring_steps", type=int, default=5 if quick else 20)
    parser.add_argument("--wirings", type=lambda v: v.split(","), default=list(WIRINGS))
    parser.add_argument("--wiring-rounds", dest="wiring_rounds", type=int, default=1 if quick else 3,
                        help="rounds of every case; each verdict is the ratio's median over them, with its range")


def run(args: argparse.Namespace) -> dict[str, Any]:
    unknown = set(args.wirings) - set(WIRINGS)
    if unknown:
        raise SystemExit(f"--wirings: unknown {sorted(unknown)}; choose from {', '.join(WIRINGS)}")
    cases = asyncio.run(collect(args.wiring_sizes, args.wiring_steps, args.wirings,
                                rounds=max(1, getattr(args, "wiring_rounds", 1))))
    return payload_from(cases, args.wiring_sizes, args.wiring_steps)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("wirings", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
