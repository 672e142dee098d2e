"""Shared pieces of the benchmark suite: a synthetic conversation, timers, tables, results.

Every benchmark builds its input from ``conversation`` so the strategies compared in one
run see exactly the same messages, and writes one JSON file under ``benchmarks/results``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from .progress import SectionRun, load_average, measure_section

RESULTS_DIR = Path(__file__).resolve().parent / "results"
START = datetime(2026, 3, 2, 9, 0, tzinfo=timezone.utc)

_TOPICS = [
    "the trip to Lisbon", "the quarterly budget", "my sister's wedding", "the garden shed", "a Python refactor",
    "the marathon training plan", "the new espresso machine", "moving flats in June", "the team offsite",
    "learning Portuguese", "the car insurance renewal", "a birthday dinner for Sam",
]
_USER_TEMPLATES = [
    "Can you help me with {topic}? I need it done by {day}.",
    "I prefer {pref} for {topic}, please remember that.",
    "What did we decide about {topic} last time? I think the budget was {n} euros.",
    "Quick update on {topic}: it moved to {day}, and {n} people are coming.",
    "I don't like {pref} at all. Let's try something else for {topic}.",
    "Could you draft a short plan for {topic} with {n} steps?",
]
_PREFS = ["window seats", "vegetarian options", "morning meetings", "trains over planes", "dark roast", "email"]
_DAYS = ["Monday", "Tuesday", "next Friday", "the 14th", "tomorrow", "the end of the month"]
_ASSISTANT_SENTENCES = [
    "Here is what I would suggest for {topic}.",
    "First, list the fixed constraints: dates, budget ({n} euros) and who has to be there.",
    "Then book the parts that sell out early, because prices rise closer to {day}.",
    "I noted your preference for {pref} and will keep it in mind.",
    "If anything changes, tell me and I will adjust the plan step by step.",
    "A reasonable order is: confirm the date, reserve, then send the details to everyone.",
    "One risk is that {topic} overlaps with other commitments around {day}.",
]


def _stamp(message: BaseMessage, when: datetime) -> BaseMessage:
    message.response_metadata = {**(message.response_metadata or {}), "created_at": when.isoformat()}
    return message


def conversation(count: int, *, seed: int = 7, start_index: int = 0, tools_every: int = 9) -> list[BaseMessage]:
    """``count`` messages of a deterministic multi-topic chat (user, assistant, sometimes a tool call).

    Sizes are realistic for a chat assistant: user turns ~15-40 tokens, replies ~60-160 tokens.
    ``start_index`` continues an earlier conversation with fresh ids and later timestamps.
    """
    rng = random.Random(seed * 1_000_003 + start_index)
    out: list[BaseMessage] = []
    i = start_index
    while len(out) < count:
        turn = i // 2
        when = START + timedelta(minutes=3 * turn)
        values = {"topic": rng.choice(_TOPICS), "pref": rng.choice(_PREFS), "day": rng.choice(_DAYS),
                  "n": rng.randint(2, 900)}
        if i % 2 == 0:
            text = rng.choice(_USER_TEMPLATES).format(**values)
            out.append(_stamp(HumanMessage(content=text, id=f"m{i}"), when))
        elif tools_every and turn % tools_every == 0 and count - len(out) >= 3:
            call_id = f"call_{i}"
            out.append(_stamp(AIMessage(content="", id=f"m{i}", tool_calls=[
                {"name": "search_notes", "args": {"query": values["topic"], "limit": 5}, "id": call_id,
                 "type": "tool_call"}]), when))
            result = "; ".join(rng.choice(_ASSISTANT_SENTENCES).format(**values) for _ in range(3))
            out.append(_stamp(ToolMessage(content=result, tool_call_id=call_id, name="search_notes",
                                          id=f"m{i}t"), when))
            sentences = [rng.choice(_ASSISTANT_SENTENCES).format(**values) for _ in range(rng.randint(3, 6))]
            out.append(_stamp(AIMessage(content=" ".join(sentences), id=f"m{i}r"), when))
        else:
            sentences = [rng.choice(_ASSISTANT_SENTENCES).format(**values) for _ in range(rng.randint(3, 7))]
            out.append(_stamp(AIMessage(content=" ".join(sentences), id=f"m{i}"), when))
        i += 1
    return out[:count]


def turn_messages(turn: int, *, seed: int = 11) -> tuple[HumanMessage, AIMessage]:
    """The user message and the agent's reply of measured step ``turn`` (ids never clash with history)."""
    rng = random.Random(seed * 7919 + turn)
    values = {"topic": rng.choice(_TOPICS), "pref": rng.choice(_PREFS), "day": rng.choice(_DAYS),
              "n": rng.randint(2, 900)}
    when = START + timedelta(days=400, minutes=2 * turn)
    human = HumanMessage(content=rng.choice(_USER_TEMPLATES).format(**values), id=f"step{turn}h")
    reply = " ".join(rng.choice(_ASSISTANT_SENTENCES).format(**values) for _ in range(rng.randint(3, 7)))
    ai = AIMessage(content=reply, id=f"step{turn}a")
    _stamp(human, when)
    _stamp(ai, when + timedelta(seconds=20))
    return human, ai


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))
    return float(ordered[rank])


