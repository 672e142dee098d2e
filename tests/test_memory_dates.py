"""Memory a real model can use (issue 28): the context knows "now", the Observer keeps what
questions need and sees what the last cycle left, the Reflector's ladder, the conversation's language."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_recording import RecordingModel, observer_reply

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.context import READING_RULES, render_context
from langchain_om.foundation.log_dates import PAST_PLAN_MARK, age_label
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.model_calls.observer import LEFT_OUT_MARKER, build_observer_messages
from langchain_om.model_calls.reflector import MAX_COMPRESSION_LEVEL, build_reflector_messages
from langchain_om.model_calls.transcript import Transcript
from langchain_om.store.base import ObservationGroup
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedObserverModel, condense_log

JST = timezone(timedelta(hours=9))

DAY_ONE = """Date: 2026-03-02 (Monday)
* 🔴 (19:05) User and partner Sam plan a Japan trip, April 3 to April 13 (meaning 2026-04-03)
* 🔴 (19:20) User will send the visa form on Wednesday (planned for 2026-03-04)
* 🔴 (19:30) ✅ User booked the ryokan Hanamuki for 2026-03-03"""
DAY_TWO = """Date: 2026-03-07 (Saturday)
* 🔴 (10:00) User's budget is now 8,000 CAD (was 9,000 CAD)"""


def groups() -> list[ObservationGroup]:
    return [ObservationGroup(id="og_1", thread_id="t", start_id="m1", end_id="m4", text=DAY_ONE),
            ObservationGroup(id="og_2", thread_id="t", start_id="m5", end_id="m6", text=DAY_TWO)]


GOLDEN_LOG = """<observations>
<observation-group id="og_1" range="m1:m4">
Date: 2026-03-02 (Monday) [7 days ago]
* 🔴 (19:05) User and partner Sam plan a Japan trip, April 3 to April 13 (meaning 2026-04-03, in 25 days)
* 🔴 (19:20) User will send the visa form on Wednesday (planned for 2026-03-04, 5 days ago: probably happened)
* 🔴 (19:30) ✅ User booked the ryokan Hanamuki for 2026-03-03 [6 days ago]
</observation-group>

<observation-group id="og_2" range="m5:m6">
[5 days later]
Date: 2026-03-07 (Saturday) [2 days ago]
* 🔴 (10:00) User's budget is now 8,000 CAD (was 9,000 CAD)
</observation-group>
</observations>"""


def test_golden_context_for_a_multi_day_log_at_a_fixed_now() -> None:
    text = render_context(groups(), current_task="Finish the packing list.", suggested_response="Offer a list.",
                          static_sections=["<recall-instructions>\nuse recall\n</recall-instructions>"],
                          extra_sections=["<working-memory>\nname: Maya\n</working-memory>"],
                          today=date(2026, 3, 9))
    assert text is not None
    assert GOLDEN_LOG in text
    # static first (reading rules, recall guidance), then today's date, the log, then the volatile parts
    order = [text.index(READING_RULES), text.index("<recall-instructions>"),
             text.index("Today is Monday, 2026-03-09."), text.index("<observations>"),
             text.index("<working-memory>"), text.index("<current-task>"), text.index("<suggested-response>")]
    assert order == sorted(order)
    assert text.startswith(READING_RULES)
    for rule in ("the newer one holds", "personalise", PAST_PLAN_MARK, "newest user message decides",
                 "say so plainly instead of guessing", "<time-gap>", "[5 days later]",
                 "(meaning 2026-03-13, 4 days ago)"):
        assert rule in text


def test_ages_and_gaps() -> None:
    today = date(2026, 3, 9)
    assert [age_label(today - timedelta(days=n), today) for n in (0, 1, 3, 13, 14, 40, 90, 800)] == [
        "today", "yesterday", "3 days ago", "13 days ago", "14 days ago", "40 days ago", "90 days ago",
        "800 days ago, about 2 years"]
    assert [age_label(today + timedelta(days=n), today) for n in (1, 4, 14)] == ["tomorrow", "in 4 days",
                                                                                 "in 14 days"]
    # the same date renders the same bytes; the next day changes the ages
    monday = render_context(groups(), current_task=None, suggested_response=None, today=today)
    assert monday == render_context(groups(), current_task=None, suggested_response=None, today=today)
    tuesday = render_context(groups(), current_task=None, suggested_response=None, today=today + timedelta(days=1))
    assert tuesday is not None and "[3 days ago]" in tuesday and "[8 days ago]" in tuesday


