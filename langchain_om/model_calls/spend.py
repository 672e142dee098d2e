"""Running totals of what OM's own model calls cost.

Two scopes: per record (``record.metadata["om_spend"]``, committed with the observation or
reflection it paid for, so every worker and ``astatus`` / ``langchain-om inspect`` see it), and
per process (``process_spend()``, every attempt this process made, failed ones included:
a failed call is billed too when the provider got that far).

Each scope maps a role (``observer``, ``reflector``) to ``calls``, ``input_tokens``,
``output_tokens`` and, when a provider reports one, ``cost``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

_SPEND_KEY = "om_spend"
_FIELDS = ("calls", "input_tokens", "output_tokens")
_process: dict[str, dict[str, float]] = {}
_process_lock = threading.Lock()


def _add(totals: dict[str, Any], usage: Mapping[str, Any] | None, cost: float | None) -> None:
    totals["calls"] = int(totals.get("calls", 0)) + 1
    if usage:
        totals["input_tokens"] = int(totals.get("input_tokens", 0)) + int(usage.get("input_tokens") or 0)
        totals["output_tokens"] = int(totals.get("output_tokens", 0)) + int(usage.get("output_tokens") or 0)
    if cost is not None:
        totals["cost"] = float(totals.get("cost", 0.0)) + cost


def cost_of(provider_metadata: Mapping[str, Any] | None) -> float | None:
    """The provider's reported cost of a call, when it reports one (e.g. OpenRouter's ``cost``)."""
    if not provider_metadata:
        return None
    for key in ("cost", "total_cost"):
        value = provider_metadata.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    usage = provider_metadata.get("token_usage") or provider_metadata.get("usage")
    if isinstance(usage, Mapping):
        value = usage.get("cost")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None


def add_to_record(metadata: dict[str, Any], role: str, usage: Mapping[str, Any] | None,
                  provider_metadata: Mapping[str, Any] | None = None) -> None:
    """Count one successful call of ``role`` on a record's metadata (the caller commits it)."""
    spend = metadata.setdefault(_SPEND_KEY, {})
    _add(spend.setdefault(role, {}), usage, cost_of(provider_metadata))


def record_spend(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of a record's running totals, or None before its first paid call."""
    spend = metadata.get(_SPEND_KEY)
    if not isinstance(spend, Mapping) or not spend:
        return None
    return {role: dict(values) for role, values in spend.items() if isinstance(values, Mapping)}


def add_to_process(role: str, usage: Mapping[str, Any] | None, provider_metadata: Mapping[str, Any] | None = None,
                   *, failed: bool = False) -> None:
    """Count one attempt in this process's totals (``failed_calls`` counts the failed ones)."""
    with _process_lock:
        totals = _process.setdefault(role, {})
        _add(totals, usage, cost_of(provider_metadata))
        if failed:
            totals["failed_calls"] = int(totals.get("failed_calls", 0)) + 1


def process_spend() -> dict[str, dict[str, float]]:
    """This process's totals per role since start (or the last ``reset_process_spend``)."""
    with _process_lock:
        return {role: dict(values) for role, values in _process.items()}


def reset_process_spend() -> None:
    with _process_lock:
        _process.clear()
