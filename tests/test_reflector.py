"""Reflector: prompt levels, parsing, the compression check and the scripted Reflector."""

from __future__ import annotations

import pytest
from langchain_core.messages import HumanMessage, SystemMessage

from langchain_om.model_calls.reflector import (
    MAX_COMPRESSION_LEVEL,
    REFLECTOR_PROMPT_MARKER,
    ReflectorOutputError,
    build_reflector_messages,
    is_compressed,
    parse_reflector_output,
)
from langchain_om.testing import ScriptedObserverModel, condense_log

LOG = """Date: 2026-11-28 (Saturday)
* 🔴 (09:00) User said their cat Miso is allergic to chicken.
* 🟡 (09:05) Assistant listed five cat foods.
* 🟡 (09:06) Assistant compared prices of the cat foods.
* 🟢 (09:07) User said thanks.
* 🔴 (09:00) User said their cat Miso is allergic to chicken.

Date: 2026-11-29 (Sunday)
* 🟡 (10:00) User asked about vets near the old town.
* 🟢 (10:02) Assistant gave four vet addresses.
* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon.
* 🟡 (10:09) User asked what to bring to the vet."""


def words(text: str) -> int:
    return len(text.split())


def test_prompt_levels_get_stronger_and_instruction_is_appended() -> None:
    prompts = [build_reflector_messages(LOG, instruction="Keep medical details.", level=level, target_tokens=500)
               for level in range(MAX_COMPRESSION_LEVEL + 1)]
    systems = [str(p[0].content) for p in prompts]
    assert all(s.startswith(REFLECTOR_PROMPT_MARKER) for s in systems)
    assert len(set(systems)) == MAX_COMPRESSION_LEVEL + 1 >= 4
    assert "two thirds" in systems[1] and "about half" in systems[2] and "about a third" in systems[3]
    assert all("Additional instructions from the application:\nKeep medical details." in s for s in systems)
    # the stable rule text comes first (provider prompt caches; engine test fakes compare the first 80 chars)
    assert len({s[:400] for s in systems}) == 1
    system, human = prompts[0]
    assert isinstance(system, SystemMessage) and isinstance(human, HumanMessage)
    assert "Compression level: 0" in str(human.content)
    assert "at most about 500 tokens" in str(human.content)
    assert "* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon." in str(human.content)
    for needle in ("merge only repeats", "Drop the superseded line", "Date: YYYY-MM-DD", "<observations>",
                   "Every 🔴 name, number, amount, date and time, and every ✅ outcome", "never overrides",
                   "language the log is written in", "Observer's conventions"):
        assert needle in system.content


def test_prompt_inline_extractors_and_bad_level() -> None:
    messages = build_reflector_messages(LOG, instruction=None, level=0, target_tokens=None,
                                        inline_extractors=[("open-questions", "Questions still open.", "vet?")])
    assert "<open-questions>" in str(messages[0].content)
    assert "<previous-open-questions>\nvet?" in str(messages[1].content)
    assert "Target length" not in str(messages[1].content)
    with pytest.raises(ValueError, match="level"):
        build_reflector_messages(LOG, instruction=None, level=MAX_COMPRESSION_LEVEL + 1, target_tokens=None)


def test_parse_reflector_output() -> None:
    text = ("Okay, here is the condensed log:\n```\n<observations>\nDate: 2026-11-28 (Saturday)\n"
            "* 🔴 (09:00) User's cat Miso is allergic to chicken.\n</observations>\n"
            "<current-task>Prepare for the vet visit.</current-task>\n"
            "<open-questions>what to bring</open-questions>\n```")
    result = parse_reflector_output(text, inline_slugs=["open-questions"])
    assert result.observations == "Date: 2026-11-28 (Saturday)\n* 🔴 (09:00) User's cat Miso is allergic to chicken."
    assert result.current_task == "Prepare for the vet visit."
    assert result.suggested_response is None
    assert result.extracted == {"open-questions": "what to bring"}


@pytest.mark.parametrize("text", ["", "<observations></observations>", "I cannot compress this.",
                                  "<observations>\nDate: 2026-11-28 (Saturday)\n</observations>"])
def test_parse_reflector_degenerate_raises(text: str) -> None:
    with pytest.raises(ReflectorOutputError):
        parse_reflector_output(text)


@pytest.mark.parametrize(
    ("inp", "out", "ok"),
    [
        (1000, 500, True),
        (1000, 1000, False),  # must be strictly smaller
        (1000, 1200, False),
        (1000, 0, False),
        (1000, 5, False),  # degenerate: a handful of tokens from a large log
        (10_000, 150, False),  # under 2% of the input
        (10_000, 250, True),
        (50, 8, True),  # small inputs may shrink a lot
    ],
)
def test_is_compressed(inp: int, out: int, ok: bool) -> None:
    assert is_compressed(inp, out) is ok


def test_scripted_reflector_round_trip_at_every_level() -> None:
    model = ScriptedObserverModel()
    sizes = []
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        reply = model.invoke(build_reflector_messages(LOG, instruction=None, level=level, target_tokens=None))
        result = parse_reflector_output(str(reply.content))
        out = result.observations
        sizes.append(words(out))
        assert is_compressed(words(LOG), words(out))
        assert "🟢" not in out
        assert out.count("Miso is allergic") <= 1  # duplicates merged
        # every 🔴 note survives with its names, numbers and dates (in fewer words from level 1 on)
        red = next(line for line in out.splitlines() if "🔴" in line and "2026-12-03" in line)
        assert all(word in red for word in ("(10:05)", "User will visit", "vet", "2026-12-03", "noon")), red
        if level == 0:
            assert "* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon." in out
    assert sizes[0] > sizes[1] >= sizes[2]
    level0 = parse_reflector_output(str(model.invoke(
        build_reflector_messages(LOG, instruction=None, level=0, target_tokens=None)).content)).observations
    assert level0.splitlines() == [
        "Date: 2026-11-28 (Saturday)",
        "* 🔴 (09:00) User said their cat Miso is allergic to chicken.",
        "* 🟡 (09:06) Assistant compared prices of the cat foods.",
        "",
        "Date: 2026-11-29 (Sunday)",
        "* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon.",
        "* 🟡 (10:09) User asked what to bring to the vet.",
    ]


def test_scripted_reflector_shrinks_all_red_logs() -> None:
    log = "Date: 2026-12-01 (Tuesday)\n" + "\n".join(
        f"* 🔴 (10:{i:02d}) User said important fact number {i} about the project plan and its budget."
        for i in range(6)
    )
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        out = condense_log(log, level)
        assert words(out) < words(log)
        assert out.startswith("Date: 2026-12-01 (Tuesday)")
        # shorter in words, never by losing a 🔴 note: every fact, number and time is still there
        assert all(f"number {i}" in out and f"10:{i:02d}" in out for i in range(6)), (level, out)


def test_scripted_reflector_is_deterministic() -> None:
    assert condense_log(LOG, 1) == condense_log(LOG, 1)