def stamped(message: BaseMessage, when: datetime) -> BaseMessage:
    message.response_metadata = {TIMESTAMP_KEY: when.isoformat()}
    return message


async def seeded(clock: datetime) -> ObservationalMemory:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), clock=lambda: clock,
                             observation={"message_tokens": 30_000, "buffer_tokens": False},
                             reflection={"observation_tokens": 40_000})
    record = await om.aget_record("t")
    updated = record.model_copy(deep=True)
    updated.groups = groups()
    updated.metadata["current_task"] = "Plan the trip."
    await om.store.acommit_record(updated, expected_version=record.version)
    return om


async def test_steps_of_one_day_share_the_prefix_and_the_next_day_changes_it() -> None:
    wall = datetime(2031, 1, 1, tzinfo=timezone.utc)  # the clock is far off: messages carry their own time
    om = await seeded(wall)
    morning = datetime(2026, 3, 9, 8, 0, tzinfo=JST)
    history: list[BaseMessage] = [stamped(HumanMessage("What is my budget now?", id="h1"), morning)]
    first = await om.aprocess("t", history)
    history += [stamped(AIMessage("8,000 CAD.", id="a1"), morning + timedelta(minutes=1)),
                stamped(HumanMessage("And when do we fly?", id="h2"), morning + timedelta(hours=9))]
    second = await om.aprocess("t", history)
    history += [stamped(AIMessage("April 3.", id="a2"), morning + timedelta(hours=9, minutes=1)),
                stamped(HumanMessage("Good morning!", id="h3"), morning + timedelta(days=1))]
    third = await om.aprocess("t", history)
    texts = [str(c.system_message.content) for c in (first, second, third) if c.system_message is not None]
    assert len(texts) == 3
    assert texts[0] == texts[1], "two steps of one day: byte-identical system message"
    assert "Today is Monday, 2026-03-09." in texts[0] and "2031" not in texts[0]
    assert "Date: 2026-03-07 (Saturday) [2 days ago]" in texts[0]
    assert "Today is Tuesday, 2026-03-10." in texts[2] and "Date: 2026-03-07 (Saturday) [3 days ago]" in texts[2]
    # the reading rules stay the cacheable head; the change starts at the date line
    common = next(i for i, (a, b) in enumerate(zip(texts[1], texts[2], strict=False)) if a != b)
    assert texts[2][:common].startswith(READING_RULES) and texts[2][:common].endswith("\n\nToday is ")
    await om.aclose()


async def test_the_clock_dates_a_step_whose_messages_carry_no_time() -> None:
    om = await seeded(datetime(2026, 3, 20, 12, 0, tzinfo=timezone.utc))
    context = await om.aprocess("t", [HumanMessage("hello", id="h1")])
    assert context.system_message is not None
    text = str(context.system_message.content)
    assert "Today is Friday, 2026-03-20." in text and "Date: 2026-03-07 (Saturday) [13 days ago]" in text
    await om.aclose()


async def test_the_observer_sees_the_previous_hints_and_the_cut_marker() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply())
    om = ObservationalMemory(InMemoryStore(), model=model, token_counter="estimator",
                             clock=lambda: datetime(2031, 1, 1, tzinfo=timezone.utc),
                             observation={"message_tokens": 60, "buffer_tokens": False,
                                          "previous_observer_tokens": 40},
                             reflection={"observation_tokens": 100_000})
    record = await om.aget_record("t")
    updated = record.model_copy(deep=True)
    updated.groups = groups()
    updated.metadata["current_task"] = "Compare the two ryokans."
    updated.metadata["suggested_response"] = "Ask which onsen town they prefer."
    await om.store.acommit_record(updated, expected_version=record.version)
    start = datetime(2026, 3, 9, 9, 0, tzinfo=JST)
    history: list[BaseMessage] = []
    for turn in range(6):
        history += [stamped(HumanMessage(f"Turn {turn}: tell me more about onsen towns near Kanazawa please",
                                         id=f"h{turn}"), start + timedelta(minutes=2 * turn)),
                    stamped(AIMessage(f"Reply {turn}: Yamanaka and Yamashiro are both close by bus.",
                                      id=f"a{turn}"), start + timedelta(minutes=2 * turn + 1))]
        await om.aprocess("t", history)
        if model.calls:
            break
    assert model.calls, "the Observer ran"
    prompt = str(model.calls[0]["messages"][1].content)
    assert "<current-task>\nCompare the two ryokans.\n</current-task>" in prompt
    assert "<suggested-response>\nAsk which onsen town they prefer.\n</suggested-response>" in prompt
    assert "update these; do not restart them" in prompt
    # its "now" is the newest observed message's time on that message's own clock, never the wall clock
    assert "Current date and time: 2026-03-09 09:" in prompt and "2031" not in prompt
    assert LEFT_OUT_MARKER in prompt and "budget is now 8,000 CAD" in prompt
    marker = next(line for line in prompt.splitlines() if line.startswith(LEFT_OUT_MARKER))
    assert "lines, about" in marker and "tokens" in marker
    await om.aclose()


