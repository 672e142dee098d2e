"""An optional fast path of a store: one JSON field of a thread's messages, looked up by id.

A process's first step on a thread looks up every id its caller hands over (a client that sends
the whole history hands over all of them) to tell new messages from stored ones and edits from
unchanged ones. For that it needs each stored message's ``seq`` and content fingerprint, which
OM keeps inside the stored JSON. Reading and parsing whole rows costs tens of microseconds a
message; a store that extracts the one field in SQL answers in a few. Stores without it keep
working through ``aget_messages_by_ids``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol, runtime_checkable

FINGERPRINT_PATH = ("data", "response_metadata", "om_tokens", "content_hash")
"""Where OM keeps a stored message's content fingerprint inside its JSON (the token counter's
cache entry, ``foundation.tokens.CACHE_KEY``). Since schema version 9 the SQL stores also keep
it in the ``fingerprint`` column, written with the row, so a lookup of this path reads the
column instead of parsing JSON (rows the v9 backfill has not reached fall back to the JSON)."""


def stored_fingerprint(data: Mapping[str, Any]) -> str | None:
    """The string at ``FINGERPRINT_PATH`` in a message's stored JSON, or None (the column's value)."""
    value: Any = data
    for key in FINGERPRINT_PATH:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value if isinstance(value, str) else None


class MessageField(NamedTuple):
    """One stored row's place and the string at the asked path (None when absent or not a string)."""

    id: str
    seq: int
    kind: str
    value: str | None


@runtime_checkable
class SupportsFieldLookup(Protocol):
    async def aget_message_fields(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str], path: Sequence[str]
    ) -> list[MessageField]:
        """The thread's rows among ``message_ids`` (any order), each with the string found by
        following the keys of ``path`` through its stored ``data``."""


def json_path(path: Sequence[str]) -> str:
    """``path`` as an SQLite JSON path with every key quoted (keys may hold dots)."""
    if not path or any(not isinstance(key, str) or '"' in key for key in path):
        raise ValueError(f"path: expected keys without double quotes, got {list(path)!r}")
    return "$" + "".join(f'."{key}"' for key in path)
