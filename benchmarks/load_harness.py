"""Many users on one event loop: the driver and the integrity check behind ``benchmarks.load``
and ``tests/test_load_integrity.py``.

A *user* is an asyncio task that sends one human message per turn to a thread (its own, or
round-robin over a shared pool in soak mode: more threads than ``om.cache_limit``), through
``create_agent`` + ``ObservationalMemoryMiddleware`` or through ``om.aprocess``. Two users never
step the same thread at once (a chat server serialises a thread's turns). The Observer, the
Reflector and the agent's model are scripted and sleep ``*_latency_s`` per call (``asyncio.sleep``),
as a provider keeps the loop idle while it answers; the CPU they burn parsing prompts is
measured (``thread_time`` around their reply, their bookkeeping for the integrity check and
their usage figures) so it can be excluded from OM's CPU per turn.

Every human message carries a marker ``[m:<user>:<turn>]`` so the check can tell, after a run,
that each was stored exactly once, that no message lies in two observation groups, and that no
message reached the Observer twice (its transcript lines name the markers it saw).
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import logging
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

from langchain_om.engine import ObservationalMemory
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER
from langchain_om.store.base import OMStore, implicit_resource
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

Via = Literal["middleware", "aprocess"]
T = TypeVar("T")
_USER_LINE = re.compile(r"\] User: (\[m:\d+:\d+\])")
_TOPICS_EN = ["the Lisbon trip", "the quarterly budget", "a Python refactor", "the marathon plan"]
_TOPICS_JA = ["京都旅行の計画", "来月の予算", "引っ越しの準備", "誕生日の夕食"]


class _Timed:
    """CPU (thread time) a scripted model spends on a call: building its reply, keeping what
    the integrity check needs, and the usage figures a provider would compute on its side.
    None of it is OM's: it is excluded from OM's CPU per turn."""

    cpu_s: float = 0.0

    @staticmethod
    def _timed(work: Callable[[], T]) -> T:
        started = time.thread_time()
        try:
            return work()
        finally:
            _Timed.cpu_s += time.thread_time() - started


class TimedObserver(ScriptedObserverModel, _Timed):
    """The scripted Observer/Reflector, its own CPU time counted apart. It keeps what the
    integrity check needs (which markers each Observer call saw), not the prompts: a soak's
    RSS is OM's, not the harness's."""

    sends: Counter[str] = Field(default_factory=Counter)
    observer_calls: int = 0

    def _record(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> int:
        return self._timed(lambda: self._keep(messages))

    def _keep(self, messages: list[BaseMessage]) -> int:
        if _is_observer_call(messages):
            self.observer_calls += 1
            self.sends.update(_markers_sent(messages))
        self.calls.append([])
        return len(self.calls) - 1

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        return self._timed(lambda: ScriptedObserverModel._reply(self, messages, index))

    def _finish(self, messages: list[BaseMessage], reply: AIMessage) -> ChatResult:
        return self._timed(lambda: ScriptedObserverModel._finish(self, messages, reply))


class TimedAgent(ScriptedAgentModel, _Timed):
    """The scripted agent model, its own CPU time counted apart (calls not kept)."""

    def _record(self, messages: list[BaseMessage], kwargs: dict[str, Any]) -> int:
        self.calls.append([])
        return len(self.calls) - 1

    def _reply(self, messages: list[BaseMessage], index: int) -> AIMessage:
        return self._timed(lambda: ScriptedAgentModel._reply(self, messages, index))

    def _finish(self, messages: list[BaseMessage], reply: AIMessage) -> ChatResult:
        return self._timed(lambda: ScriptedAgentModel._finish(self, messages, reply))


@dataclass
class LoadPlan:
    users: int = 10
    turns: int = 10
    threads: int | None = None
    """Threads shared round-robin by the users (soak); None: one thread per user."""
    via: Via = "middleware"
    with_om: bool = True
    observer_latency_s: float = 1.0
    agent_latency_s: float = 0.0
    cache_limit: int | None = None
    message_tokens: int = 400
    observation_tokens: int = 600
    duration_s: float | None = None
    """Soak: users keep going until this many seconds passed (``turns`` is then a cap)."""
    background_bound_s: float = 120.0
    debug_events: bool = True
    """Count OM's events through ``on_debug_event`` (``LoadResult.events``, what the tests check).
    The benchmark turns it off: a server runs without a debug handler, and with one OM also builds
    the ``data-om-wait`` events it only makes for a handler, and the counting is the harness's."""


