"""LoCoMo's published scoring: token F1 between the answer and the reference, per category.

As LoCoMo's evaluation scores it: both texts lower-cased, punctuation and the words a, an, the
and 'and' removed, every word stemmed (Porter); multi-hop references (category 1) are split on
commas and each part is matched with the best part of the answer; open-domain references
(category 3) count up to their first ';'. Adversarial questions (category 5) ask about something
the conversation never said: an answer scores 1 when it says so ("not mentioned", "no
information available"), else 0; they are reported apart from the F1 of the other four.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .locomo_data import ADVERSARIAL, CATEGORIES
from .porter import stem

_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCTUATION = frozenset(string.punctuation)
DECLINES = ("not mentioned", "no information available")
"""Phrases that mark an adversarial question as declined, as LoCoMo's scoring looks for them."""


def normalize_answer(text: str) -> str:
    text = unicodedata.normalize("NFD", str(text)).lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _tokens(text: str) -> list[str]:
    return [stem(word) for word in normalize_answer(text).split()]


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the stemmed words both texts share (counted with multiplicity)."""
    predicted, wanted = _tokens(prediction), _tokens(reference)
    common = sum((Counter(predicted) & Counter(wanted)).values())
    if not common:
        return 0.0
    precision, recall = common / len(predicted), common / len(wanted)
    return 2 * precision * recall / (precision + recall)


def multi_answer_f1(prediction: str, reference: str) -> float:
    """Mean over the reference's comma-separated parts of the best F1 with a part of the answer."""
    predictions = [p.strip() for p in prediction.split(",")]
    references = [r.strip() for r in reference.split(",")]
    return sum(max(token_f1(p, r) for p in predictions) for r in references) / len(references)


def score_answer(prediction: str, reference: str, category: int) -> float:
    """The question's score as LoCoMo computes it for its category."""
    if category == ADVERSARIAL:
        lowered = prediction.lower()
        return 1.0 if any(phrase in lowered for phrase in DECLINES) else 0.0
    if category == 1:
        return multi_answer_f1(prediction, reference)
    if category == 3:
        reference = reference.split(";")[0].strip()
    return token_f1(prediction, reference)


@dataclass
class CategoryScore:
    total: float = 0.0
    count: int = 0

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else 0.0


@dataclass
class LoCoMoScores:
    """Mean score per category; ``overall`` is the F1 over categories 1-4 (adversarial apart)."""

    by_category: dict[str, CategoryScore] = field(default_factory=dict)
    overall: CategoryScore = field(default_factory=CategoryScore)
    adversarial: CategoryScore = field(default_factory=CategoryScore)

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, object]]) -> LoCoMoScores:
        scores = cls()
        for row in rows:
            category = int(row["category"])  # type: ignore[call-overload]
            value = float(row["score"])  # type: ignore[arg-type]
            name = CATEGORIES.get(category, f"category-{category}")
            bucket = scores.by_category.setdefault(name, CategoryScore())
            bucket.total += value
            bucket.count += 1
            target = scores.adversarial if category == ADVERSARIAL else scores.overall
            target.total += value
            target.count += 1
        order = [CATEGORIES[c] for c in sorted(CATEGORIES)]
        scores.by_category = {k: scores.by_category[k] for k in
                              sorted(scores.by_category, key=lambda k: (order.index(k) if k in order else 99, k))}
        return scores
