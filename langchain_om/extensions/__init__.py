"""Extensions layer: features that plug into the engine without knowing it.

Recall (index, search and the ``recall`` tool), working memory, temporal markers, extractors,
the vector index and checkpoint branches. They reach the engine only through the small
``host.MemoryHost`` interface the engine implements, never by importing ``engine``.
"""
