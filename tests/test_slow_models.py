"""Issue 46, item 2: slow and failing models never stall the user.

A local model through llama-cpp-python has no async path, reports no token usage, has a small
fixed context and takes minutes per call; when OM's Observer kept failing, every turn paid its
retries again. These tests play such a model with scripted stand-ins."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from om_fakes import OBSERVATION, CallableFake, conversation

from langchain_om import ObservationalMemory
from langchain_om.model_calls.failures import classify_error
from langchain_om.model_calls.model_gate import CONCURRENCY_KEY, concurrency_limit
from langchain_om.model_calls.om_calls import acall_om_model
from langchain_om.store.memory import InMemoryStore

OVERFLOW = "Requested tokens (9120) exceed context window of 8192"  # llama-cpp-python's words


class LocalLikeModel(BaseChatModel):
    """Like ``ChatLlamaCpp``: ``_generate`` and ``_stream`` only (no async path), no usage reported,
    one token per ``token_s``; records how many calls ran at once and whether a stream was stopped."""

    reply: str = OBSERVATION
    token_s: float = 0.0
    n_ctx: int | None = None
    max_tokens: int | None = None
    active: int = 0
    most_at_once: int = 0
    calls: int = 0
    stopped_early: int = 0
    lock: Any = None

    def model_post_init(self, context: Any) -> None:
        self.lock = threading.Lock()

    @property
    def _llm_type(self) -> str:
        return "local-like"

    def _enter(self) -> None:
        with self.lock:
            self.calls += 1
            self.active += 1
            self.most_at_once = max(self.most_at_once, self.active)

    def _leave(self) -> None:
        with self.lock:
            self.active -= 1

    def _tokens(self) -> list[str]:
        return [piece + " " for piece in self.reply.split(" ")]

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self._enter()
        try:
            for _ in self._tokens():
                time.sleep(self.token_s)
            return ChatResult(generations=[ChatGeneration(message=AIMessage(self.reply))])
        finally:
            self._leave()

    def _stream(self, messages: list[BaseMessage], stop: list[str] | None = None,
                run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> Iterator[ChatGenerationChunk]:
        self._enter()
        finished = False
        try:
            for token in self._tokens():
                time.sleep(self.token_s)
                yield ChatGenerationChunk(message=AIMessageChunk(content=token))
            finished = True
        finally:
            if not finished:
                self.stopped_early += 1
            self._leave()


PROMPT = [SystemMessage("You are the Observer of langchain-om."), HumanMessage("[2026-11-30 09:00] User: hi")]


def make_om(observer: Any, **overrides: Any) -> ObservationalMemory:
    options: dict[str, Any] = {
        "observation": {"model": observer, "message_tokens": 120, "buffer_tokens": False},
        "reflection": {"model": CallableFake(fn=lambda _m: OBSERVATION), "observation_tokens": 50_000},
        "token_counter": "estimator",
        "failure_policy": {"backoff": 1, "max_backoff": 5, "max_retries": 0},
    }
    options.update(overrides)
    return ObservationalMemory(InMemoryStore(), **options)


# ------------------------------------------------------------------ backoff across turns


async def test_a_failing_observer_is_not_paid_again_on_every_turn() -> None:
    observer = CallableFake(fn=lambda _m: (_ for _ in ()).throw(ConnectionError("local server down")))
    om = make_om(observer)
    attempted = skipped = 0
    for history in list(conversation(24))[4:]:
        ctx = await om.aprocess("t1", history)
        failed = [e.data.error for e in ctx.events if e.type == "data-om-observation-failed"]
        skipped += sum(error.startswith("skipped:") for error in failed)
        attempted += sum(not error.startswith("skipped:") for error in failed)
        if failed:
            assert ctx.status.observation_error, "the status says what happened"
    assert attempted == len(observer.prompts), "each attempt is one failed cycle"
    assert skipped >= 8, "turns skip the failing Observer, more of them as it keeps failing"
    assert attempted <= 6, f"the Observer was paid on {attempted} of {attempted + skipped} turns"
    assert attempted >= 3, "a failing Observer still gets tried again"


async def test_one_failure_skips_nothing_and_a_success_clears_the_count() -> None:
    state = {"fail": True}

    def respond(_m: list[BaseMessage]) -> str:
        if state["fail"]:
            raise ConnectionError("blip")
        return OBSERVATION

    observer = CallableFake(fn=respond)
    om = make_om(observer)
    histories = list(conversation(24))[4:]
    errors: list[str] = []
    for history in histories[:6]:
        ctx = await om.aprocess("t1", history)
        errors += [e.data.error for e in ctx.events if e.type == "data-om-observation-failed"]
    assert errors[0] and not errors[0].startswith("skipped:") and not errors[1].startswith("skipped:")
    assert errors[2].startswith("skipped:"), "the second failure in a row pauses the next turn"
    state["fail"] = False
    ends = 0
    for history in histories[6:]:
        ctx = await om.aprocess("t1", history)
        ends += sum(e.type == "data-om-observation-end" for e in ctx.events)
        assert not [e for e in ctx.events if e.type == "data-om-observation-failed"
                    and e.data.error.startswith("skipped:") and ends]
    assert ends >= 1


# ------------------------------------------------------------------ errors and usage


def test_a_context_overflow_is_not_transient() -> None:
    assert classify_error(ValueError(OVERFLOW)) == "permanent"
    assert classify_error(RuntimeError("This model's maximum context length is 8192 tokens")) == "permanent"
    assert classify_error(ValueError("something odd happened")) == "transient"


async def test_a_context_overflow_is_tried_once() -> None:
    model = CallableFake(fn=lambda _m: (_ for _ in ()).throw(ValueError(OVERFLOW)))
    with pytest.raises(Exception, match="exceed context window"):
        await acall_om_model(model, PROMPT, role="observer", input_tokens=0, default_retries=2, backoff_s=0)
    assert len(model.prompts) == 1


async def test_a_model_that_reports_no_usage_is_charged_oms_own_count() -> None:
    observer = LocalLikeModel()
    om = make_om(observer)
    for history in conversation(8):
        await om.aprocess("t1", history)
    spend = (await om.astatus("t1")).spend
    assert observer.calls and spend is not None
    assert spend["observer"]["input_tokens"] > 100 and spend["observer"]["output_tokens"] > 20


# ------------------------------------------------------------------ one model object, one call at a time


def test_the_concurrency_limit_is_one_for_a_model_without_async_and_stated_otherwise() -> None:
    assert concurrency_limit(LocalLikeModel()) == 1
    assert concurrency_limit(LocalLikeModel(metadata={CONCURRENCY_KEY: 3})) == 3
    assert concurrency_limit(CallableFake(fn=str)) is None


async def test_om_never_runs_one_local_model_from_two_threads_at_once() -> None:
    model = LocalLikeModel(reply="<observations>ok</observations>", token_s=0.01)

    def call_on_its_own_loop() -> None:  # as ``process`` and a background loop would
        asyncio.run(acall_om_model(model, PROMPT, role="observer", input_tokens=0))

    threads = [threading.Thread(target=call_on_its_own_loop) for _ in range(3)]
    for thread in threads:
        thread.start()
    await asyncio.gather(acall_om_model(model, PROMPT, role="observer", input_tokens=0),
                         acall_om_model(model, PROMPT, role="reflector", input_tokens=0))
    for thread in threads:
        thread.join(30)
    assert model.calls == 5 and model.most_at_once == 1


async def test_a_call_that_timed_out_stops_and_frees_the_model() -> None:
    slow = LocalLikeModel(reply=" ".join(["word"] * 2_000), token_s=0.02)  # ~40 s if it ran to the end
    with pytest.raises(Exception, match=r"(?i)timeout|timed out"):
        await acall_om_model(slow, PROMPT, role="observer", input_tokens=0, timeout_s=0.2)
    for _ in range(250):  # the stopped stream leaves at its next token
        if slow.active == 0:
            break
        await asyncio.sleep(0.02)
    assert slow.active == 0 and slow.stopped_early == 1, "the abandoned call stopped instead of running on"
    slow.reply, slow.token_s = "<observations>ok</observations>", 0.0
    result = await acall_om_model(slow, PROMPT, role="observer", input_tokens=0, timeout_s=5)
    assert result.text.strip() == "<observations>ok</observations>"


# ------------------------------------------------------------------ a context smaller than the prompt


async def test_om_warns_once_when_a_models_context_is_smaller_than_its_prompt(caplog: Any) -> None:
    observer = LocalLikeModel(n_ctx=512, max_tokens=256)
    om = make_om(observer)
    with caplog.at_level(logging.WARNING, logger="langchain_om.model_calls.context_size"):
        for history in conversation(10):
            await om.aprocess("t1", history)
    warnings = [r.getMessage() for r in caplog.records if "context (512 tokens)" in r.getMessage()]
    assert len(warnings) == 1 and "observer" in warnings[0] and "n_ctx" in warnings[0]
    roomy = LocalLikeModel(n_ctx=1_000_000)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="langchain_om.model_calls.context_size"):
        for history in conversation(10):
            await make_om(roomy).aprocess("t2", history)
    assert not [r for r in caplog.records if "context (" in r.getMessage()]


class SharedLocalModel(LocalLikeModel):
    """One local model object as agent (through create_agent, so bound with tools) and Observer."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(**kwargs)


async def test_one_local_model_as_agent_and_background_observer_is_never_run_twice_at_once() -> None:
    from langchain.agents import create_agent
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_om import ObservationalMemoryMiddleware

    model = SharedLocalModel(reply=OBSERVATION, token_s=0.002)
    om = ObservationalMemory(InMemoryStore(), model=model, token_counter="estimator",
                             observation={"message_tokens": 400, "buffer_tokens": 80},
                             reflection={"observation_tokens": 50_000})
    agent = create_agent(model, [], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "shared"}}
    for turn in range(10):
        await agent.ainvoke({"messages": [HumanMessage(f"turn {turn}: " + "details of my plan " * 20)]}, config)
    await om.await_background()
    assert model.calls > 10, "the agent and the background Observer both ran"
    assert model.most_at_once == 1
    await om.aclose()
