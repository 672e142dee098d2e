"""The ``recall`` tool: the agent pages back through the raw messages behind its observations.

Observation groups in the agent's context carry ``range="start_id:end_id"``; the agent passes
one of those ids as ``cursor`` to read the messages, lists the user's other conversations
(``mode="threads"``), and searches them (``mode="search"``): by keyword through the store's own
full-text index (no embedder needed), and also by meaning with ``retrieval.vector``, the two
rankings combined by reciprocal rank fusion.

Result shape (documented choice): a JSON-serialisable dict with **snake_case** keys, the
reference page's return fields one to one (``has_next_page``, ``token_offset``, ...), because
the arguments the model passes are snake_case too and one convention per tool is easier for a
model to follow. LangChain serialises the dict to JSON for the ``ToolMessage``.

Isolation: every read goes through the store with the bound ``resource_id``; ids the model
passes are only ever looked up inside that resource, and search hits are re-checked against
the store before they are shown. Bad arguments become a clear tool error (a ``ToolException``
turned into an error ``ToolMessage`` by ``handle_tool_error``), never an exception in the
agent loop and never another user's data.

Paging (documented choice where the reference page is silent): pages are message ranges by
position in the thread. With a cursor, ``page=1`` starts at the cursor and ``page=-1`` ends at
it. Without one, positive pages count from the ``anchor`` (``"end"``: page 1 is the newest) and
negative pages count back from the newest message whatever the anchor. ``has_next_page`` /
``has_prev_page`` say whether newer / older messages exist outside the page. ``detail="high"``
shows a single part per call, the first (filter-matching) part of the first message in the
page's range, with ``next_call`` (the exact arguments for the next part, which may lie past
the page: ``{"cursor": id, "part_index": n}``) and a ``hint``; ``part_index`` calls carry the
same continuation.

Semantic search: ``retrieval={"vector": True, "embeddings": emb}`` keeps the vectors in OM's own
store (``vector_index.StoreVectorIndex``: they survive restarts); ``"vector_store": vs`` uses a
LangChain ``VectorStore`` of the user's instead.

Binding: ``om.recall_tool(thread_id=..., resource_id=...)`` binds a conversation; without
ids the tool reads ``thread_id`` / ``resource_id`` (or ``user_id``) from the run's
``config["configurable"]`` at call time, so one static tool object serves every thread of a
``create_agent`` or graph.

Layout: a package of one concept a module, because the tool grew past what one sitting
reads. ``args`` (what the model may pass), ``scope`` (whose data it may read), ``render``
(how a message and its parts read, the output budget), ``browse`` (messages and threads
modes), ``search`` (search mode and rank fusion), ``indexing`` (embedding new messages),
``install`` (the instructions section and wiring into an engine), ``tool`` (the tool object).
Every name importable from the former ``recall.py`` is re-exported here, so
``from langchain_om.extensions.recall import X`` keeps working.
"""

from __future__ import annotations

from .args import (
    DEFAULT_LIMIT,
    DEFAULT_TOKEN_BUDGET,
    LOW_DETAIL_CHARS,
    MAX_ID_CHARS,
    MAX_LIMIT,
    MAX_PAGE,
    MAX_QUERY_CHARS,
    MAX_SEARCH_RESULTS,
    PartType,
    RecallInput,
    parse_date,
)
from .browse import NEXT_SCAN
from .indexing import _INDEXES as _INDEXES
from .indexing import _index_text as _index_text
from .indexing import index_messages, vector_document_id
from .install import install_retrieval, retrieval_instructions, retrieval_section
from .render import Part, message_parts, message_stamp
from .search import RRF_K, HitKey, fuse_rankings, keyword_search_available, semantic_search_available
from .tool import DESCRIPTION, RecallTool, make_recall_tool

__all__ = [
    "DEFAULT_LIMIT",
    "DEFAULT_TOKEN_BUDGET",
    "DESCRIPTION",
    "LOW_DETAIL_CHARS",
    "MAX_ID_CHARS",
    "MAX_LIMIT",
    "MAX_PAGE",
    "MAX_QUERY_CHARS",
    "MAX_SEARCH_RESULTS",
    "NEXT_SCAN",
    "RRF_K",
    "HitKey",
    "Part",
    "PartType",
    "RecallInput",
    "RecallTool",
    "fuse_rankings",
    "index_messages",
    "install_retrieval",
    "keyword_search_available",
    "make_recall_tool",
    "message_parts",
    "message_stamp",
    "parse_date",
    "retrieval_instructions",
    "retrieval_section",
    "semantic_search_available",
    "vector_document_id",
]
