"""Issue 20, degenerate output: ``degeneracy`` flags looping Observer/Reflector replies and
passes real ones (the scripted models' output, the fakes' output, long realistic logs)."""

from __future__ import annotations

import random
from datetime import date, timedelta

import pytest
from om_fakes import OBSERVATION, REFLECTION

from langchain_om.model_calls import degenerate
from langchain_om.model_calls.degenerate import degeneracy
from langchain_om.testing import LOOPING_LINE, ScriptedObserverModel, condense_log, looping_reply

_TOPICS = [
    "the trip to Lisbon in March", "a gluten-free birthday cake", "renewing the car insurance",
    "the sister's wedding speech", "a standing desk under 400 euros", "learning Portuguese verbs",
    "the leaking kitchen tap", "a present for the nephew who turns 9", "moving the dentist appointment",
    "the quarterly tax return", "training for a half marathon", "repotting the fiddle-leaf fig",
    "the broken laptop hinge", "a vegetarian menu for eight guests", "the rent increase letter",
    "a podcast about Roman history", "the cat's vaccination booster", "switching mobile carriers",
]
_VERBS = ["asked about", "said they prefer", "decided on", "is worried about", "wants help with",
          "mentioned", "postponed", "confirmed", "compared two options for", "finished"]


def _transcript(turns: int, seed: int = 3) -> str:
    """A long, varied conversation in the Observer's transcript format."""
    rng = random.Random(seed)
    day = date(2026, 3, 2)
    lines = []
    for turn in range(turns):
        if turn and turn % 25 == 0:
            day += timedelta(days=1)
        stamp = f"[{day.isoformat()} {9 + turn % 10:02d}:{turn % 60:02d}]"
        topic = rng.choice(_TOPICS)
        lines.append(f"{stamp} User: I {rng.choice(['need', 'want', 'plan'])} to sort out {topic}; "
                     f"my budget is {rng.randint(20, 900)} euros.")
        lines.append(f"{stamp} Assistant: Here are {rng.randint(2, 5)} ideas for {topic}.")
    return "<transcript>\n" + "\n".join(lines) + "\n</transcript>"


def _year_log(days: int = 365, seed: int = 5) -> str:
    """A reflected log over a year: a Date header a day (weekdays repeat 52 times), a daily
    reminder bullet repeated word for word, and varied bullets under the same emoji prefixes."""
    rng = random.Random(seed)
    start = date(2025, 1, 1)
    blocks = []
    for offset in range(days):
        day = start + timedelta(days=offset)
        bullets = ["* 🟢 (08:00) Assistant sent the daily stand-up reminder."]
        for _ in range(3):
            bullets.append(f"* {rng.choice(['🔴', '🟡'])} ({rng.randint(9, 20):02d}:{rng.randint(0, 59):02d}) "
                           f"User {rng.choice(_VERBS)} {rng.choice(_TOPICS)}.")
        blocks.append(f"Date: {day.isoformat()} ({day.strftime('%A')})\n" + "\n".join(bullets))
    return "<observations>\n" + "\n\n".join(blocks) + "\n</observations>"


def _template_with_empty_fields(fields: int = 45) -> str:
    """An Observer reply whose extracted value is a working-memory template, mostly empty."""
    body = "\n".join(f"## Field {name}\n- (none)" for name in range(fields))
    return OBSERVATION + f"\n<working-memory>\n{body}\n</working-memory>"


def _counting_lines(count: int, *, closed: bool) -> str:
    body = "\n".join(f"* 🟡 (14:30) Step {i}: the user asked for the same summary again." for i in range(count))
    return "<observations>\n" + body + ("\n</observations>" if closed else "")


def _block_tail(chars: int) -> str:
    """A reply cut by the output limit whose last ``chars`` characters loop over ten distinct lines
    (too few repeats for the line rules, no long line)."""
    topics = [topic for topic in _TOPICS if not any(c.isdigit() for c in topic)][:8]  # digits would shrink
    lines = [f"* the user asked about {topic} again" for topic in topics]
    block = "\n".join(line.lower() for line in lines) + "\n"
    return "<observations>\nDate: 2026-11-30 (Monday)\n" + (block * 20)[-chars - 1:]  # + the last newline


_BLOCK = ("Date: 2026-11-30 (Monday)\n* 🔴 (10:00) User likes green tea without sugar.\n"
          "* 🟡 (10:05) Assistant suggested a sencha from Shizuoka.\n* 🟢 (10:06) User said thanks.\n")

_SCRIPTED = ScriptedObserverModel()
_REAL = {
    "fake observation": OBSERVATION,
    "fake reflection": REFLECTION,
    "scripted observer, 400 varied turns": _SCRIPTED.observe(_transcript(400)),
    "scripted reflector, level 0": "<observations>\n" + condense_log(_SCRIPTED.observe(_transcript(400))) +
                                   "\n</observations>",
    "year-long log, same prefixes and a daily reminder": _year_log(),
    "empty template, 45 '- (none)' lines": _template_with_empty_fields(45),
    "a few identical short lines": "<observations>\n" + "- (none)\n" * 12 + "</observations>",
    "99 counting lines (below the near-repeat bar)": _counting_lines(99, closed=True),
    "a long line listing numbered items": "* 🔴 (10:00) User listed their reading plan: " + ", ".join(
        f"week {i}: {topic}" for i, topic in enumerate(_TOPICS * 5)) + ".",
    "39 repeats of a line (below the bar), closed": looping_reply(times=39, closed=True),
    "empty": "",
}


