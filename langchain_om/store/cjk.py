"""Keyword search in text written without spaces (Japanese, Chinese) and in agglutinative text
(Korean): the normaliser and the character-bigram terms every store indexes and queries.

The English index (FTS5 ``porter unicode61``, PostgreSQL ``english``) keeps a run of
characters without spaces as one token, so 旅館 in 京都の旅館に泊まった, or 부산 in 부산으로,
is never a word of its own there. Beside it every store keeps a second index of the same
messages, made here:

* the text is normalised the way a user expects: lone surrogates become U+FFFD, NUL a space,
  NFKC folds full-width and half-width forms (ＡＢＣ -> abc, ｶﾀｶﾅ -> カタカナ), then lower case;
* each run of CJK characters (Han, kana with its prolonged sound mark, Hangul) becomes its
  overlapping character bigrams followed by its last character alone (東京都 -> 東京 京都 都),
  so every character starts a token;
* every other word (English words and digits inside a Japanese sentence) stays one token.

A query is normalised the same way. A CJK word of two or more characters is the *phrase* of its
bigrams (adjacent tokens, so 京都 never matches 京 ... 都 apart); a single character is a
*prefix* term (京*), which finds it at any place in a run because every character starts a
token. So one- and two-character words (京, 京都, 上海, 旅館) need no scan and no trigram.

Only messages holding at least one CJK character enter this index (``cjk_index_tokens`` returns
nothing otherwise), so an English-only user pays nothing for it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from .base import replace_lone_surrogates

_CJK_RANGES = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005-\u3007"  # 々 〆 〇
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30fa\u30fc-\u30ff"  # Katakana with ー, without the middle dot ・ (a separator)
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f"  # Hangul Jamo extended A
    "\uac00-\ud7af"  # Hangul syllables
    "\ud7b0-\ud7ff"  # Hangul Jamo extended B
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\U00020000-\U0003134f"  # CJK extensions B-G
)
_CJK_CHAR = re.compile(f"[{_CJK_RANGES}]")
_PIECE = re.compile(f"(?P<cjk>[{_CJK_RANGES}]+)|(?P<word>[^\\W{_CJK_RANGES}]+)")

MAX_TOKEN_CHARS = 64
"""A word longer than this is indexed and queried by its first 64 characters (as the English
query terms are), so no token can exceed an index's size limit for one lexeme."""


def normalise(text: str) -> str:
    """The form both a message and a query are indexed in: any ``str`` (lone surrogates, NUL),
    full-width / half-width folded by NFKC, lower case."""
    text = replace_lone_surrogates(text).replace("\x00", " ")
    return unicodedata.normalize("NFKC", text).lower()


def has_cjk(text: str) -> bool:
    return _CJK_CHAR.search(text) is not None


def _run_tokens(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)] + [run[-1]]


def cjk_index_tokens(text: str) -> list[str]:
    """The tokens a message is found by in the CJK index, in text order (positions matter for
    phrases); empty when the text holds no CJK character."""
    if text.isascii():
        return []  # every appended message passes here: ASCII cannot hold CJK, nor become it under NFKC
    text = normalise(text)
    if not has_cjk(text):
        return []
    tokens: list[str] = []
    for piece in _PIECE.finditer(text):
        if piece.group("cjk"):
            tokens.extend(_run_tokens(piece.group("cjk")))
        else:
            tokens.append(piece.group("word")[:MAX_TOKEN_CHARS])
    return tokens


def plain_words(normalised: str) -> list[str]:
    """The words of normalised text outside its CJK runs (python in pythonのコード): what the
    in-memory store counts, matching CJK words as substrings of the text instead."""
    return [piece.group("word") for piece in _PIECE.finditer(normalised) if piece.group("word")]


def cjk_index_text(text: str) -> str:
    """``cjk_index_tokens`` joined by spaces: the body FTS5's ``ascii`` tokenizer splits back."""
    return " ".join(cjk_index_tokens(text))


@dataclass(frozen=True)
class CJKTerm:
    """One query word for the CJK index: ``tokens`` adjacent in that order, the last one a
    prefix when ``prefix`` (a single CJK character)."""

    tokens: tuple[str, ...]
    prefix: bool = False
    text: str = ""
    """The normalised word itself (the in-memory store matches it as a substring)."""


PHRASE_CHARS = 4
"""A query's CJK word up to this long is looked for as it is written; a longer one that mixes
scripts, or a longer run of kanji / hanzi / Hangul alone, is a sentence rather than a word (see
``query_words``)."""


