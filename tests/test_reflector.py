"""Reflector: prompt levels, parsing, the compression check and the scripted Reflector."""

from __future__ import annotations

import pytest

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


def test_prompt_levels_follow_the_log_so_retries_share_the_cached_prefix() -> None:
    """Issue 43, item 7: one system prompt for every attempt; the level and the one target come
    after the log, so a retry repeats the system prompt and the log as a byte-identical prefix."""
    prompts = [build_reflector_messages(LOG, instruction="Keep medical details.", level=level, target_tokens=500,
                                        log_tokens=900, previous_tokens=700 if level else None)
               for level in range(MAX_COMPRESSION_LEVEL + 1)]
    systems = {str(p[0].content) for p in prompts}
    assert len(systems) == 1 and MAX_COMPRESSION_LEVEL + 1 >= 4
    system = systems.pop()
    assert system.startswith(REFLECTOR_PROMPT_MARKER)
    assert "Additional instructions from the application:\nKeep medical details." in system
    humans = [str(p[1].content) for p in prompts]
    log_end = humans[0].index("</observation-log>") + len("</observation-log>")
    assert len({h[:log_end] for h in humans}) == 1  # the log is a shared prefix of every attempt
    assert len({h[log_end:] for h in humans}) == MAX_COMPRESSION_LEVEL + 1  # the attempts differ after it
    first, retry = humans[0][log_end:], humans[1][log_end:]
    assert "Compression level: 0" in first and "Compression level: 1" in retry
    # one target, and how far the log (and the previous attempt) is from it
    assert "Target: under 500 tokens. The log above is 900 tokens: cut at least 400 (44% of it)." in first
    assert "A previous attempt came to 700 tokens, 200 over" in retry
    assert "two thirds" not in system + "".join(humans) and "at most about" not in "".join(humans)
    # levels relative to the log's own span, never fixed day counts
    assert "span" in first and "newest day" in humans[2]
    assert not any(word in system for word in ("last 7", "8 to 30", "31 to 90", "over 90"))
    for needle in ("The target comes first. Let things go in this order", "One dated event per line",
                   "🔴 only for what the user stated or decided", "most lines are not 🔴",
                   "kept once, newest", "(was 290 EUR)", "Date: YYYY-MM-DD", "<observations>",
                   "never overrides", "language the log is written in", "Observer's conventions"):
        assert needle in system, needle
    assert "* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon." in humans[0]


def test_prompt_inline_extractors_and_bad_level() -> None:
    messages = build_reflector_messages(LOG, instruction=None, level=0, target_tokens=None,
                                        inline_extractors=[("open-questions", "Questions still open.", "vet?")])
    assert "<open-questions>" in str(messages[0].content)
    assert "<previous-open-questions>\nvet?" in str(messages[1].content)
    assert "Target:" not in str(messages[1].content)
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
    # six distinct facts (numbered facts that differ only in their number would be one value, updated)
    facts = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    log = "Date: 2026-12-01 (Tuesday)\n" + "\n".join(
        f"* 🔴 (10:{i:02d}) User said important fact {name} about the project plan and its budget."
        for i, name in enumerate(facts)
    )
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        out = condense_log(log, level)
        assert words(out) < words(log)
        assert out.startswith("Date: 2026-12-01 (Tuesday)")
        # shorter in words, never by losing a 🔴 note: every fact, number and time is still there
        assert all(f"fact {name}" in out and f"10:{i:02d}" in out for i, name in enumerate(facts)), (level, out)


SUPERSEDED = {
    "en": ("Date: 2026-02-02 (Monday)\n"
           "* 🔴 (09:00) User said the trip budget is 290 EUR.\n"
           "* 🔴 (09:05) Assistant suggested three hostels near the station.\n"
           "* 🟢 (09:06) User said thanks.\n\n"
           "Date: 2026-02-09 (Monday)\n"
           "* 🔴 (10:00) User said the trip budget is 320 EUR.\n"
           "* 🔴 (10:10) User ran 5 km in the park (meaning 2026-02-08)\n\n"
           "Date: 2026-02-16 (Monday)\n"
           "* 🔴 (11:00) User ran 5 km in the park (meaning 2026-02-15)",
           "User said the trip budget is 320 EUR. (was 290)", "290 EUR", "Assistant suggested"),
    "ja": ("Date: 2026-02-02 (Monday)\n"
           "* 🔴 (09:00) ユーザー: 旅行の予算は290ユーロ。\n"
           "* 🔴 (09:05) アシスタント: 駅の近くのホステルを3つ提案した。\n\n"
           "Date: 2026-02-09 (Monday)\n"
           "* 🔴 (10:00) ユーザー: 旅行の予算は320ユーロ。\n"
           "* 🔴 (10:10) ユーザー: 公園で5km走った（meaning 2026-02-08）\n\n"
           "Date: 2026-02-16 (Monday)\n"
           "* 🔴 (11:00) ユーザー: 公園で5km走った（meaning 2026-02-15）",
           "ユーザー: 旅行の予算は320ユーロ。 (was 290)", "290ユーロ", "アシスタント:"),
}


@pytest.mark.parametrize("lang", sorted(SUPERSEDED))
def test_scripted_reflector_keeps_a_superseded_value_once_newest(lang: str) -> None:
    """Issue 43, item 7: a value stated again is kept once, newest, naming the one it replaced;
    events on different dates stay one per line; 🔴 stays only on what the user stated."""
    log, merged, old_value, assistant = SUPERSEDED[lang]
    out = condense_log(log, 0)
    assert merged in out, out
    assert out.count(old_value) == 0 or out.count(old_value) == out.count(f"(was {old_value[:3]}")
    assert len([line for line in out.splitlines() if "予算" in line or "budget" in line]) == 1
    runs = [line for line in out.splitlines() if "2026-02-08" in line or "2026-02-15" in line]
    assert len(runs) == 2 and all(line.count("2026-02-") == 1 for line in runs)  # one dated event per line
    helper = next(line for line in out.splitlines() if assistant in line)
    assert "🔴" not in helper  # 🔴 is for what the user stated or decided


def test_scripted_reflector_is_deterministic() -> None:
    assert condense_log(LOG, 1) == condense_log(LOG, 1)
