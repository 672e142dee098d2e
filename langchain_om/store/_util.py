"""Validation and encoding shared by the stores, so every backend rejects and returns the same things.

The contract suite runs one set of tests against all backends; keeping argument checks,
limits and datetime/JSON encoding in one place is what makes their behaviour identical.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, cast

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError

from .base import (
    InvalidStoreInput,
    NewMessage,
    OMRecord,
    check_id,
    check_resource_id,
    check_thread_id,
    replace_lone_surrogates,
)

MAX_LIMIT = 1000
"""Explicit limits above this are capped: a hostile or buggy caller cannot ask for the whole table."""

MAX_SEQ = 2**62
"""Sequence numbers and offsets are clamped here so they fit every backend's 64-bit integers."""

MAX_TITLE_LEN = 10_000


def check_ids(resource_id: Any, thread_id: Any) -> tuple[str, str]:
    return check_resource_id(resource_id), check_thread_id(thread_id)


def check_record_ids(resource_id: Any, thread_id: Any) -> tuple[str, str | None]:
    """The ids naming a record: a resource, plus a thread in thread scope (None in resource scope)."""
    return check_resource_id(resource_id), None if thread_id is None else check_thread_id(thread_id)


def _check_int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidStoreInput(field, f"must be an integer, got {type(value).__name__}")
    if value < 0:
        raise InvalidStoreInput(field, f"must not be negative, got {value}")
    return value


def check_limit(value: Any, field: str = "limit") -> int | None:
    """``None`` means "no limit"; explicit limits are non-negative and capped at ``MAX_LIMIT``."""
    if value is None:
        return None
    return min(_check_int(value, field), MAX_LIMIT)


def check_count(value: Any, field: str) -> int:
    """Offsets, sequence numbers, versions: non-negative integers, clamped to fit in 64 bits."""
    return min(_check_int(value, field), MAX_SEQ)


def check_optional_count(value: Any, field: str) -> int | None:
    return None if value is None else check_count(value, field)


def check_title(title: Any) -> str | None:
    if title is None:
        return None
    if not isinstance(title, str):
        raise InvalidStoreInput("title", f"must be a string, got {type(title).__name__}")
    if "\x00" in title:
        raise InvalidStoreInput("title", "must not contain NUL characters")
    if len(title) > MAX_TITLE_LEN:
        raise InvalidStoreInput("title", f"must be at most {MAX_TITLE_LEN} characters")
    return replace_lone_surrogates(title)  # a label in a text column: U+FFFD for what UTF-8 cannot hold


def check_metadata(metadata: Any) -> dict[str, Any] | None:
    """Metadata must be a JSON object; it is returned as a JSON round-trip (a private copy)."""
    if metadata is None:
        return None
    if not isinstance(metadata, Mapping):
        raise InvalidStoreInput("metadata", f"must be a mapping, got {type(metadata).__name__}")
    result = json_roundtrip(dict(metadata), "metadata")
    assert isinstance(result, dict)
    return result


