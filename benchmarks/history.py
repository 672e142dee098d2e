"""Drive each memory strategy at a given history length and measure every step (issue 7).

OM's history is written through the store directly (old messages observed, an observation log,
an unobserved tail), as if OM had run all along; SummarizationMiddleware's state is what it would
hold after the same conversation (it is run wherever its trigger fires); full history keeps all.
Then ``steps`` steps each add a user message and the agent's reply (2 new messages). Models are
instant (scripted), so every millisecond measured is bookkeeping.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.messages.utils import count_tokens_approximately
from langgraph.graph.message import add_messages

from langchain_om.engine import ObservationalMemory
from langchain_om.foundation.messages import dump_message, message_timestamp
from langchain_om.foundation.tokens import TokenCounter, get_token_counter
from langchain_om.store.base import NewMessage, ObservationGroup, OMRecord, OMStore, implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.store.sqlite import SQLiteStore
from langchain_om.testing import ScriptedObserverModel

from .common import START, Timer, conversation, turn_messages
from .strategies import summarization_middleware, summarization_step

THREAD = "bench"
OM_MESSAGE_TOKENS = 30_000
OM_OBSERVATION_TOKENS = 40_000
SUMMARY_CONFIGS: dict[str, tuple[int, int]] = {
    # name: (trigger tokens, keep tokens)
    "summarization-70k": (OM_MESSAGE_TOKENS + OM_OBSERVATION_TOKENS, 6_000),
    "summarization-800k": (800_000, 6_000),
}


@dataclass
class StepStats:
    """What one strategy did over the measured steps at one history length."""

    strategy: str
    history: int
    memory_ms: list[float] = field(default_factory=list)
    background_ms: list[float] = field(default_factory=list)
    reducer_ms: list[float] = field(default_factory=list)
    prompt_tokens: list[int] = field(default_factory=list)
    prefix_share: list[float] = field(default_factory=list)
    cold_ms: float = 0.0
    cold_samples_ms: list[float] = field(default_factory=list)
    commit_ms: list[float] = field(default_factory=list)
    setup_s: float = 0.0
    state_messages: int = 0
    events: dict[str, int] = field(default_factory=dict)


def _serial(message: BaseMessage) -> str:
    calls = json.dumps(getattr(message, "tool_calls", None) or [], sort_keys=True, default=str)
    return f"{message.type}\x00{message.text}\x00{calls}"


def _common_prefix(a: str, b: str) -> str:
    size = 0
    limit = min(len(a), len(b))
    while size < limit and a[size] == b[size]:
        size += 1
    return a[:size]


class PromptMeter:
    """Tokens of each prompt and the share that is an unchanged prefix of the previous prompt.

    The prompt is the serialized message list (role, text, tool calls). The common prefix is
    whole identical messages plus the common character prefix of the first differing one.
    """

    def __init__(self, counter: TokenCounter) -> None:
        self.counter = counter
        self.previous: list[str] | None = None
        self._seen: dict[int, tuple[BaseMessage, str, int]] = {}

    def measure(self, prompt: Sequence[BaseMessage]) -> tuple[int, float]:
        # A message object the previous prompt held is not serialized and counted again: the
        # strategies that keep the whole history hand the same objects every step, and redoing
        # 10k-50k of them per step was most of step_cost's minutes (the figures are the same).
        seen: dict[int, tuple[BaseMessage, str, int]] = {}
        for message in prompt:
            known = self._seen.get(id(message))
            if known is None or known[0] is not message:
                known = (message, _serial(message), self.counter.count_message(message))
            seen[id(message)] = known
        self._seen = seen
        serial = [seen[id(m)][1] for m in prompt]
        per_message = [seen[id(m)][2] for m in prompt]
        total = sum(per_message)
        prefix = 0
        if self.previous is not None:
            for index, text in enumerate(serial):
                if index >= len(self.previous):
                    break
                if text == self.previous[index]:
                    prefix += per_message[index]
                    continue
                common = _common_prefix(text, self.previous[index])
                prefix += self.counter.count_text(common.split("\x00", 1)[1]) if "\x00" in common else 0
                break
        self.previous = serial
        return total, (prefix / total if total else 0.0)


def _observation_log(messages: Sequence[BaseMessage], budget_tokens: int, counter: TokenCounter) -> list[str]:
    """A realistic dated observation log for already-observed history (newest bullets, ~budget tokens)."""
    bullets: list[str] = []
    used = 0
    for message in reversed(messages):
        if not isinstance(message, HumanMessage):
            continue
        when = message_timestamp(message) or START
        line = f"* 🔴 ({when:%H:%M}) User said: {message.text}"
        used += counter.count_text(line)
        bullets.append(f"Date: {when:%Y-%m-%d (%A)}\n{line}")
        if used >= budget_tokens:
            break
    bullets.reverse()
    size = max(1, len(bullets) // 10)
    return ["\n".join(bullets[i:i + size]) for i in range(0, len(bullets), size)]


async def preload_om(store: OMStore, history: list[BaseMessage], counter: TokenCounter, *,
                     unobserved_tokens: int, observation_tokens: int) -> None:
    """Write ``history`` through the store as if OM had run all along: old messages observed, a log of
    ``observation_tokens`` and an unobserved tail of ``unobserved_tokens``."""
    await store.asetup()
    await store.aensure_thread(implicit_resource(THREAD), THREAD)
    rows: list[NewMessage] = []
    for m in history:
        tokens = counter.count_message(m)  # before dumping, as OM does: the row keeps the counter's fingerprint
        rows.append(NewMessage(id=m.id or "", data=dump_message(m), tokens=tokens,
                               created_at=message_timestamp(m) or START))
    for start in range(0, len(rows), 2000):
        await store.aappend_messages(implicit_resource(THREAD), THREAD, rows[start:start + 2000])
    tail = 0
    cut = len(rows)
    while cut > 0 and tail + rows[cut - 1].tokens <= unobserved_tokens:
        cut -= 1
        tail += rows[cut].tokens
    while 0 < cut < len(history) and (history[cut].type == "tool" or getattr(history[cut - 1], "tool_calls", None)):
        cut -= 1
    if cut == 0:
        return
    texts = _observation_log(history[:cut], observation_tokens, counter)
    per = max(1, cut // len(texts))
    groups = [ObservationGroup(thread_id=THREAD, start_id=rows[min(i * per, cut - 1)].id,
                               end_id=rows[min((i + 1) * per, cut) - 1].id, text=text,
                               tokens=counter.count_text(text)) for i, text in enumerate(texts)]
    record = OMRecord(resource_id=implicit_resource(THREAD), thread_id=THREAD, scope="thread", groups=groups,
                      last_observed_seq={THREAD: cut}, last_observed_id={THREAD: rows[cut - 1].id},
                      metadata={"current_task": "Help the user with their plans",
                                "suggested_response": "Continue with the user's latest request"})
    await store.acommit_record(record, expected_version=0, mark_observed={THREAD: cut})


def _append(state: list[BaseMessage], message: BaseMessage) -> list[BaseMessage]:
    """LangGraph's ``add_messages`` reducer, as the agent state applies it every step."""
    return cast(list[BaseMessage], add_messages(cast(Any, state), cast(Any, [message])))


