"""Issue 16: OM's model calls fail like real providers do; the failure policy decides what the step does.

Errors are the real ``openai`` SDK exceptions (what ``langchain_openai`` raises), so the
classification is the one a user with a real provider gets.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import httpx
import openai
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from om_fakes import OBSERVATION, CallableFake, conversation, observer_or_reflector
from pydantic import Field

from langchain_om import ObservationalMemory
from langchain_om.foundation.config import OMConfigError
from langchain_om.foundation.events import ObservationFailedEvent
from langchain_om.model_calls.failures import OMObservationError, backoff_delay, classify_error
from langchain_om.store.memory import InMemoryStore

_REQUEST = httpx.Request("POST", "https://api.openai.com/v1/chat/completions")


def rate_limited() -> openai.RateLimitError:
    return openai.RateLimitError("Rate limit reached", response=httpx.Response(429, request=_REQUEST), body=None)


def unauthorized() -> openai.AuthenticationError:
    return openai.AuthenticationError("Incorrect API key provided", response=httpx.Response(401, request=_REQUEST),
                                      body=None)


def server_error() -> openai.InternalServerError:
    return openai.InternalServerError("upstream overloaded", response=httpx.Response(503, request=_REQUEST), body=None)


def bad_request() -> openai.BadRequestError:
    return openai.BadRequestError("context_length_exceeded", response=httpx.Response(400, request=_REQUEST),
                                  body=None)


class Failing(CallableFake):
    """Raises ``errors[i]`` on call ``i`` (None or past the end: answers like an Observer)."""

    errors: list[Any] = Field(default_factory=list)

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(list(messages))
        index = len(self.prompts) - 1
        if index < len(self.errors) and self.errors[index] is not None:
            raise self.errors[index]()
        return observer_or_reflector(messages)


class WithUsage(Failing):
    """A ``Failing`` model whose replies carry usage metadata, as real providers' do."""

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> Any:
        from langchain_core.outputs import ChatGeneration, ChatResult

        text = self._call(messages, stop, run_manager, **kwargs)
        usage = {"input_tokens": 100, "output_tokens": 10, "total_tokens": 110}
        return ChatResult(generations=[ChatGeneration(message=AIMessage(text, usage_metadata=usage))])


class AlwaysFailing(CallableFake):
    error: Any = None

    def _call(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.prompts.append(list(messages))
        raise self.error()


def make_om(model: Any, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"message_tokens": 300, "buffer_tokens": False},
        "reflection": {"observation_tokens": 50_000},
        "token_counter": "estimator",
        "failure_policy": {"backoff": 1, "max_backoff": 5},
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), model=model, **options)


# ---------------------------------------------------------------- classification


@pytest.mark.parametrize(
    ("make", "kind"),
    [
        (rate_limited, "transient"),
        (server_error, "transient"),
        (lambda: openai.APITimeoutError(request=_REQUEST), "transient"),
        (lambda: openai.APIConnectionError(request=_REQUEST), "transient"),
        (unauthorized, "permanent"),
        (bad_request, "permanent"),
        (lambda: openai.PermissionDeniedError("no", response=httpx.Response(403, request=_REQUEST), body=None),
         "permanent"),
        (lambda: openai.OpenAIError("Missing credentials. Please pass an `api_key`"), "permanent"),
        (lambda: ImportError("No module named 'langchain_anthropic'"), "permanent"),
        (lambda: TimeoutError(), "transient"),
        (lambda: RuntimeError("provider exploded"), "transient"),
    ],
)
def test_errors_are_classified_like_the_provider_means_them(make: Any, kind: str) -> None:
    assert classify_error(make()) == kind


def test_a_wrapped_provider_error_is_classified_by_its_cause() -> None:
    try:
        try:
            raise unauthorized()
        except openai.AuthenticationError as inner:
            raise RuntimeError("chat model call failed") from inner
    except RuntimeError as outer:
        assert classify_error(outer) == "permanent"


def test_backoff_grows_is_capped_and_jittered() -> None:
    import random

    rng = random.Random(7)
    delays = [backoff_delay(attempt, 0.5, 4.0, rng) for attempt in range(8) for _ in range(50)]
    assert all(0 <= d <= 4.0 for d in delays)
    assert len({round(d, 6) for d in delays}) > 100, "jittered, not lock-step"
    assert max(backoff_delay(0, 0.5, 4.0, rng) for _ in range(50)) <= 0.5


# ---------------------------------------------------------------- construction


