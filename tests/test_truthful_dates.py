"""Memory that never misleads (issue 43, items 1-5 and 8): plan marks only on plans, exact ages on
every date, computed weekdays, one clock per conversation, the dating machinery in every language,
and the smaller truths of the reading rules, the recall guidance and the Observer's transcript.

The end-to-end tests run the scripted Observer (a compliant stand-in) through ``aprocess``: a log
written on Tuesday 2026-02-10 and read on Monday 2026-03-09, in English and in Japanese."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation import context as om_context
from langchain_om.foundation.context import READING_RULES, render_context
from langchain_om.foundation.log_dates import age_label, gap_line
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.foundation.tokens import get_token_counter
from langchain_om.model_calls.language import language_line
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER, build_observer_messages, observer_system_prompt
from langchain_om.model_calls.transcript import Transcript, format_transcript
from langchain_om.store.base import ObservationGroup
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedObserverModel

EST = timezone(timedelta(hours=-5))
WRITTEN = datetime(2026, 2, 10, 9, 0, tzinfo=EST)  # a Tuesday
READ = datetime(2026, 3, 9, 10, 0, tzinfo=EST)  # a Monday, 27 days later
TODAY = date(2026, 3, 9)


def stamped(message: BaseMessage, when: datetime) -> BaseMessage:
    message.response_metadata = {TIMESTAMP_KEY: when.isoformat()}
    return message


def memory(model: Any = None, **options: Any) -> ObservationalMemory:
    return ObservationalMemory(InMemoryStore(), model=model or ScriptedObserverModel(), token_counter="estimator",
                               clock=lambda: datetime(2031, 1, 1, tzinfo=timezone.utc),
                               observation={"message_tokens": 30_000, "buffer_tokens": False},
                               reflection={"observation_tokens": 40_000}, **options)


async def context_after(om: ObservationalMemory, said: list[str], question: str) -> str:
    """The agent's system message on 2026-03-09 after the Observer read ``said`` (2026-02-10)."""
    history: list[BaseMessage] = []
    for index, text in enumerate(said):
        history += [stamped(HumanMessage(text, id=f"h{index}"), WRITTEN + timedelta(minutes=2 * index)),
                    stamped(AIMessage("OK.", id=f"a{index}"), WRITTEN + timedelta(minutes=2 * index + 1))]
    await om.aprocess("t", history)
    await om.aobserve("t")
    history.append(stamped(HumanMessage(question, id="q"), READ))
    context = await om.aprocess("t", history)
    assert context.system_message is not None
    return str(context.system_message.content)


def line_with(text: str, needle: str) -> str:
    return next(line for line in text.splitlines() if needle in line)


# ------------------------------------------------------------------ 1, 2: plan marks and ages, end to end


async def test_only_a_passed_plan_is_marked_and_every_date_carries_its_age() -> None:
    om = memory()
    text = await context_after(om, [
        "Are flights to Denver cheaper next Friday?",
        "My passport expires in 19 days.",
        "I will fly to Denver on Friday.",
        "We ran the half-marathon last Sunday.",
        "I need to renew the visa by Friday.",
    ], "How many days ago was the half-marathon?")
    assert "Date: 2026-02-10 (Tuesday) [27 days ago]" in text
    assert "(planned for 2026-02-13, 24 days ago: probably happened)" in line_with(text, "fly to Denver on Friday")
    question = line_with(text, "cheaper next Friday")
    assert "(meaning 2026-02-13, 24 days ago)" in question and "probably" not in question
    expiry = line_with(text, "passport expires")
    assert "(meaning 2026-03-01, 8 days ago)" in expiry and "probably" not in expiry
    assert "(meaning 2026-02-08, 29 days ago)" in line_with(text, "half-marathon last Sunday")
    deadline = line_with(text, "renew the visa by Friday")
    assert "(meaning 2026-02-13, 24 days ago)" in deadline and "probably" not in deadline
    assert text.count("probably happened") == 1 + READING_RULES.count("probably happened")
    await om.aclose()


