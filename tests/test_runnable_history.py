"""One system message through ``RunnableWithMessageHistory`` by default (issue 31, item 7).

End to end through ``RunnableWithObservationalMemory`` with a ``ChatPromptTemplate`` (system +
history placeholder + human) and a scripted model that records what it was given: one system
message, the template's text first and OM's context after it, in English and Japanese; the
opt-out and the plain ``RunnableWithMessageHistory`` give two; a runnable that hides its model
is wrapped unchanged, with a warning.
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.runnables.history import RunnableWithMessageHistory

from langchain_om import (
    InMemoryStore,
    ObservationalChatMessageHistory,
    ObservationalMemory,
    RunnableWithObservationalMemory,
    UnmergedSystemMessagesWarning,
)
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.store.base import implicit_resource
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

pytestmark = pytest.mark.filterwarnings("ignore:RunnableWithMessageHistory is deprecated")

TURNS = {
    "en": ("You are a concise travel assistant.", [
        "Hi! I'm planning a trip to Japan in April.", "I'm vegetarian, and my partner Sam can't do long hikes.",
        "We want one night in a ryokan in Kyoto.", "What should I keep in mind when booking?"]),
    "ja": ("あなたは簡潔な旅行アシスタントです。", [
        "こんにちは！4月に日本旅行を計画しています。",
        "私はベジタリアンで、パートナーのサムは長いハイキングが苦手です。",
        "京都の旅館に一泊したいです。", "予約のときに気をつけることは？"]),
}


def make_om() -> ObservationalMemory:
    return ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), observation={"message_tokens": 60},
                               token_counter="estimator")


def travel_prompt(system: str) -> ChatPromptTemplate:
    return ChatPromptTemplate.from_messages([
        ("system", system), MessagesPlaceholder("history"), ("human", "{question}")])


def systems(call: list[BaseMessage]) -> list[str]:
    return [str(m.content) for m in call if m.type == "system"]


async def run_turns(chain: Any, questions: list[str], om: ObservationalMemory, config: RunnableConfig) -> None:
    for question in questions:
        reply = await chain.ainvoke({"question": question}, config)
        assert isinstance(reply, AIMessage)
        await om.await_background()


@pytest.mark.parametrize("language", ["en", "ja"])
async def test_one_system_message_by_default_template_text_first(language: str) -> None:
    system, questions = TURNS[language]
    om, model = make_om(), ScriptedAgentModel()
    chain = RunnableWithObservationalMemory(travel_prompt(system) | model, om=om,
                                            input_messages_key="question", history_messages_key="history")
    await run_turns(chain, questions, om, {"configurable": {"session_id": f"trip-{language}"}})
    assert (await om.aget_record(f"trip-{language}")).groups, "OM observed, so its context is in play"
    for call in model.calls:
        assert [m.type for m in call].count("system") == 1 and str(call[0].content).startswith(system)
        assert call[-1].type == "human"
    with_memory = [str(call[0].content) for call in model.calls if "<observations>" in str(call[0].content)]
    assert with_memory and all(text.startswith(system + "\n\n") for text in with_memory)
    assert str(model.calls[-1][-1].content) == questions[-1]
    thread = f"trip-{language}"
    assert len(await om.store.aget_messages(implicit_resource(thread), thread)) == 2 * len(questions)
    await om.aclose()


async def test_plain_wiring_and_the_opt_out_send_two_system_messages() -> None:
    system, questions = TURNS["en"]
    om = make_om()
    plain_model, opted_out = ScriptedAgentModel(), ScriptedAgentModel()
    plain = RunnableWithMessageHistory(travel_prompt(system) | plain_model,
                                       lambda session_id: ObservationalChatMessageHistory(om, session_id),
                                       input_messages_key="question", history_messages_key="history")
    kept_apart = RunnableWithObservationalMemory(travel_prompt(system) | opted_out, om=om,
                                                 merge_system_messages=False,
                                                 input_messages_key="question", history_messages_key="history")
    await run_turns(plain, questions, om, {"configurable": {"session_id": "plain"}})
    await run_turns(kept_apart, questions, om, {"configurable": {"session_id": "apart"}})
    for model in (plain_model, opted_out):
        last = model.calls[-1]
        assert len(systems(last)) == 2 and last[0].content == system and last[1].id == OM_CONTEXT_MESSAGE_ID
    await om.aclose()


async def test_a_chat_model_wrapped_directly_and_a_bound_model_get_one_system_message() -> None:
    om, model = make_om(), ScriptedAgentModel()
    history_of: dict[str, ObservationalChatMessageHistory] = {}

    def get_history(session_id: str) -> ObservationalChatMessageHistory:
        return history_of.setdefault(session_id, ObservationalChatMessageHistory(om, session_id))

    chain = RunnableWithObservationalMemory(model.with_retry(), get_history)
    await history_of.setdefault("direct", ObservationalChatMessageHistory(om, "direct")).aadd_messages(
        [SystemMessage("Answer in one sentence.")])
    for question in TURNS["ja"][1]:
        await chain.ainvoke([HumanMessage(question)], {"configurable": {"session_id": "direct"}})
        await om.await_background()
    last = model.calls[-1]
    assert systems(last) and len(systems(last)) == 1 and systems(last)[0].startswith("Answer in one sentence.")
    assert "<observations>" in systems(last)[0] and last[-1].content == TURNS["ja"][1][-1]
    await om.aclose()


async def test_om_builds_the_history_for_the_user_named_in_the_config() -> None:
    om, model = make_om(), ScriptedAgentModel()
    om_scoped = ObservationalMemory(om.store, model=ScriptedObserverModel(), scope="resource",
                                    observation={"message_tokens": 60}, token_counter="estimator")
    chain = RunnableWithObservationalMemory(travel_prompt("Be brief.") | model, om=om_scoped,
                                            input_messages_key="question", history_messages_key="history")
    await run_turns(chain, TURNS["en"][1][:2], om_scoped,
                    {"configurable": {"session_id": "s-alice", "user_id": "alice"}})
    assert len(await om.store.aget_messages("alice", "s-alice")) == 4, "stored under the user the config named"
    assert await om.store.aget_messages("bob", "s-alice") == []
    await om_scoped.aclose()
    await om.aclose()


def test_an_opaque_runnable_is_wrapped_unchanged_with_a_warning_and_bad_arguments_name_the_field() -> None:
    om, model = make_om(), ScriptedAgentModel()
    prompt = travel_prompt("Be brief.")
    opaque = RunnableLambda(lambda value: model.invoke(prompt.invoke(value)), name="my_chain")
    with pytest.warns(UnmergedSystemMessagesWarning, match="my_chain.*one_system_message"):
        chain = RunnableWithObservationalMemory(opaque, om=om, input_messages_key="question",
                                                history_messages_key="history")
    chain.invoke({"question": "hi"}, {"configurable": {"session_id": "opaque"}})
    assert len(systems(model.calls[-1])) == 1, "no context yet: only the template's system message"
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnmergedSystemMessagesWarning)
        RunnableWithObservationalMemory(opaque, om=om, merge_system_messages=False)
    with pytest.raises(TypeError, match="get_session_history, om"):
        RunnableWithObservationalMemory(prompt | model)
    with pytest.raises(TypeError, match="om: expected an ObservationalMemory"):
        RunnableWithObservationalMemory(prompt | model, om="memory")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="merge_system_messages"):
        RunnableWithObservationalMemory(prompt | model, om=om, merge_system_messages="no")  # type: ignore[arg-type]
    om.close()


@pytest.mark.filterwarnings("error")
async def test_thread_id_names_the_session_and_no_deprecation_warning_is_printed() -> None:
    """Issue 47, item 7: ``thread_id`` as in every other entry point (``session_id`` still works), and no
    deprecation warning from upstream on each construction or call: the docstring says it once."""
    om, model = make_om(), ScriptedAgentModel()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        chain = RunnableWithObservationalMemory(travel_prompt("Be brief.") | model, om=om,
                                                input_messages_key="question", history_messages_key="history")
        await run_turns(chain, TURNS["ja"][1][:2], om, {"configurable": {"thread_id": "スレッド", "user_id": "u1"}})
        await run_turns(chain, TURNS["en"][1][:1], om, {"configurable": {"session_id": "スレッド", "user_id": "u1"}})
    assert [str(w.message) for w in seen] == []
    stored = await om.store.aget_messages("u1", "スレッド")
    assert [m.data["data"]["content"] for m in stored if m.data["type"] == "human"] == [*TURNS["ja"][1][:2],
                                                                                      TURNS["en"][1][0]]
    with pytest.raises(ValueError, match="thread_id 'a' and session_id 'b'"):
        await chain.ainvoke({"question": "x"}, {"configurable": {"thread_id": "a", "session_id": "b"}})
    await om.aclose()
