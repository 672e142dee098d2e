"""Issue 30 item 13: a property-based fuzzer of whole conversations (hypothesis stateful testing).

Two machines draw conversations step by step: random human messages, AI replies, AI tool calls
and their results, edits of earlier messages under their ids, the caller's system message,
images (also as ``file`` blocks), hostile text (lone surrogates, NUL, 25k characters, empty,
markup), a failing or looping Observer, restarts on the same store and a second worker.

* ``AprocessMachine`` drives ``ObservationalMemory.aprocess`` as a caller does (the whole history,
  only the new messages, or the same step again) on the in-memory store, SQLite and (when
  ``LANGCHAIN_OM_TEST_PG_DSN`` is set) PostgreSQL; on SQLite the operator also runs
  ``langchain-om threads`` / ``inspect`` on the live file after a hostile title (issue 44);
* ``AgentMachine`` drives ``create_agent`` + ``ObservationalMemoryMiddleware`` with a checkpointer,
  and adds forks and replays from past checkpoints (time travel) and recall search after them.

After every step they check: no stored message lost or duplicated; the newest human message and
the unanswered tool round in the model's input; the rest of the input within the hard ceiling;
nothing both observed and shown raw; the ``data-om-status`` numbers consistent with the context
and the store; each message findable by its rarest word (an edited one by its new word and, once
replaced in place, not by the retracted one); nothing of another resource visible, nor of an
abandoned branch after time travel.

Profiles: ``om-fuzz-ci`` by default (about a minute); ``LANGCHAIN_OM_FUZZ_PROFILE=om-fuzz-long``
for the long run (docs/testing.md).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, ClassVar

import pytest
from fuzz_support import (
    GLITCH,
    IMAGE_BLOCKS,
    BagOfWords,
    StoreOpener,
    SwitchableObserver,
    cli,
    current_sections,
    downgrade_postgres_to_v6,
    fuzz_settings,
    hostile,
    hostile_text,
    human,
    prompt_text,
    rare_word,
    required_ids,
    run,
    store_kinds,
    terminal_unsafe,
    text_of,
    tool_result,
    upgrade_while_serving,
)
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from langchain_om.cli.literal import visible
from langchain_om.engine import ObservationalMemory
from langchain_om.engine.state import OMContext
from langchain_om.extensions.recall.indexing import stored_index

RESOURCE = "fuzz-user"
THREAD = "fuzz-thread"
INTRUDER = "fuzz-intruder"
SECRET = "qzsecretforeignvx"
images = st.one_of(st.none(), st.none(), st.sampled_from(IMAGE_BLOCKS))


def make_om(store: Any, observer: SwitchableObserver, buffering: bool) -> ObservationalMemory:
    observation: dict[str, Any] = {"message_tokens": 1_200}
    if not buffering:
        observation["buffer_tokens"] = False
    return ObservationalMemory(
        store, model=observer, token_counter="estimator", observation=observation,
        retrieval={"vector": True, "embeddings": BagOfWords()},
        reflection={"observation_tokens": 2_500}, failure_policy={"max_retries": 0, "backoff": 1, "max_backoff": 2},
    )


class AprocessMachine(RuleBasedStateMachine):
    """One thread of one resource, driven through ``aprocess`` by a caller holding its history."""

    kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.opener = StoreOpener(self.kind)
        self.observer = SwitchableObserver()
        self.buffering = True
        self.om = make_om(self.opener.open(), self.observer, True)
        self.workers: list[ObservationalMemory] = [self.om]
        self.history: list[BaseMessage] = []
        self.system: SystemMessage | None = None
        self.pending: list[str] = []
        self.words: dict[str, str] = {}  # message id -> its current rare word
        self.all_words: dict[str, list[str]] = {}  # message id -> every word it held, oldest first
        self.retracted: dict[str, str] = {}  # message id -> a word an edit took out of it
        self.sent = 0  # how much of the history the caller has passed so far
        self.fresh: set[str] = set()  # ids added or edited since the last check
        self.counter = 0
        self.context: OMContext | None = None
        self.contexts: list[OMContext] = []
        self.upgraded = False

    # ------------------------------------------------------------------ set-up and teardown

    @initialize(buffering=st.booleans())
    def start(self, buffering: bool) -> None:
        self.buffering = buffering
        self.om = make_om(self.om.store, self.observer, buffering)
        self.workers = [self.om]
        run(self.loop, self.om.aprocess("foreign", [HumanMessage(f"{SECRET} my door code is 7731", id="foreign-1")],
                                        resource_id=INTRUDER))

    def teardown(self) -> None:
        try:
            for worker in self.workers:
                run(self.loop, worker.aclose(cancel=True, timeout=10))
            run(self.loop, self.opener.acleanup())
        finally:
            self.loop.close()

    # ----------------------------------------------------------------------------- helpers

    def _id(self, prefix: str) -> tuple[str, str]:
        self.counter += 1
        return f"{prefix}{self.counter}", rare_word(self.counter)

    def _last_kind(self) -> str | None:
        if not self.history:
            return None
        last = self.history[-1]
        if isinstance(last, AIMessage) and last.tool_calls:
            return "call"
        return last.type

    def _step(self, messages: list[BaseMessage] | None = None, worker: ObservationalMemory | None = None) -> None:
        batch = messages if messages is not None else self.history
        prefix = [self.system] if self.system is not None else []
        self.context = run(self.loop, (worker or self.om).aprocess(THREAD, [*prefix, *batch], resource_id=RESOURCE))
        self.sent = len(self.history)
        self.check()

    # ------------------------------------------------------------------------------- rules

    @precondition(lambda self: not self.pending)
    @rule(text=hostile_text, image=images)
    def user_says(self, text: str, image: dict[str, Any] | None) -> None:
        mid, word = self._id("h")
        self.history.append(human(word, hostile(text), image, mid))
        self.words[mid] = word
        self.all_words.setdefault(mid, []).append(word)
        self.fresh.add(mid)
        self._step()

    @precondition(lambda self: not self.pending and self._last_kind() in ("human", "tool"))
    @rule(text=hostile_text)
    def model_answers(self, text: str) -> None:
        mid, word = self._id("a")
        self.history.append(AIMessage(f"{word} {hostile(text)}", id=mid))
        self.words[mid] = word
        self.all_words.setdefault(mid, []).append(word)
        self.fresh.add(mid)
        self._step()

    @precondition(lambda self: not self.pending and self._last_kind() in ("human", "tool"))
    @rule(calls=st.integers(1, 2))
    def model_calls_tools(self, calls: int) -> None:
        mid, _ = self._id("c")
        ids = [f"{mid}-call{i}" for i in range(calls)]
        self.history.append(AIMessage("", id=mid, tool_calls=[
            {"name": "lookup", "args": {"n": i}, "id": call, "type": "tool_call"} for i, call in enumerate(ids)]))
        self.pending = ids
        self._step()

    @precondition(lambda self: bool(self.pending))
    @rule(text=hostile_text, image=images)
    def tool_returns(self, text: str, image: dict[str, Any] | None) -> None:
        mid, word = self._id("t")
        self.history.append(tool_result(word, hostile(text), self.pending.pop(0), image, mid))
        self.words[mid] = word
        self.all_words.setdefault(mid, []).append(word)
        self.fresh.add(mid)
        self._step()

    @precondition(lambda self: any(isinstance(m, HumanMessage) for m in self.history))
    @rule(data=st.data(), text=hostile_text)
    def user_edits_a_message(self, data: st.DataObject, text: str) -> None:
        if self._edit(data, text):
            self._step()

    def _edit(self, data: st.DataObject, text: str) -> bool:
        """Edit an earlier human or AI message of the caller's history under its id (not sent yet)."""
        editable = [i for i, m in enumerate(self.history) if m.type in ("human", "ai") and str(m.id) in self.words]
        if not editable:
            return False
        index = data.draw(st.sampled_from(editable))
        old = self.history[index]
        mid = str(old.id)
        _, word = self._id("e")
        if isinstance(old, HumanMessage):
            self.history[index] = HumanMessage(f"{word} {hostile(text)}", id=mid)
        else:
            assert isinstance(old, AIMessage)
            self.history[index] = AIMessage(f"{word} {hostile(text)}", id=mid, tool_calls=old.tool_calls)
        self.retracted[mid] = self.words[mid]
        self.words[mid] = word
        self.all_words.setdefault(mid, []).append(word)
        self.fresh.add(mid)
        return True

    @precondition(lambda self: self.kind == "postgres" and not self.upgraded
                  and any(isinstance(m, HumanMessage) for m in self.history))
    @rule(data=st.data(), text=hostile_text)
    def a_worker_upgrades_from_v6_while_another_edits(self, data: st.DataObject, text: str) -> None:
        """The schema taken back to version 6 (no CJK index), then a new worker opens it: while its
        CJK backfill batch holds the entries it wrote, the serving worker runs a step with an edit
        (issue 44: the old text must not stay indexed). Once per example: it costs a migration."""
        self.upgraded = True
        if not self._edit(data, text):
            return
        run(self.loop, downgrade_postgres_to_v6(self.om.store))
        prefix = [self.system] if self.system is not None else []
        serving = self.om.aprocess(THREAD, [*prefix, *self.history], resource_id=RESOURCE)
        upgrading = make_om(self.opener.open(), self.observer, self.buffering)
        self.workers.append(upgrading)
        self.context = run(self.loop, upgrade_while_serving(upgrading.store, serving))
        self.sent = len(self.history)
        self.check()

    @rule(text=st.one_of(st.none(), hostile_text))
    def caller_sets_instructions(self, text: str | None) -> None:
        self.system = None if text is None else SystemMessage(f"You are a careful assistant. {hostile(text)}")
        self._step()

    @precondition(lambda self: bool(self.history))
    @rule()
    def caller_retries_the_step(self) -> None:
        self._step()

    @precondition(lambda self: not self.pending)
    @rule(text=hostile_text)
    def stateless_caller_sends_only_the_new_message(self, text: str) -> None:
        mid, word = self._id("h")
        self.history.append(HumanMessage(f"{word} {hostile(text)}", id=mid))
        self.words[mid] = word
        self.all_words.setdefault(mid, []).append(word)
        self.fresh.add(mid)
        self._step(self.history[self.sent:])

    @rule(mode=st.sampled_from(["ok", "ok", "fail", "loop"]))
    def observer_changes(self, mode: str) -> None:
        self.observer.mode = mode

    @precondition(lambda self: self.kind == "sqlite" and bool(self.history))
    @rule(title=st.one_of(st.sampled_from(["rich-markup", "terminal-escape"]), hostile_text))
    def operator_inspects_the_thread(self, title: str) -> None:
        """``langchain-om threads`` / ``inspect`` on the live file, after a hostile title: every stored
        text (title, current task, hints, the log) printed literally, nothing raw for the terminal."""
        assert self.opener.folder is not None
        db = os.path.join(self.opener.folder, "om.db")
        text = hostile(title).replace("\x00", "")[:200]  # titles refuse NUL (a clear error) and long text
        run(self.loop, self.om.store.aupdate_thread(RESOURCE, THREAD, title=text or None))
        record = run(self.loop, self.om.store.aget_record(RESOURCE, THREAD))
        for argv in (["threads", "--resource", RESOURCE], ["inspect", THREAD, "--resource", RESOURCE]):
            code, out, err = cli(*argv, "--db", db)
            assert code == 0, (argv, err)
            assert not terminal_unsafe(out + err), (argv, terminal_unsafe(out + err))
            stored = run(self.loop, self.om.store.aget_thread(RESOURCE, THREAD))
            assert stored is not None
            if stored.title and stored.title.strip():
                assert visible(stored.title) in out, (argv, stored.title)
            if argv[0] == "inspect" and record is not None and record.current_task:
                assert visible(record.current_task) in out, record.current_task

    @rule()
    def background_work_settles(self) -> None:
        for worker in self.workers:
            run(self.loop, worker.await_background())

    @rule()
    def process_restarts(self) -> None:
        for worker in self.workers:
            run(self.loop, worker._tasks.aclose(timeout=10, cancel=True))
            if worker.store is not self.opener.shared:
                run(self.loop, worker.store.aclose())
        self.om = make_om(self.opener.open(), self.observer, self.buffering)
        self.workers = [self.om]
        if self.history:
            self._step()

    @precondition(lambda self: bool(self.history))
    @rule()
    def a_second_worker_runs_the_same_step(self) -> None:
        if len(self.workers) < 2:
            self.workers.append(make_om(self.opener.open(), self.observer, self.buffering))
        prefix = [self.system] if self.system is not None else []

        async def both() -> list[OMContext]:
            return list(await asyncio.gather(*(w.aprocess(THREAD, [*prefix, *self.history], resource_id=RESOURCE)
                                               for w in self.workers[:2])))

        contexts = run(self.loop, both())
        for context in contexts:
            self.context = context
            self.check()

    # -------------------------------------------------------------------------- invariants

    def check(self) -> None:
        assert self.context is not None
        run(self.loop, self._acheck(self.context))
        self.fresh.clear()

    async def _acheck(self, ctx: OMContext) -> None:
        store = self.om.store
        rows = await store.aget_messages(RESOURCE, THREAD)
        messages = [r for r in rows if r.kind == "message"]
        ids = [r.id for r in messages]
        expected = [str(m.id) for m in self.history]
        assert ids == expected, f"stored messages lost or duplicated:\n{ids}\n{expected}"

        # what the model reads
        shown = [m for m in ctx.messages]
        shown_ids = [str(m.id) for m in shown]
        assert len(shown_ids) == len(set(shown_ids)), f"a message shown twice: {shown_ids}"
        must = required_ids(self.history)
        missing = must - set(shown_ids)
        assert not missing, f"the model's input lacks {missing} (newest human / open tool round): {shown_ids}"
        model_input = ctx.to_messages()
        assert sum(1 for m in model_input if m.type == "system") <= 1 + len(ctx.instructions)
        if self.system is not None:
            assert ctx.instructions and text_of(ctx.instructions[-1]) == text_of(self.system)

        # within the hard ceiling, apart from what always stays (the question, the newest round, the
        # newest message)
        counter = self.om.counter
        exempt = must | ({str(self.history[-1].id)} if self.history else set())
        rest = [m for m in shown if str(m.id) not in exempt]
        ceiling = self.om.config.hard_ceiling_tokens()
        rest_tokens = sum(counter.count_message(m) for m in rest)
        assert rest_tokens <= ceiling, f"{rest_tokens} tokens besides the current turn, ceiling {ceiling}"

        # nothing both observed and shown raw (the newest human message may be pinned back)
        observed = {r.id for r in messages if r.observed}
        both = (set(shown_ids) & observed) - must
        assert not both, f"observed and shown raw: {both}"

        # status consistent with the context and the store
        status = ctx.status
        record = ctx.record
        assert status.thread_id == THREAD and status.record_id == record.id
        assert status.windows.active.observations.tokens == record.observation_tokens
        unobserved = [r for r in rows if not r.observed]
        # the window the status reports: every unobserved row (edit notes too, which the Observer reads)
        assert status.windows.active.messages.tokens == sum(r.tokens for r in unobserved), \
            (status.windows.active.messages, [(r.id, r.kind, r.tokens) for r in unobserved])
        buffered = status.windows.buffered.observations
        assert 0 <= buffered.projected_message_removal <= buffered.message_tokens
        unobserved_ids = {r.id for r in unobserved}
        assert set(shown_ids) - must <= unobserved_ids, "shown but neither unobserved nor the current turn"
        if status.observation_error is None:
            assert {r.id for r in unobserved if r.kind == "message"} <= set(shown_ids), \
                "an unobserved message is missing from a context nothing trimmed"

        # each new or edited message findable by the rare word its stored row holds: an edit of an
        # unobserved message replaces the row (the new word finds it, the retracted one no longer
        # does); an edit of an observed message keeps the row as it was and stores the correction as
        # an ``edit`` note for the Observer. Edit notes are not search-indexed (``search_text``), so
        # there the message is found by its original word; the correction reaches memory through
        # the Observer, not through search.
        if store.keyword_search_available:
            by_id = {r.id: r for r in messages}
            notes = " ".join(str(r.data) for r in rows if r.kind == "edit")
            for mid in sorted(self.fresh):
                row_text = str(by_id[mid].data)
                held = [w for w in self.all_words[mid] if w in row_text]
                assert held, f"{mid}: the stored row holds none of its words"
                if self.words[mid] not in row_text:
                    assert self.words[mid] in notes, f"{mid}: the edit of an observed message was not stored"
                hits = await store.asearch_messages(RESOURCE, held[-1], thread_id=THREAD, limit=5)
                assert mid in {h.message.id for h in hits}, f"{mid} not found by its word {held[-1]!r}"
                old = self.retracted.get(mid)
                if old is not None and self.words[mid] in row_text:  # replaced in place
                    stale = await store.asearch_messages(RESOURCE, old, thread_id=THREAD, limit=5)
                    assert mid not in {h.message.id for h in stale}, f"{mid} still found by retracted {old!r}"

        # the stored row holds exactly the text sent (every str: lone surrogates, two that form a pair)
        sent = {str(m.id): m for m in self.history}
        for row in messages:
            content = sent[row.id].content
            if isinstance(content, str) and row.id in self.words and self.words[row.id] in content \
                    and self.words[row.id] in str(row.data):
                assert row.data["data"]["content"] == content, f"{row.id}: stored text differs from the text sent"

        # each new or edited message found by meaning (its word's bucket), unless its text embeds as
        # NaN: such a vector is never stored and never hides the others (issue 44)
        index = stored_index(self.om)
        assert index is not None
        rows_by_id = {r.id: r for r in messages}
        for mid in sorted(self.fresh):
            row_text = str(rows_by_id[mid].data)
            if GLITCH in row_text:
                continue
            word = [w for w in self.all_words[mid] if w in row_text][-1]
            hits = await index.asearch(RESOURCE, word, k=20, thread_id=THREAD)
            assert mid in {h.message_id for h in hits}, f"{mid} not found by the meaning of {word!r}"

        # no other resource visible
        assert SECRET not in prompt_text(model_input)
        assert await store.asearch_messages(RESOURCE, SECRET, limit=5) == []
        recall = self.om.recall_tool(thread_id=THREAD, resource_id=RESOURCE)
        out = await recall.ainvoke({"mode": "search", "query": f"{SECRET} 7731"})
        assert SECRET not in str(out) and "7731" not in str(out)

    @invariant()
    def nothing_of_another_resource_was_written(self) -> None:
        threads = run(self.loop, self.om.store.alist_threads(INTRUDER))
        assert [t.thread_id for t in threads] == ["foreign"]


