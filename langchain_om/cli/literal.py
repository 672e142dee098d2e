"""Stored text on the operator's terminal: shown as it is, never interpreted.

Thread ids, titles, resource ids, the current task, message ids and the observation log are
written by apps, end users and models. Passed to Rich as a string, ``[/]`` in a title is read as
markup (the command crashes, hiding every other thread); passed to the terminal raw, an escape
sequence in a title runs (ESC ] 0 sets the window title, ESC [ 2 J clears the screen). Every
command prints such text through ``literal`` (or ``visible`` where it builds its own line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.text import Text

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""C0 and C1 control characters, DEL, the two Unicode line separators and lone surrogates (which a
UTF-8 terminal cannot even be sent: printing one raises ``UnicodeEncodeError``)."""

_CONTROL_KEEPING_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""The same, except newline and tab: multi-line text (the observation log) keeps its layout."""


def _shown(match: re.Match[str]) -> str:
    return repr(match.group())[1:-1]  # ESC -> \x1b, newline -> \n, U+D800 -> \ud800


def visible(text: str, *, keep_lines: bool = False) -> str:
    """``text`` with every control character written as its Python escape (``\\x1b``, ``\\n``), so it
    shows what is stored and cannot drive the terminal. ``keep_lines`` leaves newlines and tabs."""
    return (_CONTROL_KEEPING_LINES if keep_lines else _CONTROL).sub(_shown, text)


def literal(text: object, *, style: str = "", keep_lines: bool = False) -> Text:
    """A Rich ``Text`` of ``text`` made visible: Rich never reads markup in it (``[/]`` is printed as
    it is) and the terminal never receives a control character from it."""
    return Text(visible(str(text), keep_lines=keep_lines), style=style)


_SURROGATE = re.compile("[\ud800-\udfff]")


def json_text(payload: Any) -> str:
    """``--json`` output: indented, non-ASCII kept readable, and every lone surrogate written as its
    ``\\uXXXX`` escape (valid JSON that reads back as the same string), never as a raw code point
    that no UTF-8 stream can hold."""
    text = json.dumps(payload, indent=2, ensure_ascii=False)
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)
