"""Property-based tests of recall paging (hypothesis), on the in-memory store and SQLite.

For random thread lengths, limits, page numbers and cursors, the ``recall`` tool's pages must
match a plain model of the thread (messages ``1..n`` in order):

- walking forward (``page=1, 2, ...`` from the start, or from a cursor) until ``has_next_page``
  is false returns every message exactly once, pages disjoint and in order;
- walking backward (``anchor="end"`` pages, negative pages, negative pages from a cursor) until
  ``has_prev_page`` is false mirrors the forward walk;
- ``page=0`` is ``page=1``; the first page has no previous page, the newest no next page;
- any single page equals the model's slice, flags included;
- no page ever shows a message of another thread or another resource.

One engine per store is seeded lazily (a thread per drawn length, next to noise threads of the
same and of another resource) and reused across examples, so the whole module stays fast.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from recall_helpers import chat, make_om, result_dict, seed

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import RecallTool
from langchain_om.store import InMemoryStore, SQLiteStore

MAX_LENGTH = 45
MAX_LIMIT = 12
PAGE_CAP = 200  # a walk never needs more calls than messages + 1

_ID = re.compile(r"--- message (\S+) ·")


class Harness:
    """An engine on one store and its own event loop; threads of any length on demand."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.loop = asyncio.new_event_loop()
        store = InMemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "recall-props.db")
        self.om: ObservationalMemory = make_om(store, scope="resource")
        self.threads: dict[int, list[str]] = {}
        self.tools: dict[int, RecallTool] = {}
        self.run(seed(self.om, "u1", {"noise": chat("noise", 7)}))
        self.run(seed(self.om, "u2", {"foreign": chat("foreign", 7)}))

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def thread(self, length: int) -> tuple[RecallTool, list[str]]:
        """The tool bound to a thread of ``length`` messages, and the thread's ids in order."""
        if length not in self.threads:
            name = f"len{length}"
            messages = chat(name, (length + 1) // 2, words=2)[:length]
            if messages:
                self.run(seed(self.om, "u1", {name: messages}))
            self.threads[length] = [str(m.id) for m in messages]
            self.tools[length] = RecallTool(memory=self.om, bound_thread_id=name, bound_resource_id="u1",
                                            max_output_tokens=200_000)
        return self.tools[length], self.threads[length]

    def call(self, tool: RecallTool, args: dict[str, Any]) -> dict[str, Any]:
        out = result_dict(self.run(tool.ainvoke(args)))
        text = out["messages"]
        assert "truncated" not in out, args
        assert "noise" not in text and "foreign" not in text, (args, text)
        assert out["thread_id"] == tool.bound_thread_id
        return out

    def close(self) -> None:
        self.run(self.om.store.aclose())
        self.loop.close()


@pytest.fixture(scope="module", params=["memory", "sqlite"])
def harness(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    h = Harness(str(request.param), tmp_path_factory.mktemp(f"recall-{request.param}"))
    yield h
    h.close()


def ids(out: dict[str, Any]) -> list[str]:
    return _ID.findall(out["messages"])


def model_page(n: int, lo: int, hi: int) -> tuple[list[int], bool, bool]:
    """Seqs ``lo..hi`` clipped to ``1..n``, and whether older / newer messages exist."""
    seqs = [s for s in range(max(lo, 1), min(hi, n) + 1)]
    return seqs, min(lo - 1, n) >= 1, n > max(hi, 0)


def expected(n: int, limit: int, page: int, *, anchor: str = "start", cursor_seq: int | None = None
             ) -> tuple[list[int], bool, bool]:
    page = page or 1
    if cursor_seq is not None:
        if page > 0:
            return model_page(n, cursor_seq + (page - 1) * limit, cursor_seq + page * limit - 1)
        k = -page
        return model_page(n, cursor_seq - k * limit + 1, cursor_seq - (k - 1) * limit)
    if anchor == "start" and page > 0:
        return model_page(n, 1 + (page - 1) * limit, page * limit)
    k = abs(page)
    return model_page(n, n - k * limit + 1, n - (k - 1) * limit)


def walk(h: Harness, tool: RecallTool, base: dict[str, Any], pages: Iterator[int], flag: str) -> list[list[str]]:
    chunks: list[list[str]] = []
    for page in pages:
        out = h.call(tool, {**base, "page": page})
        chunks.append(ids(out))
        assert out["count"] == len(chunks[-1])
        if not out[flag]:
            return chunks
        assert len(chunks) <= PAGE_CAP
    raise AssertionError("walk did not end")


def forward_pages() -> Iterator[int]:
    page = 1
    while True:
        yield page
        page += 1


def backward_pages() -> Iterator[int]:
    page = -1
    while True:
        yield page
        page -= 1


def flat(chunks: list[list[str]]) -> list[str]:
    return [i for chunk in chunks for i in chunk]


PROPS = settings(max_examples=60, deadline=None, database=None,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

lengths = st.integers(min_value=0, max_value=MAX_LENGTH)
limits = st.integers(min_value=1, max_value=MAX_LIMIT)


@PROPS
@given(n=lengths, limit=limits)
def test_walks_cover_every_message_once(harness: Harness, n: int, limit: int) -> None:
    tool, all_ids = harness.thread(n)
    forward = walk(harness, tool, {"limit": limit}, forward_pages(), "has_next_page")
    assert flat(forward) == all_ids  # disjoint, in order, complete
    assert all(forward) or n == 0  # no empty page inside a walk
    assert all(len(chunk) == limit for chunk in forward[:-1])
    # backward: anchor="end" pages 1, 2, ...; negative pages -1, -2, ... with either anchor
    for anchor, pages in (("end", forward_pages()), ("start", backward_pages()), ("end", backward_pages())):
        backward = walk(harness, tool, {"limit": limit, "anchor": anchor}, pages, "has_prev_page")
        assert flat(list(reversed(backward))) == all_ids
        assert all(len(chunk) == limit for chunk in backward[:-1])
    first = harness.call(tool, {"limit": limit})
    assert not first["has_prev_page"] and first["has_next_page"] == (n > limit)
    newest = harness.call(tool, {"limit": limit, "page": -1})
    assert not newest["has_next_page"] and newest["has_prev_page"] == (n > limit)
    for anchor in ("start", "end"):
        zero = harness.call(tool, {"limit": limit, "anchor": anchor, "page": 0})
        one = harness.call(tool, {"limit": limit, "anchor": anchor, "page": 1})
        assert ids(zero) == ids(one) and zero["page"] == one["page"] == 1
        assert (zero["has_next_page"], zero["has_prev_page"]) == (one["has_next_page"], one["has_prev_page"])


@PROPS
@given(n=lengths, limit=limits, page=st.integers(min_value=-60, max_value=60), anchor=st.sampled_from(["start", "end"]))
def test_any_page_matches_the_model(harness: Harness, n: int, limit: int, page: int, anchor: str) -> None:
    tool, all_ids = harness.thread(n)
    out = harness.call(tool, {"limit": limit, "page": page, "anchor": anchor})
    seqs, has_prev, has_next = expected(n, limit, page, anchor=anchor)
    assert ids(out) == [all_ids[s - 1] for s in seqs]
    assert (out["has_prev_page"], out["has_next_page"]) == (has_prev, has_next)
    assert out["page"] == (page or 1) and out["limit"] == limit and out["cursor"] is None


@PROPS
@given(data=st.data(), n=st.integers(min_value=1, max_value=MAX_LENGTH), limit=limits)
def test_cursor_pages_match_the_model_and_mirror(harness: Harness, data: st.DataObject, n: int, limit: int) -> None:
    tool, all_ids = harness.thread(n)
    c = data.draw(st.integers(min_value=0, max_value=n - 1), label="cursor index")
    cursor = all_ids[c]
    page = data.draw(st.integers(min_value=-25, max_value=25), label="page")
    out = harness.call(tool, {"cursor": cursor, "limit": limit, "page": page})
    seqs, has_prev, has_next = expected(n, limit, page, cursor_seq=c + 1)
    assert ids(out) == [all_ids[s - 1] for s in seqs]
    assert (out["has_prev_page"], out["has_next_page"]) == (has_prev, has_next)
    assert out["cursor"] == cursor
    forward = walk(harness, tool, {"cursor": cursor, "limit": limit}, forward_pages(), "has_next_page")
    assert flat(forward) == all_ids[c:]
    backward = walk(harness, tool, {"cursor": cursor, "limit": limit}, backward_pages(), "has_prev_page")
    assert flat(list(reversed(backward))) == all_ids[: c + 1]
    zero = harness.call(tool, {"cursor": cursor, "limit": limit, "page": 0})
    assert ids(zero) == forward[0]
