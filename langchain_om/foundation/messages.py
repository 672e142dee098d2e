"""Helpers for LangChain messages: ids, timestamps, (de)serialisation and safe cut points.

A cut between observed and kept messages must never separate an AI message
that calls tools from the tool results answering it: providers reject a tool
result whose call is missing, and a call whose result is missing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, message_to_dict, messages_from_dict

from ..store._util import dumps
from ..store.base import InvalidStoreInput, new_id

TIMESTAMP_KEY = "created_at"
"""``message.response_metadata[TIMESTAMP_KEY]`` (ISO string or epoch seconds) dates a message."""


def ensure_id(message: BaseMessage) -> str:
    """Give the message a stable id (in place) so the store, the graph state and recall agree."""
    if not message.id:
        message.id = new_id("msg_")
    return message.id


def message_timestamp(message: BaseMessage) -> datetime | None:
    """The timestamp a caller attached to the message, if any (naive values are taken as UTC)."""
    raw = message.response_metadata.get(TIMESTAMP_KEY) if message.response_metadata else None
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return _in_utc_range(raw if raw.tzinfo else raw.replace(tzinfo=timezone.utc))
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        if not math.isfinite(raw):
            raise ValueError(f"response_metadata.{TIMESTAMP_KEY}: epoch seconds must be a finite number, got {raw!r}")
        seconds = raw / 1000 if raw > 10_000_000_000 else raw
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            raise ValueError(
                f"response_metadata.{TIMESTAMP_KEY}: epoch {raw!r} is outside years 1 to 9999"
            ) from None
    if isinstance(raw, str):
        try:
            parsed = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError as exc:
            raise ValueError(f"response_metadata.{TIMESTAMP_KEY}: not an ISO timestamp: {raw!r}") from exc
        return _in_utc_range(parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc))
    raise ValueError(f"response_metadata.{TIMESTAMP_KEY}: expected ISO string or epoch, got {type(raw).__name__}")


def _in_utc_range(moment: datetime) -> datetime:
    """Stores keep UTC: an instant whose UTC date is outside years 1..9999 cannot be stored."""
    try:
        moment.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(
            f"response_metadata.{TIMESTAMP_KEY}: {moment.isoformat()} is outside years 1 to 9999 in UTC"
        ) from None
    return moment


def dump_message(message: BaseMessage) -> dict[str, Any]:
    """The message as stored; a tool's artifact that JSON cannot hold is left out.

    Artifacts (``content_and_artifact`` tools) are often bytes or objects, and they never reach a
    model. Storing them would refuse the message on every step and stall the thread.
    """
    data = message_to_dict(message)
    artifact = data["data"].get("artifact")
    if artifact is not None:
        try:
            dumps(artifact, "artifact")  # the store's own JSON rule, so the two cannot disagree
        except InvalidStoreInput:
            data["data"]["artifact"] = None
    return data


def load_message(data: dict[str, Any]) -> BaseMessage:
    return messages_from_dict([data])[0]


def has_tool_calls(message: BaseMessage) -> bool:
    return isinstance(message, AIMessage) and bool(message.tool_calls)


def is_safe_cut(messages: Sequence[BaseMessage], cut: int) -> bool:
    """True if observing ``messages[:cut]`` and keeping ``messages[cut:]`` splits no tool exchange."""
    if cut <= 0:
        return True
    if cut < len(messages) and messages[cut].type == "tool":
        return False
    return not has_tool_calls(messages[cut - 1])


def safe_cut_at_or_before(messages: Sequence[BaseMessage], cut: int) -> int:
    """The largest safe cut point not after ``cut`` (0 when there is none)."""
    cut = min(max(cut, 0), len(messages))
    while cut > 0 and not is_safe_cut(messages, cut):
        cut -= 1
    return cut


def safe_cut_at_or_after(messages: Sequence[BaseMessage], cut: int) -> int:
    """The smallest safe cut point not before ``cut`` (``len`` if the tail is one open exchange)."""
    cut = min(max(cut, 0), len(messages))
    while cut < len(messages) and not is_safe_cut(messages, cut):
        cut += 1
    if cut == len(messages) and not is_safe_cut(messages, cut):
        return safe_cut_at_or_before(messages, cut)
    return cut


def last_human_index(messages: Sequence[BaseMessage]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].type == "human":
            return index
    return None


_MODEL_VERSION_SUFFIX = re.compile(r"-(?:latest|\d{4}-\d{2}-\d{2}|\d{8}|\d{3,4})$")


def _model_parts(model_id: str) -> tuple[str | None, str]:
    provider, _, name = model_id.replace(":", "/").lower().rpartition("/")
    if provider.endswith("models"):  # Gemini reports "models/gemini-2.5-flash"
        provider = provider[: -len("models")].rstrip("/")
    return provider or None, _MODEL_VERSION_SUFFIX.sub("", name)


def same_model(a: str, b: str) -> bool:
    """Whether two ``provider/model`` ids name the same model.

    A response reports the dated snapshot (``gpt-4o-mini-2024-07-18``) and may omit the
    provider, while the caller's model carries the alias: comparing strings would see a change
    on every step and defeat buffering. A provider is compared only when both sides have one.
    """
    (provider_a, name_a), (provider_b, name_b) = _model_parts(a), _model_parts(b)
    if provider_a and provider_b and provider_a != provider_b:
        return False
    return name_a == name_b


def model_identity(message: BaseMessage) -> str | None:
    """``provider/model`` of the model that wrote an AI message, from its response metadata."""
    if not isinstance(message, AIMessage):
        return None
    meta = message.response_metadata or {}
    name = meta.get("model_name") or meta.get("model")
    provider = meta.get("model_provider") or meta.get("ls_provider")
    if not name:
        return None
    return f"{provider}/{name}" if provider else str(name)
