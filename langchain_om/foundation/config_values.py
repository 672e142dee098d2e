"""Option values that need more than a type: durations, timeouts, model specs, ratio tokens.

Split from ``config.py`` (the option models) so each reads in one sitting; ``config.py``
re-exports what callers import from it (``OMConfigError``, ``DEFAULT_MODEL``, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Literal

DEFAULT_MODEL = "google_genai:gemini-2.5-flash"
DEFAULT_MAX_OUTPUT_TOKENS = 100_000
OBSERVER_DEFAULT_TEMPERATURE = 0.3
REFLECTOR_DEFAULT_TEMPERATURE = 0.0
DEFAULT_BLOCK_AFTER = 1.2
# Per attempt; generous, because a 30k-token observation on a reasoning model can take minutes.
DEFAULT_MODEL_TIMEOUT_MS = 300_000

Scope = Literal["thread", "resource"]
Duration = float | Literal["auto"] | Literal[False] | None
"""Milliseconds, ``"auto"`` (provider prompt-cache TTL), ``False`` (off) or ``None`` (inherit)."""


def ratio_tokens(base: int, ratio: float) -> int:
    """``base x ratio`` rounded to the nearest token (a half rounds up).

    Truncating the float product loses a token whenever the product lands a hair under a whole
    number: 30,000 x (1 - 0.8) is 5,999.999... and 1.3 x 33,333 is 43,332.9."""
    return math.floor(base * ratio + 0.5)


class OMConfigError(ValueError):
    """An invalid option; ``field`` is the dotted option path (``observation.block_after``)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(f"{field}: {message}")


_DURATION_UNITS_MS: dict[str, float] = {
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hr": 3_600_000,
    "hrs": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)?\s*$")


def parse_duration(value: Any, field: str) -> Duration:
    """Turn ``300_000`` / ``"5m"`` / ``"1hr"`` / ``"auto"`` / ``False`` into ms (or the marker)."""
    if value is None:
        return None
    if value is False:
        return False
    if value is True:
        raise OMConfigError(field, "expected milliseconds, a duration string like '5m', 'auto' or false")
    if isinstance(value, (int, float)):
        if value < 0:
            raise OMConfigError(field, f"duration must not be negative, got {value}")
        return float(value)
    if isinstance(value, str):
        if value.strip().lower() == "auto":
            return "auto"
        match = _DURATION_RE.match(value)
        if match:
            number = float(match.group(1))
            unit = (match.group(2) or "ms").lower()
            if unit in _DURATION_UNITS_MS:
                return number * _DURATION_UNITS_MS[unit]
        raise OMConfigError(field, f"cannot read duration {value!r}; use ms, '30s', '5m', '1hr', 'auto' or false")
    raise OMConfigError(field, f"expected a duration, got {type(value).__name__}")


def check_timeout(value: Any, field: str) -> float | Literal[False]:
    parsed = parse_duration(value, field)
    if parsed is None:
        return DEFAULT_MODEL_TIMEOUT_MS
    if parsed == "auto" or (parsed is not False and not (0 < parsed < math.inf)):
        raise OMConfigError(field, f"expected a positive duration (ms, '90s', '5m') or false, got {value!r}")
    return parsed


def timeout_seconds(value: Any) -> float | None:
    return None if value is False else float(value) / 1000.0


def check_model_spec(value: Any, field: str) -> Any:
    """Accept the model shapes the reference allows; the real resolution is in ``models.py``."""
    if value is None:
        return None
    if isinstance(value, str):
        if not value.strip():
            raise OMConfigError(field, "model string must not be empty")
        return value
    if isinstance(value, (list, tuple)):
        if not value:
            raise OMConfigError(field, "a model list must hold at least one model")
        for index, item in enumerate(value):
            inner = item.get("model") if isinstance(item, Mapping) else item
            if isinstance(item, Mapping) and "max_retries" in item:
                retries = item["max_retries"]
                if not isinstance(retries, int) or retries < 0:
                    raise OMConfigError(f"{field}[{index}].max_retries", "must be an integer >= 0")
            check_model_spec(inner, f"{field}[{index}]")
        return list(value)
    if callable(value) or hasattr(value, "ainvoke") or hasattr(value, "resolve"):
        return value
    raise OMConfigError(
        field,
        "expected 'provider:model', a BaseChatModel, a callable, ModelByInputTokens or a list of models",
    )
