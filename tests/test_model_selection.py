"""OM model selection (issue 6, item 4), tested through ObservationalMemory with recording models."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import conversation
from om_recording import RecordingModel, observer_reply

from langchain_om.engine import ObservationalMemory, OMContext
from langchain_om.foundation.tokens import CONVERSATION_OVERHEAD, MESSAGE_OVERHEAD, EstimatorCounter
from langchain_om.model_calls.models import ModelByInputTokens, ModelSelectionError, reads_input_tokens
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore

SHORT_REFLECTION = "<observations>\n* 🔴 Miso: no chicken.\n</observations>"


def reply(messages: list[BaseMessage]) -> str:
    text = "\n".join(str(m.content) for m in messages)
    return observer_reply() if "Turn " in text else SHORT_REFLECTION


def make_om(model: Any = None, **options: Any) -> ObservationalMemory:
    observation = {"message_tokens": 400, "buffer_tokens": False, **options.pop("observation", {})}
    reflection = {"observation_tokens": 10_000, **options.pop("reflection", {})}
    return ObservationalMemory(InMemoryStore(), model=model, observation=observation, reflection=reflection,
                               token_counter="estimator", **options)


async def run_until_observed(om: ObservationalMemory, turns: int = 14) -> list[OMContext]:
    contexts = []
    for history in conversation(turns):
        ctx = await om.aprocess("t1", history)
        contexts.append(ctx)
        if any(e.type in ("data-om-observation-end", "data-om-observation-failed") for e in ctx.events):
            return contexts
    raise AssertionError("no observation was attempted")


# ------------------------------------------------------------------ ModelByInputTokens


def test_model_by_input_tokens_picks_the_smallest_fitting_tier() -> None:
    small, large = RecordingModel(fn=reply), RecordingModel(fn=reply)
    selector = ModelByInputTokens(up_to={50_000: large, 5_000: small})
    assert selector.get_thresholds() == [5_000, 50_000]
    assert selector.resolve(10) is small
    assert selector.resolve(5_000) is small
    assert selector.resolve(5_001) is large
    assert selector.resolve(50_000) is large
    with pytest.raises(ModelSelectionError) as info:
        selector.resolve(50_001)
    assert "50001" in str(info.value).replace(",", "").replace("_", "") or "50,001" in str(info.value)


async def test_tiers_are_chosen_by_the_observer_input_size() -> None:
    tiny, big = RecordingModel(fn=reply), RecordingModel(fn=reply)
    om = make_om(ModelByInputTokens(up_to={50: tiny, 1_000_000: big}))
    await run_until_observed(om)
    assert tiny.calls == [] and len(big.calls) == 1


async def test_input_above_the_largest_tier_aborts_the_step() -> None:
    tiny = RecordingModel(fn=reply)
    om = make_om(ModelByInputTokens(up_to={50: tiny}))
    contexts = await run_until_observed(om)
    last = contexts[-1]
    assert last.aborted and "50" in last.aborted
    failed = [e for e in last.events if e.type == "data-om-observation-failed"]
    assert failed and "50" in failed[0].data.error  # type: ignore[attr-defined]
    assert tiny.calls == []
    record = await om.aget_record("t1")
    assert record.groups == [], "nothing was observed"
    assert [m.id for m in last.messages] == [m.id for m in list(conversation(len(contexts)))[-1]]


# ------------------------------------------------------------------ instances, callables, lists


async def test_a_chat_model_instance_is_used_directly() -> None:
    model = RecordingModel(fn=reply)
    om = make_om(model)
    await run_until_observed(om)
    assert len(model.calls) == 1
    assert "Turn 0" in "\n".join(str(m.content) for m in model.calls[0]["messages"])


async def test_dynamic_model_callable_gets_the_context() -> None:
    observer_model, reflector_model = RecordingModel(fn=reply), RecordingModel(fn=reply)
    seen: list[dict[str, Any]] = []

    def choose(ctx: dict[str, Any]) -> Any:
        seen.append(dict(ctx))
        return observer_model if ctx["role"] == "observer" else reflector_model

    om = make_om(choose)
    await run_until_observed(om)
    await om.areflect("t1")
    assert len(observer_model.calls) == 1 and len(reflector_model.calls) == 1
    first = seen[0]
    assert first["thread_id"] == "t1" and first["trigger"] == "turn-sync"
    assert first["resource_id"] == implicit_resource("t1")
    assert first["input_tokens"] > 0 and first["memory"] is om
    assert seen[-1]["role"] == "reflector" and seen[-1]["trigger"] == "manual"


async def test_per_role_models() -> None:
    observer_model, reflector_model = RecordingModel(fn=reply), RecordingModel(fn=reply)
    om = make_om(observation={"model": observer_model}, reflection={"model": reflector_model})
    await run_until_observed(om)
    await om.areflect("t1")
    assert len(observer_model.calls) == 1 and len(reflector_model.calls) == 1


async def test_model_list_is_tried_in_order_with_retries() -> None:
    flaky = RecordingModel(fn=reply, fail_times=100)
    backup = RecordingModel(fn=reply)
    om = make_om([{"model": flaky, "max_retries": 2}, backup])
    contexts = await run_until_observed(om)
    assert any(e.type == "data-om-observation-end" for e in contexts[-1].events)
    assert len(flaky.calls) == 3, "one attempt plus two retries"
    assert len(backup.calls) == 1


async def test_a_retry_can_succeed_on_the_same_model() -> None:
    flaky = RecordingModel(fn=reply, fail_times=1)
    backup = RecordingModel(fn=reply)
    om = make_om([{"model": flaky, "max_retries": 1}, backup])
    await run_until_observed(om)
    assert len(flaky.calls) == 2 and backup.calls == []


async def test_all_models_failing_is_a_failed_cycle_not_an_exception() -> None:
    first, second = RecordingModel(fn=reply, fail_times=100), RecordingModel(fn=reply, fail_times=100)
    om = make_om([first, second])
    contexts = await run_until_observed(om)
    assert not contexts[-1].aborted
    failed = [e for e in contexts[-1].events if e.type == "data-om-observation-failed"]
    assert failed and "provider exploded" in failed[0].data.error  # type: ignore[attr-defined]
    assert first.calls and second.calls


# ------------------------------------------------------------------ settings reach the call


def call_settings(call: dict[str, Any]) -> dict[str, Any]:
    """Settings may arrive as bound kwargs or as fields on a configured copy of the model."""
    merged = {"temperature": call["temperature"], "max_tokens": call["max_tokens"]}
    merged.update({k: v for k, v in call["kwargs"].items() if v is not None})
    return merged


async def test_model_settings_and_provider_options_reach_the_observer_call() -> None:
    model = RecordingModel(fn=reply)
    om = make_om(observation={"model": model, "model_settings": {"temperature": 0.7, "max_output_tokens": 1234},
                              "provider_options": {"top_k": 5}},
                 reflection={"model_settings": {"temperature": 0.1, "max_output_tokens": 777}})
    await run_until_observed(om)
    await om.areflect("t1")
    observer_call, reflector_call = model.calls[0], model.calls[-1]
    obs = call_settings(observer_call)
    assert obs["temperature"] == 0.7 and obs["max_tokens"] == 1234 and obs["top_k"] == 5
    ref = call_settings(reflector_call)
    assert ref["temperature"] == 0.1 and ref["max_tokens"] == 777 and "top_k" not in ref


async def test_role_default_temperatures_without_settings() -> None:
    model = RecordingModel(fn=reply)
    om = make_om(model)
    await run_until_observed(om)
    await om.areflect("t1")
    assert call_settings(model.calls[0])["temperature"] == 0.3
    assert call_settings(model.calls[-1])["temperature"] == 0.0
    # a custom model gets no default max output
    assert call_settings(model.calls[0])["max_tokens"] is None


# ------------------------------------------------------------------ strings


@pytest.fixture
def created_models(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, dict[str, Any], RecordingModel]]:
    """Replaces LangChain's provider factory (there is no network here) and records what OM asked for."""
    import langchain.chat_models

    from langchain_om.model_calls import models

    created: list[tuple[str, dict[str, Any], RecordingModel]] = []

    def fake_init_chat_model(name: str, **kwargs: Any) -> RecordingModel:
        model = RecordingModel(fn=reply)
        created.append((name, kwargs, model))
        return model

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init_chat_model)
    monkeypatch.setattr(models, "_model_cache", {})
    # the strings resolve to fakes here: no provider package or API key is needed, so skip the
    # construction-time check of them (tests/test_failure_policy.py covers it)
    import langchain_om.engine.core as engine_core

    monkeypatch.setattr(engine_core, "check_model_strings", lambda _config: None)
    return created


