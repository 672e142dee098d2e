"""Extractors (issue 6, item 1): slugs, inline and structured values, persistence, failures, built-ins."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.messages import BaseMessage
from om_fakes import conversation
from om_recording import RecordingModel, observer_reply
from pydantic import BaseModel

from langchain_om.engine import ObservationalMemory, OMContext
from langchain_om.extensions.extractors import Extractor, slugify
from langchain_om.foundation.config import OMConfigError
from langchain_om.foundation.events import OMEvent
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore


class Profile(BaseModel):
    name: str | None = None
    city: str | None = None


def make_om(model: Any, *, store: Any = None, observation: dict[str, Any] | None = None,
            reflection: dict[str, Any] | None = None, **kwargs: Any) -> ObservationalMemory:
    obs = {"message_tokens": 400, "buffer_tokens": False, **(observation or {})}
    ref = {"observation_tokens": 10_000, **(reflection or {})}
    return ObservationalMemory(store or InMemoryStore(), model=model, observation=obs, reflection=ref,
                               token_counter="estimator", **kwargs)


async def observe_once(om: ObservationalMemory, thread: str = "t1", turns: int = 14) -> list[OMContext]:
    """Feed a growing conversation until one observation has ended; returns the step contexts."""
    contexts = []
    for history in conversation(turns):
        ctx = await om.aprocess(thread, history)
        contexts.append(ctx)
        if any(e.type == "data-om-observation-end" for e in ctx.events):
            return contexts
    raise AssertionError("no observation happened")


def end_event(contexts: list[OMContext], kind: str = "data-om-observation-end") -> OMEvent:
    return next(e for c in contexts for e in c.events if e.type == kind)


def observer_text(messages: list[BaseMessage]) -> str:
    return "\n".join(str(m.content) for m in messages)


# ------------------------------------------------------------------ construction rules


def test_slug_is_derived_from_name_and_read_only() -> None:
    assert Extractor("User profile", "x").slug == "user-profile"
    assert Extractor("  Open  TODOs (v2)! ", "x").slug == "open-todos-v2"
    assert slugify("Déjà vu") == "d-j-vu"
    extractor = Extractor("Mood", "x")
    with pytest.raises(AttributeError):
        extractor.slug = "other"  # type: ignore[misc]


@pytest.mark.parametrize("name", ["Current task", "suggested response", "Thread-Title", "observations",
                                  "Observation group", "reflection", "Memory", "SYSTEM"])
def test_builtin_and_reserved_slugs_are_refused(name: str) -> None:
    with pytest.raises(OMConfigError) as info:
        Extractor(name, "anything")
    assert info.value.field == "extractor.name"
    assert slugify(name) in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": ""}, "extractor.name"),
        ({"name": "!!!"}, "extractor.name"),
        ({"instructions": ""}, "extractor[mood].instructions"),
        ({"schema": 42}, "extractor[mood].schema"),
        ({"metadata_key_path": "a..b"}, "extractor[mood].metadata_key_path"),
        ({"metadata_key_path": True}, "extractor[mood].metadata_key_path"),
        ({"include_previous_extraction": "yes"}, "extractor[mood].include_previous_extraction"),
        ({"on_extracted": "not callable"}, "extractor[mood].on_extracted"),
    ],
)
def test_bad_extractor_options_name_the_field(kwargs: dict[str, Any], field: str) -> None:
    options: dict[str, Any] = {"name": "Mood", "instructions": "the user's mood", **kwargs}
    with pytest.raises(OMConfigError) as info:
        Extractor(**options)
    assert info.value.field == field


def test_duplicate_slugs_across_observation_and_reflection_are_refused() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply())
    with pytest.raises(OMConfigError) as info:
        make_om(model, observation={"extract": [Extractor("Mood", "a")]},
                reflection={"extract": [Extractor("mood", "b")]})
    assert info.value.field == "reflection.extract[0]" and "mood" in str(info.value)
    with pytest.raises(OMConfigError) as info:
        make_om(model, observation={"extract": [Extractor("Mood", "a"), Extractor("MOOD", "b")]})
    assert info.value.field == "observation.extract[1]"
    with pytest.raises(OMConfigError) as info:
        make_om(model, observation={"extract": ["mood"]})
    assert info.value.field == "observation.extract[0]"


# ------------------------------------------------------------------ inline extractors


async def test_inline_extractor_is_requested_parsed_persisted_and_reported() -> None:
    replies = iter(["calm", "excited"])
    model = RecordingModel(fn=lambda _m: observer_reply(f"<user-mood>{next(replies)}</user-mood>"))
    mood = Extractor("User mood", "One word for the user's current mood.")
    om = make_om(model, observation={"extract": [mood]})
    contexts = await observe_once(om)
    prompt = observer_text(model.prompts()[0])
    assert "user-mood" in prompt and "One word for the user's current mood." in prompt
    end = end_event(contexts)
    assert end.data.extracted_values["user-mood"] == "calm"  # type: ignore[attr-defined]
    assert end.to_part()["data"]["extractedValues"]["user-mood"] == "calm"
    record = await om.aget_record("t1")
    assert record.metadata["om"]["extracted"]["user-mood"] == "calm"
    # the next observation shows the previous value and replaces it
    await observe_once(om, turns=30)
    assert "calm" in observer_text(model.prompts()[-1])
    record = await om.aget_record("t1")
    assert record.metadata["om"]["extracted"]["user-mood"] == "excited"


async def test_include_previous_extraction_false_hides_the_old_value() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<scratch-note>zebra-7431</scratch-note>"))
    om = make_om(model, observation={"extract": [Extractor("Scratch note", "a note",
                                                             include_previous_extraction=False)]})
    await observe_once(om)
    await observe_once(om, turns=30)
    assert len(model.prompts()) >= 2
    assert "zebra-7431" not in observer_text(model.prompts()[-1])
    assert (await om.aget_record("t1")).metadata["om"]["extracted"]["scratch-note"] == "zebra-7431"


async def test_instructions_function_receives_the_runtime_context() -> None:
    seen: list[dict[str, Any]] = []

    def instructions(ctx: dict[str, Any]) -> str:
        seen.append(dict(ctx))
        return f"Topic for thread {ctx['thread_id']} of {ctx['resource_id']} during {ctx['source']}."

    model = RecordingModel(fn=lambda _m: observer_reply("<topic>cats</topic>"))
    om = make_om(model, observation={"extract": [Extractor("Topic", instructions)]})
    for history in conversation(14):
        ctx = await om.aprocess("t9", history, resource_id="user-3")
        if any(e.type == "data-om-observation-end" for e in ctx.events):
            break
    assert seen and seen[0]["thread_id"] == "t9" and seen[0]["resource_id"] == "user-3"
    assert seen[0]["source"] == "observation" and seen[0]["memory"] is om
    assert "Topic for thread t9 of user-3 during observation." in observer_text(model.prompts()[0])


async def test_missing_inline_tag_keeps_the_previous_value_without_failure() -> None:
    calls = {"n": 0}

    def reply(_m: list[BaseMessage]) -> str:
        calls["n"] += 1
        return observer_reply("<topic>cats</topic>" if calls["n"] == 1 else "")

    model = RecordingModel(fn=reply)
    om = make_om(model, observation={"extract": [Extractor("Topic", "the topic")]})
    await observe_once(om)
    contexts = await observe_once(om, turns=30)
    end = end_event(contexts)
    assert "topic" not in (end.data.extracted_values or {})  # type: ignore[attr-defined]
    assert not end.data.extraction_failures  # type: ignore[attr-defined]
    assert (await om.aget_record("t1")).metadata["om"]["extracted"]["topic"] == "cats"


# ------------------------------------------------------------------ structured extractors


def structured_answer(name: str, _messages: list[BaseMessage]) -> dict[str, Any]:
    return {"name": "Aiko", "city": "Kyoto"} if name == "Profile" else {}


async def test_schema_extractor_runs_a_structured_follow_up_call() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply(), structured=structured_answer)
    profile = Extractor("User profile", "Stable profile facts.", schema=Profile)
    om = make_om(model, observation={"extract": [profile]})
    contexts = await observe_once(om)
    kinds = ["structured" if c["kwargs"].get("tools") else "main" for c in model.calls]
    assert kinds == ["main", "structured"]
    follow_up = model.structured_calls()[0]
    assert follow_up["kwargs"]["tools"][0]["function"]["name"] == "Profile"
    text = observer_text(follow_up["messages"])
    assert "Stable profile facts." in text and "Turn 0" in text  # it sees what the Observer saw
    end = end_event(contexts)
    assert end.data.extracted_values["user-profile"] == {"name": "Aiko", "city": "Kyoto"}  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert record.metadata["om"]["extracted"]["user-profile"] == {"name": "Aiko", "city": "Kyoto"}
    # the schema extractor is not requested inline from the Observer
    assert "user-profile" not in observer_text(model.prompts()[0])


async def test_schema_function_and_custom_key_path_and_unpersisted_values() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<mood>calm</mood>"), structured=structured_answer)
    chosen: list[str] = []

    def schema_for(ctx: dict[str, Any]) -> type[BaseModel]:
        chosen.append(ctx["source"])
        return Profile

    om = make_om(model, observation={"extract": [
        Extractor("Profile data", "facts", schema=schema_for, metadata_key_path="profile.current"),
        Extractor("Mood", "mood", metadata_key_path=False),
    ]})
    contexts = await observe_once(om)
    assert chosen == ["observation"]
    end = end_event(contexts)
    values = end.data.extracted_values  # type: ignore[attr-defined]
    assert values["profile-data"]["city"] == "Kyoto" and values["mood"] == "calm"
    om_meta = (await om.aget_record("t1")).metadata["om"]
    assert om_meta["profile"]["current"] == {"name": "Aiko", "city": "Kyoto"}
    assert "profile-data" not in om_meta.get("extracted", {})
    assert "mood" not in om_meta.get("extracted", {})


async def test_on_extracted_replaces_values_and_failures_are_isolated() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<mood>calm</mood><budget>300</budget><city>Kyoto</city>"))

    async def shout(ctx: dict[str, Any]) -> str:
        assert ctx["slug"] == "mood" and ctx["value"] == "calm"
        return str(ctx["value"]).upper()

    def explode(ctx: dict[str, Any]) -> None:
        raise ValueError("budget hook broke")

    om = make_om(model, observation={"extract": [
        Extractor("Mood", "mood", on_extracted=shout),
        Extractor("Budget", "budget", on_extracted=explode),
        Extractor("City", "city", on_extracted=lambda ctx: None),  # None keeps the value
    ]})
    contexts = await observe_once(om)
    end = end_event(contexts)
    values = end.data.extracted_values  # type: ignore[attr-defined]
    assert values["mood"] == "CALM" and values["city"] == "Kyoto" and "budget" not in values
    failures = end.data.extraction_failures  # type: ignore[attr-defined]
    assert [f.slug for f in failures] == ["budget"] and "budget hook broke" in failures[0].error
    record = await om.aget_record("t1")
    assert record.groups, "a failing extractor never fails the observation"
    assert record.metadata["om"]["extracted"]["mood"] == "CALM"
    assert "budget" not in record.metadata["om"]["extracted"]


async def test_structured_follow_up_gets_the_role_settings_and_provider_options() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply(), structured=structured_answer)
    profile = Extractor("User profile", "Stable profile facts.", schema=Profile)
    om = make_om(model, observation={"extract": [profile], "provider_options": {"max_tokens": 999},
                                     "model_settings": {"temperature": 0.6}})
    await observe_once(om)
    follow_up = model.structured_calls()[0]
    assert follow_up["temperature"] == 0.6
    assert follow_up["max_tokens"] == 999  # a provider option the model declares as a field
    assert model.temperature is None, "the user's model instance is not mutated"


async def test_failing_structured_call_is_reported_and_others_are_kept() -> None:
    def broken(name: str, _m: list[BaseMessage]) -> dict[str, Any]:
        raise RuntimeError("structured output unavailable")

    model = RecordingModel(fn=lambda _m: observer_reply("<mood>calm</mood>"), structured=broken)
    om = make_om(model, observation={"extract": [Extractor("Profile", "facts", schema=Profile),
                                                 Extractor("Mood", "mood")]})
    contexts = await observe_once(om)
    end = end_event(contexts)
    assert [f.slug for f in end.data.extraction_failures] == ["profile"]  # type: ignore[attr-defined]
    assert end.data.extracted_values["mood"] == "calm"  # type: ignore[attr-defined]


async def test_reflection_extractors_run_during_reflection_only() -> None:
    def reply(messages: list[BaseMessage]) -> str:
        if "Questions still open." in observer_text(messages):  # only the Reflector is asked for it
            return ("<observations>\n* 🔴 Miso: no chicken.\n</observations>\n"
                    "<open-questions>Which brand?</open-questions>")
        return observer_reply("<open-questions>ignored</open-questions>")

    model = RecordingModel(fn=reply)
    om = make_om(model, reflection={"extract": [Extractor("Open questions", "Questions still open.")]})
    contexts = await observe_once(om)
    assert "open-questions" not in (end_event(contexts).data.extracted_values or {})  # type: ignore[attr-defined]
    assert "Questions still open." not in observer_text(model.prompts()[0])
    record = await om.areflect("t1")
    assert record.generation_count == 1
    reflector_prompt = observer_text(model.prompts()[-1])
    assert "Questions still open." in reflector_prompt
    assert record.metadata["om"]["extracted"]["open-questions"] == "Which brand?"


# ------------------------------------------------------------------ built-ins


async def test_builtin_values_go_through_the_pipeline_and_are_mirrored() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply(task="Choose a chicken-free food.", title="Cat food"))
    om = make_om(model)
    contexts = await observe_once(om)
    end = end_event(contexts)
    values = end.data.extracted_values  # type: ignore[attr-defined]
    assert values["current-task"] == "Choose a chicken-free food."
    assert values["suggested-response"] == "Ask about wet or dry food."
    assert "thread-title" not in values  # observation.thread_title is off
    record = await om.aget_record("t1")
    assert record.metadata["om"]["extracted"]["current-task"] == "Choose a chicken-free food."
    assert record.metadata["current_task"] == "Choose a chicken-free food."
    assert record.current_task == "Choose a chicken-free food."
    thread = await om.store.aget_thread(implicit_resource("t1"), "t1")
    assert thread is not None and thread.title is None
    assert not any(e.type == "data-om-thread-update" for c in contexts for e in c.events)


async def test_thread_title_updates_the_thread_only_when_enabled() -> None:
    titles = iter(["Cat food", "Cat food", "Moving house"])
    model = RecordingModel(fn=lambda _m: observer_reply(title=next(titles)))
    om = make_om(model, observation={"thread_title": True})
    contexts = await observe_once(om)
    update = end_event(contexts, "data-om-thread-update")
    assert update.data.new_title == "Cat food" and update.data.old_title is None  # type: ignore[attr-defined]
    observed = end_event(contexts, "data-om-observation-end")
    assert update.data.cycle_id == observed.data.cycle_id, "the title update belongs to its observation cycle"  # type: ignore[attr-defined]
    assert update.to_part()["data"]["newTitle"] == "Cat food"
    assert "thread title" in observer_text(model.prompts()[0]).lower() or "thread-title" in observer_text(
        model.prompts()[0])
    thread = await om.store.aget_thread(implicit_resource("t1"), "t1")
    assert thread is not None and thread.title == "Cat food"
    record = await om.aget_record("t1")
    assert record.metadata["om"]["extracted"]["thread-title"] == "Cat food"
    # same title again: no update event; the Observer is shown the current title
    contexts = await observe_once(om, turns=30)
    assert "Cat food" in observer_text(model.prompts()[-1])
    assert not any(e.type == "data-om-thread-update" for c in contexts for e in c.events)
    contexts = await observe_once(om, turns=46)
    update = end_event(contexts, "data-om-thread-update")
    assert update.data.old_title == "Cat food" and update.data.new_title == "Moving house"  # type: ignore[attr-defined]


# ------------------------------------------------------------------ buffering


async def test_buffered_values_are_persisted_when_buffered() -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<mood>calm</mood>"))
    om = make_om(model, observation={"message_tokens": 2000, "buffer_tokens": 300,
                                     "extract": [Extractor("Mood", "mood")]})
    buffered_end = None
    for history in conversation(10):
        await om.aprocess("t1", history)
        await om.await_background()
        record = await om.aget_record("t1")
        if record.buffered_chunks:
            buffered_end = record
            break
    assert buffered_end is not None, "a chunk was buffered"
    assert not buffered_end.groups, "nothing activated yet"
    assert buffered_end.metadata["om"]["extracted"]["mood"] == "calm"
    # the buffering-end event arrives with the next step and carries the value
    ctx = await om.aprocess("t1", list(conversation(10))[-1])
    ends = [e for e in ctx.events if e.type == "data-om-buffering-end"]
    assert ends and ends[0].data.extracted_values["mood"] == "calm"  # type: ignore[attr-defined]
