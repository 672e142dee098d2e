"""Working memory (issue 6, item 2): storage, context section, agent tool, WorkingMemoryExtractor."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from om_fakes import conversation
from om_recording import RecordingModel, observer_reply
from pydantic import BaseModel, Field

from langchain_om.engine import ObservationalMemory, OMContext
from langchain_om.extensions.extractors import Extractor
from langchain_om.extensions.working_memory import NAMESPACE, TOOL_NAME, WorkingMemoryExtractor
from langchain_om.foundation.config import OMConfigError
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore


class Person(BaseModel):
    name: str | None = Field(default=None, description="The user's name")
    city: str | None = None
    diet: str | None = None


def make_om(model: Any = None, *, store: Any = None, observation: dict[str, Any] | None = None,
            **kwargs: Any) -> ObservationalMemory:
    obs = {"message_tokens": 400, "buffer_tokens": False, **(observation or {})}
    return ObservationalMemory(store or InMemoryStore(), model=model or RecordingModel(fn=lambda _m: observer_reply()),
                               observation=obs, reflection={"observation_tokens": 10_000},
                               token_counter="estimator", **kwargs)


async def observe_once(om: ObservationalMemory, thread: str = "t1", turns: int = 14,
                       resource_id: str | None = None) -> list[OMContext]:
    contexts = []
    for history in conversation(turns):
        ctx = await om.aprocess(thread, history, resource_id=resource_id)
        contexts.append(ctx)
        if any(e.type == "data-om-observation-end" for e in ctx.events):
            return contexts
    raise AssertionError("no observation happened")


def text_of(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


# ------------------------------------------------------------------ options


@pytest.mark.parametrize(
    ("option", "observation", "field"),
    [
        ({"scope": "global"}, {}, "working_memory.scope"),
        ({"colour": "red"}, {}, "working_memory.colour"),
        ({"schema": dict}, {}, "working_memory.schema"),
        ({"schema": Person, "template": "# x"}, {}, "working_memory.template"),
        ({"template": "   "}, {}, "working_memory.template"),
        ({"agent_managed": "no"}, {}, "working_memory.agent_managed"),
        ({"enabled": False}, {"manage_working_memory": True}, "observation.manage_working_memory"),
        ("yes", {}, "working_memory"),
    ],
)
def test_bad_working_memory_options_name_the_field(option: Any, observation: dict[str, Any], field: str) -> None:
    with pytest.raises(OMConfigError) as info:
        make_om(working_memory=option, observation=observation)
    assert info.value.field == field


def test_defaults_depend_on_who_manages_it() -> None:
    assert make_om().working_memory is None
    plain = make_om(working_memory=True).working_memory
    assert plain is not None and plain.settings.agent_managed and not plain.settings.use_state_signals
    managed = make_om(observation={"manage_working_memory": True}).working_memory
    assert managed is not None, "manage_working_memory turns working memory on"
    assert not managed.settings.agent_managed and managed.settings.use_state_signals
    explicit = make_om(working_memory={"agent_managed": True, "use_state_signals": False},
                       observation={"manage_working_memory": True}).working_memory
    assert explicit is not None and explicit.settings.agent_managed and not explicit.settings.use_state_signals


def test_working_memory_extractor_requires_working_memory() -> None:
    with pytest.raises(OMConfigError) as info:
        make_om(observation={"extract": [WorkingMemoryExtractor()]})
    assert info.value.field == "observation.extract[0]"
    with pytest.raises(OMConfigError):
        Extractor("Working memory", "x")  # the slug is reserved for the built-in class


# ------------------------------------------------------------------ storage and context


async def test_resource_scope_is_shared_across_threads_thread_scope_is_not() -> None:
    store = InMemoryStore()
    om = make_om(store=store, working_memory={"scope": "resource"})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", "# About the user\n- Name: Aiko", resource_id="u1")
    assert await om.working_memory.aget("t2", resource_id="u1") == "# About the user\n- Name: Aiko"
    assert await om.working_memory.aget("t1", resource_id="u2") is None
    stored = await store.aget_value("u1", NAMESPACE, "resource")
    assert stored is not None and stored["value"].endswith("Name: Aiko") and stored["format"] == "markdown"

    om_thread = make_om(store=InMemoryStore(), working_memory={"scope": "thread"})
    assert om_thread.working_memory is not None
    await om_thread.working_memory.aset("t1", "thread one notes", resource_id="u1")
    assert await om_thread.working_memory.aget("t2", resource_id="u1") is None
    assert await om_thread.working_memory.aget("t1", resource_id="u1") == "thread one notes"


async def test_schema_documents_are_validated_and_merged() -> None:
    om = make_om(working_memory={"schema": Person})
    wm = om.working_memory
    assert wm is not None
    assert await wm.aset("t1", {"name": "Aiko", "city": "Kyoto"}) == {"name": "Aiko", "city": "Kyoto", "diet": None}
    assert await wm.aset("t1", {"city": "Osaka", "name": None}, merge=True) == {
        "name": "Aiko", "city": "Osaka", "diet": None}
    assert await wm.aset("t1", {"diet": "vegan"}) == {"name": None, "city": None, "diet": "vegan"}
    with pytest.raises(ValueError, match="city"):
        await wm.aset("t1", {"city": 12})
    with pytest.raises(ValueError, match="JSON"):
        await wm.aset("t1", "not json")


async def test_working_memory_is_rendered_in_the_context_from_the_first_step() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply())
    om = make_om(model, working_memory=True)
    assert om.working_memory is not None
    ctx = await om.aprocess("t1", [HumanMessage("hi", id="h0")])
    assert ctx.system_message is not None  # empty but agent-managed: the agent sees the template
    assert "<working-memory>" in str(ctx.system_message.content) and "About the user" in str(
        ctx.system_message.content)
    assert TOOL_NAME in str(ctx.system_message.content)
    await om.working_memory.aset("t1", "- Name: Aiko\n- Cat: Miso")
    ctx = await om.aprocess("t1", [HumanMessage("hi", id="h0"), HumanMessage("again", id="h1")])
    assert ctx.system_message is not None and "- Cat: Miso" in str(ctx.system_message.content)
    assert model.calls == [], "rendering working memory costs no model call"


async def test_observer_managed_memory_is_hidden_until_written_and_tool_free() -> None:
    om = make_om(observation={"manage_working_memory": True})
    ctx = await om.aprocess("t1", [HumanMessage("hi", id="h0")])
    assert ctx.system_message is None
    assert om.working_memory_tools() == []


# ------------------------------------------------------------------ agent tool


async def test_update_tool_writes_markdown_for_the_configured_thread() -> None:
    om = make_om(working_memory={"scope": "resource"})
    assert om.working_memory is not None
    [tool] = om.working_memory_tools()
    assert tool.name == TOOL_NAME
    config: Any = {"configurable": {"thread_id": "t1", "resource_id": "u7"}}
    result = await tool.ainvoke({"content": "- Name: Ren\n- Prefers short answers"}, config=config)
    assert "updated" in str(result).lower()
    assert await om.working_memory.aget("t5", resource_id="u7") == "- Name: Ren\n- Prefers short answers"
    bad = await tool.ainvoke({"content": "  "}, config=config)
    assert "non-empty" in str(bad)
    missing = await tool.ainvoke({"content": "x"}, config={"configurable": {}})
    assert "thread_id" in str(missing)


async def test_update_tool_takes_the_user_id_alias_like_the_other_integrations() -> None:
    """Without it the document landed under the thread's resource, not the user's."""
    om = make_om(working_memory={"scope": "resource"})
    assert om.working_memory is not None
    [tool] = om.working_memory_tools()
    config: Any = {"configurable": {"thread_id": "t1", "user_id": "alice"}}
    await tool.ainvoke({"content": "- Name: Alice"}, config=config)
    assert await om.working_memory.aget("t9", resource_id="alice") == "- Name: Alice"
    assert await om.working_memory.aget("t1") is None  # nor under the thread's private resource
    both: Any = {"configurable": {"thread_id": "t1", "resource_id": "u7", "user_id": "alice"}}
    await tool.ainvoke({"content": "- Name: Ren"}, config=both)
    assert await om.working_memory.aget("t1", resource_id="u7") == "- Name: Ren"
    assert await om.working_memory.aget("t1", resource_id="alice") == "- Name: Alice"


async def test_update_tool_with_schema_merges_fields() -> None:
    om = make_om(working_memory={"schema": Person, "scope": "thread"})
    assert om.working_memory is not None
    [tool] = om.working_memory_tools(thread_id="t1")
    assert set(tool.args) == {"name", "city", "diet"}
    await tool.ainvoke({"name": "Aiko", "city": "Kyoto"})
    await tool.ainvoke({"city": "Osaka"})
    assert await om.working_memory.aget("t1") == {"name": "Aiko", "city": "Osaka", "diet": None}


# ------------------------------------------------------------------ WorkingMemoryExtractor


async def test_markdown_working_memory_is_updated_by_the_observer() -> None:
    doc = "# About the user\n- Name: Aiko\n- Cat: Miso (allergic to chicken)"
    model = RecordingModel(fn=lambda _m: observer_reply(f"<working-memory>\n{doc}\n</working-memory>"))
    om = make_om(model, observation={"manage_working_memory": True})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", "# About the user\n- Name: Aiko")
    contexts = await observe_once(om)
    prompt = text_of(model.prompts()[0])
    assert "working-memory" in prompt and "State signals" in prompt
    assert "- Name: Aiko" in prompt, "the Observer sees the current document"
    assert await om.working_memory.aget("t1") == doc
    end = next(e for c in contexts for e in c.events if e.type == "data-om-observation-end")
    assert end.data.extracted_values["working-memory"] == doc  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert "working-memory" not in record.metadata.get("om", {}).get("extracted", {})
    # the next step shows it in the context
    ctx = await om.aprocess("t1", list(conversation(14))[-1])
    assert ctx.system_message is not None and "allergic to chicken" in str(ctx.system_message.content)


async def test_state_signals_skip_unchanged_documents() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<working-memory>- Name: Aiko</working-memory>"))
    store = InMemoryStore()
    om = make_om(model, store=store, observation={"manage_working_memory": True})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", "- Name: Aiko")
    before = await store.aget_value(implicit_resource("t1"), NAMESPACE, "resource")
    contexts = await observe_once(om)
    end = next(e for c in contexts for e in c.events if e.type == "data-om-observation-end")
    assert "working-memory" not in (end.data.extracted_values or {})  # type: ignore[attr-defined]
    after = await store.aget_value(implicit_resource("t1"), NAMESPACE, "resource")
    assert after == before, "unchanged: nothing rewritten"


def person_answer(changes: dict[str, Any]) -> Any:
    def answer(name: str, _m: list[BaseMessage]) -> dict[str, Any]:
        return dict(changes)
    return answer


async def test_schema_working_memory_with_state_signals_merges_the_delta() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply(), structured=person_answer({"city": "Osaka"}))
    om = make_om(model, observation={"manage_working_memory": True}, working_memory={"schema": Person})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", {"name": "Aiko", "city": "Kyoto", "diet": "vegan"})
    await observe_once(om)
    follow_up = model.structured_calls()
    assert len(follow_up) == 1
    tool_schema = follow_up[0]["kwargs"]["tools"][0]["function"]
    assert tool_schema["name"] == "PersonUpdate" and not tool_schema["parameters"].get("required")
    assert "Kyoto" in text_of(follow_up[0]["messages"]), "the current document is shown"
    assert await om.working_memory.aget("t1") == {"name": "Aiko", "city": "Osaka", "diet": "vegan"}
    record = await om.aget_record("t1")
    assert "working-memory" not in record.metadata.get("om", {}).get("extracted", {})


async def test_schema_working_memory_without_state_signals_replaces_the_document() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply(), structured=person_answer({"city": "Osaka"}))
    om = make_om(model, observation={"manage_working_memory": True},
                 working_memory={"schema": Person, "use_state_signals": False})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", {"name": "Aiko", "city": "Kyoto", "diet": "vegan"})
    await observe_once(om)
    assert model.structured_calls()[0]["kwargs"]["tools"][0]["function"]["name"] == "Person"
    assert "complete" in text_of(model.structured_calls()[0]["messages"])
    assert await om.working_memory.aget("t1") == {"name": None, "city": "Osaka", "diet": None}


async def test_working_memory_persists_in_every_store_backend(store: Any) -> None:
    om = make_om(store=store, working_memory={"schema": Person, "scope": "resource"})
    assert om.working_memory is not None
    await om.working_memory.aset("t1", {"name": "Aiko"}, resource_id="u1")
    reopened = make_om(store=store, working_memory={"schema": Person, "scope": "resource"})
    assert reopened.working_memory is not None
    assert await reopened.working_memory.aget("t2", resource_id="u1") == {"name": "Aiko", "city": None, "diet": None}
    assert await reopened.working_memory.aget("t2", resource_id="u2") is None
