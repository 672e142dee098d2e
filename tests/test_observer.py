"""Observer: transcript formatting, prompt contents, tolerant parsing, previous-observation budget."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage, message_to_dict

from langchain_om.foundation.messages import TIMESTAMP_KEY
from langchain_om.model_calls.observer import (
    OBSERVER_PROMPT_MARKER,
    ObserverOutputError,
    Transcript,
    build_observer_messages,
    format_transcript,
    parse_observer_output,
    thread_label,
    truncate_previous_observations,
)
from langchain_om.store.base import StoredMessage
from langchain_om.testing import ScriptedObserverModel

T0 = datetime(2026, 12, 1, 14, 5, tzinfo=timezone.utc)  # a Tuesday

PNG = {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png", "filename": "screenshot.png"}
JPEG_URL = {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,/9j/4AAQ"}}
PDF = {"type": "file", "base64": "JVBERi0=", "mime_type": "application/pdf", "filename": "report.pdf"}


def words(text: str) -> int:
    return len(text.split())


def at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def stored(seq: int, message: BaseMessage, moment: datetime, kind: Any = "message") -> StoredMessage:
    return StoredMessage(id=f"m{seq}", thread_id="t", resource_id="r", seq=seq, data=message_to_dict(message),
                         created_at=moment, kind=kind)


# ------------------------------------------------------------------ transcript


def test_transcript_text_tool_calls_and_results() -> None:
    messages: list[tuple[BaseMessage, datetime]] = [
        (HumanMessage("Find me flights to Lisbon"), at(0)),
        (AIMessage("", tool_calls=[{"name": "search", "args": {"q": "Lisbon flights"}, "id": "c1"}]), at(1)),
        (ToolMessage("3 flights found: TP123, TP456, FR9", tool_call_id="c1"), at(1)),
        (AIMessage("I found three flights.\nThe cheapest is FR9."), at(2)),
    ]
    text = format_transcript(messages, thread_label=None).text.splitlines()
    assert text[0] == "[2026-12-01 Tuesday 14:05] User: Find me flights to Lisbon"
    assert text[1] == '[2026-12-01 Tuesday 14:06] Assistant called tool search({"q": "Lisbon flights"})'
    assert text[2] == "[2026-12-01 Tuesday 14:06] Tool search returned: 3 flights found: TP123, TP456, FR9"
    assert text[3] == "[2026-12-01 Tuesday 14:07] Assistant: I found three flights."
    assert text[4] == "  The cheapest is FR9."  # continuation lines are indented


def test_transcript_tool_error_and_long_output_truncated() -> None:
    messages: list[tuple[BaseMessage, datetime]] = [
        (AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "c1"},
                                   {"name": "read", "args": {}, "id": "c2"}]), at(0)),
        (ToolMessage("timeout", tool_call_id="c1", status="error"), at(0)),
        (ToolMessage("x" * 40_000, tool_call_id="c2"), at(0)),
    ]
    text = format_transcript(messages).text  # no counter given: about four bytes a token
    assert "Tool fetch failed: timeout" in text
    read_line = next(line for line in text.splitlines() if "Tool read returned" in line)
    assert len(read_line) < 20_200
    assert "[cut at 5000 tokens; 20000 more characters not shown]" in read_line


def test_thread_label_header_and_obscured_ids() -> None:
    assert thread_label("thread-secret-42", obscure=False) == "thread-secret-42"
    hidden = thread_label("thread-secret-42", obscure=True)
    assert "secret" not in hidden and hidden == thread_label("thread-secret-42", obscure=True)
    assert hidden != thread_label("thread-secret-43", obscure=True)
    text = format_transcript([(HumanMessage("hi"), at(0))], thread_label=hidden).text
    assert text.splitlines()[0] == f"=== Thread {hidden} ==="


def _image_message() -> list[tuple[BaseMessage, datetime]]:
    return [(HumanMessage(content=[{"type": "text", "text": "What is wrong here?"}, PNG, JPEG_URL, PDF]), at(0))]


def test_image_and_file_placeholders() -> None:
    transcript = format_transcript(_image_message(), observe_attachments=True, model_supports_images=True)
    assert "[Image #1: screenshot.png]" in transcript.text
    assert "[Image #2: image.jpeg]" in transcript.text
    assert "[File #1: report.pdf (application/pdf)]" in transcript.text
    assert transcript.attachments == [PNG, JPEG_URL]  # files are placeholders only, never forwarded


@pytest.mark.parametrize(
    ("policy", "supports", "expected"),
    [
        (True, False, ["screenshot.png", "jpeg"]),
        (False, True, []),
        ("auto", True, ["screenshot.png", "jpeg"]),
        ("auto", False, []),
        (["IMAGE/PNG"], True, ["screenshot.png"]),
        (["image/*"], False, ["screenshot.png", "jpeg"]),
        (["*"], True, ["screenshot.png", "jpeg"]),
        (["application/pdf"], True, []),
    ],
)
def test_attachment_policies(policy: Any, supports: bool, expected: list[str]) -> None:
    transcript = format_transcript(_image_message(), observe_attachments=policy, model_supports_images=supports)
    names = [b.get("filename") or "jpeg" for b in transcript.attachments]
    assert names == expected
    # placeholders stay whatever the policy
    assert "[Image #1: screenshot.png]" in transcript.text and "[File #1: report.pdf" in transcript.text


def test_tool_result_attachments_follow_the_same_rules() -> None:
    messages: list[tuple[BaseMessage, datetime]] = [
        (AIMessage("", tool_calls=[{"name": "screenshot", "args": {}, "id": "c1"}]), at(0)),
        (ToolMessage(content=[{"type": "text", "text": "captured"}, PNG], tool_call_id="c1"), at(0)),
    ]
    allowed = format_transcript(messages, observe_attachments=["image/png"])
    assert "Tool screenshot returned: captured" in allowed.text and "[Image #1: screenshot.png]" in allowed.text
    assert allowed.attachments == [PNG]
    assert format_transcript(messages, observe_attachments=["image/jpeg"]).attachments == []


def test_stored_messages_and_temporal_markers() -> None:
    rows = [
        stored(1, HumanMessage("Morning! Remind me about the dentist."), at(0)),
        stored(2, AIMessage("Sure."), at(1)),
        stored(3, SystemMessage(content=""), at(181), kind="temporal-marker"),
        stored(4, HumanMessage("Back again."), at(181)),
        stored(5, SystemMessage(content="2 days later"), at(3000), kind="temporal-marker"),
        stored(6, HumanMessage("Hello after the weekend."), at(3000)),
    ]
    lines = format_transcript(rows).text.splitlines()
    assert lines[0] == "[2026-12-01 Tuesday 14:05] User: Morning! Remind me about the dentist."
    assert lines[2] == "--- 3 hours later ---"
    assert lines[3] == "[2026-12-01 Tuesday 17:06] User: Back again."
    assert lines[4] == "--- 2 days later ---"


def test_times_are_shown_on_the_clock_of_the_message_timestamp() -> None:
    """Stored instants are UTC; a transcript is shown on the conversation's clock, the offset the
    user's message states, so an evening message keeps its date (and "tomorrow" resolves as the
    user meant it), and a message without a stamp of its own is shown on the same clock."""
    local = datetime.fromisoformat("2026-03-02T19:05:00-05:00")
    message = HumanMessage("Book dinner for tomorrow.", response_metadata={TIMESTAMP_KEY: local.isoformat()})
    plain = HumanMessage("No timestamp of its own.")
    rows = [stored(1, message, local.astimezone(timezone.utc)), stored(2, plain, at(0))]
    lines = format_transcript(rows).text.splitlines()
    assert lines[0] == "[2026-03-02 Monday 19:05] User: Book dinner for tomorrow."
    assert lines[1].startswith("[2026-12-01 Tuesday 09:05] User: No timestamp")
    # a stamp that disagrees with the stored instant is ignored in favour of the store (and its clock)
    wrong = HumanMessage("late import", response_metadata={TIMESTAMP_KEY: "2020-01-01T10:00:00+09:00"})
    assert format_transcript([stored(3, wrong, at(0))]).text.startswith("[2026-12-01 Tuesday 14:05]")


# ------------------------------------------------------------------ prompt


def test_prompt_contents() -> None:
    transcript = Transcript(text="[2026-12-01 14:05] User: hi")
    messages = build_observer_messages(
        transcript,
        previous_observations="Date: 2026-11-30 (Monday)\n* 🔴 (09:00) User said their cat is Miso.",
        instruction="Prioritise dietary restrictions.",
        now=T0,
        want_thread_title=False,
        inline_extractors=[("user-profile", "Stable facts about the user.", "name: Ana")],
    )
    system, human = messages
    assert isinstance(system, SystemMessage) and isinstance(human, HumanMessage)
    assert str(system.content).startswith(OBSERVER_PROMPT_MARKER)
    assert str(system.content).rstrip().endswith("Prioritise dietary restrictions.")
    assert "<user-profile>" in str(system.content) and "Stable facts about the user." in str(system.content)
    assert "thread-title" not in str(system.content)
    body = str(human.content)
    assert "do not copy them" in body and "User said their cat is Miso." in body
    assert "<previous-user-profile>\nname: Ana" in body
    assert "2026-12-01 14:05 (Tuesday)" in body
    assert "[2026-12-01 14:05] User: hi" in body
    # relative dates, priorities and the user/assistant distinction are asked for
    prompt = str(system.content)
    for needle in ("(meaning 2026-03-13)", "🔴", "🟡", "🟢", "✅", "Date: YYYY-MM-DD (Weekday)", "User ...",
                   "Assistant ...", "<observations>", "<current-task>", "<suggested-response>", "Never invent",
                   "conversation's own language", "(was 3,000 EUR)", "one line each", "never turn it into a\n  fact"):
        assert needle in prompt


def test_thread_title_requested_only_when_on() -> None:
    transcript = Transcript(text="[2026-12-01 14:05] User: hi")
    on = build_observer_messages(transcript, previous_observations="", instruction=None, now=T0,
                                 want_thread_title=True, inline_extractors=())
    assert "<thread-title>" in str(on[0].content)
    assert "There are no previous observations yet." in str(on[1].content)


def test_forwarded_images_ride_in_the_human_message() -> None:
    transcript = format_transcript(_image_message())
    human = build_observer_messages(transcript, previous_observations="", instruction=None, now=T0,
                                    want_thread_title=False, inline_extractors=())[1]
    assert isinstance(human.content, list)
    assert human.content[0]["type"] == "text"  # type: ignore[index]
    assert human.content[1:] == [PNG, JPEG_URL]


def test_system_prompt_stable_across_calls() -> None:
    a = build_observer_messages(Transcript("[2026-12-01 14:05] User: a"), previous_observations="x", now=T0)
    b = build_observer_messages(Transcript("[2026-12-02 09:00] User: b"), previous_observations="y", now=at(900))
    assert a[0].content == b[0].content  # keeps provider prompt caches warm


# ------------------------------------------------------------------ parsing

GOOD = """<observations>
Date: 2026-12-01 (Tuesday)
* 🔴 (14:05) User said they are vegetarian.
* 🟡 (14:07) Assistant suggested two recipes.
</observations>
<current-task>Plan a vegetarian dinner.</current-task>
<suggested-response>Ask how many guests are coming.</suggested-response>
<thread-title>Vegetarian dinner plan</thread-title>
<user-profile>diet: vegetarian</user-profile>"""


def test_parse_well_formed() -> None:
    result = parse_observer_output(GOOD, inline_slugs=["user-profile"])
    assert result.observations.splitlines() == [
        "Date: 2026-12-01 (Tuesday)",
        "* 🔴 (14:05) User said they are vegetarian.",
        "* 🟡 (14:07) Assistant suggested two recipes.",
    ]
    assert result.current_task == "Plan a vegetarian dinner."
    assert result.suggested_response == "Ask how many guests are coming."
    assert result.thread_title == "Vegetarian dinner plan"
    assert result.extracted == {"user-profile": "diet: vegetarian"}
    assert result.warnings == []


def test_parse_prose_fences_and_case() -> None:
    text = "Sure! Here are the observations you asked for:\n```xml\n" + GOOD.replace(
        "<observations>", "<OBSERVATIONS>").replace("</observations>", "</Observations>") + "\n```\nHope it helps."
    result = parse_observer_output(text)
    assert "Sure" not in result.observations and "```" not in result.observations
    assert "* 🔴 (14:05) User said they are vegetarian." in result.observations
    assert result.current_task == "Plan a vegetarian dinner."


def test_parse_missing_closing_tags() -> None:
    text = ("<observations>\nDate: 2026-12-01 (Tuesday)\n* 🔴 (14:05) User said the budget is 300 EUR.\n"
            "<current-task>Find a hotel\n<suggested-response>Offer three hotels")
    result = parse_observer_output(text)
    assert result.observations.endswith("User said the budget is 300 EUR.")
    assert result.current_task == "Find a hotel"
    assert result.suggested_response == "Offer three hotels"
    assert any("not closed" in w for w in result.warnings)


def test_parse_without_observations_tag_uses_bullets() -> None:
    text = ("Here are my notes.\nDate: 2026-12-01 (Tuesday)\n- 🔴 (14:05) User said they live in Porto.\n"
            "That is all.\n<current-task>Answer about Porto.</current-task>")
    result = parse_observer_output(text)
    assert result.observations == "Date: 2026-12-01 (Tuesday)\n- 🔴 (14:05) User said they live in Porto."
    assert result.current_task == "Answer about Porto."
    assert any("no <observations> tag" in w for w in result.warnings)


def test_parse_drops_prompt_echo_and_placeholders() -> None:
    text = ("<observations>\nHere are the observations:\nDate: <YYYY-MM-DD> (<Weekday>)\n* <mark> (<HH:MM>) "
            "<observation>\nDate: 2026-12-01 (Tuesday)\n* 🔴 (14:05) User said hi.\n</observations>\n"
            "<current-task>none</current-task>")
    result = parse_observer_output(text)
    assert result.observations == "Date: 2026-12-01 (Tuesday)\n* 🔴 (14:05) User said hi."
    assert result.current_task is None


@pytest.mark.parametrize("text", ["", "   \n", "I could not find anything.", "<observations>\n</observations>",
                                  "<observations>Date: 2026-12-01 (Tuesday)</observations>"])
def test_parse_unusable_raises(text: str) -> None:
    with pytest.raises(ObserverOutputError, match="Observer"):
        parse_observer_output(text)


def test_missing_inline_value_is_a_warning() -> None:
    result = parse_observer_output(GOOD, inline_slugs=["todo-list"])
    assert result.extracted == {}
    assert "no value for <todo-list>" in result.warnings


# ------------------------------------------------------------------ previous observations

LOG = """Date: 2026-11-28 (Saturday)
* 🔴 (09:00) User said their cat Miso is allergic to chicken.
* 🟡 (09:05) Assistant listed cat foods one two three four five.
* 🟢 (09:06) User said thanks a lot for the help today.

