"""The id checks remember valid ids (issue 33, item 3): a turn checks the same few ids some thirty
times down its call chain. A remembered answer must be the answer the checks give: each check
keeps its own memo, since an id valid for one (``"*"`` as an id, a branch id as a thread id, a
private resource as a resource) is refused by another, and an invalid id is refused every time.
"""

from __future__ import annotations

import pytest

from langchain_om.store import ids
from langchain_om.store.base import (
    BRANCH_MARK,
    InvalidStoreInput,
    check_id,
    check_resource_id,
    check_thread_id,
    implicit_resource,
)


@pytest.mark.parametrize("thread", ["chat-1", "会話スレッド", "thread 🙂"])
def test_each_check_keeps_its_own_answers(thread: str) -> None:
    branch = f"{thread}{BRANCH_MARK}abc123"
    private = implicit_resource(thread)
    for _ in range(2):  # the second round answers from the memos
        assert check_id(thread, "x") == thread
        assert check_thread_id(branch) == branch
        assert check_resource_id(private) == private
        assert check_id("*", "x") == "*"
        with pytest.raises(InvalidStoreInput, match=r"^thread_id: must not be '\*'"):
            check_thread_id("*")
        with pytest.raises(InvalidStoreInput, match=r"^resource_id: must not contain the record separator"):
            check_id(branch, "resource_id")  # a branch is OM's thread, never a caller's id
        with pytest.raises(InvalidStoreInput, match=r"^thread_id: must not contain the record separator"):
            check_thread_id(private)  # a private resource is not a thread
        with pytest.raises(InvalidStoreInput, match=r"^resource_id: must not contain the record separator"):
            check_id(private, "resource_id")


@pytest.mark.parametrize("bad", ["", " ", "a\x00b", "a\x1fb", "x" * 513, "ユーザー\ud800"])
def test_an_invalid_id_is_refused_every_time_naming_the_field(bad: str) -> None:
    for field in ("resource_id", "thread_id", "message_ids"):
        with pytest.raises(InvalidStoreInput, match=f"^{field}: "):
            check_id(bad, field)
        with pytest.raises(InvalidStoreInput, match=f"^{field}: "):
            check_thread_id(bad, field)


def test_a_longer_bound_is_checked_apart_and_the_memo_stays_bounded() -> None:
    long_id = "長" * 600
    assert check_id(long_id, "title", max_len=1000) == long_id
    with pytest.raises(InvalidStoreInput, match=r"^resource_id: must be at most 512"):
        check_id(long_id, "resource_id")  # valid under 1000, not under the default 512
    for i in range(ids._CHECKED_LIMIT + 10):
        check_id(f"user-{i}", "resource_id")
    assert len(ids._CHECKED_IDS) <= ids._CHECKED_LIMIT
    assert check_id("user-1", "resource_id") == "user-1"
