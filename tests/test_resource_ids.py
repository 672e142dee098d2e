"""Resolving a thread's resource is remembered per pair of ids (``engine/resource_ids.py``): a
remembered answer must be the checked one, per scope, and a bad id must fail every time."""

from __future__ import annotations

import pytest

from langchain_om.engine.resource_ids import resolve
from langchain_om.foundation.config import OMConfigError
from langchain_om.store.base import BRANCH_MARK, InvalidStoreInput, implicit_resource


@pytest.mark.parametrize("thread", ["thread-1", "スレッド🙂"])
def test_a_remembered_resolution_is_the_checked_one(thread: str) -> None:
    for _ in range(2):  # the second answer comes from memory
        assert resolve(thread, None, "thread") == implicit_resource(thread)
        assert resolve(thread, "ユーザー", "thread") == "ユーザー"
        assert resolve(f"{thread}{BRANCH_MARK}abc", None, "thread") == implicit_resource(thread)
        assert resolve(thread, implicit_resource(thread), "thread") == implicit_resource(thread)
        # the scope is part of the question: resource scope needs an explicit resource
        with pytest.raises(OMConfigError, match="resource_id"):
            resolve(thread, None, "resource")
        assert resolve(thread, "user-1", "resource") == "user-1"


@pytest.mark.parametrize("bad", ["", "a\x1fb", "x\x00", "\ud800", implicit_resource("other")])
def test_a_bad_id_fails_every_time(bad: str) -> None:
    for _ in range(2):
        with pytest.raises(InvalidStoreInput, match="resource_id"):
            resolve("thread-1", bad, "thread")
        with pytest.raises(InvalidStoreInput, match="thread_id"):
            resolve(bad or "*", None, "thread")
    with pytest.raises(InvalidStoreInput, match="thread_id"):
        resolve(["not", "hashable"], None, "thread")  # type: ignore[arg-type]
    with pytest.raises(InvalidStoreInput, match="resource_id"):
        resolve("thread-1", 42, "thread")  # type: ignore[arg-type]
