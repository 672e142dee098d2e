"""What images and files cost in tokens: each provider's image rule and a deterministic file estimate.

Its own module because pricing media is a concept apart from counting text: it reads image
headers (PNG, GIF, JPEG, WebP) and payload sizes, never a vocabulary. ``tokens.py``'s counters
call ``image_block_tokens`` / ``file_block_tokens`` for content blocks and re-export the public
names (``image_tokens``, ``file_tokens``, ``normalize_provider``, the fallback charges).
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
from collections.abc import Mapping
from typing import Any, Literal, Protocol

ProviderFamily = Literal["openai", "anthropic", "google"]


class TextCounter(Protocol):
    """What pricing a text-like file needs from a counter (every ``TokenCounter`` fits)."""

    def count_text(self, text: str) -> int: ...


IMAGE_FALLBACK_TOKENS: dict[ProviderFamily | None, int] = {
    "openai": 765,  # a 1024x1024 high-detail image
    "anthropic": 1600,  # Anthropic's cap for a natively sized image
    "google": 258,  # Gemini's flat per-image charge
    None: 1000,  # unknown provider: between the OpenAI and Anthropic defaults
}
"""Charge for an image whose dimensions cannot be determined (remote URL, file id, unknown format)."""

FILE_FALLBACK_TOKENS = 1000
"""Charge for a file given only by URL or id: its size is unknown."""
BINARY_BYTES_PER_TOKEN = 8
"""Binary files (PDF, audio, video): one token per 8 bytes of payload, a deterministic middle ground."""

_PROVIDER_ALIASES: dict[str, ProviderFamily] = {
    "openai": "openai",
    "azure_openai": "openai",
    "azure": "openai",
    "gpt": "openai",
    "o1": "openai",
    "o3": "openai",
    "o4": "openai",
    "anthropic": "anthropic",
    "claude": "anthropic",
    "bedrock": "anthropic",
    "bedrock_converse": "anthropic",
    "google": "google",
    "google_genai": "google",
    "google_vertexai": "google",
    "google_anthropic_vertex": "anthropic",
    "vertexai": "google",
    "gemini": "google",
}


_MODEL_MARKERS: tuple[tuple[str, ProviderFamily], ...] = (
    ("gpt", "openai"),
    ("claude", "anthropic"),
    ("gemini", "google"),
)


def normalize_provider(hint: str | None) -> ProviderFamily | None:
    """Map a provider name, ``provider:model`` spec or bare model name to the image-pricing family."""
    if not hint:
        return None
    value = hint.strip().lower()
    head = re.split(r"[:/]", value, maxsplit=1)[0]
    if head in _PROVIDER_ALIASES:
        return _PROVIDER_ALIASES[head]
    for marker, family in _MODEL_MARKERS:
        if marker in value:
            return family
    return None


def image_tokens(
    width: int | None,
    height: int | None,
    provider: ProviderFamily | None = None,
    detail: str | None = None,
) -> int:
    """Tokens a provider charges for one image; deterministic fallbacks when dimensions are unknown.

    OpenAI: 85 base + 170 per 512px tile after fitting into 2048 and scaling the short
    side to 768 (``detail="low"`` is a flat 85). Anthropic: w*h/750 after capping the
    long edge at 1568. Gemini: 258 per 768px tile (small images are one tile).
    Unknown providers with known dimensions use the OpenAI rule, matching o200k.
    """
    if provider in ("openai", None) and detail == "low":
        return 85
    if not width or not height or width <= 0 or height <= 0:
        return IMAGE_FALLBACK_TOKENS[provider]
    w, h = float(width), float(height)
    if provider == "anthropic":
        long_edge = max(w, h)
        if long_edge > 1568:
            w, h = w * 1568 / long_edge, h * 1568 / long_edge
        return min(1600, max(1, math.ceil(w * h / 750)))
    if provider == "google":
        if w <= 384 and h <= 384:
            return 258
        return 258 * math.ceil(w / 768) * math.ceil(h / 768)
    long_edge = max(w, h)
    if long_edge > 2048:
        w, h = w * 2048 / long_edge, h * 2048 / long_edge
    short_edge = min(w, h)
    if short_edge > 768:
        w, h = w * 768 / short_edge, h * 768 / short_edge
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _sniff_image_size(data: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG, GIF, JPEG or WebP header, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return int(width), int(height)
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return int(width), int(height)
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8X":
            return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
        if chunk == b"VP8 ":
            return (int.from_bytes(data[26:28], "little") & 0x3FFF, int.from_bytes(data[28:30], "little") & 0x3FFF)
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        return None
    if data[:2] == b"\xff\xd8":
        return _sniff_jpeg(data)
    return None


_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _sniff_jpeg(data: bytes) -> tuple[int, int] | None:
    """Walk JPEG segments (not pixels) to the first start-of-frame marker."""
    i = 2
    while i + 9 <= len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:
            i += 2
            continue
        if marker in _JPEG_SOF:
            height, width = struct.unpack(">HH", data[i + 5 : i + 9])
            return int(width), int(height)
        i += 2 + int.from_bytes(data[i + 2 : i + 4], "big")
    return None


_B64_HEADER_CHARS = 65_536  # enough for PNG/GIF/WebP and JPEGs with modest EXIF blocks
_WS_RE = re.compile(r"\s+")


def _b64_head(b64: str) -> bytes:
    chunk = _WS_RE.sub("", b64[: _B64_HEADER_CHARS + 1024])[:_B64_HEADER_CHARS]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        return base64.b64decode(chunk)
    except (binascii.Error, ValueError):
        return b""


def _b64_size(b64: str) -> int:
    """Decoded byte length of a base64 payload, computed without decoding it."""
    length = len(b64) - b64.count("\n") - b64.count("\r") - b64.count(" ")
    return max(0, length * 3 // 4 - b64[-2:].count("="))


def _split_data_url(url: str) -> tuple[str | None, str | None]:
    """``data:image/png;base64,AAAA`` -> (mime, base64 payload); other URLs -> (None, None)."""
    if not url.startswith("data:"):
        return None, None
    header, _, payload = url[5:].partition(",")
    mime = header.split(";", 1)[0] or None
    return (mime, payload) if ";base64" in header else (mime, None)


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _nested_maps(block: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The block and the nested dicts where providers keep payload and metadata."""
    maps: list[Mapping[str, Any]] = [block]
    for key in ("image_url", "source", "file", "input_audio", "extras", "metadata"):
        value = block.get(key)
        if isinstance(value, Mapping):
            maps.append(value)
    return maps


