"""Issue 46, item 1: a model reply becomes memory only after it is checked.

A real small model (Qwen2.5-Coder 0.5B/1.5B through llama.cpp) answered OM's Observer prompt with
the transcript echoed back under a header of its own, with "Good night!", with "I'm sorry, but I
can't assist with that.", with the prompt's template, and with the prompt's instructions copied
into <current-task> and <suggested-response>. Those replies are recorded in
``tests/data/local_model_replies.jsonl`` (copied from the run's log); the tests here replay them
through ``aprocess`` and check that nothing of the kind is stored, that what can be repaired for
certain is repaired, and that a reply that is not observations is asked for once more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from langchain_om import ObservationalMemory
from langchain_om.cli.demo import load_conversation
from langchain_om.foundation.events import OMEvent
from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.model_calls.reflector import REFLECTOR_PROMPT_MARKER
from langchain_om.model_calls.replies import REPLY_TALLY
from langchain_om.model_calls.reply_checks import UnusableReply, check_observations, check_reflection, transcript_dates
from langchain_om.store.ids import implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedChatModel, ScriptedObserverModel

RECORDED = {row["name"]: row for row in map(json.loads, (Path(__file__).parent / "data" /
                                                          "local_model_replies.jsonl").read_text("utf-8").splitlines())}

GOOD = """<observations>
Date: 2026-03-02 (Monday)
* 🔴 (19:05) User and partner Sam plan about ten days in Japan in April, mostly for cherry blossoms.
* 🟡 (19:05) Assistant offered to keep a running plan and asked for departure city, dates and budget.
</observations>
<current-task>Collecting the basics of the Japan trip.</current-task>
<suggested-response>Ask where they fly from and their budget.</suggested-response>"""

GOOD_JA = """<observations>
Date: 2026-03-02 (Monday)
* 🔴 (19:05) ユーザーはパートナーのサムと4月に約10日間、桜を見に日本へ行く予定。
</observations>"""


def make_om(observer: Any, reflector: Any = None, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"model": observer, "message_tokens": 60, "buffer_tokens": False},
        "reflection": {"model": reflector or ScriptedObserverModel(), "observation_tokens": 50_000},
        "token_counter": "estimator",
        "failure_policy": {"backoff": 1, "max_backoff": 5},
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), **options)


def demo_start(count: int = 3) -> list[BaseMessage]:
    return load_conversation(id_prefix="demo")[:count]


def japanese_start() -> list[BaseMessage]:
    stamp = {TIMESTAMP_KEY: "2026-03-02T19:05:00-05:00"}
    return [HumanMessage("こんにちは！パートナーのサムと4月に10日間ほど日本へ行きたいです。桜が目当てです。", id="j0",
                         response_metadata=stamp),
            AIMessage("いいですね。出発地、日程、予算を教えてください。", id="j1",
                      response_metadata={TIMESTAMP_KEY: "2026-03-02T19:06:00-05:00"}),
            HumanMessage("トロント発です。予算は2人で9,000カナダドル。", id="j2",
                         response_metadata={TIMESTAMP_KEY: "2026-03-02T19:07:00-05:00"})]


def of(events: list[OMEvent], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]


async def observe_once(om: ObservationalMemory, messages: list[BaseMessage]) -> list[OMEvent]:
    ctx = await om.aprocess("t1", messages)
    return list(ctx.events)


# ------------------------------------------------------------------ recorded real replies, end to end


@pytest.mark.parametrize("name", ["transcript_echo", "greeting", "refusal", "template_echo"])
async def test_a_recorded_reply_that_is_not_observations_is_never_stored(name: str) -> None:
    observer = ScriptedChatModel(responses=[RECORDED[name]["reply"]])
    om = make_om(observer)
    events = await observe_once(om, demo_start())
    assert len(observer.calls) == 2, "a reply that is not observations is asked for once more, like a loop"
    record = await om.aget_record("t1")
    assert record.groups == [] and record.observations == ""
    failed = of(events, "data-om-observation-failed")
    assert failed, "the failure event says the cycle failed"
    assert "refused 2 times" in failed[0].data.error
    assert record.current_task is None and record.suggested_response is None


async def test_the_transcript_echo_is_named_as_such() -> None:
    om = make_om(ScriptedChatModel(responses=[RECORDED["transcript_echo"]["reply"]]))
    events = await observe_once(om, demo_start())
    error = of(events, "data-om-observation-failed")[0].data.error
    assert "transcript echoed back" in error and "[2026-03-02 19:27] User: Hi!" in error


async def test_the_agents_part_played_is_refused_tagged_or_not() -> None:
    """The 0.5B model answered as the assistant ("Sure, I'd be happy to help ... 1. **Create a
    Calendar**"); its numbered lines look like bullets to the parser."""
    played = RECORDED["agent_roleplay"]["reply"]
    for reply in (played, f"<observations>\n{played}\n</observations>"):
        observer = ScriptedChatModel(responses=[reply])
        om = make_om(observer)
        events = await observe_once(om, demo_start())
        assert len(observer.calls) == 2 and (await om.aget_record("t1")).groups == []
        error = of(events, "data-om-observation-failed")[0].data.error
        assert "the assistant's part played" in error or "not observation lines" in error
    observer = ScriptedChatModel(responses=["もちろんです！旅行の計画をお手伝いします。まずは予算を決めましょう。"])
    om = make_om(observer)
    events = await observe_once(om, japanese_start())
    assert "the assistant's part played" in of(events, "data-om-observation-failed")[0].data.error


async def test_a_recorded_refusal_is_retried_and_the_good_second_reply_observed() -> None:
    for name in ("refusal", "greeting", "transcript_echo"):
        observer = ScriptedChatModel(responses=[RECORDED[name]["reply"], GOOD])
        om = make_om(observer)
        events = await observe_once(om, demo_start())
        assert len(observer.calls) == 2, name
        assert of(events, "data-om-observation-end") and not of(events, "data-om-observation-failed"), name
        record = await om.aget_record("t1")
        assert "cherry blossoms" in record.observations and "Good night" not in record.observations, name


async def test_instructions_copied_into_the_hints_are_dropped_and_the_observations_kept() -> None:
    """The 0.5B model's reply: one real observation line, then the prompt's own sentences for
    <current-task> and <suggested-response>; on main both were stored and shown to the agent."""
    om = make_om(ScriptedChatModel(responses=[RECORDED["instruction_echo_hints"]["reply"]]))
    await observe_once(om, demo_start())
    record = await om.aget_record("t1")
    assert "My partner Sam" in record.observations
    assert record.current_task is None and record.suggested_response is None
    ctx = await om.aprocess("t1", demo_start(5))
    system = str(ctx.system_message.content) if ctx.system_message else ""
    assert "in one or two sentences" not in system and "How the assistant should go on" not in system


async def test_the_template_copied_back_is_named_and_a_refusal_as_title_dropped() -> None:
    om = make_om(ScriptedChatModel(responses=[RECORDED["template_echo"]["reply"]]))
    events = await observe_once(om, demo_start())
    assert "the reply template copied back" in of(events, "data-om-observation-failed")[0].data.error
    titled = GOOD + "\n<thread-title>I'm sorry, but I can't assist with that.</thread-title>"
    observer = ScriptedChatModel(responses=[titled])
    om = make_om(observer, observation={"model": observer, "message_tokens": 60, "buffer_tokens": False,
                                        "thread_title": True})
    events = await observe_once(om, demo_start())
    assert of(events, "data-om-observation-end")
    assert not [e for e in events if e.type == "data-om-thread-update"], "a refusal never becomes the title"
    thread = await om.store.aget_thread(implicit_resource("t1"), "t1")
    assert thread is None or not thread.title


async def test_a_header_of_its_own_and_missing_marks_are_repaired() -> None:
    reply = ("<observations>\nDate: 2026-03-02, Time: 19:27\n"
             "* (19:05) User and Sam plan ten days in Japan in April for cherry blossoms.\n"
             "- Assistant asked for the departure city and budget.\n</observations>")
    before = REPLY_TALLY["observer:repaired"]
    om = make_om(ScriptedChatModel(responses=[reply]))
    await observe_once(om, demo_start())
    record = await om.aget_record("t1")
    assert record.groups, "a certain repair keeps the reply"
    text = record.groups[0].text
    assert text.splitlines()[0] == "Date: 2026-03-02 (Monday)"
    assert "* 🟡 (19:05) User and Sam plan" in text and "* 🟡 Assistant asked" in text
    assert "Time: 19:27" not in text
    assert REPLY_TALLY["observer:repaired"] == before + 1


async def test_japanese_headers_and_marks_are_repaired_and_a_japanese_refusal_retried() -> None:
    reply = ("<observations>\nDate: 2026年3月2日\n* (19:05) ユーザーはサムと4月に日本旅行を計画している。\n"
             "</observations>")
    om = make_om(ScriptedChatModel(responses=[reply]))
    await observe_once(om, japanese_start())
    text = (await om.aget_record("t1")).groups[0].text
    assert text == "Date: 2026-03-02 (Monday)\n* 🟡 (19:05) ユーザーはサムと4月に日本旅行を計画している。"

    refusal = "申し訳ありませんが、そのご依頼にはお手伝いできません。"
    observer = ScriptedChatModel(responses=[refusal, GOOD_JA])
    om = make_om(observer)
    events = await observe_once(om, japanese_start())
    assert len(observer.calls) == 2 and of(events, "data-om-observation-end")
    assert "サム" in (await om.aget_record("t1")).observations

    om = make_om(ScriptedChatModel(responses=[refusal]))
    events = await observe_once(om, japanese_start())
    assert "a refusal" in of(events, "data-om-observation-failed")[0].data.error


async def test_a_reply_in_the_transcripts_own_shape_is_refused_in_japanese_too() -> None:
    echo = ("<observations>\nDate: 2026-03-02\n[2026-03-02 19:05] User: こんにちは！パートナーのサムと4月に日本へ。\n"
            "[2026-03-02 19:06] Assistant: いいですね。おやすみなさい！\n</observations>")
    om = make_om(ScriptedChatModel(responses=[echo]))
    events = await observe_once(om, japanese_start())
    assert (await om.aget_record("t1")).groups == []
    assert "transcript echoed back" in of(events, "data-om-observation-failed")[0].data.error


# ------------------------------------------------------------------ the checks themselves


def test_lines_without_a_resolved_date_are_refused_when_the_transcript_spans_days() -> None:
    with pytest.raises(UnusableReply, match="without a resolved 'Date:' header"):
        check_observations("* 🔴 User likes tea", dates=["2026-03-02", "2026-03-03"])
    with pytest.raises(UnusableReply, match="without a resolved 'Date:' header"):
        check_observations("Date: today\n* 🔴 User likes tea", dates=["2026-03-02"])
    text, warnings = check_observations("* 🔴 User likes tea", dates=["2026-03-02"])
    assert text == "Date: 2026-03-02 (Monday)\n* 🔴 User likes tea" and warnings


def test_an_agent_answer_without_tags_or_dates_is_not_made_into_observations() -> None:
    """The 0.5B model's answer as the agent ("1. **Create a Calendar**: ...") has numbered lines the
    parser takes for bullets; with no tag and no header nothing about it is certain."""
    with pytest.raises(UnusableReply):
        check_observations("1. **Create a Calendar**: Use a calendar app.", dates=["2026-03-02"], tagged=False)


def test_prose_between_notes_and_instructions_copied_into_the_log() -> None:
    with pytest.raises(UnusableReply, match="not observation lines"):
        check_observations("Date: 2026-03-02\nGot it! Let's plan the trip step by step.\n* 🔴 User likes tea")
    prompt = "Mark what was completed with ✅: \"✅ User booked the ryokan in Hakone for 2026-04-08\"."
    text, warnings = check_observations(
        "Date: 2026-03-02\n* 🔴 (19:05) User likes tea\n* ✅ User booked the ryokan in Hakone for 2026-04-08",
        instructions=prompt)
    assert "ryokan" not in text and "User likes tea" in text
    assert any("copied from OM's instructions" in w for w in warnings)


LOG = """Date: 2026-03-02 (Monday)
* 🔴 (19:07) User flies from Toronto, April 3 to April 13; budget 9,000 CAD for two.
* 🔴 (19:07) User is vegetarian; Sam hurt his left knee in January.

Date: 2026-03-04 (Wednesday)
* 🔴 (20:10) User booked Air Canada nonstop at 3,480 CAD.
* 🟡 (20:12) Assistant suggested Hakone for the onsen night."""


def test_a_reflection_that_lost_the_dates_or_most_facts_is_refused() -> None:
    with pytest.raises(UnusableReply, match="lost the log's dates"):
        check_reflection(LOG, "* 🔴 User flies from Toronto April 3-13, 9,000 CAD, booked Air Canada 3,480 CAD.")
    with pytest.raises(UnusableReply, match="newest day"):
        check_reflection(LOG, "Date: 2026-03-02 (Monday)\n* 🔴 Toronto, April 3-13, 9,000 CAD, Air Canada 3,480.")
    with pytest.raises(UnusableReply, match="most of the user's facts"):
        check_reflection(LOG, "Date: 2026-03-04 (Wednesday)\n* 🔴 User is planning a trip.")
    check_reflection(LOG, "Date: 2026-03-02 (Monday)\n* 🔴 User: Toronto, April 3-13, 9,000 CAD, vegetarian; "
                          "Sam's left knee (January).\n\nDate: 2026-03-04 (Wednesday)\n"
                          "* 🔴 Booked Air Canada nonstop 3,480 CAD.")


def test_a_japanese_reflection_that_lost_the_names_and_numbers_is_refused() -> None:
    log = ("Date: 2026-03-02 (Monday)\n"
           "* 🔴 (19:07) ユーザーはトロントから4月3日から13日まで。予算は2人で9,000カナダドル。\n"
           "* 🔴 (19:08) サムは1月に左膝を痛めた。ユーザーはベジタリアン。")
    with pytest.raises(UnusableReply, match="most of the user's facts"):
        check_reflection(log, "Date: 2026-03-02 (Monday)\n* 🔴 ユーザーは旅行を計画中。")
    check_reflection(log, "Date: 2026-03-02 (Monday)\n"
                          "* 🔴 トロント発4月3日〜13日、予算9,000カナダドル。\n"
                          "* 🔴 サムは1月に左膝を負傷、ユーザーはベジタリアン。")


async def test_a_reflection_that_lost_the_facts_is_not_committed_end_to_end() -> None:
    def reflector(messages: list[BaseMessage]) -> str:
        assert REFLECTOR_PROMPT_MARKER in str(messages[0].content)
        return "<observations>\nDate: 2026-03-02 (Monday)\n* 🔴 User is planning a trip.\n</observations>"

    observer = ScriptedChatModel(responses=[
        "<observations>\nDate: 2026-03-02 (Monday)\n"
        + "\n".join(f"* 🔴 (19:{i:02d}) User noted booking code AB{1000 + i} for Kyoto day {i}." for i in range(30))
        + "\n</observations>"])
    om = make_om(observer, ScriptedChatModel(responses=[reflector]),
                 reflection={"model": ScriptedChatModel(responses=[reflector]), "observation_tokens": 200})
    events = await observe_once(om, demo_start())
    record = await om.aget_record("t1")
    assert record.generation_count == 0 and "AB1029" in record.observations
    failed = [e for e in of(events, "data-om-observation-failed") if e.data.operation_type == "reflection"]
    assert failed and "lost most of the user's facts" in failed[0].data.error


def test_a_reflection_cut_to_its_target_keeps_facts_in_proportion_and_passes() -> None:
    """A target can ask for half the log: the Reflector then lets the older 🔴 detail go (its
    prompt's conflict order). Facts kept in proportion to the length kept pass; the same length
    spent on generalities does not."""
    log = "Date: 2026-03-02 (Monday)\n" + "\n".join(
        f"* 🔴 (09:{i:02d}) User noted booking code AB{1000 + i} for Kyoto day {i}." for i in range(20))
    kept_half = "Date: 2026-03-02 (Monday)\n" + "\n".join(
        f"* 🔴 (09:{i:02d}) User noted booking code AB{1000 + i} for Kyoto day {i}." for i in range(10, 20))
    check_reflection(log, kept_half)
    vague = "Date: 2026-03-02 (Monday)\n" + "\n".join(
        "* 🔴 (09:00) User noted several booking codes for the Kyoto part of the trip." for _ in range(10))
    with pytest.raises(UnusableReply, match="facts"):
        check_reflection(log, vague)


def test_the_checks_read_the_transcript_stamps_the_observer_is_shown() -> None:
    """The transcript's stamps carry the weekday (issue 43): the checks must still read their dates
    (a headerless reply of a one-day transcript gets its header) and know a stamped line copied
    back as an echo. Built from ``format_transcript`` itself, so a change of the stamp shape that
    the checks do not follow fails here."""
    from langchain_om.foundation.messages import message_timestamp
    from langchain_om.model_calls.transcript import format_transcript

    stamped = [(m, message_timestamp(m)) for m in demo_start()]
    text = format_transcript([(m, t) for m, t in stamped if t is not None]).text
    assert transcript_dates(text) == {"2026-03-02"}
    repaired, _warnings = check_observations("* 🔴 (19:05) User plans ten days in Japan in April.",
                                             dates=transcript_dates(text))
    assert repaired.startswith("Date: 2026-03-02 (Monday)")
    echoed = next(line for line in text.splitlines() if line.startswith("[2026-03-02"))
    with pytest.raises(UnusableReply):
        check_observations(f"Date: 2026-03-02 (Monday)\n{echoed}\n* 🔴 (19:05) User plans a trip.")
