"""Tokens a benchmark run spends per model role, and what they would cost at the user's prices.

A run is billed four ways: the Observer and the Reflector while the haystack is ingested, the
answer model and the judge once a question. Each question's row records the tokens of each role
(the Observer's and Reflector's from OM's own running totals on the question's record, the
answer's and judge's from the replies' usage, counted locally when a model reports none). With
a price table the rows and the summary also carry a cost, and the summary projects the cost of
the whole file from the questions run so far: a scripted run (``--model scripted``) spends the
real input tokens of every call, so it tells a user what a paid run will cost before paying.

Prices are US dollars per million tokens, input and output, keyed by a role (``observer``,
``reflector``, ``answer``, ``judge``), by a model string, or ``*`` for any other call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROLES = ("observer", "reflector", "answer", "judge")
ANY_MODEL = "*"


@dataclass(frozen=True)
class Price:
    """US dollars per million input and output tokens."""

    input: float
    output: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (input_tokens * self.input + output_tokens * self.output) / 1_000_000


def _price_value(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise ValueError(f"{where}: a price must be a number >= 0 (dollars per million tokens), got {value!r}")
    return float(value)


def parse_price(text: str) -> tuple[str, Price]:
    """``"openai:gpt-4o-mini=0.15,0.60"`` or ``"observer=0.15,0.6"`` -> (key, Price)."""
    key, sep, values = str(text).rpartition("=")
    parts = values.split(",")
    if not sep or not key.strip() or len(parts) != 2:
        raise ValueError(f"price: expected MODEL_OR_ROLE=INPUT,OUTPUT (dollars per million tokens), got {text!r}")
    try:
        numbers = [float(part) for part in parts]
    except ValueError:
        raise ValueError(f"price: {text!r}: INPUT and OUTPUT must be numbers") from None
    return key.strip(), Price(_price_value(numbers[0], f"price {key}"), _price_value(numbers[1], f"price {key}"))


def load_prices(path: str | Path) -> dict[str, Price]:
    """A JSON object ``{"MODEL_OR_ROLE": {"input": 0.15, "output": 0.6}, ...}`` (or ``[input, output]``)."""
    source = Path(path)
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"prices: no such file: {source}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"prices: {source} is not valid JSON ({exc})") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"prices: {source} must hold a JSON object of MODEL_OR_ROLE -> prices")
    table: dict[str, Price] = {}
    for key, value in raw.items():
        if isinstance(value, Mapping) and set(value) >= {"input", "output"}:
            pair = (value["input"], value["output"])
        elif isinstance(value, list) and len(value) == 2:
            pair = (value[0], value[1])
        else:
            raise ValueError(f"prices: {key}: expected {{\"input\": X, \"output\": Y}} or [X, Y], got {value!r}")
        table[key] = Price(_price_value(pair[0], f"prices: {key}.input"),
                           _price_value(pair[1], f"prices: {key}.output"))
    return table


@dataclass(frozen=True)
class PriceTable:
    """Prices by role, then by model string, then ``*``; the model of each role comes from the run."""

    prices: Mapping[str, Price]
    models: Mapping[str, str]

    @classmethod
    def build(cls, *, files: Sequence[str | Path] = (), entries: Iterable[str] = (),
              models: Mapping[str, str]) -> PriceTable | None:
        prices: dict[str, Price] = {}
        for path in files:
            prices.update(load_prices(path))
        for entry in entries:
            key, price = parse_price(entry)
            prices[key] = price
        return cls(prices, dict(models)) if prices else None

    def price_of(self, role: str) -> Price | None:
        for key in (role, self.models.get(role, ""), ANY_MODEL):
            if key in self.prices:
                return self.prices[key]
        return None

    def unpriced(self, spend: Mapping[str, Mapping[str, Any]]) -> list[str]:
        """Roles that spent tokens but have no price: their cost is left out, and said so."""
        return [role for role, used in spend.items() if tokens_of(used) and self.price_of(role) is None]

    def cost(self, spend: Mapping[str, Mapping[str, Any]]) -> float:
        total = 0.0
        for role, used in spend.items():
            price = self.price_of(role)
            if price is not None:
                total += price.cost(int(used.get("input_tokens") or 0), int(used.get("output_tokens") or 0))
        return total


def tokens_of(used: Mapping[str, Any]) -> int:
    return int(used.get("input_tokens") or 0) + int(used.get("output_tokens") or 0)


def add_call(spend: dict[str, dict[str, int]], role: str, input_tokens: int, output_tokens: int) -> None:
    """Count one call of ``role`` in a question's spend."""
    used = spend.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
    used["calls"] += 1
    used["input_tokens"] += int(input_tokens)
    used["output_tokens"] += int(output_tokens)


def add_spend(total: dict[str, dict[str, int]], spend: Mapping[str, Mapping[str, Any]]) -> None:
    """Add one question's spend to a running total, role by role."""
    for role, used in spend.items():
        into = total.setdefault(role, {"calls": 0, "input_tokens": 0, "output_tokens": 0})
        for key in ("calls", "input_tokens", "output_tokens"):
            into[key] += int(used.get(key) or 0)


def ordered(spend: Mapping[str, Any]) -> list[str]:
    """The roles of a spend in the order a run pays them, unknown ones last."""
    return [r for r in ROLES if r in spend] + sorted(set(spend) - set(ROLES))
