"""Stored text for a terminal: control characters made visible, everything else as it is.

Thread ids, titles, the current task and the observation log are written by apps, users and
models; sent raw, an escape sequence among them runs on the operator's terminal (ESC ] 0 sets the
window title, ESC [ 2 J clears the screen) and a lone surrogate cannot even be encoded. The CLI
(``cli/literal.py``) and the console handler (``integrations/callbacks.py``) print such text
through ``visible``.
"""

from __future__ import annotations

import re

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""C0 and C1 control characters, DEL, the two Unicode line separators and lone surrogates."""

_CONTROL_KEEPING_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""The same, except newline and tab: multi-line text (the observation log) keeps its layout."""


def _shown(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]  # ESC -> \x1b, newline -> \n, U+D800 -> \ud800


def visible(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every control character written as its Python escape (``\\x1b``, ``\\n``), so it
    shows what is stored and cannot drive the terminal. ``keep_lines`` leaves newlines and tabs."""
    return (_CONTROL_KEEPING_LINES if keep_lines else _CONTROL).sub(_shown, text)