@pytest.mark.parametrize("text", list(_REAL.values()), ids=list(_REAL))
def test_real_replies_pass(text: str) -> None:
    assert degeneracy(text) is None


_LOOPS = {
    "a line 300 times, cut by the output limit": (looping_reply(times=300), "repeated 300 times"),
    "a line 40 times, closed": (looping_reply(times=40, closed=True), "repeated 40 times"),
    "a line differing only by a counter, closed": (_counting_lines(150, closed=True), "numbers changing"),
    "a counter loop cut by the output limit": (_counting_lines(60, closed=False), "the last"),
    "a 4-line block 40 times, closed": ("<observations>\n" + _BLOCK * 40 + "</observations>",
                                        "lines repeat earlier lines"),
    "a 4-line block cut mid-block": ("<observations>\n" + _BLOCK * 20 + _BLOCK[:70], "the last"),
    "one endless line, cut": ("* 🔴 (10:00) User said " + "and then they asked again " * 200, "the last"),
    "one endless line that ends": ("* 🔴 (10:00) User said " + "and then they asked again " * 120 +
                                   "which was all for today, thanks.\n</observations>\n"
                                   "<current-task>Answer the user.</current-task>", "within one line"),
    "a short line 400 times": ("<observations>\n" + "- (none)\n" * 400, "repeated 400 times"),
    "a short line until the limit, after real lines": (_year_log(120) + "\n- (none)" * 300, "the last"),
    "one character until the limit": ("<observations>\n* 🟡 (10:00) User said: " + "!" * 5000, "1-character"),
}


@pytest.mark.parametrize(("text", "expected"), list(_LOOPS.values()), ids=list(_LOOPS))
def test_loops_are_flagged_with_a_reason(text: str, expected: str) -> None:
    reason = degeneracy(text)
    assert reason is not None and expected in reason, reason
    assert len(reason) < 300 and "\n" not in reason


def test_the_reason_quotes_the_line_and_counts_it() -> None:
    reason = degeneracy(looping_reply(times=312))
    assert reason == f"line {LOOPING_LINE!r} repeated 312 times (of 314 lines)"


def test_a_periodic_tail_reason_names_the_block_and_its_length() -> None:
    reason = degeneracy("<observations>\n" + "Miso likes fish. " * 200)
    assert reason is not None
    assert "repeat a 17-character block" in reason and "'miso likes fish.'" in reason


@pytest.mark.parametrize(
    ("text", "baseline"),
    [
        # a Reflector keeping the repeated lines of an old log it was given
        ("<observations>\n" + _BLOCK * 40 + "</observations>", "<observation-log>\n" + _BLOCK * 40),
        # an Observer quoting a pasted file of identical lines
        ("<observations>\n" + "* 🟡 ERROR connection refused by db-1\n" * 300 + "</observations>",
         "User: here is my log\n" + "* 🟡 ERROR connection refused by db-1\n" * 300),
        # a loop cut by the output limit that only repeats a stretch of the prompt
        ("Miso likes fish. " * 200, "Context: " + "Miso likes fish. " * 300),
    ],
    ids=["reflector keeps a repeated log", "observer quotes a pasted file", "tail copied from the prompt"],
)
def test_repetition_the_model_was_given_is_not_a_loop(text: str, baseline: str) -> None:
    assert degeneracy(text) is not None, "the same text is a loop without the baseline"
    assert degeneracy(text, baseline=baseline) is None


def test_a_loop_beyond_what_the_baseline_holds_is_still_flagged() -> None:
    baseline = "\n".join([LOOPING_LINE] * 10)
    reason = degeneracy(looping_reply(times=300, closed=True), baseline=baseline)
    assert reason is not None and "repeated 291 times" in reason


@pytest.mark.parametrize(
    ("rule", "below", "at"),
    [
        ("LINE_REPEAT_MIN", looping_reply(times=degenerate.LINE_REPEAT_MIN - 1, closed=True),
         looping_reply(times=degenerate.LINE_REPEAT_MIN, closed=True)),
        ("NEAR_REPEAT_MIN", _counting_lines(degenerate.NEAR_REPEAT_MIN - 1, closed=True),
         _counting_lines(degenerate.NEAR_REPEAT_MIN, closed=True)),
        ("TAIL_MIN_CHARS", _block_tail(degenerate.TAIL_MIN_CHARS - 1), _block_tail(degenerate.TAIL_MIN_CHARS)),
    ],
)
def test_thresholds_are_where_the_module_says(rule: str, below: str, at: str) -> None:
    assert degeneracy(below) is None, rule
    assert degeneracy(at) is not None, rule


def test_a_loop_to_the_output_limit_is_measured_whole() -> None:
    # 100k tokens of one loop: the tail check looks at a window, then measures the whole run
    reason = degeneracy("<observations>\n* 🔴 (10:00) User said " + "and then again " * 27_000)
    assert reason is not None and "15-character block" in reason and "27,000 times" in reason