def check_datetime(value: Any, field: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidStoreInput(field, f"must be a datetime, got {type(value).__name__}")
    return check_instant(value, field)


def check_instant(value: datetime, field: str) -> datetime:
    """``value`` in UTC; an instant whose UTC date falls outside years 1..9999 (year 1 at +05:00,
    say) is refused with the field named instead of an ``OverflowError`` deep in a store."""
    try:
        return to_utc(value)
    except OverflowError:
        raise InvalidStoreInput(field, f"{value.isoformat()} is outside years 1 to 9999 in UTC") from None


def check_messages(messages: Any) -> list[NewMessage]:
    """Accept NewMessage objects (or dicts of their fields); validate ids, tokens and JSON data."""
    return [message for message, _text in check_messages_json(messages)]


def check_messages_json(messages: Any) -> list[tuple[NewMessage, str]]:
    """``check_messages``, each message with its data as JSON text (encoded once, for stores
    that keep text)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise InvalidStoreInput("messages", "must be a sequence of NewMessage")
    result: list[tuple[NewMessage, str]] = []
    for index, item in enumerate(messages):
        field = f"messages[{index}]"
        if not isinstance(item, NewMessage):
            try:
                item = NewMessage.model_validate(item)
            except ValidationError as exc:
                raise InvalidStoreInput(field, f"not a NewMessage: {exc.errors()[0].get('msg')}") from None
        check_id(item.id, f"{field}.id")
        _check_int(item.tokens, f"{field}.tokens")
        text = dumps(item.data, f"{field}.data")
        detached = loads(text)  # what a JSON store gives back, and nothing shared with the caller
        created = check_instant(item.created_at, f"{field}.created_at")
        result.append((item.model_copy(update={"data": detached, "created_at": created}), text))
    return result


def check_message_ids(message_ids: Any) -> list[str]:
    """The ids of an id lookup, checked and without repeats, in their order.

    A cold step looks up every id a client hands over (50k for a long history): ``check_id``
    one by one cost ~2 us each. Plain ASCII strings are checked together in C (one join, a
    few scans); anything else takes the per-id path, which names what is wrong."""
    ids = message_ids if type(message_ids) is list else list(message_ids)
    if ids and set(map(type, ids)) == {str}:
        unique = list(dict.fromkeys(ids))
        joined = "\n".join(unique)
        if (joined.isascii() and "\x00" not in joined and "\x1f" not in joined and "\x1e" not in joined
                and max(map(len, unique)) <= 512 and all(map(str.strip, unique))):
            return unique
    return list(dict.fromkeys(check_id(mid, "message_ids") for mid in ids))


def check_replacement(
    resource_id: Any, thread_id: Any, message_id: Any, data: Any, tokens: Any
) -> tuple[str, str, NewMessage, str]:
    """``areplace_message``'s arguments, checked like an append: the ids, the new row and its JSON."""
    resource, thread = check_ids(resource_id, thread_id)
    new, text = check_messages_json([NewMessage(id=check_id(message_id, "message_id"), data=data, tokens=tokens)])[0]
    return resource, thread, new, text


def check_mark_observed(mark_observed: Any) -> dict[str, int]:
    if mark_observed is None:
        return {}
    if not isinstance(mark_observed, Mapping):
        raise InvalidStoreInput("mark_observed", "must map thread ids to sequence numbers")
    return {
        check_thread_id(thread_id, "mark_observed"): check_count(seq, f"mark_observed[{thread_id!r}]")
        for thread_id, seq in mark_observed.items()
    }


def check_record(record: Any, expected_version: Any) -> tuple[OMRecord, int]:
    if not isinstance(record, OMRecord):
        raise InvalidStoreInput("record", f"must be an OMRecord, got {type(record).__name__}")
    check_resource_id(record.resource_id, "record.resource_id")
    if record.scope == "thread" or record.thread_id is not None:
        check_thread_id(record.thread_id, "record.thread_id")
    version = check_count(expected_version, "expected_version")
    return record, version


def record_data(record: OMRecord) -> dict[str, Any]:
    """The record as JSON data: what ``record_json`` encodes (a commit can validate its returned
    record from it instead of parsing the text back)."""
    try:
        return record.model_dump(mode="json")
    except PydanticSerializationError as exc:
        raise InvalidStoreInput("record", f"must be JSON-serialisable ({exc})") from None


def record_json(record: OMRecord) -> str:
    """The record as ASCII JSON text (stdlib encoder, so odd strings like lone surrogates survive)."""
    return dumps(record_data(record), "record")


def record_from_json(text: str | bytes) -> OMRecord:
    return OMRecord.model_validate(loads(text))


# ---- migration 2: implicit resources ------------------------------------------------------

V1_IMPLICIT_THREADS_SQL = (
    "SELECT t.thread_id FROM {threads} t WHERE t.resource_id = t.thread_id "
    "AND NOT EXISTS (SELECT 1 FROM {threads} o WHERE o.resource_id = t.resource_id AND o.thread_id <> t.thread_id) "
    "AND NOT EXISTS (SELECT 1 FROM {records} r WHERE r.resource_id = t.resource_id AND r.scope = 'resource')"
)
"""Threads that schema version 1 stored under their own id because no resource was given.

Version 1 wrote ``resource_id = thread_id`` for such threads, which an explicit resource can
also produce (``resource_id="alice"`` on thread ``"alice"``). The rule: thread ``T`` stored
under resource ``T`` was implicit unless the resource shows it was explicit, that is unless
resource ``T`` has another thread (an implicit resource only ever holds its own thread) or a
resource-scope record (resource scope always required an explicit ``resource_id``). Such a
thread, its messages, its records and the resource's working memory move to
``implicit_resource(T)``; everything else keeps its resource. So an explicit resource with
one thread named like itself is taken as implicit: after the upgrade an app that passed
``resource_id=T`` on thread ``T`` starts that thread afresh, and its old rows stay in the
store under ``implicit_resource(T)``. The other choice would leave every single-thread
implicit user (the common case) without their memory and still reachable by id.
"""


def record_body_for_resource(body: Any, resource_id: str) -> dict[str, Any]:
    """A stored record body (a JSON object) moved to another resource."""
    if not isinstance(body, dict):
        raise InvalidStoreInput("record", "stored record body is not a JSON object")
    return {**body, "resource_id": resource_id}


# ---- deleting a thread in resource scope ----------------------------------------------------


def record_without_thread(record: OMRecord, thread_id: str) -> OMRecord | None:
    """The resource-scope record with a deleted thread forgotten, or None if it holds nothing of it.

    Drops the thread's watermark (a thread created again under that id numbers its messages
    from 1, so a watermark left behind would hide them), every group that came only from
    that thread (its ``thread_ids``, or its ``thread_id`` when it lists none), its buffered
    chunks, and a buffered reflection over a dropped group. A group that mixes several
    threads (one Observer reply for a multi-thread batch, or a reflection that merged
    threads) stays whole: its text cannot be split by thread.
    """
    dropped = {g.id for g in record.groups if set(g.thread_ids or [g.thread_id]) == {thread_id}}
    chunks = [c for c in record.buffered_chunks if c.thread_id != thread_id]
    reflection = record.buffered_reflection
    if reflection is not None and dropped.intersection(reflection.covered_group_ids):
        reflection = None
    # per-thread entries of the engine's metadata: the caller's system messages and the pinned
    # human message (langchain_om.foundation.inputs / langchain_om.foundation.turns)
    metadata = {key: value for key, value in record.metadata.items()}
    per_thread = [key for key in ("instructions", "pinned")
                  if isinstance(metadata.get(key), dict) and thread_id in metadata[key]]
    for key in per_thread:
        metadata[key] = {t: v for t, v in metadata[key].items() if t != thread_id}
    if (not dropped and len(chunks) == len(record.buffered_chunks) and reflection is record.buffered_reflection
            and thread_id not in record.last_observed_seq and thread_id not in record.last_observed_id
            and not per_thread):
        return None
    return record.model_copy(update={
        "groups": [g for g in record.groups if g.id not in dropped],
        "buffered_chunks": chunks,
        "buffered_reflection": reflection,
        "last_observed_seq": {t: s for t, s in record.last_observed_seq.items() if t != thread_id},
        "last_observed_id": {t: i for t, i in record.last_observed_id.items() if t != thread_id},
        "metadata": metadata,
    })


def record_thread(record: OMRecord) -> str | None:
    """The thread part of a record's key (None in resource scope)."""
    return record.thread_id if record.scope == "thread" else None


# ---- datetimes ------------------------------------------------------------------------------


def to_utc(value: datetime) -> datetime:
    """Naive datetimes are taken as UTC; everything is stored and returned in UTC."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def iso(value: datetime) -> str:
    """Fixed-width ISO text (always with microseconds, the year zero-padded to four digits, which
    ``strftime('%Y')`` does not do on Linux), so string order equals time order and every year
    1..9999 reads back with ``fromisoformat``."""
    return to_utc(value).isoformat(timespec="microseconds")


def from_iso(value: str) -> datetime:
    return to_utc(datetime.fromisoformat(value))


# ---- JSON -----------------------------------------------------------------------------------


def dumps(value: Any, field: str) -> str:
    """Strict JSON text (no NaN, no arbitrary objects); a bad value names the field. ASCII (every
    character outside it escaped), except a value ``loads`` could not get back from that: see
    ``_EXACT_KEY``."""
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidStoreInput(field, f"must be JSON-serialisable ({exc})") from None
    if (_ESCAPED_PAIR.search(text) is not None and _holds_split_pair(value)) or (
            isinstance(value, dict) and _EXACT_KEY in value and len(value) == 1):
        return json.dumps({_EXACT_KEY: base64.b64encode(
            _unescaped(value).encode("utf-8", "surrogatepass")).decode("ascii")}, separators=(",", ":"))
    return text


def loads(text: str | bytes) -> Any:
    """The value ``dumps`` encoded, exactly."""
    return unwrap_exact(json.loads(text))


_EXACT_KEY = "__langchain_om_exact__"
"""JSON cannot tell two lone surrogates that happen to form a pair (``"\ud83d\ude00"`` as two
code points, as ``surrogatepass`` or CESU-8 decoding makes them) from the one character they
encode: an ASCII escape writes both as ``\ud83d\ude00``, which every JSON parser reads as 😀.
So a value holding such a pair is stored as ``{_EXACT_KEY: base64}`` of its JSON text with the
characters left as they are, in UTF-8 with ``surrogatepass``; ``loads`` (and ``from_jsonb_safe``)
read it back. A value that itself looks like that wrapper is wrapped too, so it round-trips."""
_ESCAPED_PAIR = re.compile(r"\\ud[89ab][0-9a-f]{2}\\ud[c-f][0-9a-f]{2}")
"""A surrogate pair escape in ASCII JSON: a character past U+FFFF, or a split pair (rare: only
then is the value encoded a second time, to tell which)."""
_SPLIT_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")


def _holds_split_pair(value: Any) -> bool:
    """Whether a string (or key) of ``value`` holds two lone surrogates side by side. Only a string
    UTF-8 cannot encode holds a surrogate at all (a C-speed check), so the pattern scans those
    alone: a value with a real emoji (every observation line has one) is not encoded a second time.
    Iterative, so a value as deep as ``json.dumps`` accepts never overflows the stack here."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    if _SPLIT_PAIR.search(item) is not None:
                        return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _unescaped(value: Any) -> str:
    return json.dumps(value, allow_nan=False, separators=(",", ":"), ensure_ascii=False)


def unwrap_exact(value: Any) -> Any:
    """``value`` itself, or what ``dumps`` wrapped in ``_EXACT_KEY``."""
    if isinstance(value, dict) and len(value) == 1 and _EXACT_KEY in value:
        return json.loads(base64.b64decode(value[_EXACT_KEY]).decode("utf-8", "surrogatepass"))
    return value


def check_update(update: Any) -> Callable[[Any], Any]:
    if not callable(update):
        raise InvalidStoreInput("update", f"must be a function of the current value, got {type(update).__name__}")
    return cast(Callable[[Any], Any], update)


def json_roundtrip(value: Any, field: str) -> Any:
    """What a JSON store would give back: validates the value and detaches it from the caller."""
    return loads(dumps(value, field))


_WRAP_KEY = "__langchain_om_b64__"
# NUL and lone surrogates are legal in Python strings but rejected by PostgreSQL's jsonb.
_JSONB_UNSAFE = re.compile(r"\\u0000|\\ud[89a-f]", re.IGNORECASE)


def to_jsonb_safe(value: Any, field: str) -> Any:
    """A value jsonb accepts; anything it would reject travels base64-wrapped and round-trips exactly."""
    text = dumps(value, field)
    if jsonb_unsafe(text) or is_wrapped(value):
        return wrap_json_text(text)
    return value


def jsonb_unsafe(text: str) -> bool:
    """Whether jsonb would reject this JSON text (a NUL or a lone surrogate escape)."""
    return _JSONB_UNSAFE.search(text) is not None


def wrap_json_text(text: str) -> dict[str, str]:
    """``to_jsonb_safe``'s wrapper of JSON text jsonb would reject (``from_jsonb_safe`` unwraps it)."""
    return {_WRAP_KEY: base64.b64encode(text.encode("ascii")).decode("ascii")}


def from_jsonb_safe(value: Any) -> Any:
    """A value read from a jsonb column, unwrapped (``to_jsonb_safe``, then ``_EXACT_KEY``)."""
    if is_wrapped(value):
        return loads(base64.b64decode(value[_WRAP_KEY]).decode("ascii"))
    return unwrap_exact(value)


def is_wrapped(value: Any) -> bool:
    """Whether ``value`` looks like the wrapper itself (so it is wrapped again, to round-trip)."""
    return isinstance(value, dict) and len(value) == 1 and _WRAP_KEY in value