def _payload(block: Mapping[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(base64 data, url, mime type) wherever the block's format keeps them."""
    data: str | None = None
    url: str | None = None
    mime: str | None = None
    for m in _nested_maps(block):
        for key in ("base64", "data", "file_data"):
            value = m.get(key)
            if data is None and isinstance(value, str) and value:
                data = value
        for key in ("url", "image_url"):
            value = m.get(key)
            if url is None and isinstance(value, str) and value:
                url = value
        for key in ("mime_type", "media_type", "format"):
            value = m.get(key)
            if mime is None and isinstance(value, str) and value:
                mime = value
    if data is not None and data.startswith("data:"):
        data_mime, data = _split_data_url(data)
        mime = mime or data_mime
    if data is None and url is not None:
        data_mime, payload = _split_data_url(url)
        if payload is not None:
            data, mime = payload, mime or data_mime
    return data, url, mime


def image_block_tokens(block: Mapping[str, Any], provider: ProviderFamily | None) -> int:
    width = height = None
    detail: str | None = None
    for m in _nested_maps(block):
        width = width or _as_int(m.get("width"))
        height = height or _as_int(m.get("height"))
        value = m.get("detail")
        if detail is None and isinstance(value, str):
            detail = value.lower()
    if not (width and height):
        data, _, _ = _payload(block)
        if data:
            size = _sniff_image_size(_b64_head(data))
            if size:
                width, height = size
    return image_tokens(width, height, provider, detail)


def is_image_file(block: Mapping[str, Any]) -> bool:
    """A file block (``{"type": "file", "mime_type": "image/png", ...}``) that holds an image: the
    provider reads it as an image, so it is priced as one, not by its byte size. SVG is XML text."""
    _, _, mime = _payload(block)
    if not mime:
        return False
    mime = mime.lower()
    return mime.startswith("image/") and not _TEXT_MIME_RE.match(mime)


_TEXT_MIME_RE = re.compile(r"^(text/|application/(json|xml|yaml|x-yaml|javascript|csv|x-ndjson|sql)\b|.*\+(json|xml)$)")


def file_tokens(
    counter: TextCounter,
    *,
    text: str | None = None,
    base64_data: str | None = None,
    mime_type: str | None = None,
    filename: str | None = None,
) -> int:
    """Deterministic estimate for a document: text-like files are counted as text, binaries by size."""
    tokens = counter.count_text(filename) if filename else 0
    if text is not None:
        return tokens + counter.count_text(text)
    if base64_data:
        if mime_type and _TEXT_MIME_RE.match(mime_type.lower()):
            try:
                decoded = base64.b64decode(base64_data).decode("utf-8", errors="replace")
                return tokens + counter.count_text(decoded)
            except (binascii.Error, ValueError):
                pass
        return tokens + max(1, math.ceil(_b64_size(base64_data) / BINARY_BYTES_PER_TOKEN))
    return tokens + FILE_FALLBACK_TOKENS


def file_block_tokens(counter: TextCounter, block: Mapping[str, Any]) -> int:
    text: str | None = None
    filename: str | None = None
    for m in _nested_maps(block):
        value = m.get("text")
        if text is None and isinstance(value, str):
            text = value
        for key in ("filename", "title", "name"):
            value = m.get(key)
            if filename is None and isinstance(value, str):
                filename = value
    source = block.get("source")
    if text is None and isinstance(source, Mapping) and source.get("type") == "text":
        value = source.get("data")
        text = value if isinstance(value, str) else None
    data, _, mime = _payload(block) if text is None else (None, None, None)
    return file_tokens(counter, text=text, base64_data=data, mime_type=mime, filename=filename)
