"""A vocabulary-free estimate of o200k_base token counts (``EstimatorCounter`` counts with it).

Its own module because it is a self-contained model: a regex that mirrors o200k's
pre-tokenizer and a handful of fitted costs, with nothing to load. ``tokens.py`` builds the
counter on it and re-exports ``estimate_tokens``.
"""

from __future__ import annotations

import re
from functools import lru_cache

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
# Mirrors o200k's pre-tokenizer closely enough that each piece has a predictable cost:
# words split at case changes, digits in groups of three, punctuation runs, newlines.
_PIECE_RE = re.compile(
    rf"(?P<cjk>[{_CJK}])"
    r"|(?P<cjkp>[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20])"
    rf"|(?P<uni>[A-Za-z]*[^\x00-\x7f\W\d_{_CJK}][^\W\d_{_CJK}]*)"
    r"|(?P<low>[A-Z]?[a-z]+)"
    r"|(?P<up>[A-Z]+(?![a-z]))"
    r"|(?P<num>\d+)"
    r"|(?P<nl>[ \t]*(?:\r?\n)+)"
    rf"|(?P<pa>[{_ASCII_PUNCT}]+(?=[^\W\d_]))"
    rf"|(?P<punct>[{_ASCII_PUNCT}]+)"
    r"|(?P<sym>[^\w\s])"
    r"|(?P<sp>\s+)"
)

# Fitted against o200k_base on prose, Python and JSON (see tests/test_tokens.py).
_WORD_SINGLE_MAX = 10  # lower-case words up to this length are almost always one token
_WORD_EXTRA_CHARS = 4.0  # each further 4 letters cost about one more token
_UPPER_CHARS = 4.0  # ALLCAPS runs: about 4 letters per token
_UNICODE_CHARS = 2.5  # non-ASCII alphabetic words (accents, Cyrillic, ...)
# CJK, per character: o200k merges common pairs (です, ます, した), kanji a little less often;
# fitted on the Japanese demo conversation and tests/data/token_samples/prose_ja.txt (errors in
# docs/search.md)
_HIRAGANA_COST = 0.8
_KATAKANA_COST = 0.8
_HAN_COST = 0.9
_HANGUL_COST = 0.7
_CJK_PUNCT_COST = 0.7  # 、。「」（）： often merge into the character before them


def _cjk_cost(char: str) -> float:
    point = ord(char)
    if point < 0x30A0:
        return _HIRAGANA_COST
    if point < 0x3100:
        return _KATAKANA_COST
    if 0xAC00 <= point <= 0xD7AF:
        return _HANGUL_COST
    return _HAN_COST
_PUNCT_EXTRA_CHARS = 5.0  # punctuation runs: one token, plus one per 5 more chars
_PUNCT_ATTACHED = 0.7  # a punctuation run glued to the next word often merges into it
_NEWLINE_AFTER_PUNCT = 0.5  # "]:\n", "},\n" usually merge the newline into the punctuation
_SPACE_RUN = 0.5  # indentation runs are one token, single spaces merge into the next word


_TWENTIETHS = 20  # every cost above is a whole number of twentieths: sums are exact integers


def _piece_total(text: str) -> float:
    """The summed cost of ``text``'s pieces, in tokens."""
    total = 0.0
    previous = ""
    for match in _PIECE_RE.finditer(text):
        kind = match.lastgroup or ""
        size = match.end() - match.start()
        if kind == "low":
            total += 1.0 if size <= _WORD_SINGLE_MAX else 1.0 + (size - _WORD_SINGLE_MAX) / _WORD_EXTRA_CHARS
        elif kind == "sp":
            total += _SPACE_RUN if size > 1 else 0.0
        elif kind == "punct":
            total += 1.0 + (size - 1) / _PUNCT_EXTRA_CHARS
        elif kind == "pa":
            total += _PUNCT_ATTACHED + (size - 1) / _PUNCT_EXTRA_CHARS
        elif kind == "nl":
            total += _NEWLINE_AFTER_PUNCT if previous == "punct" else 1.0
        elif kind == "num":
            total += (size + 2) // 3
        elif kind == "up":
            total += max(1.0, size / _UPPER_CHARS)
        elif kind == "uni":
            total += max(1.0, size / _UNICODE_CHARS)
        elif kind == "cjk":
            total += _cjk_cost(match.group())
        elif kind == "cjkp":
            total += _CJK_PUNCT_COST
        else:  # sym: emoji, non-ASCII punctuation, control characters
            total += 1.0
        previous = kind
    return total


def _piece_costs(text: str) -> int:
    """The summed cost of ``text``'s pieces, in twentieths of a token."""
    return round(_piece_total(text) * _TWENTIETHS)


# A text is the sum of its lines (each cut after its run of newlines): a piece never spans such a
# cut, and the one piece whose cost looks at the piece before it (a newline after punctuation) is
# never first in a line. Whitespace other than spaces, tabs and newlines can form one piece with a
# newline, so such a text is counted whole.
_LINE_RE = re.compile(r"[^\n]*(?:\n+|\Z)")
_ODD_SPACE_RE = re.compile(r"[^\S \t\n]")
_LINE_CACHE_CHARS = 2000  # longer lines are rarely repeated: counted, not kept


@lru_cache(maxsize=16_384)
def _line_costs(line: str) -> int:
    return _piece_costs(line)


def estimate_tokens(text: str) -> int:
    """Estimate the o200k_base token count of ``text`` without any vocabulary.

    Line by line, each line's cost kept (bounded): OM counts the same lines again and again (the
    Observer's and Reflector's prompts repeat the log and the instructions with a few new lines),
    and the piece-by-piece loop costs ~0.5 us a word in Python."""
    if not text:
        return 0
    if _ODD_SPACE_RE.search(text) is not None:
        return max(1, int(_piece_total(text) + 0.5))
    total = sum(_line_costs(line) if len(line) <= _LINE_CACHE_CHARS else _piece_costs(line)
                for line in _LINE_RE.findall(text) if line)
    return max(1, (total + _TWENTIETHS // 2) // _TWENTIETHS)
