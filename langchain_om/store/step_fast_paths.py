"""Optional store methods that fold a warm step's store calls into fewer.

On PostgreSQL each store call is a pool checkout and each statement a network round trip, both
Python CPU in psycopg; a warm agent turn made 9 store calls, now 5 (``tests/test_store_round_trips.py``
pins the figures). Every method here is optional: the engine falls back to the plain reads of
``OMStore`` for a store without it.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

from .base import NewMessage, RecordStamp, StoredMessage


@runtime_checkable
class SupportsIncarnationAppend(Protocol):
    """Optional fast path of a store: an append that first checks, in the same transaction, that
    the thread is still the incarnation the caller knows (its ``created_at``).

    The engine checks the incarnation before every append (another worker may have deleted and
    re-created the thread, and its caches describe the old one); a separate read cost a round
    trip per append. Stores without it keep the separate read."""

    async def aappend_to_incarnation(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime
    ) -> list[StoredMessage] | None:
        """``aappend_messages`` when ``resource_id`` owns the thread and its ``created_at`` is
        ``born``; otherwise None, with nothing written (the caller re-checks and retries)."""


ThreadHead = tuple[int, RecordStamp | None]
"""A thread's last ``seq`` and a record's stamp, read together (``SupportsThreadHead``)."""


@runtime_checkable
class SupportsHeadAppend(Protocol):
    """Optional fast path of a store: ``aappend_to_incarnation`` that also answers the thread's head
    (its last ``seq`` after the append and a record's stamp), read in the append's transaction.

    A step reads that head right after appending (the window's refresh and the record check), and
    the middleware again after the turn's final answer (the checkpoint's position): on SQLite two
    more statements and inline calls per turn, for values the append's transaction already holds;
    on PostgreSQL two more round trips, and the fork check's read (``at_most``) a third."""

    async def aappend_with_head(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime,
        record_thread: str | None, at_most: int | None = None,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        """``aappend_to_incarnation``, with ``aget_thread_head(resource_id, thread_id, record_thread)``
        as of the append's commit; None, with nothing written, on another incarnation. ``at_most``:
        when the thread's last seq is above it, nothing is written and the head says so (a step's
        deferred fork check, ``extensions/branches.py``)."""


@runtime_checkable
class SupportsNewAppend(Protocol):
    """Optional fast path of a store: ``aappend_with_head`` that writes nothing at all when the
    thread already holds any of the messages' ids.

    A step without a checkpointed position (no checkpointer, a stateless API) is checked for
    running from the past: the branch must not hold one of the state's messages below a newer one.
    When the state holds only messages this append brings, an append that proves none of them was
    stored is that check, in the append's own transaction: the fork probe's call and its two reads
    go (``extensions/branches.py``, ``engine.persistence.ONLY_NEW``)."""

    async def aappend_new_with_head(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage], born: datetime,
        record_thread: str | None,
    ) -> tuple[list[StoredMessage], ThreadHead] | None:
        """``aappend_with_head``; when any id of ``messages`` is already stored in the thread, the
        transaction rolls back and the answer holds no rows (and the head before it)."""


ForkProbe = tuple[list[tuple[int, str, str]], list[tuple[str, int, str]]]
"""``afork_probe``'s answer: the newest rows as ``(seq, id, kind)``, newest first, and the rows of
the asked ids as ``(id, seq, kind)``."""


@runtime_checkable
class SupportsForkProbe(Protocol):
    """Optional fast path of a store: the two reads of a step's fork check in one call.

    A caller without a checkpointed position (no checkpointer, a stateless API) is checked on
    every step for running from the past: the branch's newest rows, and which of the state's
    ids the branch holds. Apart they cost two round trips per step. Stores without it answer in
    two reads (``aget_messages`` newest first, ``aget_messages_by_ids``)."""

    async def afork_probe(self, resource_id: str, thread_id: str, message_ids: Sequence[str],
                          newest: int) -> ForkProbe:
        """The ``newest`` newest rows of the thread and the rows of ``message_ids`` it holds,
        id, ``seq`` and kind only (no message bodies)."""


_SUPPORTS: weakref.WeakKeyDictionary[Any, dict[type, bool]] = weakref.WeakKeyDictionary()


def supports(store: Any, protocol: type) -> bool:
    """``isinstance(store, protocol)`` for the optional fast paths, answered once per store: a
    runtime protocol's check costs ~5 us, and a step asks several times. (A store is expected to
    keep the methods it had; one that drops a fast path later keeps being offered it.)"""
    try:
        known = _SUPPORTS.get(store)
        if known is None:
            known = _SUPPORTS[store] = {}
    except TypeError:  # a store that cannot be weakly referenced or hashed: ask every time
        return isinstance(store, protocol)
    found = known.get(protocol)
    if found is None:
        found = known[protocol] = isinstance(store, protocol)
    return found
