"""The estimator's fast walk (an ASCII-only pattern for ASCII text, a CJK run as one match,
integer twentieths) must give exactly the counts of the plain walk it replaced: one match per
piece, every pattern tried, float costs. The plain walk is written out here as the reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from langchain_om.foundation import tokens_estimator as te
from langchain_om.foundation.tokens import EstimatorCounter

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_PUNCT = r"!-/:-@\[-`{-~"
_REFERENCE_RE = re.compile(
    rf"(?P<cjk>[{_CJK}])"
    r"|(?P<cjkp>[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20])"
    rf"|(?P<uni>[A-Za-z]*[^\x00-\x7f\W\d_{_CJK}][^\W\d_{_CJK}]*)"
    r"|(?P<low>[A-Z]?[a-z]+)"
    r"|(?P<up>[A-Z]+(?![a-z]))"
    r"|(?P<num>\d+)"
    r"|(?P<nl>[ \t]*(?:\r?\n)+)"
    rf"|(?P<pa>[{_PUNCT}]+(?=[^\W\d_]))"
    rf"|(?P<punct>[{_PUNCT}]+)"
    r"|(?P<sym>[^\w\s])"
    r"|(?P<sp>\s+)"
)


def _reference_total(text: str) -> float:
    """The plain walk: one match per piece, each costed on its own (in tokens)."""
    total, previous = 0.0, ""
    for match in _REFERENCE_RE.finditer(text):
        kind, size = match.lastgroup or "", match.end() - match.start()
        if kind == "low":
            total += 1.0 if size <= 10 else 1.0 + (size - 10) / 4.0
        elif kind == "sp":
            total += 0.5 if size > 1 else 0.0
        elif kind == "punct":
            total += 1.0 + (size - 1) / 5.0
        elif kind == "pa":
            total += 0.7 + (size - 1) / 5.0
        elif kind == "nl":
            total += 0.5 if previous == "punct" else 1.0
        elif kind == "num":
            total += (size + 2) // 3
        elif kind == "up":
            total += max(1.0, size / 4.0)
        elif kind == "uni":
            total += max(1.0, size / 2.5)
        elif kind == "cjk":
            point = ord(match.group())
            total += 0.8 if point < 0x3100 else 0.7 if 0xAC00 <= point <= 0xD7AF else 0.9
        elif kind == "cjkp":
            total += 0.7
        else:
            total += 1.0
        previous = kind
    return total


_ODD = [
    "Let's talk about the Lisbon trip; I prefer trains and my budget is 40 euros.",
    "[m:3:5] 京都旅行の計画について相談したいです。予算は5000円で、金曜日までに決めたい。",
    "カタカナとひらがなと漢字、한국어 텍스트입니다 and ÀLLCAPS Ünïcödé хорошо",
    "emoji 🔴🟡🟢 👍🏽 mixed with 数字１２３ and fullwidth ＡＢＣ！？",
    "NUL \x00 and a lone surrogate \ud800 and DEL \x7f and \x1c\x1d separators",
    "def f(x):\n    return {'a': [1, 2, 3], \"b\": x}  # note:\n\n\t\n",
    "ideographic\u3000space、punctuation。「quoted」（paren）：colon",
    "CamelCaseWords HTTPServer getURL x86_64 v1.2.3 https://example.com/a?b=c",
    "",
    "  \n \r\n\r\n  tail",
]


def _corpus() -> list[str]:
    samples = Path(__file__).parent / "data" / "token_samples"
    return [*_ODD, *(p.read_text(encoding="utf-8") for p in sorted(samples.iterdir()))]


@pytest.mark.parametrize("text", _corpus())
def test_fast_walk_counts_what_the_plain_walk_counts(text: str) -> None:
    # every prefix cut at a few points too: runs and punctuation end mid-way
    for cut in {len(text), len(text) // 3, len(text) // 2, 7, 1}:
        part = text[:cut]
        assert te._piece_costs(part) == round(_reference_total(part) * 20), part[-40:]


def test_estimates_of_english_and_japanese_are_the_plain_walks_rounded() -> None:
    counter = EstimatorCounter()
    for text in _ODD[:3]:
        expected = max(1, round(_reference_total(text) * 20 + 10) // 20)
        assert counter.count_text(text) == expected, text
    # 京都 (two kanji) and です (two kana): 0.9 + 0.9 and 0.8 + 0.8 tokens
    assert te._piece_costs("京都") == 36 and te._piece_costs("です") == 32 and te._piece_costs("한국") == 28


_PIECES = ["the", "Lisbon", "HTTP", "URLs", "x86", "2026", "5000円", "京都", "です", "한국", "Ünï", "хорошо",
           "🔴", "🟡", "(14:05)", "[m:3:5]", "—", "、", "。", "「quoted」", "a.b", "e.g.", "x,", "!", ":", "-",
           "＃", "ＡＢＣ", "\x00", "\ud800", "_", "__init__", "'s", "\"b\""]
_GAPS = [" ", " ", " ", " ", "  ", "\t", " \t", "\u3000", "\u00a0", "", " \n", "\n", "\r\n", " \r"]


def _lines(seed: int, count: int) -> list[str]:
    """Random lines of words, punctuation and scripts, joined by every kind of gap (single spaces
    most often): the cases a word-by-word sum must get right and those it must leave whole."""
    import random

    rng = random.Random(seed)
    out: list[str] = []
    for _ in range(count):
        parts = [rng.choice(_PIECES) for _ in range(rng.randint(1, 12))]
        text = parts[0]
        for part in parts[1:]:
            text += rng.choice(_GAPS) + part
        out.append(text + rng.choice(["", "\n", "\n\n", " \n", ".\n"]))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_line_counted_word_by_word_costs_what_its_whole_walk_costs(seed: int) -> None:
    """``_line_costs`` sums the costs of a line's words (cached one by one) when single spaces
    part them; any other spacing is walked whole. Either way: the plain walk's count."""
    te._line_costs.cache_clear()
    for line in [*_lines(seed, 400), *(ln for text in _corpus() for ln in te._LINE_RE.findall(text) if ln)]:
        assert te._line_costs(line) == round(_reference_total(line) * 20), repr(line)
        assert te._line_costs(line) == te._piece_costs(line), repr(line)  # cached: the same again


def test_an_observer_reply_in_english_and_japanese_counts_as_walked_whole() -> None:
    reply = ("Date: Mon, May 4, 2026\n"
             "* 🔴 (14:05) User's Lisbon trip budget is 400 euros; prefers trains [m:3:5]\n"
             "* 🟡 (14:07) 京都旅行の予算は5000円、金曜日までに決めたい (meaning May 8, 2026)\n"
             "  * -> assistant suggested the 09:12 train  (two spaces)\n")
    te._line_costs.cache_clear()
    te._word_costs.cache_clear()
    expected = max(1, (te._piece_costs(reply) + 10) // 20)
    assert te.estimate_tokens(reply) == expected
    assert te.estimate_tokens(reply) == expected, "again, from the kept words and lines"
