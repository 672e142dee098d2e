"""Read a benchmark file's top-level JSON array one element at a time, compressed or not.

LongMemEval's M variant is a 2.7 GB JSON list: loading it whole takes several times that in
memory. ``iter_json_array`` reads chunks and decodes one element at a time with the standard
library's ``json.JSONDecoder.raw_decode`` (no extra dependency), so memory stays at about one
element (a question with its haystack) whatever the file's size. ``.xz`` and ``.gz`` files are
decompressed on the fly, so the published files can be read as downloaded or compressed.
"""

from __future__ import annotations

import gzip
import json
import lzma
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

CHUNK_CHARS = 1 << 20
"""Characters read at a time; an element longer than the buffer doubles what the next read asks for."""

_WHITESPACE = " \t\n\r"


class JSONStreamError(ValueError):
    """The file is not a JSON array of elements; the message names the file and the element."""


def open_text(path: str | Path) -> IO[str]:
    """The file as UTF-8 text, decompressed when its name ends in ``.xz`` or ``.gz``."""
    source = Path(path)
    name = source.name.lower()
    if name.endswith(".xz"):
        return lzma.open(source, "rt", encoding="utf-8")
    if name.endswith(".gz"):
        return gzip.open(source, "rt", encoding="utf-8")
    return source.open("r", encoding="utf-8")


def iter_json_array(path: str | Path) -> Iterator[Any]:
    """Each element of the file's top-level JSON array, in order, decoded one at a time."""
    decoder = json.JSONDecoder()
    with open_text(path) as handle:
        buffer, pos, eof = "", 0, False

        def fill(want: int) -> bool:
            """Append at least ``want`` more characters (fewer at the end); False at end of file."""
            nonlocal buffer, pos, eof
            if eof:
                return False
            try:
                chunk = handle.read(want)
            except (EOFError, lzma.LZMAError, gzip.BadGzipFile, UnicodeDecodeError) as exc:
                raise JSONStreamError(f"{path}: cannot be read ({exc})") from exc
            if not chunk:
                eof = True
                return False
            buffer, pos = buffer[pos:] + chunk, 0
            return True

        def skip_space() -> str:
            """The next character that is not white space ('' at end of file)."""
            nonlocal pos
            while True:
                while pos < len(buffer) and buffer[pos] in _WHITESPACE:
                    pos += 1
                if pos < len(buffer):
                    return buffer[pos]
                if not fill(CHUNK_CHARS):
                    return ""

        if skip_space() != "[":
            raise JSONStreamError(f"{path}: must hold a JSON list (it does not start with '[')")
        pos += 1
        index = 0
        if skip_space() == "]":
            return
        while True:
            if skip_space() == "":
                raise JSONStreamError(f"{path}: ends inside the list, after element {index - 1}")
            while True:
                try:
                    value, end = decoder.raw_decode(buffer, pos)
                except json.JSONDecodeError as exc:
                    # most often the element goes on past the buffer: read more (as much again, so a
                    # long element costs a few decodes, not one per chunk) and try again
                    if fill(max(CHUNK_CHARS, len(buffer) - pos)):
                        continue
                    raise JSONStreamError(f"{path}: element {index} is not valid JSON ({exc.msg})") from exc
                # a number at the buffer's very end may go on in the next chunk
                if end < len(buffer) or not fill(CHUNK_CHARS):
                    break
            pos = end
            yield value
            index += 1
            separator = skip_space()
            if separator == "]":
                if skip_space_after_end(handle, buffer[pos + 1:]):
                    raise JSONStreamError(f"{path}: text after the end of the list")
                return
            if separator != ",":
                found = repr(separator) if separator else "the end of the file"
                raise JSONStreamError(f"{path}: expected ',' or ']' after element {index - 1}, found {found}")
            pos += 1


def skip_space_after_end(handle: IO[str], rest: str) -> bool:
    """Whether anything but white space follows the closing bracket."""
    if rest.strip(_WHITESPACE):
        return True
    while chunk := handle.read(CHUNK_CHARS):
        if chunk.strip(_WHITESPACE):
            return True
    return False