# ------------------------------------------------------------------------------------ the agent


def make_agent(om: ObservationalMemory, model: Any, saver: Any) -> Any:
    from langchain.agents import create_agent
    from langchain_core.tools import tool

    from langchain_om.integrations.middleware import ObservationalMemoryMiddleware

    @tool
    def lookup(n: int) -> str:
        """Look something up."""
        return AgentMachine.tool_output.get(n, f"nothing for {n}")

    return create_agent(model, [lookup], middleware=[ObservationalMemoryMiddleware(om)], checkpointer=saver,
                        system_prompt="You are a careful assistant. あなたは丁寧なアシスタントです。")


class AgentMachine(RuleBasedStateMachine):
    """``create_agent`` + middleware with a checkpointer: turns, tool rounds, edits, time travel."""

    kind = "memory"
    tool_output: ClassVar[dict[int, str]] = {}

    def __init__(self) -> None:
        super().__init__()
        from langgraph.checkpoint.memory import InMemorySaver

        from langchain_om.testing import ScriptedAgentModel

        self.loop = asyncio.new_event_loop()
        self.opener = StoreOpener(self.kind)
        self.observer = SwitchableObserver()
        self.saver = InMemorySaver()
        self.model = ScriptedAgentModel()
        self.om = make_om(self.opener.open(), self.observer, True)
        self.agent = make_agent(self.om, self.model, self.saver)
        self.config: dict[str, Any] = {"configurable": {"thread_id": THREAD, "resource_id": RESOURCE}}
        self.counter = 0
        self.abandoned: set[str] = set()
        self.branch_words: set[str] = set()
        self.turn_ends: list[Any] = []  # checkpoint configs at the end of each turn of the live branch
        AgentMachine.tool_output = {}

    @initialize()
    def start(self) -> None:
        run(self.loop, self.om.aprocess("foreign", [HumanMessage(f"{SECRET} my door code is 7731", id="foreign-1")],
                                        resource_id=INTRUDER))

    def teardown(self) -> None:
        try:
            run(self.loop, self.om.aclose(cancel=True, timeout=10))
            run(self.loop, self.opener.acleanup())
        finally:
            self.loop.close()

    def _word(self) -> str:
        self.counter += 1
        return rare_word(10_000 + self.counter)

    def _invoke(self, inputs: Any, config: dict[str, Any], expect: set[str]) -> dict[str, Any]:
        first_call = len(self.model.calls)
        state = run(self.loop, self.agent.ainvoke(inputs, config))
        prompts = self.model.calls[first_call:]
        assert prompts, "the agent's model was called"
        for prompt in prompts:
            text = prompt_text(prompt)
            for word in expect:
                assert word in text, f"the model's input lacks {word!r} of the current turn"
            stale = [w for w in self.abandoned if w in text]
            assert not stale, f"the model read the abandoned branch: {stale}"
            assert SECRET not in text
            conversation = [m for m in prompt if m.type != "system"]
            must = required_ids(conversation) | {str(conversation[-1].id)}
            rest = [m for m in conversation if str(m.id) not in must]
            tokens = sum(self.om.counter.count_message(m) for m in rest)
            assert tokens <= self.om.config.hard_ceiling_tokens(), f"{tokens} tokens besides the current turn"
            assert sum(1 for m in prompt if m.type == "system") == 1, "exactly one system message"
        snapshot = run(self.loop, self.agent.aget_state({"configurable": {"thread_id": THREAD}}))
        self.turn_ends.append(snapshot.config)
        self.branch_words = {w for w in self._all_words() if w in prompt_text(snapshot.values["messages"])}
        run(self.loop, self._astore_is_clean())
        return dict(state)

    def _all_words(self) -> list[str]:
        return [rare_word(10_000 + i) for i in range(1, self.counter + 1)]

    async def _astore_is_clean(self) -> None:
        for thread in await self.om.store.alist_threads(RESOURCE):
            rows = await self.om.store.aget_messages(RESOURCE, thread.thread_id)
            ids = [r.id for r in rows if r.kind == "message"]
            assert len(ids) == len(set(ids)), f"duplicated rows in {thread.thread_id}"
            seqs = [r.seq for r in rows]
            assert seqs == sorted(set(seqs))
        assert [t.thread_id for t in await self.om.store.alist_threads(INTRUDER)] == ["foreign"]

    @rule(text=hostile_text, image=images, with_tool=st.booleans(), tool_text=hostile_text)
    def user_turn(self, text: str, image: dict[str, Any] | None, with_tool: bool, tool_text: str) -> None:
        word = self._word()
        expect = {word}
        if with_tool:
            tool_word = self._word()
            AgentMachine.tool_output[self.counter] = f"{tool_word} {hostile(tool_text)}"
            self.model.tool_calls_on[len(self.model.calls)] = ("lookup", {"n": self.counter})
        self._invoke({"messages": [human(word, hostile(text), image)]}, self.config, expect)

    @precondition(lambda self: len(self.turn_ends) >= 2)
    @rule(data=st.data(), text=hostile_text)
    def time_travel_to_an_earlier_turn(self, data: st.DataObject, text: str) -> None:
        target = data.draw(st.sampled_from(self.turn_ends[:-1]))
        before = set(self.branch_words)
        past = run(self.loop, self.agent.aget_state(target))
        kept = {w for w in before if w in prompt_text(past.values["messages"])}
        self.abandoned |= before - kept
        self.turn_ends = self.turn_ends[: self.turn_ends.index(target) + 1]
        word = self._word()
        fork = {"configurable": {**target["configurable"], "resource_id": RESOURCE}}
        self._invoke({"messages": [HumanMessage(f"{word} {hostile(text)}")]}, fork, {word})

    @precondition(lambda self: bool(self.abandoned))
    @rule(data=st.data())
    def recall_search_after_time_travel(self, data: st.DataObject) -> None:
        word = data.draw(st.sampled_from(sorted(self.abandoned)))
        self.model.tool_calls_on[len(self.model.calls)] = ("recall", {"mode": "search", "query": word})
        self.abandoned.discard(word)  # the tool's reply may name it (from the other branch): from now on the
        # fork's own history holds it legitimately; the check is on the label
        question = self._word()  # the query travels in the tool call only, so a hit on it is the old message's
        state = self._invoke({"messages": [HumanMessage(f"{question} what did I say before?")]}, self.config,
                             {question})
        outputs = [text_of(m) for m in state["messages"] if m.type == "tool"]
        assert outputs, "recall ran"
        assert word not in current_sections(outputs[-1]), \
            f"recall search labels the abandoned branch's {word!r} as the current thread:\n{outputs[-1]}"

    @precondition(lambda self: len(self.turn_ends) >= 1)
    @rule(text=hostile_text)
    def user_edits_the_last_question(self, text: str) -> None:
        snapshot = run(self.loop, self.agent.aget_state({"configurable": {"thread_id": THREAD}}))
        humans = [m for m in snapshot.values["messages"] if m.type == "human"]
        if not humans:
            return
        word = self._word()
        edited = HumanMessage(f"{word} {hostile(text)}", id=humans[-1].id)
        self._invoke({"messages": [edited]}, self.config, {word})

    @rule(mode=st.sampled_from(["ok", "ok", "fail", "loop"]))
    def observer_changes(self, mode: str) -> None:
        self.observer.mode = mode

    @rule()
    def process_restarts(self) -> None:
        run(self.loop, self.om._tasks.aclose(timeout=10, cancel=True))
        if self.om.store is not self.opener.shared:
            run(self.loop, self.om.store.aclose())
        self.om = make_om(self.opener.open(), self.observer, True)
        self.agent = make_agent(self.om, self.model, self.saver)