def _count(events: Sequence[Any], into: dict[str, int]) -> None:
    for event in events:
        into[event.type] = into.get(event.type, 0) + 1


COLD_SAMPLES = 5
"""Cold first steps timed per case (fresh ``ObservationalMemory`` instances; the median is reported)."""
COLD_MIN_SAMPLES, COLD_BUDGET_MS = 2, 5_000.0
"""Past ``COLD_MIN_SAMPLES`` fresh instances, sampling stops once the case's cold steps took
``COLD_BUDGET_MS``: a 50k-message cold step of ~10 s is no less certain for being sampled 3 times
rather than 6 (six were a minute of the section)."""
COMMIT_MESSAGE_TOKENS = 300
"""Observation threshold of the commit steps: about two turns, so one step in two commits."""


async def cold_and_commit_steps(store: OMStore, state: list[BaseMessage], counter: TokenCounter, stats: StepStats,
                                commits: int) -> None:
    """Time OM's two rarer kinds of step on the store a case already stepped on, each step handed
    the same state as the plain steps. Cold: the first step of a fresh ``ObservationalMemory`` (its
    caches empty, the store already open), ``COLD_SAMPLES`` times. Commit: steps of an instance
    without buffering whose threshold is about two turns, so the step itself observes and commits
    (instant scripted Observer); only steps whose record version moved count, not the instance's
    first (cold) step, which observes the whole unobserved tail at once."""
    for sample in range(COLD_SAMPLES):
        if sample >= COLD_MIN_SAMPLES and sum(stats.cold_samples_ms) >= COLD_BUDGET_MS:
            break
        state.append(HumanMessage(f"Back again ({sample}): where were we?", id=f"cold{sample}h"))
        fresh = ObservationalMemory(store, model=ScriptedObserverModel(),
                                    observation={"message_tokens": OM_MESSAGE_TOKENS},
                                    reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)
        with Timer() as timer:
            await fresh.aprocess(THREAD, state)
        await fresh.aclose(cancel=True)
        stats.cold_samples_ms.append(timer.ms)
    observing = ObservationalMemory(store, model=ScriptedObserverModel(),
                                    observation={"message_tokens": COMMIT_MESSAGE_TOKENS, "buffer_tokens": False},
                                    reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)
    try:
        for turn in range(10_000, 10_000 + 4 * commits + 1):
            human, ai = turn_messages(turn)
            state = _append(state, human)
            before = (await observing.aget_record(THREAD)).version
            with Timer() as timer:
                await observing.aprocess(THREAD, state)
            state = _append(state, ai)
            if turn > 10_000 and (await observing.aget_record(THREAD)).version > before:
                stats.commit_ms.append(timer.ms)
            if len(stats.commit_ms) >= commits:
                break
    finally:
        await observing.aclose(cancel=True)


