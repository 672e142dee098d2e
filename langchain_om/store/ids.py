"""Ids as every store accepts them: the checks, the reserved forms OM builds, the keys built from them.

Ids are opaque strings a caller chooses; the separators OM uses to build keys (``\x1f``) and its
own private forms (``\x1e``: a thread's private resource, a branch) can never appear in one, so no
caller's id can name another's memory. Moved out of ``base`` (which re-exports every name here)
when the checks gained their memo of valid ids.
"""

from __future__ import annotations

import re
from typing import Any, cast


class InvalidStoreInput(ValueError):
    """Bad input to a store call; ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


def record_key(resource_id: str, thread_id: str | None) -> str:
    """Records are keyed by resource, plus thread in thread scope."""
    thread = thread_id if thread_id is not None else RESOURCE_SCOPE_THREAD
    return f"{resource_id}\x1f{thread}"


_CHECKED_LIMIT = 4096
_CHECKED_IDS: set[str] = set()
"""Strings that passed ``check_id`` with the default length bound. A turn checks the same few ids
some thirty times down its call chain (every store call checks its arguments); whether a string
is a valid id depends on nothing else, so a repeat costs a set lookup. Only valid strings are
kept (an invalid one runs the checks, and raises naming its field, every time); the set is
emptied when full, which only costs the next checks their scans."""
_CHECKED_THREADS: set[str] = set()
"""The same for ``check_thread_id`` (``"*"`` is an id but not a thread id, a branch id the reverse)."""
_CHECKED_RESOURCES: set[str] = set()
"""The same for the private resources ``check_resource_id`` accepts (explicit ones are ids)."""


def _remember(checked: set[str], value: str) -> None:
    if len(checked) >= _CHECKED_LIMIT:
        checked.clear()
    checked.add(value)


def check_id(value: Any, field: str, *, max_len: int = 512) -> str:
    """Ids are opaque non-empty strings; anything else is rejected with the field named."""
    if type(value) is str and max_len == 512 and value in _CHECKED_IDS:
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidStoreInput(field, "must be a non-empty string")
    if len(value) > max_len:
        raise InvalidStoreInput(field, f"must be at most {max_len} characters")
    if "\x00" in value:
        raise InvalidStoreInput(field, "must not contain NUL characters")
    if "\x1f" in value:
        # record_key joins ids with \x1f; allowing it would let two resources share a record key.
        raise InvalidStoreInput(field, "must not contain the unit separator (\\x1f)")
    if "\x1e" in value:
        # IMPLICIT_RESOURCE_PREFIX starts with \x1e: no explicit id may name a thread's private resource.
        raise InvalidStoreInput(field, "must not contain the record separator (\\x1e)")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # SQL stores cannot hold them, and the same id must be valid on every store.
            raise InvalidStoreInput(field, "must not contain lone surrogates (not valid Unicode text)") from None
    if max_len == 512 and type(value) is str:
        _remember(_CHECKED_IDS, value)
    return value


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, the copy that indexes and models get.

    Python strings may hold them (``os.fsdecode`` of a non-UTF-8 file name gives ``\\udcff``),
    but UTF-8 cannot: a full-text index, an embedder or a provider's HTTP body would fail on
    them. Stored messages keep the original (their JSON escapes it), so nothing is lost."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub("\ufffd", text)
    return text


IMPLICIT_RESOURCE_PREFIX = "\x1ethread:"
"""Resource ids of threads used without a resource: ``IMPLICIT_RESOURCE_PREFIX + thread_id``.

``check_id`` refuses ``\x1e`` in every id a caller passes, so no explicit ``resource_id`` (or
``user_id``) can ever name such a resource: a thread id chosen equal to another user's
resource id reaches nothing of that user."""


def implicit_resource(thread_id: str) -> str:
    """The private resource of a thread used without ``resource_id``."""
    return IMPLICIT_RESOURCE_PREFIX + check_thread_id(thread_id)


def check_resource_id(value: Any, field: str = "resource_id") -> str:
    """What a store accepts as a resource id: an explicit id, or a thread's private resource.

    The engine builds the private form (``implicit_resource``); public entry points check
    explicit ids with ``check_id``, which refuses it.
    """
    if type(value) is str and value in _CHECKED_RESOURCES:  # a thread's private resource checked before
        return value
    if isinstance(value, str) and value.startswith(IMPLICIT_RESOURCE_PREFIX):
        check_thread_id(value[len(IMPLICIT_RESOURCE_PREFIX):], field)
        if type(value) is str:
            _remember(_CHECKED_RESOURCES, value)
        return value
    return check_id(value, field)


RESOURCE_SCOPE_THREAD = "*"
"""The thread part of a resource-scope record's key; no real thread may carry this id."""


BRANCH_MARK = "\x1ebranch:"
"""Separates a thread id from its branch suffix in OM's internal branch thread ids
(``langchain_om.extensions.branches``): ``<thread>\x1ebranch:<suffix>``. Only OM makes them; like the
private resources, they hold ``\x1e``, which no caller's id may contain."""


def thread_key(thread_id: str) -> str:
    """A thread id as part of a key-value key: OM's branch ids hold ``\x1e``, which keys may not,
    so it is escaped (injectively: ``%`` is escaped first)."""
    return thread_id.replace("%", "%25").replace("\x1e", "%1E")


def check_thread_id(value: Any, field: str = "thread_id") -> str:
    """A thread id is an id that cannot be mistaken for the resource-scope record's key; OM's own
    branch ids (``BRANCH_MARK``) are a thread id, the mark and a suffix."""
    if type(value) is str and value in _CHECKED_THREADS:
        return value
    if isinstance(value, str) and BRANCH_MARK in value:
        root, _, suffix = value.partition(BRANCH_MARK)
        check_thread_id(root, field)
        check_id(suffix, field)
    else:
        thread_id = check_id(value, field)
        if thread_id == RESOURCE_SCOPE_THREAD:
            # record_key(r, "*") == record_key(r, None): deleting thread "*" would delete the resource's record.
            raise InvalidStoreInput(field, "must not be '*' (reserved for the resource-scope record)")
    if type(value) is str:
        _remember(_CHECKED_THREADS, value)
    return cast(str, value)
