"""Wiring retrieval into an engine: the recall instructions in the agent's context, and indexing.

The instructions are static (they depend on the configuration only), so they are rendered before
the observation log, in the part of OM's system message a prompt cache keeps. They say when recall
is worth a call (exact wording, numbers, a list the assistant gave, checking a detail, other
threads) and to search before concluding that something is unknown. They describe only what
this engine can do (search is mentioned only when a keyword index or embeddings exist, other
threads only in resource scope).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...store.base import OMRecord
from .indexing import index_messages, use_stored_index
from .search import keyword_search_available, semantic_search_available

if TYPE_CHECKING:
    from ..host import MemoryHost


def _search_instruction(om: MemoryHost) -> str:
    """The sentence on mode="search", matching what this engine can actually search with."""
    keyword, semantic = keyword_search_available(om), semantic_search_available(om)
    where = ("this conversation" if om.config.retrieval is not None and om.config.retrieval.scope == "thread"
             else "all of the user's conversations")
    if keyword and semantic:
        how = "finds messages that contain its words or mean something similar"
    elif keyword:
        how = "finds messages containing its words (exact words and their variants, not synonyms)"
    elif semantic:
        how = "finds messages with a similar meaning"
    else:
        return ""
    fallback = ('fall back to mode="threads" and browse with mode="messages"' if where.startswith("all")
                else 'browse with mode="messages"')
    return (f'mode="search" with query="..." {how} in {where} and returns a cursor per hit; open a hit '
            f"with cursor=<id>. If the results look unrelated, try other words or {fallback}.")


def retrieval_instructions(om: MemoryHost) -> str:
    """Scope-aware usage guidance for the agent (search is only mentioned when it exists)."""
    retrieval = om.config.retrieval
    if retrieval is None:
        return ""
    lines = [
        "<recall-instructions>",
        "Your memory is a summary; a `recall` tool reads the original messages behind it. Use it when "
        "the answer needs more than the summary holds: the exact wording of something said, exact "
        "numbers, dates or names, a list or recommendation you gave earlier (to repeat it item by "
        "item), or a detail you want to check before relying on it. When in doubt about an exact detail, "
        "recall it rather than answer from the summary. "
        "Before you say something is unknown or was never mentioned, look for it with recall first.",
        'Each observation group shows range="startId:endId". Call recall with cursor set to ONE id of '
        "that range: the start id with page=1 reads forward, the end id with page=-1 reads backward. "
        'Results list parts as [p0], [p1]; use detail="high" or part_index=N with the same cursor to see a '
        "part in full (tool arguments and results), one part per call: the result's next_call holds the "
        "arguments for the next part.",
    ]
    if retrieval.scope == "thread":
        lines.append("Recall reads this conversation only. Without a cursor it pages from the start "
                     '(anchor="start") or the newest messages (anchor="end").')
    else:
        lines.append('mode="threads" lists the user\'s other conversations (title, id, dates; filter with '
                     'before/after ISO dates); read one with thread_id=<id> (thread_id="current" is this '
                     "one). When the question may concern an earlier conversation, look through the "
                     "threads before answering.")
    search = _search_instruction(om)
    if search:
        lines.append(search)
    lines.append("When your memory already answers the question, answer without recall; never mention the "
                 "tool to the user.")
    if retrieval.instructions:
        lines.append(retrieval.instructions.strip())
    lines.append("</recall-instructions>")
    return "\n".join(lines)


async def retrieval_section(
    om: MemoryHost, record: OMRecord, resource_id: str, thread_id: str
) -> str | None:
    """Section provider: always in resource scope (other threads exist from the first message);
    in thread scope only once something was observed (before that, everything is in context)."""
    retrieval = om.config.retrieval
    if retrieval is None:
        return None
    if retrieval.scope == "thread" and not record.groups:
        return None
    return retrieval_instructions(om)


def install_retrieval(om: MemoryHost) -> None:
    """Wire retrieval into an engine: the instructions section and vector indexing on store.

    With ``vector=True`` and ``embeddings`` but no ``vector_store``, the vectors are kept in
    OM's own store (``StoreVectorIndex``): they survive restarts and are shared by every worker
    on the database. A ``vector_store`` of the user's is used as given instead.
    """
    retrieval = om.config.retrieval
    if retrieval is None:
        return
    if retrieval.vector and retrieval.vector_store is None and retrieval.embeddings is not None:
        from langchain_core.embeddings import Embeddings

        from ...foundation.config import OMConfigError
        from ...foundation.extras import missing_modules

        if missing_modules(["numpy"]):  # the base install leaves it out: only this feature needs it
            raise OMConfigError("retrieval.embeddings", "semantic search over OM's store needs numpy, which is "
                                'not installed: pip install "langchain-om[vector]" (or pip install numpy)')
        from ..vector_index import StoreVectorIndex

        if not isinstance(retrieval.embeddings, Embeddings):
            raise OMConfigError(
                "retrieval.embeddings",
                f"expected a LangChain Embeddings instance, got {type(retrieval.embeddings).__name__}",
            )
        use_stored_index(om, StoreVectorIndex(om.store, retrieval.embeddings))
    if retrieval_section not in om.static_section_providers:
        om.static_section_providers.append(retrieval_section)
    listeners = getattr(om, "message_listeners", None)
    if isinstance(listeners, list) and retrieval.vector and index_messages not in listeners:
        listeners.append(index_messages)