def _machines() -> list[Any]:
    out = []
    for machine in (AprocessMachine, AgentMachine):
        for kind in store_kinds():
            cls = type(f"{machine.__name__}_{kind}", (machine,), {"kind": kind})
            cls.TestCase.settings = fuzz_settings()
            out.append(pytest.param(cls, id=f"{machine.__name__}-{kind}",
                                    marks=[pytest.mark.postgres] if kind == "postgres" else []))
    return out


@pytest.mark.parametrize("machine", _machines())
def test_whole_conversations_keep_every_invariant(machine: Any) -> None:
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(machine, settings=fuzz_settings())


async def test_a_second_worker_sees_an_edit_made_by_the_first() -> None:
    """Shrunk from a fuzzer failure: both workers got ``a2`` in one step and the first stored it, so
    the second never learnt it was stored; after the first rewrote it in place (an unobserved
    edit), the second kept showing the retracted text and counting its old tokens, although the
    caller passed it the edited message too."""
    from langchain_om.store import InMemoryStore

    store, observer = InMemoryStore(), SwitchableObserver()
    first, second = make_om(store, observer, True), make_om(store, observer, True)
    question = HumanMessage("first question", id="h1")
    answer = AIMessage("東京の天気は晴れ、明日は雨です。 a long answer", id="a2")
    await first.aprocess(THREAD, [question], resource_id=RESOURCE)
    await asyncio.gather(first.aprocess(THREAD, [question], resource_id=RESOURCE),
                         second.aprocess(THREAD, [question], resource_id=RESOURCE))
    await asyncio.gather(first.aprocess(THREAD, [question, answer], resource_id=RESOURCE),
                         second.aprocess(THREAD, [question, answer], resource_id=RESOURCE))
    edited = [question, AIMessage("short", id="a2")]
    await first.aprocess(THREAD, edited, resource_id=RESOURCE)
    follow_up = HumanMessage("next", id="h4")
    await first.aprocess(THREAD, [follow_up], resource_id=RESOURCE)
    await first.aprocess(THREAD, [*edited, follow_up], resource_id=RESOURCE)
    ctx = await second.aprocess(THREAD, [*edited, follow_up], resource_id=RESOURCE)
    assert [text_of(m) for m in ctx.messages] == ["first question", "short", "next"]
    rows = await store.aget_messages(RESOURCE, THREAD)
    assert ctx.status.windows.active.messages.tokens == sum(r.tokens for r in rows if not r.observed)