async def test_only_a_passed_plan_is_marked_in_a_japanese_log() -> None:
    om = memory()
    text = await context_after(om, [
        "金曜日にデンバーへ行きます。",
        "パスポートは明日で期限切れです。",
        "昨日ハーフマラソンを走りました。",
        "金曜日までにビザを更新します。",
    ], "ハーフマラソンは何日前でしたか？")
    assert "Date: 2026-02-10 (Tuesday) [27 days ago]" in text
    assert "(planned for 2026-02-13, 24 days ago: probably happened)" in line_with(text, "デンバーへ行きます")
    expiry = line_with(text, "期限切れ")
    assert "(meaning 2026-02-11, 26 days ago)" in expiry and "probably" not in expiry
    assert "(meaning 2026-02-09, 28 days ago)" in line_with(text, "ハーフマラソンを走りました")
    deadline = line_with(text, "ビザを更新します")
    assert "(meaning 2026-02-13, 24 days ago)" in deadline and "probably" not in deadline
    await om.aclose()


def render(log: str, today: date = TODAY) -> str:
    group = ObservationGroup(id="og", thread_id="t", start_id="m1", end_id="m2", text=log)
    text = render_context([group], current_task=None, suggested_response=None, today=today)
    assert text is not None
    return text


def test_marks_and_ages_on_lines_as_a_real_observer_writes_them() -> None:
    text = render(
        "Date: 2026-02-10 (Tuesday)\n"
        "* 🟡 (09:00) User asked whether flights on 2026-02-20 are cheaper (meaning 2026-02-20)\n"
        "* 🟡 (09:05) Assistant found a United flight departing 2026-02-20 for 412 USD; not booked\n"
        "* 🔴 (09:10) User's passport expires 2026-03-01 (meaning 2026-03-01)\n"
        "* 🔴 (09:12) User must file the tax return by 2026-03-02 (meaning 2026-03-02)\n"
        "* 🔴 (09:15) User sees the dentist on Friday (planned for 2026-02-13)\n"
        "* 🔴 (09:20) ✅ User booked the ryokan for the trip (planned for 2026-02-27)\n"
        "* 🔴 (09:25) User flies to Osaka (planned for 2026-03-20)\n"
        "* 🔴 (09:30) ユーザーは2026-02-20に京都へ行く予定（planned for 2026-02-20）\n"
        "* 🔴 (09:35) ユーザーのセールは2026-02-20まで（meaning 2026-02-20）\n"
        "* 🔴 (09:40) 사용자는 부산에 갈 예정 (planned for 2026-02-21)\n"
        "* 🔴 (09:45) 用户的签证在2026-02-22到期（meaning 2026-02-22）")
    assert "(planned for 2026-02-13, 24 days ago: probably happened)" in text
    assert "（planned for 2026-02-20, 17 days ago: probably happened）" in text
    assert "（meaning 2026-02-20, 17 days ago）" in text
    assert "(planned for 2026-02-21, 16 days ago: probably happened)" in text  # Korean
    assert "2026-02-22 [15 days ago]到期（meaning 2026-02-22, 15 days ago）" in text  # Chinese: no mark
    assert "(planned for 2026-03-20, in 11 days)" in text
    assert "(planned for 2026-02-27, 10 days ago)" in text, "a ✅ line is done, not probably done"
    assert "departing 2026-02-20 [17 days ago] for 412 USD" in text
    assert "(meaning 2026-03-02, 7 days ago)" in text
    rules = text.split("<observations>", 1)[0]
    assert "a deadline, an expiry date, an offer or a price that lies behind us does not mean" in rules
    log = text.split("<observations>", 1)[1]
    assert log.count("probably happened") == 3
    for never in ("whether flights", "United flight", "passport", "tax return", "セール", "到期"):
        assert "probably" not in line_with(log, never)


def test_ages_are_exact_days_within_ninety_and_gaps_too() -> None:
    assert [age_label(TODAY - timedelta(days=n), TODAY) for n in (0, 1, 2, 14, 27, 40, 89, 90)] == [
        "today", "yesterday", "2 days ago", "14 days ago", "27 days ago", "40 days ago", "89 days ago",
        "90 days ago"]
    assert age_label(TODAY - timedelta(days=142), TODAY) == "142 days ago, about 4 months"
    assert age_label(TODAY - timedelta(days=800), TODAY) == "800 days ago, about 2 years"
    assert [age_label(TODAY + timedelta(days=n), TODAY) for n in (1, 4, 21)] == ["tomorrow", "in 4 days",
                                                                                 "in 21 days"]
    assert gap_line(date(2026, 2, 1), date(2026, 3, 2)) == "[29 days later]"
    assert gap_line(date(2025, 10, 1), date(2026, 3, 2)) == "[152 days later, about 5 months]"
    assert "whole calendar days" in READING_RULES