def test_a_model_string_without_its_key_is_refused_at_construction(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(OMConfigError) as info:
        ObservationalMemory(InMemoryStore(), model="openai:gpt-5-mini")
    assert info.value.field == "model"
    assert "OPENAI_API_KEY" in str(info.value)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    ObservationalMemory(InMemoryStore(), model="openai:gpt-5-mini")  # constructs once the key is there


def test_a_google_model_without_its_key_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(OMConfigError) as info:
        ObservationalMemory(InMemoryStore(), observation={"model": "google/gemini-2.5-flash"})
    assert info.value.field == "observation.model"
    assert "GOOGLE_API_KEY" in str(info.value)
    # a key given in provider_options counts
    ObservationalMemory(InMemoryStore(), observation={"model": "google/gemini-2.5-flash",
                                                      "provider_options": {"google_api_key": "k"}})


def test_an_unknown_provider_is_refused_at_construction() -> None:
    with pytest.raises(OMConfigError) as info:
        ObservationalMemory(InMemoryStore(), model="foo:bar")
    assert info.value.field == "model"
    assert "unknown model provider" in str(info.value)


def test_a_missing_provider_package_names_the_pip_package(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    if importlib.util.find_spec("langchain_anthropic") is not None:
        pytest.skip("langchain_anthropic is installed here")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    with pytest.raises(OMConfigError) as info:
        ObservationalMemory(InMemoryStore(), reflection={"model": ["openai:gpt-5-mini", "anthropic:claude-sonnet-4-5"]},
                            observation={"provider_options": {"api_key": "k"}})
    assert info.value.field == "reflection.model[1]"
    assert "pip install langchain-anthropic" in str(info.value)


# ---------------------------------------------------------------- retries


async def test_transient_errors_are_retried_then_the_observation_succeeds() -> None:
    model = Failing(errors=[rate_limited, server_error])
    om = make_om(model)
    for history in conversation(12):
        ctx = await om.aprocess("t1", history)
        if ctx.record.observations:
            break
    assert len(model.prompts) == 3, "two transient failures, then the retry that worked"
    assert ctx.record.observations and "Miso" in ctx.record.observations
    assert not any(isinstance(e, ObservationFailedEvent) for e in ctx.events)


async def test_retries_are_bounded_by_max_retries() -> None:
    model = AlwaysFailing(error=rate_limited)
    om = make_om(model, failure_policy={"max_retries": 1, "backoff": 1})
    for history in conversation(6):
        ctx = await om.aprocess("t1", history)
        if model.prompts:
            break
    assert len(model.prompts) == 2, "one call and one retry"
    failed = [e for e in ctx.events if isinstance(e, ObservationFailedEvent)]
    assert len(failed) == 1 and "RateLimitError" in failed[0].data.error
    assert ctx.status.observation_error is not None and "RateLimitError" in ctx.status.observation_error


async def test_a_permanent_error_is_not_retried_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    from langchain_om.model_calls.failures import FAILURE_LOG

    FAILURE_LOG.reset()  # reported once per process: start from a process that has seen nothing
    model = AlwaysFailing(error=unauthorized)
    om = make_om(model)
    attempted = skipped = 0
    with caplog.at_level(logging.WARNING, logger="langchain_om"):
        for history in conversation(10):
            ctx = await om.aprocess("t1", history)
            error = ctx.status.observation_error or ""
            skipped += error.startswith("skipped:")
            attempted += bool(error) and not error.startswith("skipped:")
    assert attempted >= 2 and skipped >= 1, "after two failures in a row a turn skips the Observer (issue 46)"
    assert len(model.prompts) == attempted, "one call per attempted step, never a retry of an auth error"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR and "AuthenticationError" in r.getMessage()]
    assert len(errors) == 1, "reported once, not on every step"
    assert "Incorrect API key" in (ctx.status.observation_error or ""), "a skipped turn still says what is wrong"
    assert "\n" not in (ctx.status.observation_error or ""), "a one-line reason"


async def test_on_failure_raise_gives_the_caller_a_clear_exception() -> None:
    model = AlwaysFailing(error=unauthorized)
    om = make_om(model, failure_policy="raise")
    with pytest.raises(OMObservationError) as info:
        for history in conversation(10):
            await om.aprocess("t1", history)
    assert info.value.kind == "permanent"
    assert "AuthenticationError" in str(info.value)
    stored = await om.store.aget_messages(om._resource_for("t1", None), "t1")
    assert stored, "the turn's messages were stored before the failure; nothing is lost"


async def test_a_turn_never_waits_longer_than_its_budget() -> None:
    import asyncio

    class Hanging(CallableFake):
        async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                             **kwargs: Any) -> Any:
            self.prompts.append(list(messages))
            await asyncio.sleep(60)
            raise AssertionError("unreachable")

    model = Hanging()
    om = make_om(model, failure_policy={"turn_budget": "300ms", "max_retries": 3, "backoff": 1})
    histories = list(conversation(6))
    for history in histories[:-1]:
        await om.aprocess("t1", history)
    started = time.monotonic()
    ctx = await om.aprocess("t1", histories[-1])
    assert model.prompts, "the Observer was called"
    assert time.monotonic() - started < 5, "bounded by the 300 ms budget (not 4 x 60 s)"
    assert ctx.status.observation_error is not None