async def test_a_second_worker_does_not_repeat_an_edit_the_first_already_applied() -> None:
    """Shrunk from a fuzzer failure: the first worker rewrote ``h1`` in place and then observed it;
    the second, holding the old fingerprint, took the same edit for a new one and stored an ``edit``
    note of 6k tokens for the Observer (a correction that was already in the observed row), which
    the first worker's window did not count: two workers reported different windows."""
    from fuzz_support import HUGE
    from langchain_core.messages import ToolMessage

    from langchain_om.store import InMemoryStore

    store, observer = InMemoryStore(), SwitchableObserver()
    first, second = make_om(store, observer, False), make_om(store, observer, False)
    question = HumanMessage("qzavx", id="h1")
    call = AIMessage("", id="c2", tool_calls=[{"name": "lookup", "args": {}, "id": "k0", "type": "tool_call"}])
    result = ToolMessage("qzcvx", tool_call_id="k0", id="t3")
    await first.aprocess(THREAD, [question], resource_id=RESOURCE)
    await asyncio.gather(first.aprocess(THREAD, [question], resource_id=RESOURCE),
                         second.aprocess(THREAD, [question], resource_id=RESOURCE))
    await first.aprocess(THREAD, [question, call, result], resource_id=RESOURCE)
    edited = [HumanMessage("qzdvx " + HUGE, id="h1"), call, result]
    await first.aprocess(THREAD, edited, resource_id=RESOURCE)  # rewritten in place, then observed
    contexts = await asyncio.gather(first.aprocess(THREAD, edited, resource_id=RESOURCE),
                                    second.aprocess(THREAD, edited, resource_id=RESOURCE))
    rows = await store.aget_messages(RESOURCE, THREAD)
    assert [r.kind for r in rows] == ["message"] * 3, "no correction note for an edit already in the row"
    unobserved = sum(r.tokens for r in rows if not r.observed)
    assert [c.status.windows.active.messages.tokens for c in contexts] == [unobserved, unobserved]
