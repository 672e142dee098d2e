"""observation.previous_observer_tokens (issue 6, item 5), end to end through the Observer prompt."""

from __future__ import annotations

from typing import Any

from om_fakes import conversation
from om_recording import RecordingModel, observer_reply

from langchain_om.engine import ObservationalMemory
from langchain_om.store.base import BufferedReflection, ObservationGroup
from langchain_om.store.memory import InMemoryStore


def group_text(index: int, lines: int = 12) -> str:
    body = []
    for line in range(lines):
        marker = "🔴" if line == 0 else "🟢"
        body.append(f"* {marker} (09:{line:02d}) fact-{index}-{line} about the garden plan and its watering schedule")
    return f"Date: 2026-11-{index + 1:02d}\n" + "\n".join(body)


async def seeded_om(previous: Any, *, pending: bool = False, groups: int = 6) -> tuple[ObservationalMemory,
                                                                                       RecordingModel]:
    model = RecordingModel(fn=lambda _m: observer_reply())
    om = ObservationalMemory(InMemoryStore(), model=model, token_counter="estimator",
                             observation={"message_tokens": 400, "buffer_tokens": False,
                                          "previous_observer_tokens": previous},
                             reflection={"observation_tokens": 100_000})
    record = await om.aget_record("t1")
    updated = record.model_copy(deep=True)
    updated.groups = [ObservationGroup(thread_id="t1", start_id=f"old{i}a", end_id=f"old{i}b", text=group_text(i),
                                       tokens=om.counter.count_text(group_text(i))) for i in range(groups)]
    if pending:
        updated.buffered_reflection = BufferedReflection(
            covered_group_ids=[g.id for g in updated.groups[:4]],
            text="* 🔴 SUMMARY-OF-FIRST-FOUR-DAYS: the garden plan, condensed.", input_tokens=900, output_tokens=20)
    await om.store.acommit_record(updated, expected_version=record.version)
    return om, model


async def observer_prompt(om: ObservationalMemory, model: RecordingModel) -> str:
    for history in conversation(14):
        await om.aprocess("t1", history)
        if model.calls:
            return "\n".join(str(m.content) for m in model.calls[0]["messages"])
    raise AssertionError("the Observer was never called")


async def test_budget_keeps_the_newest_lines_and_red_lines_where_possible() -> None:
    om, model = await seeded_om(300)
    prompt = await observer_prompt(om, model)
    assert "fact-5-11" in prompt, "the newest line is kept"
    assert "fact-0-5" not in prompt and "fact-1-7" not in prompt, "old detail is cut from the front"
    old_reds = [g for g in range(5) if f"fact-{g}-0 " in prompt]
    assert old_reds, "old 🔴 lines survive the cut where they fit"
    assert old_reds == list(range(old_reds[0], 5)), "the newest 🔴 lines are the ones kept"
    assert not any(f"fact-{g}-{i} " in prompt for g in range(5) for i in range(1, 12)), "old 🟢 detail is cut"
    full = "\n\n".join(group_text(i) for i in range(6))
    kept = [line for line in full.splitlines() if line.startswith("*") and line in prompt]
    assert om.counter.count_text("\n".join(kept)) <= 300 * 1.1


async def test_bigger_budget_keeps_more() -> None:
    small, small_model = await seeded_om(200)
    large, large_model = await seeded_om(900)
    small_prompt = await observer_prompt(small, small_model)
    large_prompt = await observer_prompt(large, large_model)

    def count(prompt: str) -> int:
        return sum(f"fact-{g}-{i} " in prompt for g in range(6) for i in range(12))

    assert count(small_prompt) < count(large_prompt) < 72


async def test_zero_omits_prior_observations() -> None:
    om, model = await seeded_om(0)
    prompt = await observer_prompt(om, model)
    assert "fact-" not in prompt


async def test_false_disables_cutting() -> None:
    om, model = await seeded_om(False)
    prompt = await observer_prompt(om, model)
    assert all(f"fact-{g}-{i} " in prompt for g in range(6) for i in range(12))


async def test_pending_buffered_reflection_summary_replaces_the_lines_it_covers() -> None:
    om, model = await seeded_om(False, pending=True)
    prompt = await observer_prompt(om, model)
    assert "SUMMARY-OF-FIRST-FOUR-DAYS" in prompt
    assert "fact-0-" not in prompt and "fact-3-" not in prompt, "covered lines are replaced"
    assert "fact-4-0" in prompt and "fact-5-11" in prompt, "uncovered groups stay"
    # and with a budget the summary is swapped in before cutting: the summary is newest-first material
    om, model = await seeded_om(250, pending=True)
    prompt = await observer_prompt(om, model)
    assert "fact-0-0" not in prompt and "fact-5-11" in prompt
    assert "SUMMARY-OF-FIRST-FOUR-DAYS" in prompt, "the summary is a 🔴 line, so it survives the cut"
