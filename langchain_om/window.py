"""A thread's unobserved window: its stored rows, oldest first, with their token total.

Several checks of a step (thresholds, activation, status, buffering) need the window's
tokens, and the context needs its rows as LangChain messages. Both are carried with the
rows as rows join or leave, so no step re-sums or re-looks-up the whole window; and the
window is a tuple, so neither can go stale.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from operator import attrgetter

from langchain_core.messages import BaseMessage

from .store.base import StoredMessage, total_tokens

_SEQ = attrgetter("seq")


class Window(tuple[StoredMessage, ...]):
    """Unobserved rows in seq order (read them like any tuple) and ``tokens``, their total.

    ``parsed`` holds the first rows as LangChain messages (all of them once the engine has
    built a context from this window); rows appended later extend it lazily.
    """

    tokens: int
    parsed: tuple[BaseMessage, ...]
    _edits: bool | None = None

    @property
    def has_edits(self) -> bool:
        """Whether an ``edit`` row (a correction for the Observer) is among the rows; looked up
        once per window object, not on every step."""
        if self._edits is None:
            self._edits = any(row.kind == "edit" for row in tuple.__iter__(self))
        return self._edits

    def __new__(
        cls, rows: Iterable[StoredMessage] = (), tokens: int | None = None, parsed: tuple[BaseMessage, ...] = ()
    ) -> Window:
        window = super().__new__(cls, rows)
        window.tokens = total_tokens(tuple.__iter__(window)) if tokens is None else tokens
        window.parsed = parsed
        return window

    def after(self, seq: int) -> Window:
        """The rows with a seq above ``seq``: a bisect, and a sum over the smaller side only."""
        start = bisect_right(self, seq, key=_SEQ)
        if start == 0:
            return self
        if start >= len(self):
            return Window()
        parsed = self.parsed[start:]
        if start * 2 <= len(self):
            return Window(self[start:], self.tokens - total_tokens(self[:start]), parsed)
        return Window(self[start:], None, parsed)

    def plus(self, rows: Iterable[StoredMessage]) -> Window:
        """This window with ``rows`` (newer, in seq order) appended."""
        extra = tuple(rows)
        if not extra:
            return self
        window = Window(self + extra, self.tokens + total_tokens(extra), self.parsed)
        if self._edits is not None:
            window._edits = self._edits or any(row.kind == "edit" for row in extra)
        return window
