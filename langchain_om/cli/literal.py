"""Stored text on the operator's terminal: shown as it is, never interpreted.

Thread ids, titles, resource ids, the current task, message ids and the observation log are
written by apps, end users and models. Passed to Rich as a string, ``[/]`` in a title is read as
markup (the command crashes, hiding every other thread); passed to the terminal raw, an escape
sequence in a title runs (ESC ] 0 sets the window title, ESC [ 2 J clears the screen). Every
command prints such text through ``literal`` (or ``visible``, from ``foundation/terminal_text.py``,
where it builds its own line).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.text import Text

from ..foundation.terminal_text import visible

__all__ = ["json_text", "literal", "visible"]


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
