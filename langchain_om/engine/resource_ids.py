"""Which resource a thread's memory lives under, checked once per pair of ids.

A turn resolves its thread's resource about six times (the step, the turn end, the branch check,
the position, the state trim); each resolution checks both ids (length, separators, surrogates).
The answer depends only on the two ids and the scope, so valid pairs are remembered (bounded);
an invalid pair is never remembered and raises every time, naming the field.
"""

from __future__ import annotations

from functools import lru_cache

from ..extensions.branches import branch_root
from ..foundation.config import OMConfigError
from ..store.base import check_id, check_thread_id, implicit_resource


def resolve(thread_id: str, resource_id: str | None, scope: str) -> str:
    """The caller's resource, else the thread's private one (``EngineCore.resolve_resource``)."""
    if type(thread_id) is str and (resource_id is None or type(resource_id) is str):
        return _remembered(thread_id, resource_id, scope)
    return _resolve(thread_id, resource_id, scope)  # not a string: the checks name the field


@lru_cache(maxsize=4096)
def _remembered(thread_id: str, resource_id: str | None, scope: str) -> str:
    return _resolve(thread_id, resource_id, scope)


def _resolve(thread_id: str, resource_id: str | None, scope: str) -> str:
    check_thread_id(thread_id)
    if resource_id is None:
        root = branch_root(thread_id)
        if root != thread_id:  # a branch of a thread (see branches.py) lives under that thread's resource
            return _resolve(root, None, scope)
        if scope == "resource":
            raise OMConfigError("resource_id", "is required when scope='resource'")
        return implicit_resource(thread_id)  # private to the thread: no explicit id can name it
    if resource_id == implicit_resource(thread_id):
        return resource_id  # resolved already (hooks and section providers pass it back): the same thread's
    return check_id(resource_id, "resource_id")
