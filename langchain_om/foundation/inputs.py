"""Sorting a step's input: the caller's system messages, new messages, and edits of known ones.

* **System messages are instructions, not conversation.** A caller's ``SystemMessage`` (a
  persona, house rules) is never stored as a message, never shown to the Observer and never
  observed away. OM keeps the thread's latest instructions in the record's metadata, so a
  caller that sends them once (chat-history style) keeps them, and a caller that sends them
  every step (graph state) replaces them only when they change.
* **Edits are honoured.** LangGraph's ``add_messages`` replaces a message by id, so a message
  re-sent under a known id with other content is an edit. OM keeps a fingerprint per stored id;
  an edit of an unobserved message replaces the stored copy, an edit of an observed one is
  stored as a new ``edit`` row (the raw history keeps both versions) which the Observer reads
  as a correction of the earlier message in its next cycle.

Detecting an edit costs nothing for the messages the caller passed last step as the same
objects (one list comparison in C, on pointers); only a list that changed otherwise (an edit, a
removal, objects deserialised again from a checkpoint) is walked in Python, fingerprinting the
known messages OM has not seen as objects yet (a crc32 of their content). A step stays O(new or
changed messages) in Python work, and never reads the stored history.
"""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, NamedTuple

from langchain_core.messages import BaseMessage, ChatMessage, SystemMessage

from ..store.base import NewMessage, StoredMessage
from .messages import dump_message, load_message
from .tokens import CACHE_KEY, _fingerprint

OM_SYSTEM_PREFIX = "langchain-om-"
EDIT_ROLE = "edit"
EDIT_OF = "om_edit_of"
EDIT_TYPE = "om_edit_type"
INSTRUCTIONS_KEY = "instructions"


class KnownMessage(NamedTuple):
    """What OM remembers of a stored message: its fingerprint and where it stands."""

    fingerprint: str
    seq: int


def message_fingerprint(message: BaseMessage) -> str:
    """A cheap change detector over what a model reads of a message (content, tool calls, name)."""
    return _fingerprint(message)


def _row_fingerprint(row: StoredMessage) -> str:
    cached = ((row.data.get("data") or {}).get("response_metadata") or {}).get(CACHE_KEY)
    if isinstance(cached, Mapping) and isinstance(cached.get("content_hash"), str):
        return str(cached["content_hash"])
    return message_fingerprint(load_message(row.data))


def known_from_rows(rows: Iterable[StoredMessage]) -> dict[str, KnownMessage]:
    """Fingerprints of stored rows; an ``edit`` row stands for the newest version of its message."""
    known: dict[str, KnownMessage] = {}
    for row in rows:
        if row.kind == "edit":
            original = ((row.data.get("data") or {}).get("additional_kwargs") or {}).get(EDIT_OF)
            if isinstance(original, str) and original in known:
                known[original] = KnownMessage(_row_fingerprint(row), known[original].seq)
            continue
        known[row.id] = KnownMessage(_row_fingerprint(row), row.seq)
    return known


def is_om_message(message: BaseMessage) -> bool:
    """OM's own context message, which a caller's state may carry back (graph nodes)."""
    return bool(message.id) and str(message.id).startswith(OM_SYSTEM_PREFIX)


def is_edit_message(message: BaseMessage) -> bool:
    return isinstance(message, ChatMessage) and message.role == EDIT_ROLE


@dataclass
class SortedInputs:
    instructions: list[BaseMessage] = field(default_factory=list)
    fresh: list[BaseMessage] = field(default_factory=list)
    edited: list[BaseMessage] = field(default_factory=list)


