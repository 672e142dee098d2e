"""Property tests of the activation arithmetic (pure functions in buffering.py)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_om.buffering import idle_ttl_ms, projected_removal, removal_target, select_chunks
from langchain_om.config import ObservationConfig
from langchain_om.store.base import BufferedChunk


def make_chunks(sizes: list[int]) -> list[BufferedChunk]:
    chunks = []
    seq = 1
    for index, size in enumerate(sizes):
        chunks.append(
            BufferedChunk(
                thread_id="t", start_seq=seq, end_seq=seq + 1, start_id=f"m{seq}", end_id=f"m{seq + 1}",
                message_count=2, message_tokens=size, observations=f"* 🟡 chunk {index}", observation_tokens=5,
            )
        )
        seq += 2
    return chunks


ratio = st.floats(min_value=0.05, max_value=1.0)
sizes = st.lists(st.integers(min_value=1, max_value=5000), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(sizes=sizes, activation=ratio, current=st.integers(min_value=0, max_value=80_000))
def test_selection_is_a_minimal_prefix_reaching_the_target(sizes: list[int], activation: float, current: int) -> None:
    obs = ObservationConfig(message_tokens=20_000, buffer_activation=activation)
    chunks = make_chunks(sizes)
    chosen = select_chunks(list(reversed(chunks)), current, obs)  # input order must not matter
    assert chosen == chunks[: len(chosen)], "activation happens on chunk boundaries, oldest first"
    target = removal_target(current, obs)
    removed = sum(c.message_tokens for c in chosen)
    if removed < target:
        assert len(chosen) == len(chunks), "falling short of the target means every chunk was taken"
    else:
        without_last = removed - chosen[-1].message_tokens
        assert without_last < target, "no chunk beyond the one that reaches the target"
    assert projected_removal(chunks, current, obs) == removed


@settings(max_examples=200, deadline=None)
@given(keep=st.integers(min_value=1000, max_value=19_000), current=st.integers(min_value=0, max_value=60_000))
def test_absolute_activation_keeps_that_many_tokens(keep: int, current: int) -> None:
    obs = ObservationConfig(message_tokens=20_000, buffer_tokens=2000, buffer_activation=keep)
    assert removal_target(current, obs) == max(1, current - keep)


@given(activation=ratio)
def test_ratio_activation_removes_share_of_threshold(activation: float) -> None:
    obs = ObservationConfig(message_tokens=30_000, buffer_activation=activation)
    # the nearest token: within half a token of the exact share, never truncated down a whole one
    target = removal_target(12_345, obs)
    assert target == 1 or abs(target - 30_000 * activation) <= 0.5


def test_no_chunks_means_nothing_projected() -> None:
    assert projected_removal([], 50_000, ObservationConfig()) == 0


def test_idle_ttl_resolution() -> None:
    assert idle_ttl_ms(False, "openai") is None
    assert idle_ttl_ms(None, "openai") is None
    assert idle_ttl_ms(120_000.0, None) == 120_000.0
    assert idle_ttl_ms("auto", "anthropic") == 300_000
    assert idle_ttl_ms("auto", "google_genai") == 3_600_000
    assert idle_ttl_ms("auto", "unknown-provider") == 300_000
