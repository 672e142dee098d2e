"""How much of the agent model's input a provider prompt cache can serve, over the bundled demo.

Providers bill a prompt prefix that is byte-identical to an earlier call's at a fraction of the
price, and only from a minimum length on (1,024 tokens at OpenAI and Anthropic). OM's context is
laid out for this: static text, the current date, the observation log, then the volatile hints
and the unobserved messages. This section replays ``langchain_om/data/demo_conversation.json``
(the demo's 58 user turns over 11 days, tool calls included) through ``create_agent`` +
``ObservationalMemoryMiddleware`` with scripted models, records every input the agent's model
receives, and reports the share of all input tokens that lie in a prefix (of at least
``--min-prefix`` tokens) shared with the previous call, beside the mean input tokens per call.

The scripted agent replays the demo's own assistant messages and tool results, and OM's clock
follows the conversation's timestamps (as a live deployment's clock follows its messages), so
the dates, ages and day changes in the context are the conversation's. Tokens are counted with
OM's default counter (exact o200k_base offline) on the serialized prompt (role + text + tool calls).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.checkpoint.memory import InMemorySaver

from langchain_om.cli.demo import (
    DEFAULT_MESSAGE_TOKENS,
    DEFAULT_OBSERVATION_TOKENS,
    load_conversation,
    split_steps,
)
from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import message_timestamp
from langchain_om.foundation.tokens import TokenCounter, get_token_counter
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedChatModel, ScriptedObserverModel

from .common import section_main, table
from .progress import track

THREAD = "prompt-cache"
MIN_PREFIX = 1024
TARGET = 0.95
TTL_MINUTES = 60.0
THRESHOLDS: dict[str, dict[str, Any]] = {
    # OM's defaults: the demo's ~25k tokens stay below the 30k message threshold (nothing is observed)
    "defaults": {},
    # observations along the way (every ~6k tokens of messages), the log far from reflection
    "observing": {"observation": {"message_tokens": 6000}},
    # the demo's own small thresholds: observations, activations and reflections happen along the way
    "demo": {"observation": {"message_tokens": DEFAULT_MESSAGE_TOKENS},
             "reflection": {"observation_tokens": DEFAULT_OBSERVATION_TOKENS}},
}


def serialize(messages: Sequence[BaseMessage]) -> list[str]:
    """Each message as the text a provider tokenizes: role, content, tool calls."""
    out: list[str] = []
    for m in messages:
        text = m.content if isinstance(m.content, str) else str(m.content)
        calls = "".join(f"\n[call {c['name']} {c['args']}]" for c in getattr(m, "tool_calls", None) or [])
        out.append(f"<{m.type}>\n{text}{calls}\n")
    return out


def shared_prefix_tokens(previous: list[str], current: list[str], counter: TokenCounter) -> int:
    """Tokens of ``current`` that repeat ``previous`` from the start: whole identical messages plus
    the common start of the first message that differs."""
    same = 0
    while same < min(len(previous), len(current)) and previous[same] == current[same]:
        same += 1
    head = "".join(current[:same])
    if same < len(current) and same < len(previous):
        a, b = previous[same], current[same]
        n = 0
        limit = min(len(a), len(b))
        while n < limit and a[n] == b[n]:
            n += 1
        head += b[:n]
    return counter.count_text(head) if head else 0


class _Replay:
    """The demo's assistant messages and tool results, handed out turn by turn: a turn's model calls
    get that turn's assistant messages in order, up to the first one without tool calls (the agent
    stops there); assistant messages the agent would not ask for are skipped."""

    def __init__(self, messages: Sequence[BaseMessage]) -> None:
        self.tools = {m.tool_call_id: m for m in messages if isinstance(m, ToolMessage)}
        self.queue: list[AIMessage] = []
        self.last: AIMessage | None = None
        self.now = datetime(2026, 1, 1, tzinfo=timezone.utc)

    def start_turn(self, turn: Sequence[BaseMessage]) -> None:
        self.queue = [m for m in turn if isinstance(m, AIMessage)]

    def reply(self, _messages: list[BaseMessage]) -> AIMessage:
        message = self.queue.pop(0) if self.queue else AIMessage(content="(no scripted reply left)")
        if not message.tool_calls:
            self.queue = []
        self.last = message
        stamp = message_timestamp(message)
        if stamp is not None:
            self.now = stamp
        return message.model_copy(deep=True)

    def tool_names(self) -> list[str]:
        return sorted({str(m.name) for m in self.tools.values() if m.name})


def _tool(name: str, replay: _Replay) -> BaseTool:
    def run(**kwargs: Any) -> str:
        calls = replay.last.tool_calls if replay.last is not None else []
        wanted = next((c for c in calls if c["name"] == name), None)
        result = replay.tools.get(str(wanted["id"])) if wanted else None
        return str(result.content) if result is not None else "{}"

    return StructuredTool.from_function(func=run, name=name, description=f"scripted {name}",
                                        args_schema={"type": "object", "properties": {},
                                                     "additionalProperties": True})


async def measure(min_prefix: int, steps: int | None, thresholds: str, ttl_minutes: float = TTL_MINUTES
                  ) -> dict[str, Any]:
    counter = get_token_counter()
    messages = load_conversation(id_prefix=THREAD)
    turns = split_steps(messages)[:steps]
    replay = _Replay([m for turn in turns for m in turn])
    inputs: list[list[BaseMessage]] = []
    moments: list[datetime] = []  # the conversation's time of each call

    def answer(seen: list[BaseMessage]) -> AIMessage:
        inputs.append(list(seen))
        moments.append(replay.now)
        return replay.reply(seen)

    agent_model = ScriptedChatModel(responses=[answer])
    with tempfile.TemporaryDirectory() as tmp:
        om = ObservationalMemory(
            SQLiteStore(str(Path(tmp) / "om.db")), model=ScriptedObserverModel(),
            **THRESHOLDS[thresholds],
            clock=lambda: replay.now, failure_policy="raise",
        )
        agent = create_agent(agent_model, tools=[_tool(n, replay) for n in replay.tool_names()],
                             middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": THREAD}}
        try:
            for turn in turns:
                human = next(m for m in turn if isinstance(m, HumanMessage))
                replay.start_turn(turn)
                replay.now = message_timestamp(human) or replay.now
                await agent.ainvoke({"messages": [human]}, config)
                await om.await_background(THREAD)
        finally:
            await om.aclose()
    totals: list[int] = []
    cached: list[int] = []
    live: list[int] = []  # cached, and the previous call within the cache's lifetime
    previous: list[str] | None = None
    for index, call in enumerate(inputs):
        current = serialize(call)
        total = counter.count_text("".join(current))
        shared = shared_prefix_tokens(previous, current, counter) if previous is not None else 0
        totals.append(total)
        cached.append(shared if shared >= min_prefix else 0)
        fresh = index > 0 and (moments[index] - moments[index - 1]).total_seconds() <= ttl_minutes * 60
        live.append(cached[-1] if fresh else 0)
        previous = current
    share = sum(cached) / sum(totals) if totals else 0.0
    return {"thresholds": thresholds, "turns": len(turns), "calls": len(inputs),
            "input_tokens_mean": statistics.fmean(totals) if totals else 0.0,
            "input_tokens_total": sum(totals), "cached_tokens_total": sum(cached), "cached_share": share,
            "cached_share_within_ttl": sum(live) / sum(totals) if totals else 0.0,
            "meets_target": share >= TARGET}


def report(payload: dict[str, Any]) -> str:
    p = payload["params"]
    rows = [[r["thresholds"], r["turns"], r["calls"], f"{r['input_tokens_mean']:.0f}", f"{100 * r['cached_share']:.1f}",
             "yes" if r["meets_target"] else "NO", f"{100 * r['cached_share_within_ttl']:.1f}"]
            for r in payload["runs"]]
    out = table(f"Agent-model input in a prefix of >= {p['min_prefix']} tokens shared with the previous call "
                f"(bundled demo via create_agent + middleware, counter {p['counter']})",
                ["thresholds", "turns", "model calls", "input tokens mean", "cacheable %",
                 f">= {100 * TARGET:.0f}%", f"within {p['ttl_minutes']:g} min %"], rows)
    return out + ("\n  defaults: OM's thresholds (the demo never reaches them: the steady state between cycles);"
                  "\n  observing: 6,000 message tokens, so the log grows by observations (and is never reflected);"
                  "\n  demo: 1,200 / 1,500 tokens, so every observation and reflection rewrites the log mid-run"
                  f"\n  within {p['ttl_minutes']:g} min: counted only when the previous call was at most that long"
                  " before (conversation time), as a provider's cache lifetime allows")


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--min-prefix", type=int, default=MIN_PREFIX,
                        help="shortest prefix a provider caches, in tokens (default 1024)")
    parser.add_argument("--demo-turns", type=int, default=None, help="replay only the first N user turns")
    parser.add_argument("--ttl-minutes", type=float, default=TTL_MINUTES,
                        help="cache lifetime for the second figure (default 60)")
    parser.add_argument("--thresholds", type=lambda v: v.split(","), default=list(THRESHOLDS),
                        help="comma-separated: defaults, observing, demo (all by default)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    runs = [asyncio.run(measure(args.min_prefix, args.demo_turns, name, args.ttl_minutes))
            for name in track(args.thresholds, lambda name: f"thresholds {name}")]
    return {"params": {"min_prefix": args.min_prefix, "counter": get_token_counter().source, "target": TARGET,
                       "ttl_minutes": args.ttl_minutes},
            "runs": runs}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("prompt_cache", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
