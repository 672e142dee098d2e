"""observation.instruction / reflection.instruction (issue 6, item 6), checked in what the models receive."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import BaseMessage
from om_fakes import conversation
from om_recording import RecordingModel, observer_reply

from langchain_om.engine import ObservationalMemory
from langchain_om.store.memory import InMemoryStore

OBS_RULE = "Prioritise dietary restrictions of the user's pets; skip chit-chat."
REF_RULE = "When consolidating, keep every date and dosage exactly."


def reply(messages: list[BaseMessage]) -> str:
    text = "\n".join(str(m.content) for m in messages)
    return observer_reply() if "Turn " in text else "<observations>\n* 🔴 Miso: no chicken.\n</observations>"


def make_om(model: Any, **options: Any) -> ObservationalMemory:
    return ObservationalMemory(InMemoryStore(), model=model, token_counter="estimator",
                               observation={"message_tokens": 400, "buffer_tokens": False,
                                            **options.get("observation", {})},
                               reflection={"observation_tokens": 10_000, **options.get("reflection", {})})


async def observe_and_reflect(om: ObservationalMemory) -> None:
    for history in conversation(14):
        ctx = await om.aprocess("t1", history)
        if any(e.type == "data-om-observation-end" for e in ctx.events):
            break
    record = await om.areflect("t1")
    assert record.generation_count == 1


def split(model: RecordingModel) -> tuple[list[BaseMessage], list[BaseMessage]]:
    observer = next(c["messages"] for c in model.calls if "Turn " in "".join(str(m.content) for m in c["messages"]))
    reflector = model.calls[-1]["messages"]
    return observer, reflector


async def test_instructions_are_appended_to_their_own_prompt_only() -> None:
    model = RecordingModel(fn=reply)
    om = make_om(model, observation={"instruction": OBS_RULE}, reflection={"instruction": REF_RULE})
    await observe_and_reflect(om)
    observer, reflector = split(model)
    observer_system = str(observer[0].content)
    reflector_system = str(reflector[0].content)
    assert observer[0].type == "system" and reflector[0].type == "system"
    assert OBS_RULE in observer_system and REF_RULE not in observer_system
    assert REF_RULE in reflector_system and OBS_RULE not in reflector_system


async def test_without_instructions_the_prompts_are_the_defaults() -> None:
    plain_model, custom_model = RecordingModel(fn=reply), RecordingModel(fn=reply)
    await observe_and_reflect(make_om(plain_model))
    await observe_and_reflect(make_om(custom_model, observation={"instruction": OBS_RULE},
                                      reflection={"instruction": REF_RULE}))
    plain_obs, plain_ref = split(plain_model)
    custom_obs, custom_ref = split(custom_model)
    assert OBS_RULE not in str(plain_obs[0].content) and REF_RULE not in str(plain_ref[0].content)
    assert str(custom_obs[0].content).startswith(str(plain_obs[0].content)[:200])
    assert len(str(custom_obs[0].content)) > len(str(plain_obs[0].content))
    assert len(str(custom_ref[0].content)) > len(str(plain_ref[0].content))
    # appended: the built-in guidance comes first, the user's instruction after all of it
    assert str(custom_obs[0].content).index(OBS_RULE) >= len(str(plain_obs[0].content)) * 0.9
    assert str(custom_ref[0].content).index(REF_RULE) >= len(str(plain_ref[0].content)) * 0.9