async def run_om(history_len: int, steps: int, store_kind: str, counter: TokenCounter,
                 tmp: str, prompts: bool = True, rare_steps: bool = False) -> StepStats:
    """OM at a history of ``history_len`` messages: preload through the store, then ``steps`` steps
    (and with ``rare_steps`` the cold and commit steps of ``cold_and_commit_steps``)."""
    stats = StepStats(f"om-{store_kind}", history_len)
    history = conversation(history_len)
    store: OMStore = InMemoryStore() if store_kind == "memory" else SQLiteStore(
        os.path.join(tmp, f"om-{history_len}.db"))
    with Timer() as setup:
        await preload_om(store, history, counter, unobserved_tokens=int(OM_MESSAGE_TOKENS * 0.6),
                         observation_tokens=OM_OBSERVATION_TOKENS // 2)
    stats.setup_s = setup.ms / 1000
    om = ObservationalMemory(store, model=ScriptedObserverModel(),
                             observation={"message_tokens": OM_MESSAGE_TOKENS},
                             reflection={"observation_tokens": OM_OBSERVATION_TOKENS}, token_counter=counter)
    meter = PromptMeter(counter)
    state: list[BaseMessage] = list(history)
    try:
        for turn in range(steps + 1):
            human, ai = turn_messages(turn)
            with Timer() as reducer:
                state = _append(state, human)
            with Timer() as timer:
                context = await om.aprocess(THREAD, state)
            with Timer() as background:
                await om.await_background()
            with Timer() as reducer2:
                state = _append(state, ai)
            if turn == 0:  # first step of this instance: its caches are empty (a cold step)
                stats.cold_ms = timer.ms
                stats.cold_samples_ms.append(timer.ms)
                meter.measure(context.to_messages())
                continue
            stats.memory_ms.append(timer.ms)
            stats.background_ms.append(background.ms)
            stats.reducer_ms.append(reducer.ms + reducer2.ms)
            _count(context.events, stats.events)
            if prompts:
                tokens, share = meter.measure(context.to_messages())
                stats.prompt_tokens.append(tokens)
                stats.prefix_share.append(share)
        stats.state_messages = len(state)
        if rare_steps:
            await cold_and_commit_steps(store, list(state), counter, stats, commits=max(3, min(steps, 20)))
    finally:
        await om.aclose(cancel=True)
        await store.aclose()
    return stats


async def summarized_history(middleware: Any, history_len: int, trigger: int) -> list[BaseMessage]:
    """What SummarizationMiddleware's state holds after ``history_len`` messages: it is run
    before every user message once the state passes its trigger, as it would have been."""
    state: list[BaseMessage] = []
    running = 0
    for message in conversation(history_len):
        if isinstance(message, HumanMessage) and running >= trigger:
            state, did = await summarization_step(middleware, state)
            if did:
                running = count_tokens_approximately(state)
        state.append(message)
        running += count_tokens_approximately([message])
    return state


async def run_summarization(name: str, history_len: int, steps: int, counter: TokenCounter,
                            prompts: bool = True) -> StepStats:
    """SummarizationMiddleware at a history of ``history_len`` messages, then ``steps`` steps."""
    trigger, keep = SUMMARY_CONFIGS[name]
    stats = StepStats(name, history_len)
    middleware, _model = summarization_middleware(trigger_tokens=trigger, keep_tokens=keep)
    with Timer() as setup:
        state = await summarized_history(middleware, history_len, trigger)
    stats.setup_s = setup.ms / 1000
    meter = PromptMeter(counter)
    for turn in range(steps + 1):
        human, ai = turn_messages(turn)
        with Timer() as reducer:
            state = _append(state, human)
        with Timer() as timer:
            state, did = await summarization_step(middleware, state)
        with Timer() as reducer2:
            state = _append(state, ai)
        if turn == 0:
            stats.cold_ms = timer.ms
            meter.measure(state[:-1])
            continue
        stats.memory_ms.append(timer.ms)
        stats.reducer_ms.append(reducer.ms + reducer2.ms)
        if did:
            stats.events["summaries"] = stats.events.get("summaries", 0) + 1
        if prompts:
            tokens, share = meter.measure(state[:-1])
            stats.prompt_tokens.append(tokens)
            stats.prefix_share.append(share)
    stats.state_messages = len(state)
    return stats


async def run_full(history_len: int, steps: int, counter: TokenCounter, prompts: bool = True) -> StepStats:
    """No memory: the whole history is the prompt; the only bookkeeping is the state reducer."""
    stats = StepStats("full-history", history_len)
    state: list[BaseMessage] = list(conversation(history_len))
    meter = PromptMeter(counter)
    for turn in range(steps + 1):
        human, ai = turn_messages(turn)
        with Timer() as reducer:
            state = _append(state, human)
        prompt = list(state)
        with Timer() as reducer2:
            state = _append(state, ai)
        if turn == 0:
            meter.measure(prompt)
            continue
        stats.memory_ms.append(0.0)
        stats.reducer_ms.append(reducer.ms + reducer2.ms)
        if prompts:
            tokens, share = meter.measure(prompt)
            stats.prompt_tokens.append(tokens)
            stats.prefix_share.append(share)
    stats.state_messages = len(state)
    return stats


def bench_counter() -> TokenCounter:
    """The counter OM uses by default ("auto": exact o200k_base offline, else the estimator)."""
    return get_token_counter("auto")


def tempdir() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="om-bench-")

