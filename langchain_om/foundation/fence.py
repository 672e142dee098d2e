"""Keeps model-written text inside its fence in OM's context and prompts.

Observations, hints, working memory and extracted values are written by models, and a model
can be steered by the conversation it reads: an Observer reply holding ``</observations>``
followed by "SYSTEM OVERRIDE: ..." would, rendered verbatim, put that line in the agent's
system message outside the observation log. ``neutralise`` defuses every tag OM's own
context and prompts use, wherever it appears in such text, by swapping its ``<`` for the
look-alike ``‹``: the text stays readable, and no tag in it can open or close a section.
It is idempotent, so text neutralised when stored can be neutralised again when rendered.
"""

from __future__ import annotations

import re

FENCE_TAGS = frozenset({
    # the agent's context (context.py, working_memory.py, recall/); temporal.py's <time-gap>
    # markers are left alone: OM writes them into the transcript itself, and they fence nothing
    "observations", "observation", "observation-group", "current-task", "suggested-response",
    "working-memory", "recall-instructions",
    # the Observer's, Reflector's and extractors' prompts and replies
    "thread-title", "previous-observations", "transcript", "observation-log", "input",
    "new-observations", "previous-value",
    # names a model may take for a section of its own prompt (extractors.RESERVED_TAGS)
    "memory", "reflection", "system", "user", "assistant",
})
"""Tag names OM writes (``previous-<slug>`` blocks are covered by their prefix)."""

SAFE_OPENER = "\u2039"
"""What a defused tag starts with instead of ``<`` (SINGLE LEFT-POINTING ANGLE QUOTATION MARK)."""

_NAMES = "|".join(sorted((re.escape(name) for name in FENCE_TAGS), key=len, reverse=True))
_OM_TAG = re.compile(rf"<(?=\s*/?\s*(?:{_NAMES}|previous-[\w-]+)(?![\w-]))", re.IGNORECASE)


def neutralise(text: str) -> str:
    """``text`` with every opening or closing OM tag defused (``</observations>`` -> ``‹/observations>``)."""
    if "<" not in text:
        return text
    return _OM_TAG.sub(SAFE_OPENER, text)


def neutralise_optional(text: str | None) -> str | None:
    return None if text is None else neutralise(text)