@pytest.mark.parametrize(
    ("spec", "expected", "limit_key"),
    [
        ("openai:gpt-test-mini", "openai:gpt-test-mini", "max_tokens"),
        ("openai/gpt-test-mini", "openai:gpt-test-mini", "max_tokens"),
        ("anthropic/claude-test", "anthropic:claude-test", "max_tokens"),
        ("google/gemini-test", "google_genai:gemini-test", "max_output_tokens"),
    ],
)
async def test_model_strings_both_forms_with_settings(
    created_models: list[tuple[str, dict[str, Any], RecordingModel]], spec: str, expected: str, limit_key: str
) -> None:
    om = make_om(observation={"model": spec, "model_settings": {"temperature": 0.5, "max_output_tokens": 321},
                              "provider_options": {"reasoning_effort": "low"}})
    contexts = await run_until_observed(om)
    assert any(e.type == "data-om-observation-end" for e in contexts[-1].events)
    name, kwargs, model = created_models[0]
    assert name == expected
    assert kwargs["temperature"] == 0.5 and kwargs[limit_key] == 321 and kwargs["reasoning_effort"] == "low"
    assert len(model.calls) == 1, "the model built from the string is the one called"


async def test_default_model_gets_the_default_output_limit(
    created_models: list[tuple[str, dict[str, Any], RecordingModel]],
) -> None:
    om = make_om()
    await run_until_observed(om)
    name, kwargs, _ = created_models[0]
    assert name == "google_genai:gemini-2.5-flash"
    assert kwargs["temperature"] == 0.3 and kwargs["max_output_tokens"] == 100_000


