"""docs/prompts.md shows the prompts as the code builds them (issue 28, item 7)."""

from __future__ import annotations

from pathlib import Path

from langchain_om.foundation.context import READING_RULES, READING_RULES_RESOURCE
from langchain_om.model_calls import reflector
from langchain_om.model_calls.observer import observer_system_prompt
from langchain_om.model_calls.reflector import MAX_COMPRESSION_LEVEL, reflector_system_prompt

DOC = Path(__file__).resolve().parents[1] / "docs" / "prompts.md"


def test_the_page_shows_every_prompt_verbatim() -> None:
    page = DOC.read_text(encoding="utf-8")
    shown = {
        "the reading rules": READING_RULES,
        "the resource-scope opening of the reading rules": READING_RULES_RESOURCE.split("\n\nHow to read", 1)[0],
        "the Observer system prompt": observer_system_prompt(want_thread_title=True),
        "the Reflector system prompt": reflector_system_prompt(instruction=None),
    }
    for name, text in shown.items():
        assert f"```text\n{text}\n```" in page, f"docs/prompts.md: update {name}"
    for level in range(MAX_COMPRESSION_LEVEL + 1):
        assert f"- level {level}: {reflector._LEVEL_GUIDANCE[level]}" in page, f"docs/prompts.md: level {level}"
    assert MAX_COMPRESSION_LEVEL + 1 >= 4, "the Reflector's ladder has at least four levels"
