"""What the model may pass to ``recall``: the argument schema, its limits, and the checks of free text.

Every value the model writes is bounded and checked here before it reaches the store, and a
value echoed back in an error is made safe to show (``show_value``). The field descriptions
are what the model reads about each argument.
"""

from __future__ import annotations

import unicodedata
from datetime import datetime, timezone
from typing import Literal

from langchain_core.tools import ToolException
from pydantic import BaseModel, ConfigDict, Field, model_validator

DEFAULT_LIMIT = 20
MAX_LIMIT = 100
MAX_PAGE = 100_000
MAX_SEARCH_RESULTS = 50
DEFAULT_TOKEN_BUDGET = 2_000
LOW_DETAIL_CHARS = 200
MAX_ID_CHARS = 512
MAX_QUERY_CHARS = 2_000

PartType = Literal["text", "tool-call", "tool-result", "reasoning", "image", "file"]


class RecallInput(BaseModel):
    """Arguments of the ``recall`` tool (every parameter of the reference page, snake_case)."""

    model_config = ConfigDict(extra="forbid")

    mode: Literal["messages", "threads", "search"] = Field(
        "messages",
        description='"messages" pages through message history (the default without a query); "threads" lists '
        'the user\'s conversations; "search" finds messages by the words of query (and by meaning when '
        "embeddings are configured); the default when a query is given.",
    )
    query: str | None = Field(None, description='Search text for mode="search" (a query alone searches).')
    cursor: str | None = Field(
        None,
        description='A message id to page from. Take the start or end id out of an observation group\'s '
        'range="startId:endId" — pass one id, never the whole range.',
    )
    thread_id: str | None = Field(
        None, description='Read another thread by id (from mode="threads"); "current" is the active thread.'
    )
    anchor: Literal["start", "end"] = Field(
        "start", description="Without a cursor: page from the thread's oldest (start) or newest (end) message."
    )
    page: int | None = Field(
        None,
        description="Messages (default 1; 0 counts as 1): with a cursor, positive pages read forward from it "
        "(page=1 starts at the cursor), negative pages backward (page=-1 ends at the cursor). Without a "
        'cursor, positive pages count from the anchor (anchor="start": page=2 is newer than page=1; '
        'anchor="end": page=1 is the newest messages, page=2 older) and negative pages count back from '
        "the newest messages (page=-1 is the newest page) whatever the anchor. Threads: 0-based page "
        "number (default 0).",
    )
    limit: int = Field(DEFAULT_LIMIT, description=f"Items per page (default {DEFAULT_LIMIT}, at most {MAX_LIMIT}).")
    detail: Literal["low", "high"] = Field(
        "low",
        description='"low": truncated text and tool names with part indexes [p0], [p1]; "high": full content '
        "including tool arguments and results, ONE part per call (the first part on the page) with "
        "next_call naming the cursor and part_index to ask for next.",
    )
    part_type: PartType | None = Field(None, description="Only show parts of this type (messages mode).")
    tool_name: str | None = Field(None, description="Only show tool calls/results of this tool (messages mode).")
    part_index: int | None = Field(
        None, description="With cursor: show just this part ([pN]) of the cursor message at full detail "
        "(next_call names the part after it)."
    )
    before: str | None = Field(None, description='Threads mode: created before this ISO date ("2026-03-15").')
    after: str | None = Field(None, description='Threads mode: created after this ISO date ("2026-03-01").')

    @model_validator(mode="after")
    def _a_query_alone_searches(self) -> RecallInput:
        """A model that passes ``query`` and no ``mode`` wants a search: answering with the thread's first
        messages instead would look like an answer and mislead it (issue 47)."""
        if "mode" not in self.model_fields_set and self.query is not None and self.query.strip():
            self.mode = "search"
        return self


def show_value(value: str, limit: int = 80) -> str:
    """A model-supplied value, made safe to echo (bounded, control characters escaped)."""
    clean = "".join(ch if unicodedata.category(ch)[0] != "C" else repr(ch)[1:-1] for ch in value[:limit])
    return repr(clean + ("…" if len(value) > limit else ""))


def check_text(value: str, field: str, max_len: int = MAX_ID_CHARS) -> str:
    """``value`` stripped; a ``ToolException`` naming ``field`` when empty, too long or with control characters."""
    stripped = value.strip()
    if not stripped:
        raise ToolException(f"{field}: must not be empty")
    if len(stripped) > max_len:
        raise ToolException(f"{field}: too long ({len(stripped)} characters, at most {max_len})")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in stripped):
        raise ToolException(f"{field}: contains control characters; pass the id exactly as shown")
    return stripped


def parse_date(value: str, field: str) -> datetime:
    """ISO 8601 date or datetime; naive values are UTC."""
    text = check_text(value, field, 64)
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ToolException(
            f"{field}: {show_value(text)} is not an ISO 8601 date (e.g. \"2026-03-15\" or \"2026-03-10T00:00:00Z\")"
        ) from None
    moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    try:
        moment.astimezone(timezone.utc)
    except OverflowError:
        raise ToolException(
            f"{field}: {show_value(text)} is outside the calendar (years 1 to 9999 in UTC); pass a date inside it"
        ) from None
    return moment