def sort_inputs(
    messages: Sequence[BaseMessage],
    known: Mapping[str, KnownMessage],
    seen: MutableMapping[str, BaseMessage],
    previous: list[BaseMessage] | None = None,
    remember: int | None = None,
) -> SortedInputs:
    """Split the caller's messages into instructions, new messages and edits of known ones.

    New messages are those after the newest known one (as before: an unknown message older
    than a known one is a message the caller dropped and brought back, not a new turn).
    ``seen`` maps ids to the message objects OM last saw; an identical object is unchanged.

    ``previous`` is a copy of the caller's list at the last step (updated in place). When the
    caller's list still starts with exactly those messages, only the tail is looked at: the
    comparison runs in C on pointers, so a caller that hands over a long history every step
    pays microseconds, not a pass over its history in Python.

    ``remember`` bounds how many of the newest unchanged known messages go into ``seen``
    (None: all of them).
    """
    out = SortedInputs()
    listed = messages if type(messages) is list else list(messages)
    start = 0
    if previous is not None:
        known_len = _length(previous)
        if known_len and len(listed) >= known_len and _same_messages(listed, previous):
            start = known_len
        if start == 0:
            previous[:] = listed
            if isinstance(previous, CallerList):  # read again when the next step needs it
                previous.reading, previous.copies, previous.released = None, False, 0
    last_known = -1
    conversation: list[BaseMessage] = []
    unchanged: list[BaseMessage] = []
    # names bound once: a cold step walks every message a client hands over (50k of them)
    fingerprint, known_get, seen_get = _fingerprint, known.get, seen.get
    for message in listed[start:] if start else listed:
        if not isinstance(message, BaseMessage):
            raise TypeError(f"messages: expected LangChain BaseMessage objects, got {type(message).__name__}")
        kind = message.type
        if kind == "remove":
            continue
        if kind == "system":
            if not is_om_message(message):
                out.instructions.append(message)
            continue
        mid = message.id
        entry = known_get(mid) if mid else None
        if entry is not None and mid:
            last_known = len(conversation)
            before = seen_get(mid)
            # the same content object is not enough on its own: "" (a tool-calling AI message) is
            # one object everywhere, and a model_copy keeps the content while changing its calls
            if before is not message and (before is None or before.content is not message.content
                                          or before.name != message.name
                                          or _calls(before) != _calls(message)):
                if fingerprint(message) != entry.fingerprint:
                    out.edited.append(message)
                else:
                    unchanged.append(message)
        conversation.append(message)
    # ``seen`` is a bounded cache: only the newest ``remember`` are worth putting in
    for message in unchanged[-remember:] if remember else unchanged:
        seen[str(message.id)] = message
    out.fresh = [m for m in conversation[last_known + 1:] if not (m.id and m.id in known)]
    return out


class CallerList(list[BaseMessage]):
    """The caller's list of the last step, with what a model reads of each of its messages
    (``_reading``, position by position, or None until needed): the next step then reads only
    its own list, not both. ``copies``: the caller handed copies of the messages it had handed
    before (a checkpointer does, every invocation). ``released``: how many messages the list
    stands for after ``release_copies`` dropped the objects and kept only their reading."""

    __slots__ = ("copies", "reading", "released")

    def __init__(self, messages: Iterable[BaseMessage] = ()) -> None:
        super().__init__(messages)
        self.reading: Reading | None = None
        self.copies = False
        self.released = 0


def release_copies(previous: list[BaseMessage] | None) -> None:
    """At the end of a turn, drop the message objects of a caller that hands copies: its next
    turn brings new copies (compared by their reading, kept here), never these objects. Holding
    them would pin a whole checkpointed state per cached thread between turns, and make the next
    step pay for freeing them; LangGraph frees them with its own state instead."""
    if isinstance(previous, CallerList) and previous.copies and previous.reading is not None and len(previous):
        previous.released = len(previous)
        previous.clear()


def _length(previous: list[BaseMessage]) -> int:
    return previous.released if isinstance(previous, CallerList) and previous.released else len(previous)


def _same_messages(listed: list[BaseMessage], previous: list[BaseMessage]) -> bool:
    """Whether ``listed`` starts with messages that read the same as ``previous`` (which then
    becomes a copy of ``listed``): the same objects (pointer compares in C), else the same id,
    type, content, name and tool calls, position by position. A checkpointer hands back fresh
    copies every step; those fields are exactly what ``message_fingerprint`` covers (plus the id
    and type that place a message), so a head equal in them holds no edit and nothing new. Each
    field is a ``map`` over the list in C, and a ``CallerList`` keeps its own reading, so a step
    reads its new list once and walks nothing in Python (comparing whole ``__dict__``s walked
    every message's metadata dicts on both sides). Anything that differs, or a field that cannot
    be compared, leaves the decision to the full walk."""
    known_len = _length(previous)
    head, tail = listed[:known_len], listed[known_len:]
    cached = previous.reading if isinstance(previous, CallerList) else None
    released = known_len != len(previous)
    if released and cached is None:
        return False
    if not released and all(map(operator.is_, head, previous)):
        previous.extend(tail)
        if isinstance(previous, CallerList):
            previous.reading = _extended(cached, tail)
        return True
    mine = _read(head)
    try:
        if mine is None or mine != (cached if cached is not None else _read(previous)):
            return False
    except (TypeError, ValueError):  # content whose comparison fails: the full walk decides
        return False
    previous[:] = listed  # the caller's objects now: next step's compare is pointers again
    if isinstance(previous, CallerList):  # what was read of them, not of the copies they replace
        previous.reading, previous.copies, previous.released = _extended(mine, tail), True, 0
    return True


