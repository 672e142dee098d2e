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

from ..store.base import StoredMessage, total_tokens
from .turns import Kind, kind_of_row

_SEQ = attrgetter("seq")


class Window(tuple[StoredMessage, ...]):
    """Unobserved rows in seq order (read them like any tuple) and ``tokens``, their total.

    ``parsed`` holds the first rows as LangChain messages (all of them once the engine has
    built a context from this window); rows appended later extend it lazily.
    """

    tokens: int
    parsed: tuple[BaseMessage, ...]
    _edits: bool | None = None
    _kinds: tuple[Kind, ...] | None = None
    _token_list: tuple[int, ...] | None = None

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """Each row's kind (``turns``), read from the stored dicts once per window object and
        carried along as rows join or leave; only the planner's cut rules need them."""
        if self._kinds is None:
            self._kinds = tuple(kind_of_row(row) for row in tuple.__iter__(self))
        return self._kinds

    @property
    def token_list(self) -> tuple[int, ...]:
        """Each row's tokens, in order (carried like ``kinds``)."""
        if self._token_list is None:
            self._token_list = tuple(row.tokens for row in tuple.__iter__(self))
        return self._token_list

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
            window = Window(self[start:], self.tokens - total_tokens(self[:start]), parsed)
        else:
            window = Window(self[start:], None, parsed)
        if self._kinds is not None:
            window._kinds = self._kinds[start:]
        if self._token_list is not None:
            window._token_list = self._token_list[start:]
        return window

    def plus(self, rows: Iterable[StoredMessage]) -> Window:
        """This window with ``rows`` (newer, in seq order) appended."""
        extra = tuple(rows)
        if not extra:
            return self
        window = Window(self + extra, self.tokens + total_tokens(extra), self.parsed)
        if self._edits is not None:
            window._edits = self._edits or any(row.kind == "edit" for row in extra)
        if self._kinds is not None:
            window._kinds = self._kinds + tuple(kind_of_row(row) for row in extra)
        if self._token_list is not None:
            window._token_list = self._token_list + tuple(row.tokens for row in extra)
        return window