@dataclass
class LoadResult:
    turns: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    background_failures: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    loop_lag_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0
    model_cpu_s: float = 0.0
    harness_cpu_s: float = 0.0
    """CPU of the harness's own threads (the lag probe, the caller's progress bar: ``run_load``'s
    ``harness_cpu``), excluded like the models'."""
    observer_calls: int = 0
    background_done: bool = True
    rss_mb: list[tuple[float, float]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sent: dict[str, list[str]] = field(default_factory=dict)
    checked: bool = False
    """Whether the integrity check ran (only with OM: without it nothing is stored)."""
    events: Counter[str] = field(default_factory=Counter)
    """OM's events by type (``on_debug_event``): proves buffering and reflection ran."""

    @property
    def cpu_per_turn_ms(self) -> float:
        return 1000 * max(0.0, self.cpu_s - self.model_cpu_s - self.harness_cpu_s) / max(1, self.turns)


class _Capture(logging.Handler):
    """Background task failures OM logs (a failed task is logged, never raised to a turn)."""

    def __init__(self, into: Counter[str]) -> None:
        super().__init__(level=logging.ERROR)
        self.into = into

    def emit(self, record: logging.LogRecord) -> None:
        name = record.exc_info[0].__name__ if record.exc_info and record.exc_info[0] else record.getMessage()[:80]
        self.into[name] += 1


def human_text(user: int, turn: int) -> str:
    """A marked user message, English and Japanese in turn (every script goes through OM)."""
    if turn % 2:
        topic = _TOPICS_JA[(user + turn) % len(_TOPICS_JA)]
        return f"[m:{user}:{turn}] {topic}について相談したいです。予算は{turn * 1000}円で、金曜日までに決めたい。"
    topic = _TOPICS_EN[(user + turn) % len(_TOPICS_EN)]
    return f"[m:{user}:{turn}] Let's talk about {topic}; I prefer trains and my budget is {turn * 10} euros."


def rss_mb() -> float:
    """Resident set size now (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


class LagProbe:
    """Event-loop lag, sampled from a thread every ``tick_s``: how late a callback handed to the
    loop now would run (what every other coroutine also waits).

    A loop waiting in its selector has nothing to run, so its lag is 0: the probe records that
    without waking it. A ``sleep(tick)`` watcher on the loop itself woke the idle loop 100 times a
    second; with one user that idle time is the scripted Observer's latency, and each wake costs
    ~130 us of CPU on a small VM, which a run with OM (longer in wall time) was charged and the bare
    agent was not. The probe thread's own CPU is measured (``cpu_s``) and excluded like the
    scripted models'. Loops without a selector to watch fall back to sending every sample."""

    def __init__(self, loop: asyncio.AbstractEventLoop, lags: list[float], tick_s: float = 0.01) -> None:
        self.loop, self.lags, self.tick_s = loop, lags, tick_s
        self.cpu_s = 0.0
        self._waiting = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="lag-probe", daemon=True)
        self._selector: Any = getattr(loop, "_selector", None)
        self._select: Callable[..., Any] | None = None

    def start(self) -> None:
        if self._selector is not None:
            select = self._select = self._selector.select

            def watched(timeout: float | None = None) -> Any:
                self._waiting = True
                try:
                    return select(timeout)
                finally:
                    self._waiting = False

            self._selector.select = watched
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        if self._select is not None:
            self._selector.select = self._select

    def _sample(self) -> None:
        started = time.thread_time()
        try:
            while not self._stop.wait(self.tick_s):
                if self._waiting and self._select is not None:
                    self.lags.append(0.0)
                    continue
                sent = time.perf_counter()
                try:
                    self.loop.call_soon_threadsafe(self._arrived, sent)
                except RuntimeError:  # the loop closed
                    return
        finally:
            self.cpu_s = time.thread_time() - started

    def _arrived(self, sent: float) -> None:
        self.lags.append((time.perf_counter() - sent) * 1000)


