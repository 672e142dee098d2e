"""Whether a step runs from the past: the fork check of ``branches.aresolve``.

A step continues its branch unless OM has stored a row there that the caller's state never had.
With a checkpointed position that is a question about the branch's last seq; without one (no
checkpointer, a stateless API, a checkpoint from before OM's first step) it is asked of the
branch's newest rows and the state's ids, and a state that shares no stored message never forks.
Each read here is bounded: its cost never grows with the stored history.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from langchain_core.messages import BaseMessage

from ..store.step_fast_paths import SupportsForkProbe, supports

if TYPE_CHECKING:
    from .host import MemoryHost

_SCAN_LIMIT = 256  # rows read past a position to tell a retried step from a fork
_NEWEST_PAGE = 8  # rows read from the newest end to find the newest message (edits are rare)
_FIRST_PAGE = 2  # the first such read: it also tells an empty branch, so no separate last-seq read


async def afork_point(
    om: MemoryHost, resolved: str, branch: str, position_seq: int | None, messages: Sequence[BaseMessage],
) -> int | None:
    """The ``seq`` on ``branch`` the caller's state stands at when OM has stored a later row the
    state never had (the caller runs from the past); None when the step continues the branch.
    ``position_seq``: the last seq the checkpoint's position saw (None: the state has no position)."""
    if position_seq is not None:
        last = await om.store.alast_seq(resolved, branch)
        if last <= position_seq:
            return None  # the common case: one small read
        later = await om.store.aget_messages(resolved, branch, after_seq=position_seq, limit=_SCAN_LIMIT)
        incoming = _ids(messages)
        # rows a failed or retried step stored from this very state are in it: not a fork
        if len(later) < _SCAN_LIMIT and all(r.kind != "message" or r.id in incoming for r in later):
            return None
        return position_seq
    incoming = _ids(messages)
    if not incoming:
        return None
    # a checkpoint from before OM's first step, or a caller with no checkpointer (no position):
    # the caller runs from the past when the branch holds a message newer than the newest one
    # the state holds. Cost: the newest rows and an id lookup, never a walk down the history.
    if supports(om.store, SupportsForkProbe):  # both reads in one call
        probe = cast("SupportsForkProbe", om.store)
        top, found = await probe.afork_probe(resolved, branch, sorted(incoming), _FIRST_PAGE)
        newest = _newest_in(top, incoming)
        if newest == _PAGE_ON:  # the newest rows are edits or markers: page on as below
            newest = await _newest_message_seq(om, resolved, branch, incoming, before=top[-1][0])
        if newest is None:
            return None
        held = [seq for _id, seq, kind in found if kind == "message" and seq < newest]
        return max(held) if held else None
    newest = await _newest_message_seq(om, resolved, branch, incoming)
    if newest is None:
        return None  # an empty branch, or the newest stored message is in the state: it continues
    found_rows = await om.store.aget_messages_by_ids(resolved, branch, sorted(incoming))
    held = [row.seq for row in found_rows if row.kind == "message" and row.seq < newest]
    # none held: the state shares nothing with the stored thread (a stateless caller sending
    # only its new messages), so there is nothing to go back to
    return max(held) if held else None


_PAGE_ON = -1  # ``_newest_in``: no message among the rows read, and older rows may hold one


def _newest_in(top: list[tuple[int, str, str]], incoming: set[str]) -> int | None:
    """``_newest_message_seq`` over the first page a fork probe read (``(seq, id, kind)``)."""
    for seq, mid, kind in top:
        if kind == "message":
            return None if mid in incoming else seq
    return _PAGE_ON if len(top) == _FIRST_PAGE else None


async def _newest_message_seq(om: MemoryHost, resolved: str, branch: str, incoming: set[str], *,
                              before: int | None = None) -> int | None:
    """The ``seq`` of the branch's newest message row, or None when the branch holds none or the
    state holds that message. The first page is the newest two rows (the newest row is nearly
    always a message: the last reply); edit and marker rows page on."""
    while True:
        page = _FIRST_PAGE if before is None else _NEWEST_PAGE
        rows = await om.store.aget_messages(resolved, branch, before_seq=before, limit=page, descending=True)
        if not rows:
            return None
        for row in rows:
            if row.kind == "message":
                return None if row.id in incoming else row.seq
        before = rows[-1].seq


def _ids(messages: Sequence[BaseMessage]) -> set[str]:
    return {m.id for m in messages if isinstance(m, BaseMessage) and m.id}


def new_ids(om: MemoryHost, resolved: str, branch: str, messages: Sequence[BaseMessage]) -> frozenset[str] | None:
    """The state's ids when every one is likely a message this step appends (none known as stored,
    no system message: an instruction is never appended); None when the append cannot prove it."""
    if not messages or any(getattr(m, "type", None) == "system" for m in messages):
        return None
    incoming = frozenset(_ids(messages))
    return incoming if incoming and om.knows_none_of(resolved, branch, incoming) else None
