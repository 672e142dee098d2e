"""Huge texts and messages: bounded token counting, and a warning for a message larger than a window.

Counting a 10M-character message exactly took seconds and hundreds of megabytes (the
tokenizer builds the whole token list). Past ``SAMPLED_COUNT_CHARS`` a text is counted
from evenly spread slices and scaled to its length, so the cost stays bounded whatever the
size; the estimate is within a few percent for text of uniform kind. A single message
larger than the whole message window cannot be observed before the model answers it (it is
the newest turn), so it is logged once: it is what blows the context budget.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # tokens.py imports this module; keep it free of the store at import time
    from ..store.base import StoredMessage

logger = logging.getLogger("langchain_om")

SAMPLED_COUNT_CHARS = 200_000
"""Texts longer than this are counted from samples (``SAMPLE_SLICES`` slices of equal size)."""
SAMPLE_SLICES = 8


def sampled_count(text: str, count: Callable[[str], int]) -> int:
    """``count(text)`` for a short text; for a longer one, ``count`` over spread slices scaled up."""
    size = len(text)
    if size <= SAMPLED_COUNT_CHARS:
        return count(text)
    width = SAMPLED_COUNT_CHARS // SAMPLE_SLICES
    stride = (size - width) // (SAMPLE_SLICES - 1)
    counted = sum(count(text[start:start + width]) for start in range(0, stride * SAMPLE_SLICES, stride))
    return round(counted * size / (width * SAMPLE_SLICES))


def warn_oversized(messages: Iterable[StoredMessage], window_tokens: int) -> list[StoredMessage]:
    """Log a warning for each newly stored message larger than the whole message window; return them."""
    big = [m for m in messages if m.tokens > window_tokens]
    for message in big:
        logger.warning(
            "message %s in thread %s is %d tokens, more than the whole message window (observation.message_tokens="
            "%d): the model receives it verbatim until it is observed, so this step's context exceeds the budget",
            message.id, message.thread_id, message.tokens, window_tokens)
    return big