def build_om(store: OMStore, plan: LoadPlan, observer: ScriptedObserverModel,
             events: Counter[str] | None = None) -> ObservationalMemory:
    seen = events if events is not None else Counter()
    om = ObservationalMemory(
        store, model=observer, token_counter="estimator",
        on_debug_event=(lambda event: seen.update([_kind(event)])) if plan.debug_events else None,
        observation={"message_tokens": plan.message_tokens},
        reflection={"observation_tokens": plan.observation_tokens},
    )
    if plan.cache_limit is not None:
        om.cache_limit = plan.cache_limit
    return om


async def run_load(store: OMStore, plan: LoadPlan, *, on_turn: Callable[[], None] | None = None,
                   harness_cpu: Callable[[], float] | None = None) -> LoadResult:
    """Drive ``plan`` against ``store`` (set up already); returns figures and integrity problems.

    ``harness_cpu``: the CPU seconds the caller's own threads have used so far (a progress bar's
    redraws); what they use during the run is excluded from its CPU, like the lag probe's."""
    from langchain.agents import create_agent

    from langchain_om.integrations.middleware import ObservationalMemoryMiddleware

    result = LoadResult()
    observer = TimedObserver(delay_s=plan.observer_latency_s)
    agent_model = TimedAgent(delay_s=plan.agent_latency_s)
    om = build_om(store, plan, observer, result.events) if plan.with_om else None
    middleware = [ObservationalMemoryMiddleware(om)] if om is not None else []
    agent = create_agent(agent_model, [], middleware=middleware) if plan.via == "middleware" else None
    threads = plan.threads or plan.users
    busy = [asyncio.Lock() for _ in range(threads)]
    capture = _Capture(result.background_failures)
    logging.getLogger("langchain_om").addHandler(capture)
    stop = asyncio.Event()
    probe = LagProbe(asyncio.get_running_loop(), result.loop_lag_ms)
    deadline = time.monotonic() + plan.duration_s if plan.duration_s else None
    sampler = asyncio.create_task(_sample_rss(result.rss_mb, stop)) if plan.duration_s else None

    async def one_turn(user: int, turn: int) -> None:
        thread = (user + turn * plan.users) % threads if plan.threads else user
        thread_id = f"th{thread}"
        message = HumanMessage(human_text(user, turn), id=f"h-{user}-{turn}")
        async with busy[thread]:
            result.sent.setdefault(thread_id, []).append(str(message.id))
            started = time.perf_counter()
            try:
                if agent is not None:
                    await agent.ainvoke({"messages": [message]}, {"configurable": {"thread_id": thread_id}})
                elif om is not None:
                    await om.aprocess(thread_id, [message])
                    reply = AIMessage(f"ok {user}:{turn}", id=f"a-{user}-{turn}")
                    await agent_model.ainvoke([SystemMessage("scripted"), message])
                    await om.aon_turn_end(thread_id, [message, reply])
                else:
                    await agent_model.ainvoke([message])
                result.latencies_ms.append((time.perf_counter() - started) * 1000)
                result.turns += 1
            except Exception as exc:  # a failed turn is the figure this harness exists to count
                result.errors[f"{type(exc).__name__}: {str(exc)[:60]}"] += 1
        if on_turn is not None:
            on_turn()

    async def user(index: int) -> None:
        for turn in range(plan.turns):
            if deadline is not None and time.monotonic() >= deadline:
                return
            await one_turn(index, turn)

    gc.collect()
    probe.start()
    cpu0, wall0, model0 = time.process_time(), time.perf_counter(), _Timed.cpu_s
    caller0 = harness_cpu() if harness_cpu is not None else 0.0
    try:
        await asyncio.gather(*(user(u) for u in range(plan.users)))
        if om is not None:
            try:
                await asyncio.wait_for(om.await_background(), plan.background_bound_s)
            except TimeoutError:
                result.background_done = False
    finally:
        result.cpu_s = time.process_time() - cpu0
        result.wall_s = time.perf_counter() - wall0
        result.model_cpu_s = _Timed.cpu_s - model0
        caller = harness_cpu() - caller0 if harness_cpu is not None else 0.0
        stop.set()
        probe.stop()
        result.harness_cpu_s = probe.cpu_s + caller
        if sampler is not None:
            await sampler
        logging.getLogger("langchain_om").removeHandler(capture)
    result.observer_calls = observer.observer_calls
    if om is not None:
        result.checked = True
        result.problems = await check_integrity(om, result.sent, observer.sends)
        if not result.background_done:
            result.problems.append(f"await_background() still waiting after {plan.background_bound_s:.0f} s")
        await om.aclose(cancel=True)
    return result


