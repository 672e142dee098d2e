"""A vocabulary-free estimate of o200k_base token counts (``EstimatorCounter`` counts with it).

Its own module because it is a self-contained model: a regex that mirrors o200k's
pre-tokenizer and a handful of fitted costs, with nothing to load. ``tokens.py`` builds the
counter on it and re-exports ``estimate_tokens``.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import pairwise

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
# Mirrors o200k's pre-tokenizer closely enough that each piece has a predictable cost:
# words split at case changes, digits in groups of three, punctuation runs, newlines. A run of
# CJK characters is one match (each character is its own piece: the run's cost is theirs summed).
_NON_ASCII_PIECES = (
    rf"(?P<cjk>[{_CJK}]+)"
    r"|(?P<cjkp>[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20])"
    rf"|(?P<uni>[A-Za-z]*[^\x00-\x7f\W\d_{_CJK}][^\W\d_{_CJK}]*)"
)
_ASCII_PIECES = (
    r"(?P<low>[A-Z]?[a-z]+)"
    r"|(?P<up>[A-Z]+(?![a-z]))"
    r"|(?P<num>\d+)"
    r"|(?P<nl>[ \t]*(?:\r?\n)+)"
    rf"|(?P<pa>[{_ASCII_PUNCT}]+(?=[^\W\d_]))"
    rf"|(?P<punct>[{_ASCII_PUNCT}]+)"
    r"|(?P<sym>[^\w\s])"
    r"|(?P<sp>\s+)"
)
_PIECE_RE = re.compile(f"{_NON_ASCII_PIECES}|{_ASCII_PIECES}")
# The first three kinds need a non-ASCII character: an ASCII text (most English, code, JSON) is
# walked without trying them at every position (a third faster; the pieces are the same).
_ASCII_PIECE_RE = re.compile(_ASCII_PIECES)
_KANA_RE = re.compile("[\u3040-\u30ff]")
_HANGUL_RE = re.compile("[\uac00-\ud7af]")

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
_PUNCT_EXTRA_CHARS = 5.0  # punctuation runs: one token, plus one per 5 more chars
_PUNCT_ATTACHED = 0.7  # a punctuation run glued to the next word often merges into it
_NEWLINE_AFTER_PUNCT = 0.5  # "]:\n", "},\n" usually merge the newline into the punctuation
_SPACE_RUN = 0.5  # indentation runs are one token, single spaces merge into the next word


_TWENTIETHS = 20  # every cost above is a whole number of twentieths: sums are exact integers


def _twentieths(cost: float) -> int:
    exact = round(cost * _TWENTIETHS)
    assert abs(exact - cost * _TWENTIETHS) < 1e-9, cost  # a new fitted cost must keep sums exact
    return exact


# the costs above in twentieths of a token, so a walk adds integers (no float rounding)
_ONE = _TWENTIETHS
_KANA, _HAN, _HANGUL = _twentieths(_HIRAGANA_COST), _twentieths(_HAN_COST), _twentieths(_HANGUL_COST)
assert _twentieths(_KATAKANA_COST) == _KANA  # one count serves both kana
_CJK_PUNCT, _ATTACHED, _NL_AFTER_PUNCT = (
    _twentieths(_CJK_PUNCT_COST), _twentieths(_PUNCT_ATTACHED), _twentieths(_NEWLINE_AFTER_PUNCT))
_SPACES = _twentieths(_SPACE_RUN)
_PER_WORD_CHAR = _twentieths(1 / _WORD_EXTRA_CHARS)
_PER_PUNCT_CHAR = _twentieths(1 / _PUNCT_EXTRA_CHARS)
_PER_UPPER_CHAR = _twentieths(1 / _UPPER_CHARS)
_PER_UNICODE_CHAR = _twentieths(1 / _UNICODE_CHARS)


def _cjk_run(run: str) -> int:
    """A run of CJK characters, each its own piece, in twentieths."""
    kana = len(_KANA_RE.findall(run))
    hangul = len(_HANGUL_RE.findall(run)) if kana < len(run) else 0
    return _KANA * kana + _HANGUL * hangul + _HAN * (len(run) - kana - hangul)


def _piece_twentieths(text: str) -> int:
    """The summed cost of ``text``'s pieces, in twentieths of a token."""
    total = 0
    previous: str | None = ""
    for match in (_ASCII_PIECE_RE if text.isascii() else _PIECE_RE).finditer(text):
        kind = match.lastgroup
        start, end = match.span()
        size = end - start
        if kind == "low":
            total += _ONE if size <= _WORD_SINGLE_MAX else _ONE + (size - _WORD_SINGLE_MAX) * _PER_WORD_CHAR
        elif kind == "sp":
            if size > 1:
                total += _SPACES
        elif kind == "punct":
            total += _ONE + (size - 1) * _PER_PUNCT_CHAR
        elif kind == "cjk":
            total += _cjk_run(match.group())
        elif kind == "pa":
            total += _ATTACHED + (size - 1) * _PER_PUNCT_CHAR
        elif kind == "nl":
            total += _NL_AFTER_PUNCT if previous == "punct" else _ONE
        elif kind == "num":
            total += _ONE * ((size + 2) // 3)
        elif kind == "up":
            total += max(_ONE, size * _PER_UPPER_CHAR)
        elif kind == "uni":
            total += max(_ONE, size * _PER_UNICODE_CHAR)
        elif kind == "cjkp":
            total += _CJK_PUNCT
        else:  # sym: emoji, non-ASCII punctuation, control characters
            total += _ONE
        previous = kind
    return total


def _piece_total(text: str) -> float:
    """The summed cost of ``text``'s pieces, in tokens."""
    return _piece_twentieths(text) / _TWENTIETHS


def _piece_costs(text: str) -> int:
    """The summed cost of ``text``'s pieces, in twentieths of a token."""
    return _piece_twentieths(text)


# A text is the sum of its lines (each cut after its run of newlines): a piece never spans such a
# cut, and the one piece whose cost looks at the piece before it (a newline after punctuation) is
# never first in a line. Whitespace other than spaces, tabs and newlines can form one piece with a
# newline, so such a text is counted whole.
_LINE_RE = re.compile(r"[^\n]*(?:\n+|\Z)")
_ODD_SPACE_RE = re.compile(r"[^\S \t\n]")
_LINE_CACHE_CHARS = 2000  # longer lines are rarely repeated: counted, not kept


_WORD_CACHE_CHARS = 48  # longer words are rarely repeated: counted, not kept


@lru_cache(maxsize=16_384)
def _word_costs(word: str) -> int:
    return _piece_twentieths(word)


@lru_cache(maxsize=16_384)
def _line_costs(line: str) -> int:
    """A line's cost, summed word by word (each word's cost kept, bounded).

    A new line is mostly words counted before: an Observer's reply is new lines every cycle,
    and walking their pieces cost ~0.4 ms for a 1.4 KB reply. A single space between two
    non-space characters is a piece of its own that costs nothing, and no other piece crosses
    it (the lookaheads see a space or the end of the word alike), so the words' costs sum to
    the line's; a line with any other spacing is walked whole."""
    words = line.split(" ")
    if len(words) == 1:
        return _piece_costs(line)
    for before, after in pairwise(words):
        if not before or not after or before[-1].isspace() or after[0].isspace():
            return _piece_costs(line)
    return sum(_word_costs(word) if len(word) <= _WORD_CACHE_CHARS else _piece_costs(word) for word in words)


def estimate_tokens(text: str) -> int:
    """Estimate the o200k_base token count of ``text`` without any vocabulary.

    Line by line, each line's cost kept (bounded): OM counts the same lines again and again (the
    Observer's and Reflector's prompts repeat the log and the instructions with a few new lines),
    and the piece-by-piece loop costs ~0.5 us a word in Python."""
    if not text:
        return 0
    if _ODD_SPACE_RE.search(text) is not None:
        return max(1, (_piece_twentieths(text) + _TWENTIETHS // 2) // _TWENTIETHS)
    total = sum(_line_costs(line) if len(line) <= _LINE_CACHE_CHARS else _piece_costs(line)
                for line in _LINE_RE.findall(text) if line)
    return max(1, (total + _TWENTIETHS // 2) // _TWENTIETHS)