# ------------------------------------------------------------------ the prompt's count


class _SectionSpy(EstimatorCounter):
    """The estimator, recording the texts counted as prompt sections (only prompts are)."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[str] = []

    def count_sections(self, text: str, separator: str = "\n\n") -> int:
        self.prompts.append(text)
        return super().count_sections(text, separator)


def _japanese(turns: int) -> list[list[BaseMessage]]:
    histories, history = [], []
    for turn in range(turns):
        filler = "、".join(f"京都の予定{turn}の{i}番目の詳細です" for i in range(12))
        history.append(HumanMessage(f"Turn {turn}: 旅行の予算は{turn}000円です。{filler}", id=f"h{turn}"))
        histories.append(list(history))
        history.append(AIMessage(f"Answer {turn}: 承知しました。{filler}", id=f"a{turn}"))
    return histories


@pytest.mark.parametrize("language", ["English", "Japanese"])
async def test_a_plain_models_prompt_is_not_counted(language: str) -> None:
    """Nothing reads the Observer's or Reflector's prompt count unless it picks the model: with a
    plain model neither prompt is counted (its transcript is new text on every call)."""
    model, spy = RecordingModel(fn=reply), _SectionSpy()
    om = ObservationalMemory(InMemoryStore(), model=model, token_counter=spy,
                             observation={"message_tokens": 400, "buffer_tokens": False},
                             reflection={"observation_tokens": 10_000})
    histories = list(conversation(14)) if language == "English" else _japanese(14)
    for history in histories:
        await om.aprocess("t1", history)
    await om.areflect("t1")
    assert len(model.calls) >= 2, "the Observer and the Reflector both ran"
    assert spy.prompts == []


@pytest.mark.parametrize("language", ["English", "Japanese"])
async def test_a_model_chosen_by_size_or_context_gets_the_prompts_count(language: str) -> None:
    observer_model = RecordingModel(fn=reply)
    seen: list[dict[str, Any]] = []

    def choose(ctx: dict[str, Any]) -> Any:
        seen.append(dict(ctx))
        return observer_model

    spy = _SectionSpy()
    om = ObservationalMemory(InMemoryStore(), model=[{"model": choose, "max_retries": 0}], token_counter=spy,
                             observation={"message_tokens": 400, "buffer_tokens": False})
    histories = list(conversation(14)) if language == "English" else _japanese(14)
    for history in histories:
        await om.aprocess("t1", history)
        if seen:
            break
    prompt = observer_model.calls[0]["messages"]
    expected = CONVERSATION_OVERHEAD + sum(MESSAGE_OVERHEAD + EstimatorCounter().count_sections(str(m.content))
                                           for m in prompt)
    assert seen[0]["input_tokens"] == expected and expected > 500
    assert any("Turn 0" in text for text in spy.prompts)


def test_which_model_specs_read_the_prompts_count() -> None:
    plain = RecordingModel(fn=reply)
    assert not reads_input_tokens(plain) and not reads_input_tokens("openai:gpt-4o-mini")
    assert not reads_input_tokens([plain, {"model": "openai:gpt-4o-mini", "max_retries": 1}])
    assert reads_input_tokens(ModelByInputTokens(up_to={1_000: plain}))
    assert reads_input_tokens([plain, {"model": ModelByInputTokens(up_to={1_000: plain})}])
    assert reads_input_tokens(lambda ctx: plain)