# ---------------------------------------------------------------- hard ceiling


async def test_the_hard_ceiling_bounds_the_context_while_the_observer_is_down() -> None:
    model = AlwaysFailing(error=server_error)
    om = make_om(model, failure_policy={"hard_ceiling": 600, "max_retries": 0})
    history: list[BaseMessage] = []
    for history in conversation(30):
        ctx = await om.aprocess("t1", history)
    sent = om.counter.count_messages(ctx.messages)
    assert sent <= 600 + 100, f"context holds {sent} tokens against a 600-token ceiling"
    assert ctx.messages[-1].id == history[-1].id, "the newest message is always kept"
    assert ctx.status.windows.active.messages.tokens > 600, "the backlog is still there to observe later"
    stored = await om.store.aget_messages(om._resource_for("t1", None), "t1")
    assert len(stored) == len(history), "nothing was deleted"


async def test_past_the_ceiling_on_raise_the_caller_is_told() -> None:
    # max_retries 0 and "raise": the first failure already raises
    model = AlwaysFailing(error=server_error)
    om = make_om(model, failure_policy={"on_failure": "raise", "max_retries": 0})
    with pytest.raises(OMObservationError) as info:
        for history in conversation(30):
            await om.aprocess("t1", history)
    assert info.value.kind == "transient"


async def test_a_failed_observation_is_redone_when_the_observer_comes_back() -> None:
    model = Failing(errors=[server_error] * 4)
    om = make_om(model, failure_policy={"max_retries": 0})
    outcomes = []
    for history in conversation(20):  # four failures in a row pause the Observer for 1 + 2 + 4 turns
        ctx = await om.aprocess("t1", history)
        outcomes.append(ctx.status.observation_error is None)
    assert not all(outcomes[:6]) and outcomes[-1]
    assert ctx.record.observations, "observed once the Observer answered"


def test_reflection_model_errors_do_not_retry_every_compression_level() -> None:
    model = AlwaysFailing(error=unauthorized)
    om = make_om(model)
    ctx = om.process("t1", [HumanMessage("hi", id="h"), AIMessage("hello", id="a")])
    assert ctx.aborted is None
    calls_before = len(model.prompts)
    try:
        om.reflect("t1")
    except Exception:
        pass
    assert len(model.prompts) - calls_before <= 1
    _ = OBSERVATION


# ---------------------------------------------------------------- backlogs and input caps


def _transcript_tokens(om: ObservationalMemory, prompt: list[BaseMessage]) -> int:
    return om.counter.count_text(str(prompt[-1].content))


async def test_a_backlog_larger_than_one_call_is_observed_in_several_in_order() -> None:
    model = CallableFake(fn=observer_or_reflector)
    om = make_om(model, observation={"message_tokens": 1200, "buffer_tokens": False, "max_tokens_per_batch": 250})
    history: list[BaseMessage] = []
    for history in conversation(14):
        ctx = await om.aprocess("t1", history)
        if model.prompts:
            break
    assert len(model.prompts) >= 4, "the backlog went to the Observer in several calls"
    groups = ctx.record.groups
    assert len(groups) == len(model.prompts)
    ids = [m.id for m in history]
    starts = [ids.index(g.start_id) for g in groups]
    ends = [ids.index(g.end_id) for g in groups]
    assert starts == sorted(starts) and all(e + 1 == s for e, s in zip(ends, starts[1:], strict=False)), \
        "consecutive, oldest first, nothing skipped or doubled"
    for prompt in model.prompts:
        assert _transcript_tokens(om, prompt) < 250 + 400, "each call holds about one batch"


async def test_a_failure_part_way_keeps_the_parts_already_observed() -> None:
    model = Failing(errors=[None, None, unauthorized])
    om = make_om(model, observation={"message_tokens": 1200, "buffer_tokens": False, "max_tokens_per_batch": 250})
    for history in conversation(14):
        ctx = await om.aprocess("t1", history)
        if model.prompts:
            break
    assert len(model.prompts) == 3
    assert len(ctx.record.groups) == 2, "two parts committed before the failure"
    assert ctx.status.observation_error is not None