def _script(char: str) -> str:
    point = ord(char)
    if 0x3040 <= point <= 0x309F:
        return "hiragana"
    if 0x30A0 <= point <= 0x30FF or 0x31F0 <= point <= 0x31FF:
        return "katakana"
    if 0xAC00 <= point <= 0xD7FF or 0x1100 <= point <= 0x11FF or 0x3130 <= point <= 0x318F or 0xA960 <= point <= 0xA97F:
        return "hangul"
    return "han"


def query_words(run: str) -> list[str]:
    """The words a query's CJK run is looked for by. Without a dictionary, a long run is cut
    where the script changes (予算はどうなった -> 予算, どうなった; 妹の結婚式 -> 妹, 結婚式), dropping
    hiragana of one or two characters between other words (particles: の, は, を, から); a
    segment of kanji / hanzi / Hangul still longer than ``PHRASE_CHARS`` (a Chinese sentence)
    becomes its overlapping bigrams, each a word of its own. Katakana words stay whole."""
    if len(run) <= PHRASE_CHARS:
        return [run]
    segments: list[str] = []
    for char in run:
        if segments and _script(segments[-1][-1]) == _script(char):
            segments[-1] += char
        else:
            segments.append(char)
    kept = [seg for seg in segments if not (_script(seg[0]) == "hiragana" and len(seg) <= 2)] or [run]
    words: list[str] = []
    for seg in kept:
        if len(seg) > PHRASE_CHARS and _script(seg[0]) in ("han", "hangul"):
            words.extend(seg[i : i + 2] for i in range(len(seg) - 1))
        else:
            words.append(seg)
    return words


def cjk_query_terms(query: str, stop_words: frozenset[str], max_terms: int) -> list[CJKTerm]:
    """The distinct words of a query as CJK-index terms, English stop words dropped unless the
    query has nothing else, at most ``max_terms``."""
    terms: list[CJKTerm] = []
    for piece in _PIECE.finditer(normalise(query)):
        if run := piece.group("cjk"):
            found = [CJKTerm((word,), prefix=True, text=word) if len(word) == 1
                     else CJKTerm(tuple(word[i : i + 2] for i in range(len(word) - 1)), text=word)
                     for word in query_words(run[:MAX_TOKEN_CHARS])]
        else:
            word = piece.group("word")[:MAX_TOKEN_CHARS]
            found = [CJKTerm((word,), text=word)]
        for term in found:
            if term not in terms and len(terms) < max_terms:
                terms.append(term)
    meaningful = [t for t in terms if t.prefix or len(t.tokens) > 1 or t.tokens[0] not in stop_words]
    return meaningful or terms


def fts5_cjk_words(terms: Sequence[CJKTerm], *, every: bool = False) -> str:
    """The body part of an FTS5 MATCH for the CJK table: each term a quoted phrase (``"京都"``,
    ``"京"*``), ANDed when ``every``, else ORed. Tokens are ``\\w`` runs, never FTS5 syntax."""
    def phrase(term: CJKTerm) -> str:
        quoted = '"' + " ".join(term.tokens).replace('"', '""') + '"'
        return quoted + "*" if term.prefix else quoted

    return (" AND " if every else " OR ").join(phrase(term) for term in terms)


def _lexeme(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


def tsvector_literal(tokens: Sequence[str]) -> str:
    """A ``tsvector`` input with positions (``'京都':1 '都':2``), built here rather than by a
    text search parser, whose idea of a word in CJK text depends on the server's locale.
    Positions past PostgreSQL's limit (16383) are clamped by the server."""
    positions: dict[str, list[int]] = {}
    for index, token in enumerate(tokens, start=1):
        positions.setdefault(token, []).append(min(index, 16383))
    return " ".join(f"{_lexeme(token)}:{','.join(map(str, sorted(set(p))[:256]))}" for token, p in positions.items())


def tsquery_cjk(terms: Sequence[CJKTerm], *, every: bool = False) -> str:
    """A ``tsquery`` input (cast, not parsed) for the CJK table: phrases with ``<->``, a single
    character as a prefix (``'京':*``), ANDed when ``every``, else ORed."""
    def phrase(term: CJKTerm) -> str:
        if term.prefix:
            return _lexeme(term.tokens[0]) + ":*"
        return "(" + " <-> ".join(_lexeme(token) for token in term.tokens) + ")"

    return (" & " if every else " | ").join(phrase(term) for term in terms)
