"""Every option's default and every invalid combination the reference page names."""

from __future__ import annotations

from typing import Any

import pytest

from langchain_om.foundation.config import (
    DEFAULT_MAX_OUTPUT_TOKENS,
    ObservationConfig,
    OMConfig,
    OMConfigError,
    ReflectionConfig,
    parse_duration,
)


def build(**options: Any) -> OMConfig:
    return OMConfig.build(**options)


def field_of(**options: Any) -> str:
    with pytest.raises(OMConfigError) as info:
        build(**options)
    assert isinstance(info.value, ValueError)
    return info.value.field


def test_reference_defaults() -> None:
    config = build()
    obs, ref = config.observation, config.reflection
    assert config.enabled is True
    assert config.scope == "thread"
    assert obs.message_tokens == 30_000
    assert ref.observation_tokens == 40_000
    assert obs.buffer_tokens == 0.2
    assert obs.buffer_activation == 0.8
    assert obs.block_after_tokens() == 36_000  # 1.2 x message_tokens
    assert ref.buffer_activation == 0.5
    assert ref.block_after == 1.2
    assert obs.previous_observer_tokens == 2000
    assert obs.max_tokens_per_batch == 10_000
    assert obs.observe_attachments is True
    assert obs.thread_title is False
    assert config.share_token_budget is False
    assert config.temporal_markers is False
    assert config.retrieval is None
    assert config.activate_after_idle is False
    assert config.activate_on_provider_change is False
    assert config.model_spec("observation") is None  # -> the default model at call time


def test_default_model_gets_max_output_and_role_temperatures() -> None:
    config = build()
    assert config.model_settings("observation").max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS
    assert config.model_settings("observation").temperature == 0.3
    assert config.model_settings("reflection").temperature == 0.0
    assert build(model="default").model_settings("reflection").max_output_tokens == DEFAULT_MAX_OUTPUT_TOKENS


def test_custom_model_has_no_max_output_default() -> None:
    config = build(model="openai:gpt-5-mini")
    assert config.model_settings("observation").max_output_tokens is None
    explicit = build(model="openai:gpt-5-mini", observation={"model_settings": {"max_output_tokens": 500}})
    assert explicit.model_settings("observation").max_output_tokens == 500


def test_model_fallback_chain_between_roles() -> None:
    config = build(observation={"model": "openai:gpt-5-mini"})
    assert config.model_spec("reflection") == "openai:gpt-5-mini"
    config = build(reflection={"model": "openai:gpt-5-mini"})
    assert config.model_spec("observation") == "openai:gpt-5-mini"


def test_top_level_model_with_observation_model_is_refused() -> None:
    assert field_of(model="openai:gpt-5-mini", observation={"model": "openai:gpt-5"}) == "observation.model"


def test_top_level_model_with_reflection_model_is_refused() -> None:
    assert field_of(model="openai:gpt-5-mini", reflection={"model": "openai:gpt-5"}) == "reflection.model"


def test_empty_model_string_is_refused() -> None:
    assert field_of(model="  ") == "model"


def test_model_list_entries_are_checked() -> None:
    assert field_of(model=[]) == "model"
    assert field_of(model=[{"model": "openai:gpt-5-mini", "max_retries": -1}]) == "model[0].max_retries"
    assert build(model=["openai:gpt-5-mini", {"model": "google_genai:gemini-2.5-flash", "max_retries": 3}])


def test_buffer_tokens_at_or_above_message_tokens_is_refused() -> None:
    assert field_of(observation={"message_tokens": 5000, "buffer_tokens": 5000}) == "observation.buffer_tokens"
    assert field_of(observation={"message_tokens": 5000, "buffer_tokens": 9000}) == "observation.buffer_tokens"


def test_buffer_tokens_ratio_and_absolute_are_accepted() -> None:
    assert build(observation={"buffer_tokens": 0.25}).observation.buffer_interval_tokens() == 7500
    assert build(observation={"buffer_tokens": 5000}).observation.buffer_interval_tokens() == 5000


def test_buffer_tokens_zero_negative_or_true_is_refused() -> None:
    assert field_of(observation={"buffer_tokens": 0}) == "observation.buffer_tokens"
    assert field_of(observation={"buffer_tokens": -0.5}) == "observation.buffer_tokens"
    assert field_of(observation={"buffer_tokens": True}) == "observation.buffer_tokens"