async def _sample_rss(samples: list[tuple[float, float]], stop: asyncio.Event, every_s: float = 2.0) -> None:
    started = time.monotonic()
    while not stop.is_set():
        samples.append((time.monotonic() - started, rss_mb()))
        try:
            await asyncio.wait_for(stop.wait(), every_s)
        except TimeoutError:
            pass


def _kind(event: Any) -> str:
    """An event's type, with the operation (observation / reflection) where it has one."""
    operation = getattr(getattr(event, "data", None), "operation_type", None)
    return f"{event.type}:{operation}" if operation else str(event.type)


def _is_observer_call(call: Sequence[BaseMessage]) -> bool:
    return any(isinstance(m, SystemMessage) and OBSERVER_PROMPT_MARKER in str(m.content) for m in call)


def _markers_sent(call: Sequence[BaseMessage]) -> set[str]:
    """The user messages one Observer call saw (its transcript's ``User:`` lines)."""
    text = "\n".join(str(m.content) for m in call if isinstance(m, HumanMessage))
    return set(_USER_LINE.findall(text.split("<transcript>", 1)[-1]))


async def check_integrity(om: ObservationalMemory, sent: dict[str, list[str]], sends: Counter[str]) -> list[str]:
    """What went wrong, in words (empty: every sent message stored once, none observed twice,
    none sent to the Observer twice, and every assistant reply stored)."""
    problems: list[str] = []
    store = om.store
    for thread_id, ids in sorted(sent.items()):
        resource = implicit_resource(thread_id)
        rows = await store.aget_messages(resource, thread_id)
        humans = Counter(r.id for r in rows if r.data.get("type") == "human")
        ais = sum(1 for r in rows if r.data.get("type") == "ai")
        if sorted(humans.elements()) != sorted(ids):
            missing = set(ids) - set(humans)
            doubled = [i for i, n in humans.items() if n > 1]
            problems.append(f"{thread_id}: stored human messages differ from sent "
                            f"(missing {sorted(missing)[:3]}, doubled {doubled[:3]})")
        if ais != len(ids):
            problems.append(f"{thread_id}: {ais} assistant replies stored for {len(ids)} turns")
        record = await om.aget_record(thread_id)
        seq_of = {r.id: r.seq for r in rows}
        spans = sorted((seq_of.get(g.start_id, -1), seq_of.get(g.end_id, -1)) for g in record.groups)
        for (s1, e1), (s2, e2) in itertools.pairwise(spans):
            if s2 <= e1:
                problems.append(f"{thread_id}: observation groups {s1}-{e1} and {s2}-{e2} overlap")
        observed_through = record.last_observed_seq.get(thread_id, 0)
        if spans and spans[-1][1] > observed_through:
            problems.append(f"{thread_id}: a group ends at {spans[-1][1]} past the watermark {observed_through}")
    twice = {mark: n for mark, n in sends.items() if n > 1}
    if twice:
        problems.append(f"{len(twice)} messages sent to the Observer more than once, e.g. {sorted(twice)[:3]}")
    return problems