# ------------------------------------------------------------------ 3: weekdays


def test_header_weekdays_are_computed_whatever_the_model_wrote() -> None:
    text = render("Date: 2026-02-11 (Friday)\n* 🔴 (09:00) User ran 5 km\n\n"
                  "Date: 2026-02-12 (木曜日)\n* 🔴 (09:00) ユーザーは5キロ走った\n\n"
                  "Date: 2026-02-14\n* 🔴 (09:00) User rested")
    assert "Date: 2026-02-11 (Wednesday) [26 days ago]" in text
    assert "Friday" not in text.split("<observations>", 1)[1]
    assert "Date: 2026-02-12 (Thursday) [25 days ago]" in text and "木曜日" not in text
    assert "Date: 2026-02-14 (Saturday) [23 days ago]" in text


def test_transcript_stamps_carry_the_weekday() -> None:
    lines = format_transcript([(HumanMessage("I ran last Tuesday."), WRITTEN)]).text.splitlines()
    assert lines == ["[2026-02-10 Tuesday 09:00] User: I ran last Tuesday."]
    reply = str(ScriptedObserverModel().invoke(build_observer_messages(Transcript(text=lines[0]))).content)
    assert "(meaning 2026-02-03)" in reply and "Date: 2026-02-10 (Tuesday)" in reply


# ------------------------------------------------------------------ 4: one clock


async def test_replies_stamped_in_utc_never_give_a_header_after_today() -> None:
    model = ScriptedObserverModel()
    om = memory(model)
    evening = datetime(2026, 3, 8, 19, 5, tzinfo=EST)  # 00:05 UTC on the 9th
    history: list[BaseMessage] = [
        stamped(HumanMessage("Remind me to call the bank tomorrow.", id="h1"), evening),
        stamped(AIMessage("Noted: call the bank.", id="a1"), (evening + timedelta(minutes=1)).astimezone(timezone.utc)),
    ]
    await om.aprocess("t", history)
    await om.aobserve("t")
    history.append(stamped(HumanMessage("Anything else for today?", id="h2"), evening + timedelta(minutes=25)))
    context = await om.aprocess("t", history)
    assert context.system_message is not None
    text = str(context.system_message.content)
    assert "Today is Sunday, 2026-03-08." in text
    assert "[tomorrow]" not in text and "Date: 2026-03-09" not in text
    assert "Date: 2026-03-08 (Sunday) [today]" in text
    prompt = next(str(c[-1].content) for c in model.calls if OBSERVER_PROMPT_MARKER in str(c[0].content))
    assert "[2026-03-08 Sunday 19:06] Assistant: Noted" in prompt
    assert "Current date and time: 2026-03-08 19:06" in prompt
    await om.aclose()


async def test_time_gap_markers_use_the_conversations_clock() -> None:
    om = memory(temporal_markers=True)
    history: list[BaseMessage] = [stamped(HumanMessage("hi", id="h1"), WRITTEN),
                                  stamped(AIMessage("hello", id="a1"), WRITTEN.astimezone(timezone.utc))]
    await om.aprocess("t", history)
    history.append(stamped(HumanMessage("back again", id="h2"), WRITTEN + timedelta(hours=14)))
    context = await om.aprocess("t", history)
    marker = next(str(m.content) for m in context.messages if "<time-gap>" in str(m.content))
    assert marker == "<time-gap>14 hours later: Tue 10 Feb 2026 23:00 UTC-05:00</time-gap>"
    await om.aclose()


# ------------------------------------------------------------------ 5: every language