def _calls(message: BaseMessage) -> tuple[Any, Any]:
    fields = vars(message)
    return fields.get("tool_calls"), fields.get("invalid_tool_calls")


Reading = tuple[list[Any], list[Any], list[Any], list[Any], list[Any], list[Any]]
_PLACE_AND_TEXT = tuple(map(operator.itemgetter, ("id", "type", "content", "name")))


def _reading(messages: list[BaseMessage]) -> Reading:
    """What a model reads of each message and where it stands, as one list per field, built in C
    from each message's fields: id, type, content, name, and the tool calls and invalid tool calls
    of AI messages (None elsewhere). A message without one of the first four raises ``KeyError``.

    Columns, not a tuple per message: a checkpointed state is read on every step, and a tuple per
    message was a young container each for the garbage collector to walk (most of this read's
    cost inside a whole agent turn), and an old one each for as long as the reading is kept."""
    fields = list(map(vars, messages))
    ids, kinds, contents, names = (list(map(get, fields)) for get in _PLACE_AND_TEXT)
    return (ids, kinds, contents, names, list(map(dict.get, fields, repeat("tool_calls"))),
            list(map(dict.get, fields, repeat("invalid_tool_calls"))))


def _read(messages: list[BaseMessage]) -> Reading | None:
    """``_reading``, or None when an object is not a message or has an odd field (the full walk
    then decides, and names what is wrong)."""
    try:
        return _reading(messages)
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _extended(reading: Reading | None, tail: list[BaseMessage]) -> Reading | None:
    """``reading`` with ``tail``'s read after it (extended in place: a ``CallerList`` owns its reading)."""
    if reading is None or not tail:
        return reading
    more = _read(tail)
    if more is None:
        return None
    for column, added in zip(reading, more, strict=True):
        column.extend(added)
    return reading


def edit_row(message: BaseMessage, tokens: int, created_at: Any) -> NewMessage:
    """The stored form of an edit of an observed message: a new row the Observer reads as a correction."""
    fingerprint = message_fingerprint(message)
    original = str(message.id)
    if len(original) > 400:  # ids are at most 512 characters: a long one is named by its digest
        original = hashlib.sha1(original.encode("utf-8", "surrogatepass")).hexdigest()
    note = ChatMessage(
        content=message.content, role=EDIT_ROLE, id=f"{original}~edit~{fingerprint}",
        additional_kwargs={EDIT_OF: message.id, EDIT_TYPE: message.type},
        response_metadata={CACHE_KEY: {"content_hash": fingerprint}},
    )
    return NewMessage(id=str(note.id), data=dump_message(note), tokens=tokens, created_at=created_at, kind="edit")


class Instructions:
    """The caller's system messages per thread, kept in the record's metadata."""

    @staticmethod
    def fingerprints(messages: Sequence[BaseMessage]) -> list[str]:
        return [message_fingerprint(m) for m in messages]  # content only: ids of re-sent copies may differ

    @staticmethod
    def stored(metadata: Mapping[str, Any], thread_id: str) -> Mapping[str, Any] | None:
        entry = (metadata.get(INSTRUCTIONS_KEY) or {}).get(thread_id)
        return entry if isinstance(entry, Mapping) else None

    @classmethod
    def changed(cls, metadata: Mapping[str, Any], thread_id: str, fingerprints: list[str]) -> bool:
        """Whether the stored instructions differ from those with ``fingerprints`` (``fingerprints()``)."""
        entry = cls.stored(metadata, thread_id)
        return entry is None or entry.get("fingerprints") != fingerprints

    @staticmethod
    def put(metadata: MutableMapping[str, Any], thread_id: str, messages: Sequence[BaseMessage],
            fingerprints: list[str]) -> None:
        table = metadata.setdefault(INSTRUCTIONS_KEY, {})
        table[thread_id] = {"fingerprints": fingerprints, "messages": [dump_message(m) for m in messages]}

    @classmethod
    def forget(cls, metadata: MutableMapping[str, Any], thread_id: str) -> None:
        table = metadata.get(INSTRUCTIONS_KEY)
        if isinstance(table, dict):
            table.pop(thread_id, None)

    @classmethod
    def load(cls, metadata: Mapping[str, Any], thread_id: str) -> list[BaseMessage]:
        entry = cls.stored(metadata, thread_id)
        if entry is None:
            return []
        loaded = [load_message(data) for data in entry.get("messages") or []]
        return [m if isinstance(m, SystemMessage) else SystemMessage(m.content, id=m.id) for m in loaded]