def test_share_token_budget_requires_buffering_off() -> None:
    assert field_of(share_token_budget=True) == "share_token_budget"
    config = build(share_token_budget=True, observation={"buffer_tokens": False})
    assert config.share_token_budget and not config.buffering_enabled


def test_block_after_below_one_is_refused() -> None:
    assert field_of(observation={"block_after": 0.9}) == "observation.block_after"
    assert field_of(reflection={"block_after": 0.5}) == "reflection.block_after"


def test_absolute_block_after_must_exceed_threshold() -> None:
    assert field_of(observation={"message_tokens": 30_000, "block_after": 20_000}) == "observation.block_after"
    assert field_of(reflection={"observation_tokens": 40_000, "block_after": 40_000}) == "reflection.block_after"
    ok = build(observation={"message_tokens": 30_000, "block_after": 45_000})
    assert ok.observation.block_after_tokens() == 45_000


def test_block_after_multiplier_between_1_and_100() -> None:
    config = build(observation={"message_tokens": 10_000, "block_after": 1.5}, reflection={"block_after": 2})
    assert config.observation.block_after_tokens() == 15_000
    assert config.reflection.block_after_tokens() == 80_000


def test_block_after_without_buffering_is_refused() -> None:
    assert field_of(observation={"buffer_tokens": False, "block_after": 1.5}) == "observation.block_after"


def test_buffer_activation_between_one_and_thousand_is_refused() -> None:
    assert field_of(observation={"buffer_activation": 5}) == "observation.buffer_activation"
    assert field_of(observation={"buffer_activation": 0}) == "observation.buffer_activation"


def test_buffer_activation_ratio_and_tokens_to_keep() -> None:
    assert build(observation={"buffer_activation": 0.7}).observation.tokens_to_keep_after_activation() == 9000
    keep = build(observation={"buffer_activation": 4000}).observation
    assert keep.tokens_to_keep_after_activation() == 4000


def test_buffer_activation_keep_must_be_below_message_tokens() -> None:
    options = {"message_tokens": 3000, "buffer_tokens": 1000, "buffer_activation": 3000}
    assert field_of(observation=options) == "observation.buffer_activation"


def test_reflection_buffer_activation_is_a_ratio() -> None:
    assert field_of(reflection={"buffer_activation": 1.5}) == "reflection.buffer_activation"
    assert field_of(reflection={"buffer_activation": 0}) == "reflection.buffer_activation"
    assert build(reflection={"buffer_activation": 0.25}).reflection.buffer_start_tokens() == 10_000


def test_non_positive_thresholds_are_refused() -> None:
    assert field_of(observation={"message_tokens": 0}) == "observation.message_tokens"
    assert field_of(reflection={"observation_tokens": -5}) == "reflection.observation_tokens"
    assert field_of(observation={"max_tokens_per_batch": 0}) == "observation.max_tokens_per_batch"


def test_previous_observer_tokens_rules() -> None:
    assert build(observation={"previous_observer_tokens": 0}).observation.previous_observer_tokens == 0
    assert build(observation={"previous_observer_tokens": False}).observation.previous_observer_tokens is False
    assert field_of(observation={"previous_observer_tokens": -1}) == "observation.previous_observer_tokens"
    assert field_of(observation={"previous_observer_tokens": True}) == "observation.previous_observer_tokens"


def test_observe_attachments_values() -> None:
    assert build(observation={"observe_attachments": "auto"}).observation.observe_attachments == "auto"
    allow = build(observation={"observe_attachments": ["IMAGE/*", "application/pdf"]}).observation
    assert allow.observe_attachments == ["image/*", "application/pdf"]
    assert field_of(observation={"observe_attachments": ["pdf"]}) == "observation.observe_attachments"


def test_temperature_range() -> None:
    assert field_of(observation={"model_settings": {"temperature": 3}}) == "observation.model_settings.temperature"
    assert field_of(reflection={"model_settings": {"max_output_tokens": 0}}) == (
        "reflection.model_settings.max_output_tokens"
    )


def test_unknown_option_names_the_field() -> None:
    assert field_of(observation={"mesage_tokens": 100}) == "observation.mesage_tokens"
    with pytest.raises(OMConfigError):
        build(bogus=True)


