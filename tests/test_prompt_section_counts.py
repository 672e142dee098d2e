"""The Observer's prompt is counted from its sections' kept counts (issue 33, CPU per turn).

The instructions and the previous log repeat on every Observer call; counting the whole prompt
again cost about a millisecond a call. ``count_sections`` sums kept per-section counts and must
stay within two tokens per join of counting the text whole; ``count_piece`` keeps short texts
(the log's lines) so truncating the log counts each line once while it repeats.
"""

from __future__ import annotations

from datetime import datetime

import pytest

from langchain_om.foundation.tokens import EstimatorCounter, TokenCounter, get_token_counter
from langchain_om.model_calls.observer import Transcript, build_observer_messages, previous_with_marker

LOG_EN = "\n".join(f"* 🔴 (09:{i:02d}) The user said their project number {i} ships on Friday." for i in range(60))
LOG_JA = "\n".join(f"* 🟡 (10:{i:02d}) ユーザーは会議{i}を金曜日に移したいと言った。" for i in range(60))


def _counters() -> list[TokenCounter]:
    counters: list[TokenCounter] = [EstimatorCounter()]
    try:
        counters.append(get_token_counter("tiktoken"))
    except Exception:  # no vocabulary offline: the estimator alone
        pass
    return counters


@pytest.mark.parametrize("log", [LOG_EN, LOG_JA])
def test_sections_sum_stays_within_two_tokens_per_join_of_the_whole(log: str) -> None:
    text = "**User**: こんにちは、Hello there 👋\n\n**Assistant**: Hi! どうしましたか？"
    transcript = Transcript(text=text, attachments=[])
    prompt = build_observer_messages(transcript, previous_observations=log, now=datetime(2026, 1, 2, 3, 4))
    for counter in _counters():
        for message in prompt:
            text = str(message.content)
            joins = text.count("\n\n")
            whole = counter.count_text(text)
            assert abs(counter.count_sections(text) - whole) <= 2 * joins + 1, (counter.source, whole)


def test_repeated_pieces_are_counted_once() -> None:
    calls: list[str] = []

    class Counting(EstimatorCounter):
        def count_text(self, text: str) -> int:
            if len(text) < 1024:  # a line (the whole log's count is kept by count_text itself)
                calls.append(text)
            return super().count_text(text)

    counter = Counting()
    budget = counter.count_text(LOG_JA) // 2
    calls.clear()
    first = previous_with_marker(LOG_JA, budget, counter.count_piece)
    counted_first = len(calls)
    second = previous_with_marker(LOG_JA, budget, counter.count_piece)
    assert first == second and first.startswith("[Older observations left out here:")
    assert counted_first > 30 and len(calls) == counted_first, "the second truncation counted nothing again"
    assert counter.count_piece("一行") == counter.count_text("一行")
