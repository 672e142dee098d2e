"""The scripted Reflector shortens notes only by cutting their tail at a word (or, in Japanese, a
clause or character) boundary: what is left reads as the note said it, and no 🔴 note goes."""

from __future__ import annotations

import re

import pytest

from langchain_om.model_calls.note_wording import cut_text
from langchain_om.model_calls.reflector import MAX_COMPRESSION_LEVEL
from langchain_om.testing import condense_log


def _older_day(day: str, weekday: str) -> str:
    return (f"Date: 2026-03-{day} ({weekday})\n"
            f"* 🔴 (19:05) User said: Hi! It is {weekday}. My partner Sam and I want to go to Japan "
            "in April for about two weeks, maybe a bit longer if the budget allows it.\n"
            "* 🟢 (19:06) Assistant replied: Sounds great.\n"
            f"* 🟡 (19:07) Assistant used tool search_flights; replied: Found three {weekday} options.\n"
            f"* 🔴 (19:09) User said: We are from Toronto ({weekday}), flying April 3 to April 13, and our "
            "budget is 9,000 CAD for everything including the flights. (meaning 2026-04-03)\n")


LOG = (_older_day("02", "Monday") + "\n" + _older_day("03", "Tuesday")
       + "Date: 2026-03-02 (Monday)\n* 🟡 (21:00) User asked about the weather in Kyoto in April, again.\n\n"
       "Date: 2026-03-09 (Monday)\n"
       "* 🔴 (21:20) User said: I GOT THE GHIBLI TICKETS! April 7 at 2pm, four of them, for me, Sam, Priya and "
       "her husband, and we still need a plan for the evening.\n"
       "* 🟡 (21:22) Assistant replied: Wonderful news, I noted the tickets.\n")


def _notes(log: str) -> list[tuple[str, str, str]]:
    return re.findall(r"^\* (🔴|🟡|🟢) \((\d\d:\d\d)\) (.*)$", log, re.MULTILINE)


@pytest.mark.parametrize("level", range(MAX_COMPRESSION_LEVEL + 1))
def test_condensing_keeps_every_red_note_and_cuts_only_tails(level: int) -> None:
    out = condense_log(LOG, level)
    assert len(out) < len(LOG) and "🟢" not in out
    reds_in, reds_out = [n for n in _notes(LOG) if n[0] == "🔴"], [n for n in _notes(out) if n[0] == "🔴"]
    assert [t for _, t, _ in reds_out] == [t for _, t, _ in reds_in]  # never fewer 🔴 notes, same order
    for _, time_, text in _notes(out):
        body = text.split(" (meaning ")[0]
        prefix = body[:-1].rstrip() if body.endswith("…") else text
        original = next((o for _, t, o in _notes(LOG) if t == time_ and o.startswith(prefix)), None)
        assert original is not None, prefix  # no inner word dropped
        if body.endswith("…"):
            assert original[len(prefix): len(prefix) + 1] in (" ", ",", ".", "!", ";", ":")  # no word cut
            assert text.endswith("(meaning 2026-04-03)") == original.endswith("(meaning 2026-04-03)")
        else:
            assert text == original
    # one Date header per day, newest day last, its notes whole
    headers = re.findall(r"^Date: .*$", out, re.MULTILINE)
    assert len(headers) == len(set(headers)) == 3 and headers[-1].startswith("Date: 2026-03-09")
    newest = out.split("Date: 2026-03-09 (Monday)\n", 1)[1]
    assert "four of them, for me, Sam, Priya and her husband" in newest
    if level <= 1:
        assert "…" not in out  # the gentle levels drop detail, never words


def test_levels_shrink_step_by_step_and_older_days_shrink_first() -> None:
    sizes = [len(condense_log(LOG, level)) for level in range(MAX_COMPRESSION_LEVEL + 1)]
    assert sizes == sorted(sizes, reverse=True) and sizes[0] > sizes[-1]
    assert "🟡" in condense_log(LOG, 0).split("Date: 2026-03-03")[1].split("Date:")[0]  # gentle: 🟡 kept
    assert "🟡" not in condense_log(LOG, 1).split("Date: 2026-03-03")[1].split("Date:")[0]  # then 🟡 go first
    assert "…" in condense_log(LOG, 2).split("Date: 2026-03-09")[0]


def test_japanese_notes_are_cut_at_a_clause_or_character() -> None:
    note = "ユーザー: 来週の金曜日に京都へ行きます。予算は9万円です。花むきを予約しました！"
    assert cut_text(note, 30) == "ユーザー: 来週の金曜日に京都へ行きます。…"
    assert cut_text("ユーザー: 来週の金曜日、京都へ行きます予算は9万円です", 24) == "ユーザー: 来週の金曜日、…"
    assert cut_text("ユーザー: 来週の金曜日に京都へ行きます予算は9万円です", 16) == "ユーザー: 来週の金曜日に京都…"
    # six trips to six cities (six notes that differ only in the budget would be one value, updated)
    cities = ["京都", "大阪", "奈良", "神戸", "金沢", "広島"]
    log = ("Date: 2026-03-02 (Monday)\n" + "\n".join(
        f"* 🔴 (19:0{i}) ユーザー: {city}へ行く予定です。予算は{i}万円です。旅館「花むき」に泊まりたいです。"
        "夕食は精進料理にしてください。" for i, city in enumerate(cities)))
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        out = condense_log(log, level)
        assert len(out) < len(log) and out.count("🔴") == 6
        assert all(f"(19:0{i}) ユーザー: {city}へ行く予定です。" in out for i, city in enumerate(cities)), out


def test_english_cut_never_splits_a_word_and_keeps_the_resolved_date() -> None:
    text = "User said: I will send the visa form tomorrow and then call Sam about it. (meaning 2026-03-03)"
    assert cut_text(text, 40) == "User said: I will send the visa form… (meaning 2026-03-03)"
    assert cut_text("User said: Book the Tokyo hotels too. And the rest of it.", 38) == (
        "User said: Book the Tokyo hotels too. …")
    assert cut_text(text, 500) == text and cut_text("  a\n b ", 5) == "a b"
    assert cut_text("Supercalifragilistic", 10) == "Supercali…"  # one word longer than the limit
    # a note cut once before is cut again with one mark, not two
    once = "User said: I need a tent and more detail…"
    assert cut_text(once + " about it", 42) == once


def test_a_log_that_cannot_shrink_comes_back_unchanged() -> None:
    log = "Date: 2026-03-02 (Monday)\n* 🔴 (19:05) User is Maya."
    assert all(condense_log(log, level) == log for level in range(MAX_COMPRESSION_LEVEL + 1))
