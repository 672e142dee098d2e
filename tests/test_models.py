"""Model resolution, fallbacks and retries, call configuration, and the scripted test models."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langgraph.constants import TAG_NOSTREAM
from pydantic import BaseModel

from langchain_om.foundation.config import DEFAULT_MODEL, ModelSettings
from langchain_om.model_calls import models
from langchain_om.model_calls.models import (
    ModelByInputTokens,
    ModelSelectionError,
    ModelWithRetries,
    OMModelError,
    aresolve_chat_model,
    describe_model,
    model_supports_images,
    normalize_model_string,
    resolve_chat_model,
)
from langchain_om.model_calls.om_calls import acall_om_model
from langchain_om.testing import ScriptedAgentModel, ScriptedChatModel

PROMPT: list[BaseMessage] = [SystemMessage("be brief"), HumanMessage("hello")]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    models._model_cache.clear()
    yield
    models._model_cache.clear()


async def call(spec: Any, **kwargs: Any) -> models.ModelCallResult:
    options: dict[str, Any] = {"role": "observer", "input_tokens": 100, "settings": ModelSettings(),
                               "provider_options": {}, "context": {}, "backoff_s": 0}
    options.update(kwargs)
    return await acall_om_model(spec, PROMPT, **options)


# ------------------------------------------------------------------ specs


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("openai/gpt-5-mini", "openai:gpt-5-mini"),
        ("google/gemini-2.5-flash", "google_genai:gemini-2.5-flash"),
        ("anthropic/claude-sonnet-4-5", "anthropic:claude-sonnet-4-5"),
        ("openai:gpt-4.1", "openai:gpt-4.1"),
        ("google_genai:gemini-2.5-pro", "google_genai:gemini-2.5-pro"),
        ("default", DEFAULT_MODEL),
        (" Default ", DEFAULT_MODEL),
        ("gpt-4o", "gpt-4o"),
        ("openrouter/meta-llama/llama-3", "openrouter:meta-llama/llama-3"),
    ],
)
def test_normalize_model_string(given: str, expected: str) -> None:
    assert normalize_model_string(given) == expected


def test_normalize_rejects_empty() -> None:
    with pytest.raises(ModelSelectionError):
        normalize_model_string("  ")


def test_model_by_input_tokens_ordering_and_boundaries() -> None:
    selector = ModelByInputTokens(up_to={40_000: "openai/gpt-5-mini", 10_000: "google/gemini-2.5-flash",
                                         1_000_000: "openai/gpt-5"})
    assert selector.get_thresholds() == [10_000, 40_000, 1_000_000]
    assert selector.resolve(1) == "google/gemini-2.5-flash"
    assert selector.resolve(10_000) == "google/gemini-2.5-flash"
    assert selector.resolve(10_001) == "openai/gpt-5-mini"
    assert selector.resolve(40_000) == "openai/gpt-5-mini"
    assert selector.resolve(1_000_000) == "openai/gpt-5"
    with pytest.raises(ModelSelectionError, match=r"1000001 tokens.*largest.*1000000"):
        selector.resolve(1_000_001)


@pytest.mark.parametrize("bad", [{}, {0: "x"}, {-5: "x"}, {1.5: "x"}, {True: "x"}, {10: ""}])
def test_model_by_input_tokens_validation(bad: Any) -> None:
    with pytest.raises(ValueError):
        ModelByInputTokens(up_to=bad)


def test_resolve_shapes() -> None:
    a, b = ScriptedChatModel(model_name="a"), ScriptedChatModel(model_name="b")
    assert resolve_chat_model(a, input_tokens=1, context={}) == [(a, 0)]
    chain = resolve_chat_model([a, {"model": b, "max_retries": 3}, ModelWithRetries(model=a)], input_tokens=1,
                               context={})
    assert chain == [(a, 0), (b, 3), (a, 2)]
    by_size = ModelByInputTokens(up_to={100: a, 1000: b})
    assert resolve_chat_model(by_size, input_tokens=500, context={}) == [(b, 0)]
    picked = resolve_chat_model(lambda ctx: b if ctx["role"] == "reflector" else a, input_tokens=1,
                                context={"role": "reflector"})
    assert picked == [(b, 0)]
    with pytest.raises(ModelSelectionError, match="async"):
        resolve_chat_model(lambda ctx: asyncio.sleep(0, a), input_tokens=1, context={})
    with pytest.raises(ModelSelectionError):
        resolve_chat_model(42, input_tokens=1, context={})
    with pytest.raises(ValueError):
        ModelWithRetries(model=a, max_retries=-1)


async def test_aresolve_async_callable() -> None:
    a = ScriptedChatModel(model_name="a")

    async def choose(ctx: Mapping[str, Any]) -> Any:
        await asyncio.sleep(0)
        return [ModelWithRetries(model=a, max_retries=1)]

    assert await aresolve_chat_model(choose, input_tokens=1, context={}) == [(a, 1)]


def test_strings_are_resolved_lazily_with_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[tuple[str, dict[str, Any]]] = []

    def fake_init(name: str, **kwargs: Any) -> ScriptedChatModel:
        created.append((name, kwargs))
        return ScriptedChatModel(model_name=name, responses=["<observations>ok</observations>"])

    import langchain.chat_models

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    selector = ModelByInputTokens(up_to={10: "google/gemini-2.5-flash", 10_000: "openai/gpt-5-mini"})
    assert created == []  # building a spec never constructs a model
    settings = ModelSettings(temperature=0.3, max_output_tokens=1234)
    result = asyncio.run(call(selector, settings=settings, provider_options={"reasoning_effort": "low"}))
    assert created == [("openai:gpt-5-mini", {"temperature": 0.3, "max_tokens": 1234, "reasoning_effort": "low"})]
    assert result.text == "<observations>ok</observations>"
    asyncio.run(call(selector, settings=settings, provider_options={"reasoning_effort": "low"}))
    assert len(created) == 1  # cached per string + settings
    asyncio.run(call("google/gemini-2.5-flash", settings=settings))
    assert created[-1] == ("google_genai:gemini-2.5-flash", {"temperature": 0.3, "max_output_tokens": 1234})


async def test_missing_api_key_surfaces_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(OMModelError) as info:
        await call("openai/gpt-5-mini")
    assert "openai:gpt-5-mini" in str(info.value)
    assert "API key" in str(info.value)


# ------------------------------------------------------------------ calling


async def test_retries_then_success() -> None:
    model = ScriptedChatModel(responses=[RuntimeError("503"), RuntimeError("503 again"), "fine"])
    result = await call([ModelWithRetries(model=model, max_retries=2)])
    assert result.text == "fine"
    assert result.attempts == 3
    assert [str(e) for _, _, e in result.errors] == ["503", "503 again"]
    assert len(model.calls) == 3


async def test_fallback_to_next_model_after_retries() -> None:
    broken = ScriptedChatModel(model_name="broken", responses=[RuntimeError("down")])
    backup = ScriptedChatModel(model_name="backup", responses=["from backup"])
    result = await call([{"model": broken, "max_retries": 1}, backup])
    assert result.text == "from backup"
    assert len(broken.calls) == 2 and len(backup.calls) == 1
    assert result.model_name == "scripted/backup"
    assert result.attempts == 3


async def test_plain_spec_is_not_retried_and_all_errors_reported() -> None:
    one = ScriptedChatModel(model_name="one", responses=[RuntimeError("boom1")])
    two = ScriptedChatModel(model_name="two", responses=[ValueError("boom2")])
    with pytest.raises(OMModelError) as info:
        await call([one, {"model": two, "max_retries": 1}], role="reflector")
    assert len(one.calls) == 1 and len(two.calls) == 2
    errors = info.value.errors
    assert [(name, n, str(e)) for name, n, e in errors] == [
        ("scripted/one", 1, "boom1"), ("scripted/two", 1, "boom2"), ("scripted/two", 2, "boom2")]
    assert "reflector model failed after 3 attempt(s)" in str(info.value)


async def test_model_selection_error_propagates_without_calls() -> None:
    model = ScriptedChatModel()
    with pytest.raises(ModelSelectionError):
        await call(ModelByInputTokens(up_to={10: model}), input_tokens=11)
    assert model.calls == []


async def test_timeout_counts_as_a_failed_attempt() -> None:
    slow = ScriptedChatModel(model_name="slow", responses=["late"], delay_s=0.5)
    fast = ScriptedChatModel(model_name="fast", responses=["quick"])
    result = await call([slow, fast], timeout_s=0.05)
    assert result.text == "quick"
    assert isinstance(result.errors[0][2], TimeoutError | asyncio.TimeoutError)


class TagRecorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.starts: list[tuple[list[str], dict[str, Any]]] = []

    def on_chat_model_start(self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *,
                            run_id: UUID, tags: list[str] | None = None, metadata: dict[str, Any] | None = None,
                            **kwargs: Any) -> None:
        self.starts.append((list(tags or []), dict(metadata or {})))


async def test_nostream_tag_and_run_name_reach_callbacks() -> None:
    recorder = TagRecorder()
    model = ScriptedChatModel(responses=["x"], callbacks=[recorder])
    await call(model, role="reflector")
    tags, metadata = recorder.starts[0]
    assert TAG_NOSTREAM in tags and "langchain_om" in tags
    assert metadata["langchain_om_role"] == "reflector"


async def test_settings_and_provider_options_reach_instances() -> None:
    model = ScriptedChatModel(responses=["x"])
    await call(model, settings=ModelSettings(temperature=0.0, max_output_tokens=777),
               provider_options={"seed": 7})
    assert model.call_kwargs[0] == {"temperature": 0.0, "max_tokens": 777, "seed": 7}


async def test_settings_skip_fields_the_model_does_not_declare() -> None:
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    fake = FakeListChatModel(responses=["plain"])
    result = await call(fake, settings=ModelSettings(temperature=0.5, max_output_tokens=10))
    assert result.text == "plain"  # no unknown kwargs were bound


async def test_result_carries_usage_and_metadata() -> None:
    result = await call(ScriptedChatModel(model_name="m1", responses=["a" * 40]))
    assert result.usage is not None and result.usage["output_tokens"] == 10
    assert result.provider_metadata["model_name"] == "m1"
    assert isinstance(result.message, AIMessage)


# ------------------------------------------------------------------ identity and capabilities


def test_describe_model() -> None:
    assert describe_model("openai:gpt-5-mini") == "openai/gpt-5-mini"
    assert describe_model("google/gemini-2.5-flash") == "google_genai/gemini-2.5-flash"
    assert describe_model(ScriptedChatModel(model_name="x")) == "scripted/x"
    assert describe_model([{"model": "openai/gpt-4o"}]) == "openai/gpt-4o"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("openai/gpt-4o-mini", True),
        ("openai:gpt-5-mini", True),
        ("openai:gpt-4.1", True),
        ("google/gemini-2.5-flash", True),
        ("default", True),
        ("anthropic:claude-3-5-sonnet-latest", True),
        ("anthropic:claude-sonnet-4-5", True),
        ("openai:gpt-3.5-turbo", False),
        ("mistralai:mistral-large", None),
        ("some-local-model", None),
        (ScriptedChatModel(), None),
        (None, None),
    ],
)
def test_model_supports_images(spec: Any, expected: bool | None) -> None:
    assert model_supports_images(spec) is expected


# ------------------------------------------------------------------ scripted models


class Profile(BaseModel):
    name: str
    city: str | None = None


def test_scripted_chat_model_sync_callables_and_structured_output() -> None:
    model = ScriptedChatModel(responses=[lambda msgs: f"echo {msgs[-1].content}", '{"name": "Ana", "city": "Porto"}'])
    assert model.invoke("hi").content == "echo hi"
    assert model.with_structured_output(Profile).invoke("who?") == Profile(name="Ana", city="Porto")
    raw = ScriptedChatModel(responses=["not json"]).with_structured_output(Profile, include_raw=True).invoke("x")
    assert raw["parsed"] is None and raw["parsing_error"] is not None
    assert model.bind_tools([]) is model


async def test_scripted_chat_model_delay() -> None:
    model = ScriptedChatModel(responses=["x"], delay_s=0.05)
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.gather(model.ainvoke("a"), model.ainvoke("b"))
    assert 0.05 <= loop.time() - started < 0.09  # asyncio.sleep, so concurrent calls overlap


def test_scripted_agent_model_replies_and_tool_calls() -> None:
    agent = ScriptedAgentModel(tool_calls_on={0: ("recall", {"query": "cat"})})
    first = agent.invoke([HumanMessage("what is my cat called?")])
    assert isinstance(first, AIMessage)
    assert first.tool_calls[0]["name"] == "recall" and first.tool_calls[0]["args"] == {"query": "cat"}
    after_tool = agent.invoke([HumanMessage("what is my cat called?"), first,
                               ToolMessage("Miso", tool_call_id=first.tool_calls[0]["id"] or "", name="recall")])
    assert after_tool.content == "Based on recall: Miso"
    plain = agent.invoke([HumanMessage("hello there")])
    assert "hello there" in str(plain.content)
    assert agent.bind_tools([]) is agent
    assert len(agent.calls) == 3
