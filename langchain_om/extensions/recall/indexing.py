"""Embedding newly stored messages for semantic search.

With ``vector=True`` and ``embeddings`` but no ``vector_store``, each engine gets a
``StoreVectorIndex`` that keeps the vectors in OM's own store (``use_stored_index``);
otherwise the user's LangChain ``VectorStore`` receives one document per message, with the
ids that let search re-check it against the store.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ...store.base import StoredMessage, replace_lone_surrogates
from .render import message_parts, role_of

if TYPE_CHECKING:
    from ..host import MemoryHost
    from ..vector_index import StoreVectorIndex

logger = logging.getLogger("langchain_om")


_INDEXES: weakref.WeakKeyDictionary[MemoryHost, StoreVectorIndex] = weakref.WeakKeyDictionary()
"""The stored-embeddings index of each engine built with ``embeddings`` and no ``vector_store``."""


def stored_index(om: MemoryHost) -> StoreVectorIndex | None:
    """The engine's stored-embeddings index, or None when it has none."""
    return _INDEXES.get(om)


def use_stored_index(om: MemoryHost, index: StoreVectorIndex) -> None:
    """Keep the engine's vectors in ``index`` (``install_retrieval`` builds it from the config)."""
    _INDEXES[om] = index


def _index_text(om: MemoryHost, resource_id: str, stored: StoredMessage) -> str:
    parts = message_parts(om.message_of(resource_id, stored))
    text = "\n".join(p.text for p in parts if p.kind in ("text", "tool-result")).strip()
    return replace_lone_surrogates(text)  # embedders speak UTF-8 (the stored row keeps the original)


def vector_document_id(resource_id: str, thread_id: str, message_id: str) -> str:
    return "om_" + hashlib.sha256(f"{resource_id}\x1f{thread_id}\x1f{message_id}".encode()).hexdigest()[:40]


async def index_messages(
    om: MemoryHost, resource_id: str, thread_id: str, rows: Sequence[StoredMessage]
) -> None:
    """Embed newly stored messages into OM's stored index or the user's vector store (failures
    are logged, never raised: the messages are stored and keyword search finds them anyway)."""
    retrieval = om.config.retrieval
    if retrieval is None or not retrieval.vector:
        return
    index = stored_index(om)
    if index is not None:
        texts = [(row.id, text) for row in rows
                 if row.kind == "message" and (text := _index_text(om, resource_id, row))]
        try:
            await index.aadd(resource_id, thread_id, texts)
        except Exception as exc:
            logger.warning("langchain-om: embedding %d message(s) for recall search failed: %s", len(texts), exc)
        return
    if retrieval.vector_store is None:
        return
    from langchain_core.documents import Document

    docs: list[Document] = []
    ids: list[str] = []
    for row in rows:
        if row.kind != "message":
            continue
        text = _index_text(om, resource_id, row)
        if not text:
            continue
        ids.append(vector_document_id(resource_id, thread_id, row.id))
        docs.append(Document(page_content=text, metadata={
            "resource_id": resource_id, "thread_id": thread_id, "message_id": row.id,
            "role": role_of(row), "created_at": row.created_at.isoformat(),
        }))
    if not docs:
        return
    try:
        await retrieval.vector_store.aadd_documents(docs, ids=ids)
    except Exception as exc:
        logger.warning("langchain-om: indexing %d message(s) for recall search failed: %s", len(docs), exc)
