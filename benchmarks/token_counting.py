"""Token counting throughput on one corpus: OM's estimator, exact o200k_base, LangChain's approximation.

* ``estimator``: ``langchain_om.foundation.tokens.EstimatorCounter`` (no vocabulary);
* ``tiktoken``: ``TiktokenCounter``, exact o200k_base loaded offline by ``langchain_om.foundation.tokens``;
* ``approximate``: ``langchain_core.messages.utils.count_tokens_approximately``.
OM's counters cache per-part counts on the message, so they are measured twice: cold (fresh
message copies) and cached (the same messages counted again, which is what every later step pays).
Accuracy against exact o200k_base is reported as the relative error of the corpus total.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately

from langchain_om.foundation.tokens import CACHE_KEY, EstimatorCounter, TiktokenCounter, TokenCounter

from .common import conversation, section_main, table


def _fresh(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    return [m.model_copy(deep=True) for m in messages]


def _time(fn: Callable[[], int]) -> tuple[float, int]:
    start = time.perf_counter()
    total = fn()
    return time.perf_counter() - start, total


def _counting(counter: TokenCounter, messages: list[BaseMessage]) -> Callable[[], int]:
    return lambda: sum(counter.count_message(m) for m in messages)


def run(args: argparse.Namespace) -> dict[str, Any]:
    corpus = conversation(args.messages, seed=3)
    for message in corpus:  # plain copies without any cached counts
        message.response_metadata.pop(CACHE_KEY, None)
    exact = TiktokenCounter()
    counters: dict[str, TokenCounter] = {"estimator": EstimatorCounter(), "tiktoken": exact}
    results: dict[str, dict[str, Any]] = {}
    reference = sum(exact.count_message(m) for m in _fresh(corpus))
    for name, counter in counters.items():
        messages = _fresh(corpus)
        cold_s, total = _time(_counting(counter, messages))
        cached_s, cached_total = _time(_counting(counter, messages))
        assert cached_total == total, "cached counts must equal fresh counts"
        results[name] = {"seconds": cold_s, "tokens": total, "tokens_per_s": total / cold_s,
                         "messages_per_s": len(messages) / cold_s, "cached_seconds": cached_s,
                         "cached_messages_per_s": len(messages) / cached_s,
                         "error_vs_o200k": (total - reference) / reference}
    messages = _fresh(corpus)
    seconds, total = _time(lambda: sum(count_tokens_approximately([m]) for m in messages))
    again, _ = _time(lambda: sum(count_tokens_approximately([m]) for m in messages))
    results["approximate"] = {"seconds": seconds, "tokens": total, "tokens_per_s": reference / seconds,
                              "messages_per_s": len(messages) / seconds, "cached_seconds": again,
                              "cached_messages_per_s": len(messages) / again,
                              "error_vs_o200k": (total - reference) / reference}
    base = results["tiktoken"]["messages_per_s"]
    ratios = {f"{name} / tiktoken (messages/s, cold)": data["messages_per_s"] / base for name, data in results.items()}
    ratios["estimator cached / cold"] = results["estimator"]["cached_messages_per_s"] / results["estimator"][
        "messages_per_s"]
    ratios["tiktoken cached / cold"] = results["tiktoken"]["cached_messages_per_s"] / base
    huge = _huge_message(args.huge_chars, exact)
    return {"huge_message": huge, "params": {"messages": len(corpus), "o200k_tokens": reference,
                       "note": "tokens_per_s uses each counter's own total, except approximate which is "
                               "normalised to the exact o200k total"},
            "counters": results, "ratios": ratios}


def _huge_message(chars: int, exact: TiktokenCounter) -> dict[str, Any]:
    """One user message of ``chars`` characters (a pasted log): OM's count, which tokenizes spread samples
    past ``SAMPLED_COUNT_CHARS``, against encoding the whole text."""
    line = "2026-03-02 19:05:11 INFO worker-3 request /api/book?id=8812 took 41 ms; cache hit ratio 0.93\n"
    text = (line * (chars // len(line) + 1))[:chars]
    om_s, om_tokens = _time(lambda: exact.count_message(HumanMessage(text)))
    full_s, full_tokens = _time(lambda: len(exact.encoding.encode_ordinary(text)))
    return {"chars": chars, "om_seconds": om_s, "om_tokens": om_tokens, "full_encode_seconds": full_s,
            "full_tokens": full_tokens, "error_vs_full": (om_tokens - full_tokens) / full_tokens}


def report(payload: dict[str, Any]) -> str:
    rows = [[name, d["tokens_per_s"], d["messages_per_s"], d["cached_messages_per_s"], d["error_vs_o200k"] * 100]
            for name, d in payload["counters"].items()]
    p = payload["params"]
    out = table(f"Token counting on {p['messages']:,} messages ({p['o200k_tokens']:,} o200k tokens)",
                ["counter", "tokens/s", "messages/s", "messages/s cached", "error % vs o200k"], rows)
    for key, value in payload["ratios"].items():
        out += f"\n  {key} = {value:.2f}"
    huge = payload.get("huge_message")
    if huge:
        out += (f"\n  one {huge['chars']:,}-character message: OM counts it in {huge['om_seconds'] * 1000:.0f} ms "
                f"(sampled; error {huge['error_vs_full'] * 100:+.2f}%), encoding it whole takes "
                f"{huge['full_encode_seconds'] * 1000:.0f} ms")
    return out


def add_arguments(parser: argparse.ArgumentParser, quick: bool = False) -> None:
    parser.add_argument("--messages", type=int, default=5000 if quick else 30_000)
    parser.add_argument("--huge-chars", type=int, default=1_000_000 if quick else 10_000_000,
                        help="size of the single huge message counted once")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return section_main("token_counting", __doc__, add_arguments, run, report, argv)


if __name__ == "__main__":
    main()
