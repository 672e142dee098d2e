"""JSON for the browser: any Python value becomes one line of valid UTF-8 JSON, never an exception.

A server-sent event is written after the generator yields it: a value ``json.dumps`` refuses (a
``datetime`` in a custom payload) or a string UTF-8 cannot encode (a lone surrogate from
``os.fsdecode`` in a tool result) would break the HTTP response in the middle, and the client would
hang on a half message. So:

* values JSON has no type for become their usual text: dates and times in ISO 8601, ``Decimal`` and
  ``UUID`` as strings, sets and tuples as lists, pydantic models and dataclasses as their fields
  (camelCase aliases where the model has them), bytes as base64, anything else as its ``repr``;
* ``NaN`` and infinities become ``null`` (``JSON.parse`` rejects them); a key that is not a string
  becomes its text; a value that contains itself (a dict, a list, a dataclass or a pydantic model)
  becomes ``"[circular]"``; an integer too long for decimal text (Python's int-to-text digit
  limit) becomes the string of its exact hexadecimal value (``"0x…"``, which any size allows);
* an object whose ``repr`` or ``str`` raises, or a mapping that fails while it is read, becomes
  ``"<unprintable TypeName>"``: the caller's bug stays in its own value, not in the response;
* a surrogate is written as a ``\\uXXXX`` escape, which is valid JSON that ``JSON.parse`` reads
  back as the same UTF-16 unit: a lone one arrives unchanged, and a pair split across two Python
  code points joins back into its character.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
from collections.abc import Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from pydantic import BaseModel

__all__ = ["wire_json"]

_SURROGATE = re.compile("[\ud800-\udfff]")
_MAX_DEPTH = 200


def wire_json(value: Any) -> str:
    """``value`` as compact JSON that encodes to UTF-8 and that ``JSON.parse`` accepts; never raises."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_plain)
    except Exception:  # a NaN, a non-string key, a cycle, a deep nest, a huge int, a repr that raises
        try:
            text = json.dumps(_jsonable(value, set(), 0), ensure_ascii=False, separators=(",", ":"),
                              allow_nan=False)
        except Exception:  # pragma: no cover - _jsonable leaves only JSON's own types; a last guard
            text = json.dumps(_unprintable(value))
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def _plain(value: Any) -> Any:
    """The JSON stand-in for one value ``json`` has no type for (``json.dumps``'s ``default``)."""
    if isinstance(value, (datetime, date, time)):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, (Decimal, UUID)):
        return str(value)
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, BaseModel):
        try:
            return value.model_dump(mode="json", by_alias=True)
        except Exception:  # a model holding itself, a serializer that raises: its fields, one by one
            return {field.alias or name: getattr(value, name, None) for name, field in type(value).model_fields.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: getattr(value, field.name) for field in dataclasses.fields(value)}
    return _text(value, repr)


def _text(value: Any, show: Any) -> str:
    """``show(value)`` (``repr`` or ``str``), or a placeholder naming the type when that raises."""
    try:
        shown = show(value)
    except Exception:
        return _unprintable(value)
    return shown if isinstance(shown, str) else _unprintable(value)


def _unprintable(value: Any) -> str:
    return f"<unprintable {type(value).__qualname__}>"


def _integer(value: int) -> int | str:
    """An int JSON can write, or the exact hex text of one over the int-to-text digit limit."""
    try:
        int.__repr__(value)
    except ValueError:  # over sys.get_int_max_str_digits(): decimal text is refused, hex never is
        return hex(value)
    return value


def _jsonable(value: Any, seen: set[int], depth: int) -> Any:
    """A copy of ``value`` that plain ``json.dumps`` takes (the slow path, for what ``_plain`` cannot fix)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return _integer(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= _MAX_DEPTH:
        return "[too deep]"
    if id(value) in seen:
        return "[circular]"
    seen.add(id(value))  # the object itself, not only its stand-in: a dataclass holding itself is a cycle
    try:
        if isinstance(value, Mapping):
            return {_key(key): _jsonable(item, seen, depth + 1) for key, item in value.items()}
        if isinstance(value, list):
            return [_jsonable(item, seen, depth + 1) for item in value]
        return _jsonable(_plain(value), seen, depth + 1)
    except RecursionError:
        return "[too deep]"
    except Exception:  # a mapping that fails while read, a list changed by another thread
        return _text(value, repr)
    finally:
        seen.discard(id(value))


def _key(key: Any) -> str:
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, (bool, float)):
        return json.dumps(key)  # what json.dumps itself writes for such a key
    if isinstance(key, int):
        return str(_integer(key))
    return _text(key, str)
