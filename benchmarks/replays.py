"""The bundled demo replayed again and again on one thread: does the log stay bounded, and what does
the Reflector cost once the log is old (issue 43, item 6)?

The demo conversation (58 user turns over 11 days) is replayed ``--replays`` times on ONE thread,
each replay a week after the previous one ended (timestamps shifted, fresh message ids), through
``ObservationalMemory.aprocess`` with the demo's thresholds (1,200 message tokens, 1,500 observation
tokens, so a hard limit of 1,800 with the default ``block_after`` of 1.2) and the scripted
Observer/Reflector (rule-based, offline). Per replay it reports:

* the stored log's tokens when the replay ends, and the largest log the agent was shown (the notes
  of OM's system message with their dates annotated, and the omission line) against the hard limit;
* Reflector calls, and how many of them ran inside a step (blocking: trigger ``turn-sync``);
* the longest OM system message (characters).

A reflection storm shows as many Reflector calls in the late replays; the target is at most 8 in
the last of 8 replays. Not a timed test: the figures are counts, identical from run to run.

    python -m benchmarks.replays                # 8 replays
    python -m benchmarks.replays --replays 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
from datetime import datetime, timedelta
from typing import Any

from langchain_core.messages import BaseMessage

from langchain_om.cli.demo import (
    DEFAULT_MESSAGE_TOKENS,
    DEFAULT_OBSERVATION_TOKENS,
    bundled_conversation_path,
    messages_from_entries,
    split_steps,
)
from langchain_om.engine import ObservationalMemory
from langchain_om.engine.log_fit import shown_notes
from langchain_om.foundation.hooks import ObserveHooks
from langchain_om.foundation.messages import message_timestamp
from langchain_om.foundation.tokens import get_token_counter
from langchain_om.store import InMemoryStore
from langchain_om.testing import ScriptedObserverModel

from .common import section_main, table

THREAD = "replays"
CALL_TARGET = 8
_LOG_BLOCK = re.compile(r"<observations>\n.*\n</observations>", re.DOTALL)


def shifted_entries(entries: list[dict[str, Any]], replay: int, gap_days: int = 7) -> list[dict[str, Any]]:
    """``entries`` moved so that replay ``replay`` (0-based) starts ``gap_days`` after the previous one
    ended; each replay spans the conversation's whole days, so the shift is a whole number of days."""
    stamps = [datetime.fromisoformat(str(e["timestamp"]).replace("Z", "+00:00")) for e in entries]
    span_days = (stamps[-1].date() - stamps[0].date()).days + 1
    shift = timedelta(days=replay * (span_days + gap_days))
    return [{**e, "timestamp": (stamp + shift).isoformat()} for e, stamp in zip(entries, stamps, strict=True)]


def shown_log(system: BaseMessage | None) -> str:
    """The observation log as the agent's model reads it, as the hard limit measures it: its notes
    (dates annotated) and the omission line, without the framing tags (empty without one)."""
    match = _LOG_BLOCK.search(str(system.content)) if system is not None else None
    return shown_notes(match.group(0)) if match else ""


async def measure(replays: int) -> dict[str, Any]:
    counter = get_token_counter()
    entries = json.loads(bundled_conversation_path().read_text(encoding="utf-8"))
    calls: list[str] = []

    async def on_start(ctx: Any) -> None:
        if ctx.operation == "reflection":
            calls.append(str(ctx.trigger))

    reflector = ScriptedObserverModel()
    om = ObservationalMemory(
        InMemoryStore(), observation={"model": ScriptedObserverModel(), "message_tokens": DEFAULT_MESSAGE_TOKENS},
        reflection={"model": reflector, "observation_tokens": DEFAULT_OBSERVATION_TOKENS},
        failure_policy="raise", hooks=ObserveHooks(on_reflection_start=on_start),
    )
    hard_limit = om.config.reflection.block_after_tokens()
    rows: list[dict[str, Any]] = []
    try:
        for replay in range(replays):
            steps = split_steps(messages_from_entries(shifted_entries(entries, replay), id_prefix=f"r{replay}"))
            calls_before, cycles_before = len(reflector.calls), len(calls)
            shown_max = 0
            system_max = 0
            for step in steps:
                moment = message_timestamp(step[-1])
                context = await om.aprocess(THREAD, step, now=moment)
                await om.await_background(THREAD)
                shown_max = max(shown_max, counter.count_text(shown_log(context.system_message)))
                system_max = max(system_max, len(str(context.system_message.content)) if context.system_message
                                 else 0)
            record = await om.aget_record(THREAD)
            cycles = calls[cycles_before:]
            rows.append({"replay": replay + 1, "log_tokens": record.observation_tokens,
                         "shown_log_tokens_max": shown_max, "reflector_calls": len(reflector.calls) - calls_before,
                         "reflection_cycles": len(cycles), "blocking_cycles": cycles.count("turn-sync"),
                         "system_chars_max": system_max})
    finally:
        await om.aclose()
    return {"hard_limit": hard_limit, "replays": rows,
            "meets_target": bool(rows) and rows[-1]["reflector_calls"] <= CALL_TARGET
            and all(r["shown_log_tokens_max"] <= hard_limit for r in rows)}


def report(payload: dict[str, Any]) -> str:
    rows = [[r["replay"], r["log_tokens"], r["shown_log_tokens_max"], r["reflector_calls"], r["reflection_cycles"],
             r["blocking_cycles"], r["system_chars_max"]] for r in payload["replays"]]
    out = table(f"The demo replayed on one thread, a week apart (thresholds {DEFAULT_MESSAGE_TOKENS:,} / "
                f"{DEFAULT_OBSERVATION_TOKENS:,}, hard limit {payload['hard_limit']:,})",
                ["replay", "stored log tokens", "shown log max", "Reflector calls", "reflection cycles",
                 "blocking cycles", "system message chars max"], rows)
    verdict = "yes" if payload["meets_target"] else "NO"
    return out + (f"\n  target: shown log <= hard limit on every step, <= {CALL_TARGET} Reflector calls in the last "
                  f"replay: {verdict}")


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--replays", type=int, default=2 if quick else 8, help="how many replays (default 8)")


def run(args: argparse.Namespace) -> dict[str, Any]:
    return asyncio.run(measure(args.replays))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("replays", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