def summary(values: Sequence[float]) -> dict[str, float]:
    """mean / p50 / p95 / max of a sample (milliseconds in, milliseconds out)."""
    return {
        "mean": float(statistics.fmean(values)) if values else 0.0,
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": float(max(values)) if values else 0.0,
        "n": float(len(values)),
    }


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, quartiles and range of a few repeated measurements of one figure."""
    ordered = sorted(values)
    if not ordered:
        return {"median": 0.0, "min": 0.0, "max": 0.0, "q1": 0.0, "q3": 0.0, "n": 0.0}
    q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else (ordered[0],) * 3
    return {"median": float(statistics.median(ordered)), "min": float(ordered[0]), "max": float(ordered[-1]),
            "q1": float(q1), "q3": float(q3), "n": float(len(ordered))}


def verdict_with_spread(values: Sequence[float], limit: float) -> str:
    """``met`` when every repeat is at most ``limit``, ``MISSED`` when none is, and ``within spread``
    when the repeats straddle it: the run-to-run noise is larger than the distance to the line."""
    if values and max(values) <= limit:
        return "met"
    if not values or min(values) > limit:
        return "MISSED"
    return "within spread"


def ratio(a: float, b: float) -> float | None:
    """a / b, or None when b is zero (printed as n/a)."""
    return a / b if b else None


@dataclass
class Timer:
    """``with Timer() as t: ...`` then ``t.ms``."""

    start: float = 0.0
    ms: float = 0.0

    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ms = (time.perf_counter() - self.start) * 1000


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), None)
    except OSError:
        return platform.processor() or None


def _commit() -> str | None:
    import subprocess

    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent, text=True,
                              capture_output=True, timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


def machine() -> dict[str, Any]:
    """Where and when the numbers were measured (ratios only compare within one run on one machine):
    the load average says how much else the machine was doing."""
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "load_average": load_average(),
        "commit": _commit(),
        "measured_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_result(name: str, payload: dict[str, Any], out_dir: Path | None = None, *, report: str | None = None,
                 run: SectionRun | None = None) -> Path:
    """Write ``<out_dir>/<name>.json`` (with machine info, and the printed report and the section's
    duration and peak RSS when given: the results page is written from them) and return its path."""
    directory = out_dir or RESULTS_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    extra: dict[str, Any] = {}
    if report is not None:
        extra["report"] = report
    if run is not None:
        extra["run"] = run.as_dict()
    path.write_text(json.dumps({"benchmark": name, "machine": machine(), **extra, **payload}, indent=2,
                               default=str) + "\n")
    return path


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table (printed and kept in the logs; no terminal features needed)."""
    cells = [[str(h) for h in header]] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(cells[0], widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    for row in cells[1:]:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(row, widths,
                                                                                              strict=True))))
    return "\n".join(lines)


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def section_main(name: str, doc: str | None, add_arguments: Callable[[argparse.ArgumentParser, bool], None],
                 run: Callable[[argparse.Namespace], dict[str, Any]], report: Callable[[dict[str, Any]], str],
                 argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m benchmarks.<name>``: parse the section's flags (``--quick`` picks their defaults),
    run it, print its report and write its JSON."""
    parser = argparse.ArgumentParser(prog=f"python -m benchmarks.{name}", description=doc)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="directory for the JSON (default benchmarks/results)")
    known, _ = parser.parse_known_args(argv)
    add_arguments(parser, known.quick)
    args = parser.parse_args(argv)
    with measure_section(name, quick=args.quick) as section:
        payload = run(args)
    text = report(payload)
    print(text)
    print(f"  -> {write_result(name, payload, args.out, report=text, run=section)}")
    print(f"  {name}: {section.seconds:.0f} s, peak RSS {section.peak_rss_mib:,.0f} MiB")
    from .results_page import page_path, write_page  # it imports this module

    out = args.out or RESULTS_DIR
    print(f"  results page: {write_page(out, page_path(out, args.quick))}")
    return payload


def spend_history(turns: int) -> list[Any]:
    """The spend benchmarks' conversation: numbered turns of 25 distinct words each."""
    from langchain_core.messages import AIMessage, HumanMessage

    messages: list[Any] = []
    for turn in range(turns):
        words = " ".join(f"w{turn}_{i}" for i in range(25))
        messages.append(HumanMessage(f"turn {turn}: {words}", id=f"h{turn}"))
        messages.append(AIMessage(f"reply {turn}: {words}", id=f"a{turn}"))
    return messages


def open_store_url(url: str) -> Any:
    """A store from a worker's URL: ``sqlite:PATH`` or ``postgres:SCHEMA:DSN``."""
    kind, _, rest = url.partition(":")
    if kind == "sqlite":
        from langchain_om.store.sqlite import SQLiteStore

        return SQLiteStore(rest)
    schema, _, dsn = rest.partition(":")
    from langchain_om.store.postgres import PostgresStore

    return PostgresStore(dsn, schema=schema)


def verdicts(payload: dict[str, Any], digits: int = 0) -> str:
    """The closing lines of a report: each ratio (``digits`` decimals; a missing one is left out)
    and each target, met or MISSED (or the target's own words, e.g. "within spread")."""
    out = "".join(f"\n  {key} = {value:.{digits}f}x" for key, value in payload["ratios"].items() if value is not None)
    return out + "".join(f"\n  target {key}: {met if isinstance(met, str) else 'met' if met else 'MISSED'}"
                         for key, met in payload["target"].items())
