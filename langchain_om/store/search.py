"""What every store needs for recall search: the text a message is indexed under, a safe
query, and the stored form of embedding vectors.

Keyword search runs on the store's own full-text index (SQLite FTS5, PostgreSQL
``tsvector``), written in the same transaction as the messages, so it needs no embedder and
survives restarts. A query is never passed to the index's query language as typed: it is
cut into words here (``\\w+``), and each word becomes a quoted term ORed with the others, so
quotes, ``*``, ``NEAR``, parentheses or ``:`` in a model's query are plain text, never syntax.

Vectors are stored as little-endian float32 bytes (SQLite ``BLOB``, PostgreSQL ``bytea``)
under an embedding *space* (which embedder made them), so vectors of two embedders are
never compared with each other.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .base import (  # the result types live with the store protocol that returns them
    InvalidStoreInput,
    SearchHit,
    VectorItem,
    check_id,
    check_resource_id,
    check_thread_id,
    replace_lone_surrogates,
)
from .cjk import CJKTerm, cjk_query_terms, fts5_cjk_words, has_cjk, normalise, plain_words

MAX_QUERY_CHARS = 10_000
"""Longest query a store accepts (recall itself stops at fewer); longer is an error, not a cut."""
MAX_QUERY_TERMS = 32
MAX_TERM_CHARS = 64
MAX_SEARCH_LIMIT = 100
MAX_VECTOR_DIM = 16_384
MAX_INDEXED_CHARS = 100_000
"""Characters of a message that are searchable (PostgreSQL's tsvector must stay under 1 MB)."""

_WORD = re.compile(r"\w+", re.UNICODE)


def _block_text(block: Any) -> str:
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return ""
    if block.get("type") in ("text", "output_text", "input_text"):
        return str(block.get("text") or "")
    return ""


def search_text(data: Mapping[str, Any], kind: str = "message") -> str:
    """The words a stored message is found by: its text (and a tool result's text) plus the
    names of tools it called. Temporal markers and system messages are not searchable."""
    if kind != "message" or not isinstance(data, Mapping):
        return ""
    if data.get("type") == "system":
        return ""
    inner = data.get("data")
    if not isinstance(inner, Mapping):
        return ""
    content = inner.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts.extend(_block_text(block) for block in content)
    calls = inner.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            if isinstance(call, Mapping) and isinstance(call.get("name"), str):
                texts.append(call["name"])
    if data.get("type") == "tool" and isinstance(inner.get("name"), str):
        texts.append(inner["name"])
    text = "\n".join(text for text in texts if text.strip()).replace("\x00", " ")
    # the index holds UTF-8: a lone surrogate is indexed as U+FFFD (the stored row keeps it)
    return replace_lone_surrogates(text[:MAX_INDEXED_CHARS])


def check_query(query: Any) -> str:
    """A query is text without NUL, at most ``MAX_QUERY_CHARS`` long."""
    if not isinstance(query, str):
        raise InvalidStoreInput("query", "must be a string")
    if "\x00" in query:
        raise InvalidStoreInput("query", "must not contain NUL characters")
    if len(query) > MAX_QUERY_CHARS:
        raise InvalidStoreInput("query", f"too long ({len(query)} characters, at most {MAX_QUERY_CHARS})")
    return query


STOP_WORDS = frozenset(
    "a about after all also am an and any are as at be been before but by can could did do does for from had has "
    "have he her him his how i if in into is it its me my no not of on or our out she so than that the their "
    "them then there these they this to too us was we were what when where which who why will with would you "
    "your".split()
)
"""English words too common to rank by; dropped from a query unless it has nothing else."""

RANK_CANDIDATES = 1_000
"""Most matches ranked per search: when a query's words occur in more messages than this, only
the newest this many are ranked (the cost of BM25 / ts_rank grows with every match: a common
word matches ~40% of 100k messages, and ranking them all takes 100-250 ms)."""


def query_terms(query: str) -> list[str]:
    """The distinct lower-cased words of a query without stop words (unless it is only stop
    words), at most ``MAX_QUERY_TERMS``, each cut to ``MAX_TERM_CHARS``; empty means nothing to find."""
    terms: list[str] = []
    for match in _WORD.finditer(query):
        term = match.group(0).lower()[:MAX_TERM_CHARS]
        if term not in terms:
            terms.append(term)
            if len(terms) == MAX_QUERY_TERMS:
                break
    meaningful = [term for term in terms if term not in STOP_WORDS]
    return meaningful or terms


def check_search_limit(limit: Any) -> int:
    """A positive result count, capped at ``MAX_SEARCH_LIMIT``."""
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise InvalidStoreInput("limit", "must be a positive integer")
    return min(limit, MAX_SEARCH_LIMIT)


def scope_token(prefix: str, value: str) -> str:
    """A single index token standing for a resource (``r``) or thread (``t``) id.

    Ids are arbitrary text; a hash is one plain alphanumeric word the full-text tokenizer keeps
    whole. It ends in a digit so no stemmer (which strips letter suffixes) can alter it.
    """
    return f"{prefix}{hashlib.sha256(value.encode()).hexdigest()[:32]}0"


def merge_ranked(every: Sequence[SearchHit], some: Sequence[SearchHit], limit: int) -> list[SearchHit]:
    """Hits holding every query word first, then those holding some; a later hit's score never
    exceeds an earlier one's, so scores stay in result order."""
    merged = list(every)
    seen = {(hit.message.thread_id, hit.message.id) for hit in every}
    ceiling = every[-1].score if every else None
    for hit in some:
        if len(merged) >= limit:
            break
        if (hit.message.thread_id, hit.message.id) in seen:
            continue
        if ceiling is not None and hit.score > ceiling:
            hit = hit.model_copy(update={"score": ceiling})
        merged.append(hit)
    return merged


def fts5_scope(resource_id: str, thread_id: str | None) -> str:
    """The part of an FTS5 MATCH that keeps a search inside the resource (and thread)."""
    scope = f'scope : "{scope_token("r", resource_id)}"'
    if thread_id is not None:
        scope += f' AND scope : "{scope_token("t", thread_id)}"'
    return scope


def fts5_match(terms: Sequence[str], resource_id: str, thread_id: str | None, *, every: bool = False) -> str:
    """An FTS5 MATCH expression: the resource's (and thread's) scope token AND any (``every``:
    all) of the terms, every term a quoted string (a quote inside doubled), so nothing typed is
    FTS5 syntax."""
    words = (" AND " if every else " OR ").join('"' + term.replace('"', '""') + '"' for term in terms)
    return f"{fts5_scope(resource_id, thread_id)} AND body : ({words})"


def fts5_cjk_match(terms: Sequence[CJKTerm], resource_id: str, thread_id: str | None, *, every: bool = False) -> str:
    """``fts5_match`` for the CJK table: phrases of bigrams and one-character prefixes."""
    return f"{fts5_scope(resource_id, thread_id)} AND body : ({fts5_cjk_words(terms, every=every)})"


def tsquery_text(terms: Sequence[str], *, every: bool = False) -> str:
    """A ``to_tsquery`` input ORing (``every``: ANDing) the terms, each a quoted lexeme (quotes
    and backslashes escaped), so nothing typed is tsquery syntax."""
    return (" & " if every else " | ").join(
        "'" + term.replace("\\", "\\\\").replace("'", "''") + "'" for term in terms)


def check_space(space: Any) -> str:
    """The embedding space name (which embedder made the vectors)."""
    return check_id(space, "space", max_len=256)


def encode_vector(values: Sequence[float]) -> bytes:
    """Little-endian float32 bytes of an embedding: finite numbers only (``finite_vector``)."""
    if not values or len(values) > MAX_VECTOR_DIM:
        raise InvalidStoreInput("vector", f"must have 1..{MAX_VECTOR_DIM} dimensions")
    try:
        blob = struct.pack(f"<{len(values)}f", *values)
    except (OverflowError, struct.error, TypeError):
        raise InvalidStoreInput("vector", "must hold numbers a float32 can hold") from None
    if not finite_vector(blob):
        raise InvalidStoreInput("vector", NON_FINITE)
    return blob


NON_FINITE = "must hold finite numbers (a NaN or an infinity is not a direction)"


def finite_vector(blob: bytes) -> bool:
    """Whether float32 bytes hold no NaN and no infinity. A stored vector must: its cosine with
    any query is NaN, which the index can neither rank nor bound (one such vector made recall's
    semantic search find nothing while a resource had fewer than k finite ones)."""
    return all(map(math.isfinite, struct.unpack(f"<{len(blob) // 4}f", blob)))


def decode_vector(blob: bytes) -> list[float]:
    """The floats of ``encode_vector`` bytes."""
    return list(struct.unpack(f"<{len(blob) // 4}f", blob))


def check_vector_items(items: Any) -> list[VectorItem]:
    """Vector items with valid ids and float32 payloads."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise InvalidStoreInput("items", "must be a sequence of VectorItem")
    checked: list[VectorItem] = []
    for index, item in enumerate(items):
        if not isinstance(item, VectorItem):
            raise InvalidStoreInput(f"items[{index}]", "must be a VectorItem")
        check_id(item.thread_id, f"items[{index}].thread_id")
        check_id(item.message_id, f"items[{index}].message_id")
        size = len(item.vector)
        if size == 0 or size % 4 or size // 4 > MAX_VECTOR_DIM:
            raise InvalidStoreInput(f"items[{index}].vector", "must be float32 bytes (encode_vector)")
        if not finite_vector(item.vector):
            raise InvalidStoreInput(f"items[{index}].vector", NON_FINITE)
        checked.append(item)
    return checked


@dataclass(frozen=True)
class KeywordQuery:
    """A query as both indexes read it. ``english``: the words for the stemmed English index
    (those without a CJK character). ``cjk``: every word for the CJK index (``store.cjk``), CJK
    runs as bigram phrases or one-character prefixes, other words as they are (it finds an
    English word written inside a Japanese sentence, which the English index holds glued to its
    neighbours). ``cjk_first``: the query holds CJK text, so the CJK index ranks first and the
    English one fills the rest; otherwise the other way round."""

    english: list[str]
    cjk: list[CJKTerm]
    cjk_first: bool

    def __bool__(self) -> bool:
        return bool(self.english or self.cjk)


def keyword_query(query: str) -> KeywordQuery:
    """The terms of a checked query for each index (empty means nothing to find)."""
    normalised = normalise(query)
    english = query_terms(" ".join(plain_words(normalised)))
    cjk = cjk_query_terms(query, STOP_WORDS, MAX_QUERY_TERMS)
    return KeywordQuery(english=english, cjk=cjk, cjk_first=has_cjk(normalised))


def search_arguments(
    resource_id: Any, query: Any, thread_id: Any, limit: Any
) -> tuple[str, str | None, KeywordQuery, int]:
    """``asearch_messages``' arguments checked the same way on every store: the resource, the
    thread (or None), the query's terms for each index and the result count."""
    resource = check_resource_id(resource_id)
    thread = check_thread_id(thread_id) if thread_id is not None else None
    return resource, thread, keyword_query(check_query(query)), check_search_limit(limit)