def test_observation_must_be_a_mapping_or_config() -> None:
    assert field_of(observation=42) == "observation"
    config = build(observation=ObservationConfig(message_tokens=1000, buffer_tokens=False),
                   reflection=ReflectionConfig(observation_tokens=2000))
    assert config.observation.message_tokens == 1000 and config.reflection.observation_tokens == 2000


@pytest.mark.parametrize(
    ("value", "expected"),
    [(300_000, 300_000.0), ("5m", 300_000.0), ("1hr", 3_600_000.0), ("30s", 30_000.0), ("250ms", 250.0),
     ("2 hours", 7_200_000.0), ("auto", "auto"), (False, False), (None, None)],
)
def test_durations(value: Any, expected: Any) -> None:
    assert parse_duration(value, "activate_after_idle") == expected


@pytest.mark.parametrize("value", ["soon", "5 parsecs", -1, True, [1]])
def test_bad_durations(value: Any) -> None:
    with pytest.raises(OMConfigError) as info:
        parse_duration(value, "activate_after_idle")
    assert info.value.field == "activate_after_idle"


def test_bad_duration_in_nested_option_names_it() -> None:
    assert field_of(observation={"activate_after_idle": "eventually"}) == "observation.activate_after_idle"
    assert field_of(activate_after_idle="eventually") == "activate_after_idle"


def test_idle_inheritance() -> None:
    config = build(activate_after_idle="5m")
    assert config.observation_idle_ms() == 300_000
    assert config.reflection_idle_ms() is False  # reflection never inherits
    off = build(activate_after_idle="5m", observation={"activate_after_idle": False})
    assert off.observation_idle_ms() is False
    own = build(reflection={"activate_after_idle": "auto"})
    assert own.reflection_idle_ms() == "auto"


def test_provider_change_inheritance() -> None:
    assert build(activate_on_provider_change=True).observation_activates_on_provider_change() is True
    assert build(activate_on_provider_change=True, observation={"activate_on_provider_change": False}) \
        .observation_activates_on_provider_change() is False
    assert build(activate_on_provider_change=True).reflection.activate_on_provider_change is False


def test_resource_scope_disables_buffering_and_obscures_ids() -> None:
    config = build(scope="resource")
    assert config.observation.buffering_enabled  # the option keeps its value ...
    assert not config.buffering_enabled  # ... but buffering is off in resource scope
    assert config.obscure_ids


def test_scope_value_is_checked() -> None:
    assert field_of(scope="user") == "scope"


def test_retrieval_forms() -> None:
    assert build(retrieval=True).retrieval is not None
    assert build(retrieval=True).retrieval.scope == "resource"  # type: ignore[union-attr]
    assert build(retrieval={"scope": "thread"}).retrieval.scope == "thread"  # type: ignore[union-attr]
    assert build(retrieval=False).retrieval is None
    assert field_of(retrieval={"vector": True}) == "retrieval.vector_store"
    assert field_of(retrieval={"scope": "everyone"}) == "retrieval.scope"


def test_token_counter_choice_is_checked() -> None:
    assert field_of(token_counter="words") == "token_counter"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"observation": {"buffer_tokens": float("nan")}}, "observation.buffer_tokens"),
        ({"observation": {"buffer_activation": float("nan")}}, "observation.buffer_activation"),
        ({"observation": {"block_after": float("nan")}}, "observation.block_after"),
        ({"observation": {"model_timeout": float("nan")}}, "observation.model_timeout"),
        ({"observation": {"message_tokens": float("inf")}}, "observation.message_tokens"),
        ({"reflection": {"block_after": float("inf")}}, "reflection.block_after"),
        ({"reflection": {"model_timeout": float("inf")}}, "reflection.model_timeout"),
        ({"retrieval": {"search_limit": 0}}, "retrieval.search_limit"),
    ],
)
def test_nan_infinite_and_empty_limits_are_refused_up_front(options: dict[str, Any], field: str) -> None:
    """NaN passes every "<= 0" check, so without this it surfaced mid-conversation as a bare
    ``cannot convert float NaN to integer`` (or a timeout on every model call)."""
    assert field_of(**options).startswith(field)