JAPANESE = Transcript(text=(
    "[2026-03-02 Monday 19:05] User: 来週の金曜日に京都へ行きます。予算は9万円です。\n"
    "[2026-03-02 Monday 19:06] Assistant: 了解しました。嵐山の旅館「花むき」をおすすめします。\n"
    "[2026-03-02 Monday 19:10] User: 花むきを予約しました！"))


def test_a_japanese_conversation_is_observed_and_reflected_in_japanese() -> None:
    observer = build_observer_messages(JAPANESE, now=datetime(2026, 3, 2, 19, 10))
    human = str(observer[1].content)
    assert "held in Japanese: write the observations in Japanese" in human
    english = build_observer_messages(Transcript(text="[2026-03-02 Monday 19:05] User: I fly to Kyoto next Friday."))
    assert "held in" not in str(english[1].content)
    assert "conversation's own language" in str(observer[0].content)
    # the scripted Observer keeps the language, resolves the date at the line end and marks what was done
    reply = ScriptedObserverModel().invoke(observer)
    log = str(reply.content).split("<observations>\n", 1)[1].split("\n</observations>", 1)[0]
    assert "ユーザー: 来週の金曜日に京都へ行きます。予算は9万円です。 (planned for 2026-03-06)" in log
    assert "✅ ユーザー: 花むきを予約しました！" in log and "アシスタント" in log
    assert "User said" not in log and "Assistant" not in log
    # the Reflector is asked for Japanese at every level, and its scripted stand-in keeps every 🔴 note
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        reflector = build_reflector_messages(log, level=level)
        assert "held in Japanese: write the consolidated log in Japanese" in str(reflector[1].content)
        condensed = condense_log(log, level)
        assert len(condensed) <= len(log)
        assert "9万円" in condensed and "花むき" in condensed


def test_scripted_observer_dates_relative_expressions_and_marks_done_things() -> None:
    transcript = Transcript(text=(
        "[2026-03-02 Monday 19:05] User: I will send the visa form tomorrow.\n"
        "[2026-03-02 Monday 19:07] User: We ran a 10k 3 days ago.\n"
        "[2026-03-02 Monday 19:09] User: I booked the flights, 3,480 CAD.\n"
        "[2026-03-02 Monday 19:11] User: Have you booked the ryokan?"))
    reply = str(ScriptedObserverModel().invoke(build_observer_messages(transcript)).content)
    assert "User said: I will send the visa form tomorrow. (planned for 2026-03-03)" in reply
    assert "User said: We ran a 10k 3 days ago. (meaning 2026-02-27)" in reply
    assert "✅ User said: I booked the flights, 3,480 CAD." in reply
    assert "✅ User said: Have you booked" not in reply and "User said: Have you booked the ryokan?" in reply


async def test_the_agent_model_reads_the_date_and_ages_through_create_agent() -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
    from langchain_om.testing import ScriptedAgentModel

    om = await seeded(datetime(2031, 1, 1, tzinfo=timezone.utc))
    model = ScriptedAgentModel()
    agent = create_agent(model, [], system_prompt="You are a travel assistant.",
                         middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    asked = datetime(2026, 3, 9, 21, 0, tzinfo=JST)
    await agent.ainvoke({"messages": [stamped(HumanMessage("How many days ago did we book?", id="q"), asked)]},
                        config)
    system = model.calls[-1][0]
    text = str(system.content)
    assert sum(m.type == "system" for m in model.calls[-1]) == 1
    assert text.startswith("You are a travel assistant.\n\n" + READING_RULES)
    assert "Today is Monday, 2026-03-09." in text and "Date: 2026-03-02 (Monday) [7 days ago]" in text
    assert "(planned for 2026-03-04, 5 days ago: probably happened)" in text and "2031" not in text
    await om.aclose()
