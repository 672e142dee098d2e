"""Multimodal input end to end: placeholders in the Observer transcript, attachment forwarding policy."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from recall_helpers import T0, stamped

from langchain_om.engine import ObservationalMemory
from langchain_om.model_calls.observer import OBSERVER_PROMPT_MARKER
from langchain_om.store import InMemoryStore
from langchain_om.testing import ScriptedChatModel

OBSERVATION = """<observations>
Date: 2026-12-01 (Tuesday)
* 🔴 (09:00) User shared a photo of their cat and a PDF report.
</observations>
<current-task>Discuss the cat photo.</current-task>"""

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="


class NamedModel(ScriptedChatModel):
    """A scripted observer that reports a real provider/model name (for the ``"auto"`` table)."""

    provider: str = "scripted"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = self.provider
        params["ls_model_name"] = self.model_name
        return params


def conversation() -> list[BaseMessage]:
    photo = {"type": "image", "base64": PIXEL, "mime_type": "image/png", "filename": "cat.png"}
    pdf = {"type": "file", "base64": "JVBERi0xLjQK", "mime_type": "application/pdf", "filename": "report.pdf"}
    shot = {"type": "image", "url": "https://example.com/shots/screen.JPG", "mime_type": "IMAGE/JPEG"}
    call = AIMessage("", tool_calls=[{"name": "screenshot", "args": {}, "id": "c1"}], id="ai-call")
    return [
        stamped(HumanMessage([{"type": "text", "text": "Look at my cat"}, photo, pdf], id="h1"), T0),
        stamped(AIMessage("Cute cat! Let me take a screenshot.", id="a1"), T0 + timedelta(seconds=5)),
        stamped(call, T0 + timedelta(seconds=6)),
        stamped(ToolMessage([{"type": "text", "text": "screenshot taken"}, shot], tool_call_id="c1",
                            name="screenshot", id="tool1"), T0 + timedelta(seconds=7)),
        stamped(AIMessage("Here it is.", id="a2"), T0 + timedelta(seconds=8)),
        stamped(HumanMessage("thanks", id="h2"), T0 + timedelta(seconds=30)),
    ]


async def observe_with(policy: Any, model: ScriptedChatModel | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Run one agent step that triggers a synchronous observation; return transcript + forwarded blocks."""
    observer = model or ScriptedChatModel(responses=[OBSERVATION])
    om = ObservationalMemory(InMemoryStore(), model=observer, observation={
        "message_tokens": 50, "buffer_tokens": False, "observe_attachments": policy})
    ctx = await om.aprocess("t", conversation(), now=T0 + timedelta(seconds=31))
    assert "data-om-observation-end" in [e.type for e in ctx.events]
    assert [m.id for m in ctx.messages] == ["h2"]
    calls = [c for c in observer.calls if OBSERVER_PROMPT_MARKER in str(c[0].content)]
    assert len(calls) == 1
    content = calls[0][-1].content
    if isinstance(content, str):
        return content, []
    text = next(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")
    blocks = [b for b in content if isinstance(b, dict) and b.get("type") != "text"]
    return text, blocks


def names(blocks: list[dict[str, Any]]) -> list[str]:
    return [str(b.get("filename") or b.get("url")) for b in blocks]


async def test_placeholders_in_transcript() -> None:
    text, _ = await observe_with(True)
    assert "[Image #1: cat.png]" in text
    assert "[File #1: report.pdf (application/pdf)]" in text
    assert "[Image #2: screen.JPG]" in text  # the tool result's attachment is numbered too
    assert text.index("[Image #1: cat.png]") < text.index("[Image #2: screen.JPG]")


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (True, ["cat.png", "https://example.com/shots/screen.JPG"]),
        (False, []),
        (["image/*"], ["cat.png", "https://example.com/shots/screen.JPG"]),
        (["IMAGE/PNG"], ["cat.png"]),
        (["image/jpeg"], ["https://example.com/shots/screen.JPG"]),
        (["application/pdf"], []),
        (["*"], ["cat.png", "https://example.com/shots/screen.JPG"]),
    ],
)
async def test_forwarding_policy(policy: Any, expected: list[str]) -> None:
    text, blocks = await observe_with(policy)
    assert names(blocks) == expected
    assert "report.pdf" not in names(blocks)  # non-image files are placeholders only
    assert "[Image #1: cat.png]" in text  # placeholders stay whatever the policy


@pytest.mark.parametrize(
    ("provider", "model_name", "forwarded"),
    [("openai", "gpt-4o-mini", True), ("openai", "gpt-3.5-turbo", False), ("scripted", "unknown-model", True)],
)
async def test_auto_uses_the_capability_table(provider: str, model_name: str, forwarded: bool) -> None:
    model = NamedModel(responses=[OBSERVATION], provider=provider, model_name=model_name)
    text, blocks = await observe_with("auto", model)
    assert bool(blocks) is forwarded
    assert "[Image #1: cat.png]" in text


async def test_resource_scope_batch_carries_placeholders_and_images() -> None:
    observer = ScriptedChatModel(responses=[OBSERVATION])
    om = ObservationalMemory(InMemoryStore(), model=observer, scope="resource",
                             observation={"message_tokens": 100_000, "observe_attachments": ["image/png"]})
    await om.aon_turn_end("one", conversation()[:2], resource_id="u1")
    await om.aon_turn_end("two", [stamped(HumanMessage("no pictures here", id="x1"), T0)], resource_id="u1")
    await om.aobserve("one", resource_id="u1")
    (call,) = [c for c in observer.calls if OBSERVER_PROMPT_MARKER in str(c[0].content)]
    content = call[-1].content
    assert isinstance(content, list)
    text = next(b["text"] for b in content if isinstance(b, dict) and b.get("type") == "text")
    assert "[Image #1: cat.png]" in text and "no pictures here" in text
    assert names([b for b in content if isinstance(b, dict) and b.get("type") != "text"]) == ["cat.png"]


async def test_recall_shows_image_and_file_parts() -> None:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedChatModel(responses=[OBSERVATION]), retrieval=True,
                             observation={"message_tokens": 100_000, "buffer_tokens": False})
    await om.aprocess("t", conversation(), now=T0 + timedelta(seconds=31))
    tool = om.recall_tool(thread_id="t")
    images = await tool.ainvoke({"part_type": "image"})
    assert isinstance(images, dict)
    assert "[image: cat.png]" in images["messages"] and "[image: screen.JPG]" in images["messages"]
    files = await tool.ainvoke({"part_type": "file"})
    assert isinstance(files, dict) and "[file: report.pdf (application/pdf)]" in files["messages"]
