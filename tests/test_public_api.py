"""The public API of DESIGN.md, imported exactly as outside code will import it."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from om_fakes import OBSERVATION, CallableFake

import langchain_om
from langchain_om import (
    ModelByInputTokens,
    ObservationalChatMessageHistory,
    ObservationalMemory,
    ObservationConfig,
    OMConfigError,
    ReflectionConfig,
)


def test_every_exported_name_resolves() -> None:
    missing = [name for name in langchain_om.__all__ if not hasattr(langchain_om, name)]
    assert missing == []


def test_constructor_options_match_the_design() -> None:
    params = inspect.signature(ObservationalMemory).parameters
    expected = ["store", "model", "scope", "observation", "reflection", "share_token_budget", "temporal_markers",
                "retrieval", "activate_after_idle", "activate_on_provider_change", "hooks", "token_counter",
                "obscure_thread_ids", "on_debug_event"]
    assert list(params)[: len(expected)] == expected
    assert params["scope"].default == "thread" and params["token_counter"].default == "auto"
    assert all(params[name].kind is inspect.Parameter.KEYWORD_ONLY for name in expected[1:])


def test_store_none_is_an_embedded_sqlite_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGCHAIN_OM_DB", str(tmp_path / "from-env.db"))
    om = ObservationalMemory(model=CallableFake(fn=lambda _m: OBSERVATION), token_counter="estimator")
    try:
        ctx = om.process("t1", [HumanMessage("hello", id="h1")])
        assert [m.id for m in ctx.messages] == ["h1"]
    finally:
        om.close()
    assert (tmp_path / "from-env.db").exists()


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"model": "openai:gpt-5-mini", "observation": {"model": "openai:gpt-5-mini"}}, "observation.model"),
        ({"observation": {"message_tokens": 1000, "buffer_tokens": 1000}}, "observation.buffer_tokens"),
        ({"share_token_budget": True}, "share_token_budget"),
        ({"observation": {"block_after": 0.5}}, "observation.block_after"),
    ],
)
def test_config_errors_name_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(OMConfigError) as info:
        ObservationalMemory(store=langchain_om.InMemoryStore(), **kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert field in str(info.value)


def test_config_objects_are_accepted_like_dicts() -> None:
    om = ObservationalMemory(
        langchain_om.InMemoryStore(),
        model=CallableFake(fn=lambda _m: OBSERVATION),
        observation=ObservationConfig(message_tokens=500, buffer_tokens=False),
        reflection=ReflectionConfig(observation_tokens=900),
        token_counter="estimator",
    )
    assert om.config.observation.message_tokens == 500
    assert om.config.reflection.observation_tokens == 900


def test_model_by_input_tokens_resolves_the_smallest_fitting_tier() -> None:
    tiers = ModelByInputTokens(up_to={100_000: "openai:gpt-5", 10_000: "google_genai:gemini-2.5-flash"})
    assert tiers.get_thresholds() == [10_000, 100_000]
    assert tiers.resolve(9_000) == "google_genai:gemini-2.5-flash"
    assert tiers.resolve(10_001) == "openai:gpt-5"


def test_chat_history_messages_are_the_om_context() -> None:
    om = ObservationalMemory(
        langchain_om.InMemoryStore(),
        model=CallableFake(fn=lambda _m: OBSERVATION),
        observation={"message_tokens": 200, "buffer_tokens": False},
        token_counter="estimator",
    )
    history = ObservationalChatMessageHistory(om, "t1", resource_id="alice")
    filler = " ".join(f"word{i}" for i in range(60))
    for turn in range(6):
        history.add_messages([HumanMessage(f"q{turn} {filler}"), AIMessage(f"a{turn} {filler}")])
    messages = history.messages
    assert isinstance(messages[0], SystemMessage) and "<observations>" in str(messages[0].content)
    assert len(messages) < 13, "observed messages left the context"
    om.close()