async def test_a_huge_tool_result_is_truncated_for_the_observer_but_counted_in_full() -> None:
    from langchain_core.messages import ToolMessage

    model = CallableFake(fn=observer_or_reflector)
    om = make_om(model, observation={"message_tokens": 2000, "buffer_tokens": False})
    huge = "row " * 50_000
    history: list[BaseMessage] = [
        HumanMessage("load the table", id="h0"),
        AIMessage("", id="a0", tool_calls=[{"name": "load", "args": {}, "id": "c1"}]),
        ToolMessage(huge, tool_call_id="c1", id="t0"),
        AIMessage("loaded", id="a1"),
        HumanMessage("thanks", id="h1"),
    ]
    ctx = await om.aprocess("t1", history)
    assert model.prompts, "the full-size tool result crossed the threshold"
    with_tool = [str(p[-1].content) for p in model.prompts if "Tool load" in str(p[-1].content)]
    assert len(with_tool) == 1
    assert len(with_tool[0]) < 30_000 and "[cut at 5000 tokens;" in with_tool[0], "shown cut, with a size note"
    assert ctx.record.observations


# ---------------------------------------------------------------- spend


async def test_spend_totals_are_kept_per_thread_and_per_process() -> None:
    from langchain_om.model_calls.spend import process_spend, reset_process_spend

    reset_process_spend()
    model = WithUsage(errors=[rate_limited])
    om = make_om(model)
    for history in conversation(14):
        ctx = await om.aprocess("t1", history)
    observer_calls = len(model.prompts)
    status = await om.astatus("t1")
    assert status.spend is not None
    assert status.spend["observer"]["calls"] == observer_calls - 1, "paid calls that were committed"
    assert status.spend["observer"]["input_tokens"] == 100 * (observer_calls - 1)
    assert ctx.status.spend == status.spend
    totals = process_spend()["observer"]
    assert totals["calls"] == observer_calls and totals["failed_calls"] == 1
    other = await om.astatus("t2")
    assert other.spend is None, "another thread's totals are its own"


async def test_the_default_model_without_a_key_fails_on_its_first_call_and_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from langchain_om.model_calls.failures import FAILURE_LOG

    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    FAILURE_LOG.reset()
    om = ObservationalMemory(InMemoryStore(), observation={"message_tokens": 300, "buffer_tokens": False},
                             token_counter="estimator")  # the default model: constructs without a key
    failed_steps = 0
    with caplog.at_level(logging.WARNING, logger="langchain_om"):
        for history in conversation(10):
            ctx = await om.aprocess("t1", history)
            failed_steps += ctx.status.observation_error is not None
    assert failed_steps >= 3
    assert "GOOGLE_API_KEY" in (ctx.status.observation_error or "")
    reported = [r for r in caplog.records if r.levelno >= logging.ERROR and "gemini" in r.getMessage()]
    assert len(reported) == 1, "once, not on every step"


def _tool_loop(rounds: int, words: int = 40) -> list[BaseMessage]:
    """One user question, then ``rounds`` tool calls with their results and no answer yet."""
    from langchain_core.messages import ToolMessage

    question = "東京の天気を調べて、全部の観測所を比べてください (compare every station)"
    history: list[BaseMessage] = [HumanMessage(question, id="question")]
    for index in range(rounds):
        call_id = f"call{index}"
        history.append(AIMessage("", id=f"a{index}", tool_calls=[
            {"name": "station", "args": {"n": index}, "id": call_id, "type": "tool_call"}]))
        filler = " ".join(f"reading{index}_{i}" for i in range(words))
        history.append(ToolMessage(f"station {index}: {filler}", tool_call_id=call_id, id=f"t{index}"))
    return history


async def test_the_hard_ceiling_keeps_the_question_and_the_open_tool_round_in_a_tool_loop() -> None:
    """Issue 30 item 2: the ceiling trimmed by size alone and dropped the user's question, so the
    model's input began ['ai', 'tool', 'ai']; it must trim by the turn rule (``turns``)."""
    model = AlwaysFailing(error=server_error)
    om = make_om(model, failure_policy={"hard_ceiling": 600, "max_retries": 0})
    history: list[BaseMessage] = []
    for rounds in range(1, 16):
        history = _tool_loop(rounds)
        ctx = await om.aprocess("t1", history)
        kinds = [m.type for m in ctx.messages]
        assert kinds[0] == "human" and ctx.messages[0].id == "question", kinds
        assert [m.id for m in ctx.messages[-2:]] == [history[-2].id, history[-1].id], "the open round stays"
        assert not (len(ctx.messages) > 1 and ctx.messages[1].type == "tool"), "no orphaned tool result"
    assert ctx.status.observation_error is not None, "the Observer is down"
    sent = om.counter.count_messages(ctx.messages)
    assert len(ctx.messages) < len(history), "the ceiling did trim the answered rounds"
    assert sent <= 600, f"context holds {sent} tokens against a 600-token ceiling"
    stored = await om.store.aget_messages(om._resource_for("t1", None), "t1")
    assert len(stored) == len(history), "nothing was deleted"