def test_the_language_rules_keep_iso_dates_and_the_suffixes() -> None:
    japanese = language_line("[2026-02-10 Tuesday 09:00] User: 金曜日に京都へ行きます。", what="the observations")
    assert japanese is not None and "held in Japanese" in japanese
    assert "YYYY-MM-DD" in japanese and "(planned for YYYY-MM-DD)" in japanese and "(meaning YYYY-MM-DD)" in japanese
    assert "年" not in japanese and "月" not in japanese
    french = language_line("[2026-02-10 Tuesday 09:00] User: Je voudrais réserver un hôtel pour mon voyage "
                           "à Lyon avec ma femme, nous arrivons le 12 mars et le budget est de 300 euros.",
                           what="the observations")
    assert french is not None and "held in French" in french and "(planned for YYYY-MM-DD)" in french
    assert language_line("I would like to book a hotel for my trip to Lyon with my wife, we arrive on the "
                         "12th and the budget is 300 euros.", what="the observations") is None
    system = observer_system_prompt()
    assert "dates written as YYYY-MM-DD" in system and '"(planned for' in system


# ------------------------------------------------------------------ 8: smaller truths


def test_the_update_cue_is_was_in_parentheses() -> None:
    assert '"(was ...)"' in READING_RULES and '"was ..."' not in READING_RULES


def test_no_note_on_ages_without_a_log() -> None:
    only_memory = render_context([], current_task=None, suggested_response=None,
                                 extra_sections=["<working-memory>\nname: Maya\n</working-memory>"], today=TODAY)
    assert only_memory is not None and "Today is Monday, 2026-03-09." in only_memory
    assert "Ages in the log" not in only_memory
    assert "Ages in the log count whole days from this date." in render("Date: 2026-03-01\n* 🔴 (09:00) x")


async def test_a_thread_scoped_log_is_this_conversation_and_a_resource_scoped_one_names_the_others() -> None:
    assert "this conversation" in READING_RULES and "conversations" not in READING_RULES
    om = memory(scope="resource")
    await om.aprocess("t", [stamped(HumanMessage("I will fly to Denver on Friday.", id="h0"), WRITTEN)],
                      resource_id="maya")
    await om.aobserve("t", resource_id="maya")
    context = await om.aprocess("t", [stamped(HumanMessage("When do I fly?", id="q"), READ)], resource_id="maya")
    assert context.system_message is not None
    text = str(context.system_message.content)
    assert "and the user's other conversations with you" in text.split("How to read your memory", 1)[0]
    assert text.startswith(om_context.READING_RULES_RESOURCE)
    await om.aclose()


async def test_recall_guidance_says_to_recall_when_in_doubt() -> None:
    om = memory(retrieval=True)
    text = await context_after(om, ["My locker code is 4417."], "What is my locker code?")
    assert "When in doubt about an exact detail, recall it" in text
    await om.aclose()


@pytest.mark.parametrize("language", ["en", "ja"])
async def test_tool_results_reach_the_observer_capped_in_tokens(language: str) -> None:
    model = ScriptedObserverModel()
    om = ObservationalMemory(InMemoryStore(), model=model, token_counter="tiktoken",
                             observation={"message_tokens": 100_000, "buffer_tokens": False},
                             reflection={"observation_tokens": 400_000})
    word, times = ("row ", 3_000) if language == "en" else ("行データ ", 1_000)
    result = word * times  # about 3,000 tokens: well over 2,000 characters, well under 5,000 tokens
    args = {"query": word * 300}  # over 600 characters, under 2,000 tokens
    huge = word * 20_000
    history: list[BaseMessage] = [
        HumanMessage("load it", id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "load", "args": args, "id": "c1", "type": "tool_call"}]),
        ToolMessage(result, tool_call_id="c1", id="t1"),
        AIMessage("", id="a2", tool_calls=[{"name": "load", "args": {}, "id": "c2", "type": "tool_call"}]),
        ToolMessage(huge, tool_call_id="c2", id="t2"),
        AIMessage("loaded", id="a3"), HumanMessage("thanks", id="h2")]
    await om.aprocess("t", history)
    await om.aobserve("t")
    text = next(str(c[-1].content) for c in model.calls if OBSERVER_PROMPT_MARKER in str(c[0].content))
    assert result.strip() in text and args["query"].strip() in text, "under the caps: shown whole"
    cut = [line for line in text.splitlines() if line.startswith("[") and "Tool load returned" in line][1]
    shown = cut.split("returned: ", 1)[1].split(" … [cut at", 1)[0]
    assert "[cut at 5000 tokens;" in cut
    assert 4_900 <= get_token_counter("tiktoken").count_text(shown) <= 5_000
    await om.aclose()
