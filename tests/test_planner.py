"""The planner's rules, table by table (issue 20): pure functions of config, record and window.

Each table names the rule of the reference page it checks. Windows are written as compact
strings: ``"h100 a200 c50 t50 a80"`` is a human message of 100 tokens, an AI answer of 200, an
AI tool call of 50, its tool result of 50 and the AI message that answers it.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from langchain_om.engine import planner
from langchain_om.foundation.config import OMConfig
from langchain_om.foundation.window import Window
from langchain_om.store.base import BufferedChunk, BufferedReflection, ObservationGroup, OMRecord, StoredMessage

T0 = datetime(2026, 12, 4, tzinfo=timezone.utc)
_DATA = {
    "h": {"type": "human", "data": {"content": "q"}},
    "a": {"type": "ai", "data": {"content": "answer"}},
    "c": {"type": "ai", "data": {"content": "", "tool_calls": [{"id": "x", "name": "f", "args": {}}]}},
    "t": {"type": "tool", "data": {"content": "r", "tool_call_id": "x"}},
}


def window(spec: str, first_seq: int = 1) -> Window:
    rows = [StoredMessage(id=f"m{first_seq + i}", thread_id="t", resource_id="r", seq=first_seq + i,
                          data=_DATA[item[0]], tokens=int(item[1:]), created_at=T0)
            for i, item in enumerate(spec.split())]
    return Window(rows)


def chunk(start: int, end: int, tokens: int, name: str | None = None) -> BufferedChunk:
    return BufferedChunk(id=name or f"c{start}", thread_id="t", start_seq=start, end_seq=end, start_id=f"m{start}",
                         end_id=f"m{end}", message_count=end - start + 1, message_tokens=tokens,
                         observations="* obs", observation_tokens=10)


def record(*, log: int = 0, chunks: tuple[BufferedChunk, ...] = (), watermark: int = 0, staged: bool = False,
           **metadata: Any) -> OMRecord:
    groups = [ObservationGroup(thread_id="t", start_id="m0", end_id="m0", text="x", tokens=log)] if log else []
    rec = OMRecord(resource_id="r", thread_id="t", groups=groups, buffered_chunks=list(chunks), metadata=metadata)
    if watermark:
        rec.last_observed_seq["t"] = watermark
    if staged:
        rec.buffered_reflection = BufferedReflection(covered_group_ids=[g.id for g in groups], text="r",
                                                     input_tokens=log, output_tokens=log // 3)
    return rec


def config(**observation: Any) -> OMConfig:
    reflection = observation.pop("reflection", {})
    top = observation.pop("top", {})
    return OMConfig.build(observation=observation, reflection=reflection, **top)


# ------------------------------------------------------------------------------- limits


@pytest.mark.parametrize(("share", "log", "window_tokens", "expected"), [
    (False, 0, 0, (1000, 4000)),
    (False, 3000, 900, (1000, 4000)),
    # share_token_budget: each limit grows into the other's unused room, never below its own
    (True, 1000, 0, (4000, 5000)),
    (True, 4500, 200, (1000, 4800)),
    (True, 6000, 2000, (1000, 4000)),
])
def test_limits(share: bool, log: int, window_tokens: int, expected: tuple[int, int]) -> None:
    cfg = OMConfig.build(observation={"message_tokens": 1000, "buffer_tokens": False if share else 0.2},
                         reflection={"observation_tokens": 4000}, share_token_budget=share)
    got = planner.limits(cfg, log, window_tokens)
    assert (got.messages, got.observations) == expected


# ----------------------------------------------------------------- activation retention


@pytest.mark.parametrize(("sizes", "window_tokens", "floor", "taken"), [
    # the case: threshold 10k, r=0.8 (floor 2k), window 11.9k: all chunks would
    # overshoot the 9.9k target by 2k (> 0.95 x 2k) and leave nothing, so the largest prefix
    # below it goes, keeping 2.65k
    ([4000, 5250, 2650], 11_900, 2000, 2),
    # the smallest prefix reaching the target, overshooting by at most 0.95 x floor and leaving >= 1000
    ([3000, 3000, 3000], 11_900, 4000, 3),   # target 7.9k: 9k overshoots by 1.1k <= 3.8k, leaves 2.9k
    ([3000, 5000, 3000], 11_900, 2000, 2),   # target 9.9k: 11k leaves 900 < 1000 -> 8k below it
    ([6000, 3000], 11_900, 2000, 2),         # 9k < 9.9k and all of them: everything goes
    ([9950], 11_900, 2000, 1),               # overshoot 50, leaves 1950: taken
    ([11_000, 500], 11_900, 2000, 1),        # reaching prefix leaves 900: none below -> the first chunk
    # a floor under 1000 allows no overshoot at all: the largest prefix keeping the floor
    ([100, 100, 100, 100], 600, 300, 3),
    ([200, 200], 600, 300, 1),
    ([], 600, 300, 0),
])
def test_choose_chunks(sizes: list[int], window_tokens: int, floor: int, taken: int) -> None:
    chunks = [chunk(i * 10 + 1, i * 10 + 9, size) for i, size in enumerate(sizes)]
    assert planner.choose_chunks(chunks, window_tokens, floor) == chunks[:taken]


@pytest.mark.parametrize(("activation", "floor"), [(0.8, 6000), (0.5, 15_000), (1.0, 0), (2500, 2500)])
def test_retention_floor(activation: float, floor: int) -> None:
    assert planner.retention_floor(config(message_tokens=30_000, buffer_activation=activation)) == floor


def test_a_chunk_over_the_unanswered_tool_round_waits_for_the_answer() -> None:
    cfg = config(message_tokens=200, buffer_tokens=50)
    win = window("h100 a100 h50 c30 t40")  # the tool result (seq 5) is not answered yet
    early = chunk(1, 2, 200, "early")
    late = chunk(3, 5, 120, "late")
    assert planner.activatable(cfg, win, [early, late]) == [early]
    answered = window("h100 a100 h50 c30 t40 a20 h10")
    assert planner.activatable(cfg, answered, [early, late]) == [early, late]


@pytest.mark.parametrize(("tokens_spec", "signals", "expected"), [
    ("h400 a400 h300", planner.NO_SIGNALS, ("threshold", 2)),   # 1100 > 1000: 800 stays below the 900 target

    ("h400 a400 h100", planner.NO_SIGNALS, None),               # under the threshold, no signal
    ("h400 a400 h100", planner.Signals(idle=planner.IdleSignal(T0, 5.0)), ("ttl", 2)),
    ("h400 a400 h100", planner.Signals(previous_model="openai/gpt-4o"), ("provider_change", 2)),
])
def test_plan_activation(tokens_spec: str, signals: planner.Signals, expected: tuple[str, int] | None) -> None:
    cfg = config(message_tokens=1000, buffer_tokens=200)
    rec = record(chunks=(chunk(1, 1, 400), chunk(2, 2, 400)))
    plan = planner.plan_activation(cfg, rec, "t", window(tokens_spec), signals)
    got = None if plan is None else (plan.triggered_by, len(plan.chunks))
    assert got == expected


def test_no_activation_without_buffering_or_past_chunks() -> None:
    win = window("h600 a600")
    assert planner.plan_activation(config(message_tokens=1000, buffer_tokens=False), record(), "t", win) is None
    stale = record(chunks=(chunk(1, 1, 600),), watermark=1)  # the chunk's messages are observed already
    assert planner.plan_activation(config(message_tokens=1000), stale, "t", window("a600", 2)) is None


# ---------------------------------------------------------------- synchronous observation


@pytest.mark.parametrize(("buffer", "spec", "flags", "expected"), [
    # without buffering: over the threshold, everything before the current turn goes
    (False, "h300 a300 h300 a300 h100", {}, ("threshold", 4)),
    (False, "h300 a300 h100", {}, None),
    # with buffering: between the threshold and block_after (2 x 1000) only buffering runs
    (0.2, "h300 a300 h300 a300 h100", {}, None),
    # past block_after the step blocks
    (0.2, "h600 a600 h600 a600 h100", {}, ("block_after", 4)),
    # a failed background cycle: the next crossing blocks at once
    (0.2, "h300 a300 h300 a300 h100", {planner.OBSERVATION_FAILED: True}, ("buffering_failed", 4)),
])
def test_plan_observation(buffer: Any, spec: str, flags: dict[str, Any], expected: tuple[str, int] | None) -> None:
    cfg = config(message_tokens=1000, buffer_tokens=buffer, **({"block_after": 2} if buffer else {}))
    plan = planner.plan_observation(cfg, record(**flags), "t", window(spec))
    got = None if plan is None else (plan.reason, plan.cut)
    assert got == expected


def test_a_turn_over_block_after_gives_up_answered_rounds_but_never_the_newest() -> None:
    cfg = config(message_tokens=1000, buffer_tokens=False)  # the turn's limit: 1.2 x 1000
    win = window("h100 c50 t900 a50 c50 t900 a50 c50 t900")  # one turn of 3,050 tokens
    plan = planner.plan_observation(cfg, record(), "t", win)
    assert plan is not None
    assert plan.cut == 7  # the answered rounds go; the newest round (seq 8-9) stays
    assert plan.pinned == 0  # the human message is taken, so it is pinned back into the context


def test_ready_chunks_are_activated_before_a_blocking_observation() -> None:
    cfg = config(message_tokens=1000, buffer_tokens=0.2, block_after=2)
    rec = record(chunks=(chunk(1, 2, 1200),))
    plan = planner.plan_observation(cfg, rec, "t", window("h600 a600 h600 a600 h100"))
    assert plan is not None and [c.id for c in plan.activate_first] == ["c1"] and plan.cut == 0


# --------------------------------------------------------------------------- buffering


@pytest.mark.parametrize(("tokens", "expected"), [
    (0, 0), (1999, 0), (2000, 1), (4000, 2), (7800, 3),
    # past 10,000 - 1.1 x 2,000 = 7,800 the interval halves: 8,000, 9,000, 10,000 ...
    (8000, 4), (8999, 4), (9000, 5), (10_000, 6), (12_000, 8),
])
def test_buffer_boundaries(tokens: int, expected: int) -> None:
    assert planner.buffer_boundaries(tokens, 2000, 10_000) == expected


@pytest.mark.parametrize(("spec", "buffered_to", "expected"), [
    ("h150 a150", 0, 0),            # 300 tokens: the first boundary (200) was crossed
    ("h150", 0, None),              # 150: no boundary yet
    ("h150 a150 h50", 2, None),     # 300 buffered, 350 now: no new boundary (400)
    ("h150 a150 h150", 2, 2),       # 450: crossed 400 since the buffered point
    # between the threshold (1000) and block_after buffering keeps going, every half interval
    # past 1000 - 1.1 x 200 = 780
    ("h500 a500 h60", 2, None),
    ("h500 a500 h100", 2, 2),
])
def test_plan_buffering_observation_cadence(spec: str, buffered_to: int, expected: int | None) -> None:
    cfg = config(message_tokens=1000, buffer_tokens=200, block_after=3)
    chunks = (chunk(1, buffered_to, 1),) if buffered_to else ()
    plan = planner.plan_buffering(cfg, record(chunks=chunks), "t", window(spec))
    assert plan.observe_after == expected


def test_no_second_buffering_cycle_while_one_runs() -> None:
    cfg = config(message_tokens=1000, buffer_tokens=200)
    assert planner.plan_buffering(cfg, record(), "t", window("h500"), observing=True).observe_after is None


@pytest.mark.parametrize(("log", "extra", "reflecting", "expected"), [
    (1000, {}, False, False),       # under buffer_activation x observation_tokens (0.5 x 4000)
    (2000, {}, False, True),
    (2000, {}, True, False),        # one at a time
    (2000, {"staged": True}, False, False),  # one is staged already
    (2000, {planner.REFLECTION_HOLD: 1900}, False, False),  # held: the log grew by less than 1000
    (2400, {planner.REFLECTION_HOLD: 1900}, False, False),
    (2900, {planner.REFLECTION_HOLD: 1900}, False, True),
    # after a reflection left 1800 tokens, the next one is pre-computed only once the log grew by 1000
    (2400, {planner.REFLECTED_AT: 1800}, False, False),
    (2800, {planner.REFLECTED_AT: 1800}, False, True),
])
def test_plan_buffering_reflection(log: int, extra: dict[str, Any], reflecting: bool, expected: bool) -> None:
    cfg = config(message_tokens=1000, buffer_tokens=200, reflection={"observation_tokens": 4000})
    plan = planner.plan_buffering(cfg, record(log=log, **extra), "t", window("h10"), reflecting=reflecting)
    assert bool(plan.reflect_groups) is expected


# ---------------------------------------------------------------------------- reflection


@pytest.mark.parametrize(("buffer", "log", "extra", "signals", "expected"), [
    (0.2, 3000, {}, planner.NO_SIGNALS, None),                     # under the threshold
    (0.2, 3000, {"staged": True}, planner.NO_SIGNALS, None),       # staged, but no reason to swap it in
    (0.2, 3000, {"staged": True}, planner.Signals(idle=planner.IdleSignal(T0, 1.0)), ("activate", "ttl")),
    (0.2, 4500, {"staged": True}, planner.NO_SIGNALS, ("activate", "threshold")),
    (0.2, 4500, {}, planner.NO_SIGNALS, None),                     # buffering reflects in the background
    (0.2, 9000, {}, planner.NO_SIGNALS, ("reflect", "threshold")),  # past block_after (2 x 4000)
    (0.2, 4500, {planner.REFLECTION_FAILED: True}, planner.NO_SIGNALS, ("reflect", "threshold")),
    (False, 4500, {}, planner.NO_SIGNALS, ("reflect", "threshold")),
    # a cycle that stayed over the target holds further attempts until the log grew by 25%
    (False, 4500, {planner.REFLECTION_HOLD: 4300}, planner.NO_SIGNALS, None),
    (False, 5200, {planner.REFLECTION_HOLD: 4300}, planner.NO_SIGNALS, None),
    (False, 5300, {planner.REFLECTION_HOLD: 4300}, planner.NO_SIGNALS, ("reflect", "threshold")),
    (False, 4100, {planner.REFLECTION_HOLD: 4300}, planner.NO_SIGNALS, ("reflect", "threshold")),  # shrank
    (0.2, 9000, {planner.REFLECTION_HOLD: 8900}, planner.NO_SIGNALS, None),
])
def test_plan_reflection(buffer: Any, log: int, extra: dict[str, Any], signals: planner.Signals,
                         expected: tuple[str, str] | None) -> None:
    cfg = config(message_tokens=1000, buffer_tokens=buffer, reflection={"observation_tokens": 4000, "block_after": 2})
    plan = planner.plan_reflection(cfg, record(log=log, **extra), 0, signals)
    got = None if plan is None else (plan.action, plan.triggered_by)
    assert got == expected


def test_after_a_buffered_reflection_the_log_is_checked_against_block_after_again() -> None:
    """Activation leaves 1350 tokens against block_after 1200: the second plan reflects now."""
    cfg = config(message_tokens=1000, buffer_tokens=0.2,
                 reflection={"observation_tokens": 1000, "block_after": 1200})
    after_activation = record(log=1350)
    plan = planner.plan_reflection(cfg, after_activation, 0)
    assert plan is not None and plan.action == "reflect"


def test_share_token_budget_reflects_on_the_window_after_observing() -> None:
    """Under a shared budget the log's limit depends on the window: the same record reflects
    with a full window (the room is taken) and not with the window an observation left."""
    cfg = OMConfig.build(observation={"message_tokens": 1000, "buffer_tokens": False},
                         reflection={"observation_tokens": 1000}, share_token_budget=True)
    rec = record(log=1500)
    assert planner.plan_reflection(cfg, rec, 900) is not None   # limit max(1000, 2000 - 900) = 1100
    assert planner.plan_reflection(cfg, rec, 100) is None       # limit 1900
