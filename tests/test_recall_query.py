"""recall's question handling: asking words and relative time words leave the keywords, and the
hits of the time a question points at rank first, the same on every store (issue 45)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from recall_helpers import make_om, result_dict, seed, stamped

from langchain_om.extensions.recall.query import subject_words
from langchain_om.extensions.recall.time_words import time_hint
from langchain_om.store import OMStore

NOW = datetime(2024, 3, 20, 18, 0, tzinfo=timezone.utc)  # a Wednesday


def _cursors(result: dict[str, Any]) -> list[str]:
    return re.findall(r"cursor: (\S+)", result["results"])


def test_time_words_point_at_a_span_and_leave_the_query() -> None:
    hint = time_hint("What did I cook for my friend a couple of days ago?", NOW)
    assert "ago" not in hint.text and "couple" not in hint.text and "cook" in hint.text
    assert hint.contains(NOW - timedelta(days=2)) and not hint.contains(NOW - timedelta(days=9))
    weeks = time_hint("the milestone I mentioned four weeks ago", NOW)
    assert weeks.contains(NOW - timedelta(days=28)) and not weeks.contains(NOW - timedelta(days=3))
    saturday = time_hint("Where did I go last Saturday?", NOW)
    assert saturday.contains(datetime(2024, 3, 16, 12, tzinfo=timezone.utc))
    assert not saturday.contains(datetime(2024, 3, 19, 12, tzinfo=timezone.utc))
    assert time_hint("what did I eat yesterday", NOW).contains(NOW - timedelta(days=1))
    # Japanese: 三日前 (three days ago), 先週 (last week), 2週間前 (two weeks ago)
    ja = time_hint("三日前に話したレストランはどこ？", NOW)
    assert ja.contains(NOW - timedelta(days=3)) and "三日前" not in ja.text and "レストラン" in ja.text
    assert time_hint("先週の旅行", NOW).contains(NOW - timedelta(days=7))
    assert time_hint("2週間前の会議", NOW).contains(NOW - timedelta(days=14))
    # no time words: the query as typed, no span; no date known: words dropped, no span
    plain = time_hint("Lisbon flights", NOW)
    assert plain.text == "Lisbon flights" and plain.start is None
    unknown = time_hint("a week ago in Lisbon", None)
    assert unknown.text == "in Lisbon" and unknown.start is None


def test_asking_words_leave_the_keywords_unless_nothing_else_is_left() -> None:
    kept = subject_words("Can you suggest some accessories for my photography setup?").split()
    assert "accessories" in kept and "photography" in kept
    assert not {"suggest", "some"} & set(kept)
    assert subject_words("what did you suggest?") == "what did you suggest?"  # nothing else to search for
    assert subject_words("東京のおすすめ") == "東京のおすすめ"  # CJK text left as written


async def test_recall_ranks_the_subject_over_asking_words(store: OMStore) -> None:
    """Before issue 45 the generic reply won: it shares 'suggest', 'some' and 'setup' with the question."""
    om = make_om(store)
    day = NOW - timedelta(days=40)
    await seed(om, "u1", {"t1": [
        stamped(HumanMessage("My photography kit is a Sony A7 with two lenses; I carry few accessories.",
                             id="camera"), day),
        stamped(AIMessage("Lovely, landscapes reward patience.", id="camera-reply"), day),
        stamped(HumanMessage("The build fails, can you suggest a fix for my setup?", id="build"), NOW),
        stamped(AIMessage("Some suggestions: I suggest you pin some versions; some setups need some cleanup "
                          "and I suggest clearing some caches, suggest some more checks of your setup.",
                          id="generic"), NOW),
    ]})
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    found = result_dict(await tool.ainvoke({"mode": "search",
                                            "query": "Can you suggest some accessories for my photography setup?"}))
    assert _cursors(found)[0] == "camera", found["results"]


async def test_recall_ranks_the_time_a_question_points_at(store: OMStore) -> None:
    """Two dinners share every word; 'a couple of days ago' picks the one of two days before the
    conversation's newest message. Before issue 45 the newer mention ranked first, and a message
    about breathing 'for a couple of days' outranked both."""
    om = make_om(store)
    await seed(om, "u2", {"t2": [
        stamped(HumanMessage("I cooked a lasagna dinner for my friend Marta.", id="lasagna"), NOW - timedelta(days=2)),
        stamped(HumanMessage("I breathed slowly for a couple of days ago and days ago, couple of days.", id="noise"),
                NOW - timedelta(days=30)),
        stamped(HumanMessage("I cooked a curry dinner for my friend Marta.", id="curry"), NOW - timedelta(days=20)),
        stamped(HumanMessage("Thanks for the help today!", id="today"), NOW),
    ]})
    tool = om.recall_tool(thread_id="t2", resource_id="u2")
    found = result_dict(await tool.ainvoke({"mode": "search",
                                            "query": "What dinner did I cook for my friend a couple of days ago?"}))
    ranked = _cursors(found)
    assert ranked[0] == "lasagna", found["results"]
    assert "noise" not in ranked  # its only shared words were words of time
    # the same question three weeks later points at the curry instead
    om2 = make_om(store)
    later = NOW + timedelta(days=1)
    await seed(om2, "u2", {"t2": [stamped(HumanMessage("Back again.", id="back"), later)]})
    again = result_dict(await om2.recall_tool(thread_id="t2", resource_id="u2").ainvoke(
        {"mode": "search", "query": "What dinner did I cook for my friend three weeks ago?"}))
    assert _cursors(again)[0] == "curry", again["results"]


async def test_recall_ranks_the_time_a_japanese_question_points_at(store: OMStore) -> None:
    """The same two dinners in Japanese: 三日前 (three days ago) picks the newer one, 3週間前
    (three weeks ago) the older one; the time words themselves are never searched for."""
    om = make_om(store)
    await seed(om, "u3", {"t3": [
        stamped(HumanMessage("友達のマルタにカレーの夕食を作りました。", id="curry"), NOW - timedelta(days=20)),
        stamped(HumanMessage("友達のマルタにラザニアの夕食を作りました。", id="lasagna"), NOW - timedelta(days=3)),
        stamped(HumanMessage("今日もありがとう！", id="today"), NOW),
    ]})
    tool = om.recall_tool(thread_id="t3", resource_id="u3")
    recent = result_dict(await tool.ainvoke({"mode": "search", "query": "三日前に友達に作った夕食は？"}))
    assert _cursors(recent)[:1] == ["lasagna"], recent["results"]
    older = result_dict(await tool.ainvoke({"mode": "search", "query": "3週間前に友達に作った夕食は？"}))
    assert _cursors(older)[:1] == ["curry"], older["results"]
