"""A recall question turned into a keyword search: the words that name the subject, ranked with
the time the question points at.

The ``recall`` tool is asked questions in sentences ("Can you suggest some accessories for my
photography setup?", "What did I cook for my friend a couple of days ago?"). The store's index
ranks every word it is given, so the words of *asking* ("suggest", "some", "mentioned") and of
*time* ("days", "ago") found messages that happened to share them: a generic reply full of
"some" and "suggest" outranked the one message about the user's camera. Here they are dropped
before the store sees the query (never all of them: a query of nothing else keeps its words),
and a relative time ("a week ago", "last Saturday", "先週") ranks the messages of that time higher
among the keyword hits. The same for every store: the store ranks, this only chooses words and
re-orders its hits, so SQLite, PostgreSQL and the in-memory store agree.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime

from ...store.base import OMStore, SearchHit
from ...store.search import STOP_WORDS
from .time_words import TimeHint, time_hint

ASKING_WORDS = frozenset(
    # vague quantities, hedges and fillers: they qualify a subject, never name one
    "some any many much more most other others such only just really very even still ever quite rather maybe "
    "might must shall should may lately recently currently something anything everything someone anyone thing "
    "things stuff kind sort lot lots bit "
    # what an English contraction leaves once split into words (I've, I'll, don't)
    "ve ll re m s t d don didn doesn isn wasn aren "
    # asking for something, and pointing at what was said before: how a question is put to an
    # assistant, not what it is about
    "suggest suggests suggested suggestion suggestions recommend recommends recommended recommendation "
    "recommendations tip tips advice idea ideas help please tell know think remember recall mention mentions "
    "mentioned said say told talk talked discuss discussed ask asked wonder wondering curious interested "
    "interesting looking want need find get got give gave share shared previously earlier".split()
)
"""Words dropped from a recall question before the keyword search (besides the store's stop words)."""

DATE_WEIGHT = 1.0
"""How much a hit inside the time the question points at gains: its score times (1 + weight);
outside, the gain fades with the distance (measured in window half-widths)."""

_WORD = re.compile(r"\w+", re.UNICODE)


def subject_words(text: str) -> str:
    """The question without its asking words (the rest left as written, CJK text included);
    unchanged when only stop words would be left."""
    if not any(w.lower() not in ASKING_WORDS and w.lower() not in STOP_WORDS for w in _WORD.findall(text)):
        return text
    return _WORD.sub(lambda m: " " if m.group(0).lower() in ASKING_WORDS else m.group(0), text)


def date_gain(moment: datetime, hint: TimeHint) -> float:
    """1 inside the hinted span, fading outside it (0 with no span)."""
    if hint.start is None or hint.end is None:
        return 0.0
    if hint.start <= moment <= hint.end:
        return 1.0
    half = max(1.0, (hint.end - hint.start).total_seconds() / 2)
    distance = min(abs((moment - hint.start).total_seconds()), abs((moment - hint.end).total_seconds()))
    return math.exp(-distance / half)


def rerank_by_time(hits: Sequence[SearchHit], hint: TimeHint) -> list[SearchHit]:
    """Hits re-ordered by score times the time gain (a stable sort: equal scores keep the store's order)."""
    if hint.start is None:
        return list(hits)
    scored = [hit.model_copy(update={"score": hit.score * (1 + DATE_WEIGHT * date_gain(hit.message.created_at,
                                                                                         hint))})
              if hit.score > 0 else hit for hit in hits]
    return sorted(scored, key=lambda hit: hit.score, reverse=True)


async def keyword_hits(store: OMStore, resource_id: str, question: str, *, limit: int,
                       thread_id: str | None = None, now: datetime | None = None) -> list[SearchHit]:
    """The store's keyword hits for a recall question: its subject words searched, the hits of
    the time it points at (relative to ``now``, the conversation's date) ranked up."""
    hint = time_hint(question, now)
    return rerank_by_time(await store.asearch_messages(resource_id, subject_words(hint.text), thread_id=thread_id,
                                                       limit=limit), hint)
