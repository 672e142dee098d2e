"""Lifecycle hooks (issue 6, item 3): triggers, usage and provider metadata, errors."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from om_fakes import conversation
from om_recording import RecordingModel, observer_reply

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.config import OMConfigError
from langchain_om.foundation.hooks import HookContext, ObserveHooks
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore

SHORT_REFLECTION = "<observations>\n* 🔴 Miso: no chicken.\n</observations>"


def reply(messages: list[BaseMessage]) -> str:
    """Observer prompts carry the transcript ("Turn N"); the Reflector only sees observations."""
    text = "\n".join(str(m.content) for m in messages)
    return observer_reply() if "Turn " in text else SHORT_REFLECTION


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, HookContext]] = []

    def hooks(self, *, async_end: bool = False) -> ObserveHooks:
        def make(name: str) -> Any:
            if async_end and name.endswith("_end"):
                async def hook(ctx: HookContext) -> None:
                    self.calls.append((name, ctx))
                return hook

            def sync_hook(ctx: HookContext) -> None:
                self.calls.append((name, ctx))
            return sync_hook

        return ObserveHooks(**{n: make(n) for n in ("on_observation_start", "on_observation_end",
                                                    "on_reflection_start", "on_reflection_end")})

    def names(self) -> list[str]:
        return [name for name, _ in self.calls]

    def get(self, name: str) -> HookContext:
        return next(ctx for n, ctx in self.calls if n == name)


def recording_model(**kwargs: Any) -> RecordingModel:
    return RecordingModel(fn=reply, usage={"input_tokens": 321, "output_tokens": 45, "total_tokens": 366},
                          provider_metadata={"cost_usd": 0.0042, "gateway": "test"}, **kwargs)


def make_om(model: Any, hooks: Any, **observation: Any) -> ObservationalMemory:
    obs = {"message_tokens": 400, "buffer_tokens": False, **observation}
    return ObservationalMemory(InMemoryStore(), model=model, observation=obs,
                               reflection={"observation_tokens": 10_000}, hooks=hooks, token_counter="estimator")


async def test_manual_observe_and_reflect_hooks() -> None:
    recorder = Recorder()
    om = make_om(recording_model(), recorder.hooks(async_end=True), message_tokens=100_000)
    await om.aon_turn_end("t1", list(conversation(4))[-1], resource_id="u1")
    record = await om.aobserve("t1", resource_id="u1")
    assert record.groups
    assert recorder.names() == ["on_observation_start", "on_observation_end"]
    start, end = recorder.get("on_observation_start"), recorder.get("on_observation_end")
    for ctx in (start, end):
        assert (ctx.thread_id, ctx.resource_id, ctx.trigger, ctx.operation) == ("t1", "u1", "manual", "observation")
    assert start.cycle_id == end.cycle_id
    assert start.usage is None and end.error is None
    assert end.usage is not None and end.usage["input_tokens"] == 321 and end.usage["output_tokens"] == 45
    assert end.provider_metadata is not None and end.provider_metadata["cost_usd"] == 0.0042

    record = await om.areflect("t1", resource_id="u1")
    assert record.generation_count == 1
    assert recorder.names()[2:] == ["on_reflection_start", "on_reflection_end"]
    ref_end = recorder.get("on_reflection_end")
    assert ref_end.trigger == "manual" and ref_end.operation == "reflection" and ref_end.resource_id == "u1"
    assert ref_end.usage is not None and ref_end.usage["total_tokens"] == 366
    assert ref_end.provider_metadata is not None and ref_end.provider_metadata["gateway"] == "test"


async def test_turn_sync_trigger_from_aprocess() -> None:
    recorder = Recorder()
    om = make_om(recording_model(), recorder.hooks())
    for history in conversation(14):
        await om.aprocess("t1", history)
        if "on_observation_end" in recorder.names():
            break
    end = recorder.get("on_observation_end")
    assert end.trigger == "turn-sync" and end.thread_id == "t1" and end.resource_id == implicit_resource("t1")
    assert recorder.get("on_observation_start").trigger == "turn-sync"
    assert end.usage is not None and end.usage["input_tokens"] == 321


async def test_async_buffer_trigger_and_failure_reported_in_error() -> None:
    recorder = Recorder()
    model = recording_model(fail_times=10_000)
    om = make_om(model, recorder.hooks(), message_tokens=2000, buffer_tokens=300)
    for history in conversation(6):
        await om.aprocess("t1", history)  # never raises although every buffering call fails
        await om.await_background()
    assert model.calls, "buffering called the model"
    ends = [ctx for name, ctx in recorder.calls if name == "on_observation_end"]
    assert ends and all(ctx.trigger == "async-buffer" for ctx in ends)
    assert all(ctx.error and "provider exploded" in ctx.error for ctx in ends)
    assert recorder.get("on_observation_start").trigger == "async-buffer"


async def test_successful_async_buffer_end_hook_has_usage() -> None:
    recorder = Recorder()
    om = make_om(recording_model(), recorder.hooks(), message_tokens=2000, buffer_tokens=300)
    for history in conversation(6):
        await om.aprocess("t1", history)
        await om.await_background()
        if "on_observation_end" in recorder.names():
            break
    end = recorder.get("on_observation_end")
    assert end.trigger == "async-buffer" and end.error is None
    assert end.usage is not None and end.usage["output_tokens"] == 45


async def test_raising_hooks_are_logged_and_never_fail_the_cycle(caplog: pytest.LogCaptureFixture) -> None:
    def boom(ctx: HookContext) -> None:
        raise RuntimeError(f"hook broke in {ctx.operation}")

    async def async_boom(ctx: HookContext) -> None:
        raise ValueError("async hook broke")

    om = make_om(recording_model(), {"on_observation_start": boom, "on_observation_end": async_boom,
                                     "on_reflection_start": boom, "on_reflection_end": boom},
                 message_tokens=100_000)
    await om.aon_turn_end("t1", list(conversation(4))[-1])
    with caplog.at_level(logging.ERROR, logger="langchain_om"):
        record = await om.aobserve("t1")
        record = await om.areflect("t1")
    assert record.groups and record.generation_count == 1, "both cycles completed"
    messages = "\n".join(r.getMessage() + (r.exc_text or str(r.exc_info)) for r in caplog.records)
    assert "on_observation_start" in messages and "on_observation_end" in messages
    assert "on_reflection_end" in messages


def test_unknown_hook_names_are_refused() -> None:
    with pytest.raises(OMConfigError) as info:
        make_om(recording_model(), {"on_observe": lambda ctx: None})
    assert info.value.field == "hooks.on_observe"
    with pytest.raises(OMConfigError) as info:
        make_om(recording_model(), 42)
    assert info.value.field == "hooks"
