"""The unobserved window's carried token total stays equal to a fresh sum, whatever rows join or leave."""

from __future__ import annotations

from datetime import datetime, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_om.foundation.window import Window
from langchain_om.store.base import StoredMessage

_MOMENT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def rows(tokens: list[int], first_seq: int = 1) -> list[StoredMessage]:
    return [
        StoredMessage(id=f"m{first_seq + i}", thread_id="t", resource_id="r", seq=first_seq + i,
                      data={"type": "human", "data": {"content": "x"}}, tokens=t, created_at=_MOMENT)
        for i, t in enumerate(tokens)
    ]


token_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=40)


@settings(max_examples=300, deadline=None)
@given(first=token_lists, more=token_lists, cuts=st.lists(st.integers(min_value=-2, max_value=90), max_size=6))
def test_total_matches_a_fresh_sum_after_any_appends_and_cuts(first: list[int], more: list[int],
                                                             cuts: list[int]) -> None:
    window = Window(rows(first))
    window = window.plus(rows(more, first_seq=len(first) + 1))
    for seq in cuts:
        window = window.after(seq)
        assert all(m.seq > seq for m in window)
        assert window.tokens == sum(m.tokens for m in window)
    expected = [m for m in rows(first + more) if all(m.seq > seq for seq in cuts)]
    assert [m.id for m in window] == [m.id for m in expected]
    assert window.tokens == sum(m.tokens for m in expected)


def test_after_keeps_seq_order_and_returns_a_window() -> None:
    window = Window(rows([5, 6, 7, 8]))
    later = window.after(2)
    assert isinstance(later, Window)
    assert [m.seq for m in later] == [3, 4] and later.tokens == 15
    assert window.after(0) is window, "nothing to drop: the same window, no copy"
    assert window.after(4) == () and window.after(4).tokens == 0
    assert window.plus([]) is window
    assert isinstance(window[1:], tuple) and not isinstance(window[1:], Window), \
        "a slice is plain rows, not a window with a total that could be wrong"


def test_parsed_messages_follow_their_rows_through_cuts_and_appends() -> None:
    from langchain_core.messages import HumanMessage

    parsed = tuple(HumanMessage(content=f"m{i}", id=f"m{i}") for i in range(1, 4))
    window = Window(rows([1, 2, 3]), parsed=parsed).plus(rows([4], first_seq=4))
    assert window.parsed == parsed, "an appended row is parsed later, on demand"
    later = window.after(1)
    assert [m.id for m in later.parsed] == ["m2", "m3"]
    assert [m.id for m in later][: len(later.parsed)] == [m.id for m in later.parsed]