Date: 2026-11-29 (Sunday)
* 🟡 (10:00) User asked about vets near the old town area.
* 🟢 (10:02) Assistant gave four addresses of vets nearby.
* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon.

Date: 2026-11-30 (Monday)
* 🟡 (11:00) User asked for a shopping list for the weekend.
* 🟡 (11:05) Assistant wrote a shopping list with ten items."""


def test_truncate_false_zero_and_fitting() -> None:
    assert truncate_previous_observations(LOG, False, words) == LOG
    assert truncate_previous_observations(LOG, 0, words) == ""
    assert truncate_previous_observations(LOG, 10_000, words) == LOG


def test_truncate_keeps_newest_and_older_red_lines_with_headers() -> None:
    budget = 70
    result = truncate_previous_observations(LOG, budget, words)
    assert words(result) <= budget
    lines = result.splitlines()
    # the newest line survives, the oldest red item survives with its Date header
    assert lines[-1] == "* 🟡 (11:05) Assistant wrote a shopping list with ten items."
    assert "* 🔴 (09:00) User said their cat Miso is allergic to chicken." in lines
    assert lines[0] == "Date: 2026-11-28 (Saturday)"
    # older low-priority lines go first
    assert not any("🟢" in line for line in lines)
    assert "Date: 2026-11-30 (Monday)" in lines
    assert "* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon." in lines
    assert "* 🟡 (09:05) Assistant listed cat foods one two three four five." not in lines
    # order is preserved
    assert lines.index("Date: 2026-11-28 (Saturday)") < lines.index("Date: 2026-11-30 (Monday)")


def test_truncate_small_budget_prefers_newest_red() -> None:
    result = truncate_previous_observations(LOG, 20, words)
    assert words(result) <= 20
    # the newest important item wins over newer low-priority lines when only one line fits
    assert result == "Date: 2026-11-29 (Sunday)\n* 🔴 (10:05) User will visit the vet on 2026-12-03 at noon."
    assert truncate_previous_observations(LOG, 5, words) == ""  # nothing fits with its header


# ------------------------------------------------------------------ scripted observer round trip


def test_scripted_observer_round_trip() -> None:
    messages: list[tuple[BaseMessage, datetime]] = [
        (HumanMessage("I prefer aisle seats and my budget is 400 EUR."), at(0)),
        (AIMessage("", tool_calls=[{"name": "search", "args": {"q": "flights"}, "id": "c1"}]), at(1)),
        (ToolMessage("2 flights", tool_call_id="c1"), at(1)),
        (AIMessage("I found two flights within budget."), at(2)),
        (HumanMessage("ok"), at(60 * 24)),
    ]
    prompt = build_observer_messages(format_transcript(messages), previous_observations="", now=at(60 * 24),
                                     want_thread_title=True, inline_extractors=[("user-profile", "facts", None)])
    model = ScriptedObserverModel()
    reply = model.invoke(prompt)
    result = parse_observer_output(str(reply.content), inline_slugs=["user-profile"])
    assert result.warnings == []
    assert result.observations.splitlines()[:3] == [
        "Date: 2026-12-01 (Tuesday)",
        "* 🔴 (14:05) User said: I prefer aisle seats and my budget is 400 EUR.",
        "* 🟡 (14:06) Assistant used tool search; replied: I found two flights within budget.",
    ]
    assert "Date: 2026-12-02 (Wednesday)" in result.observations
    assert "* 🟡 (14:05) User said: ok" in result.observations
    assert result.current_task and "ok" in result.current_task
    assert result.thread_title == "I prefer aisle seats and my"
    assert "user-profile" in result.extracted
    assert reply.usage_metadata and reply.usage_metadata["input_tokens"] > 0
    assert model.calls and model.calls[0][0] is prompt[0]


def test_previous_log_is_counted_once_per_observer_call() -> None:
    """The whole log used to be counted twice per call (to decide the cut, then for the note)."""
    from langchain_om.model_calls.observer import LEFT_OUT_MARKER, previous_with_marker

    log = "\n".join(f"Date: 2026-03-{day:02d}\n* 🟡 (09:00) The user mentioned item {day} of the plan, 予定 {day}"
                    for day in range(1, 29))
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text.split())

    kept = previous_with_marker(log, 60, count)
    assert kept.startswith(LEFT_OUT_MARKER) and "item 28" in kept and "item 1 " not in kept
    assert calls.count(log) == 1
    assert len(calls) == len(set(calls))
