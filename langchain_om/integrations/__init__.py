"""Integrations layer: where users attach OM.

``turn`` is the step every integration runs (ids from the run config, the checkpoint's branch,
the turn's end, the tripwire) and ``tools`` the tools OM gives an agent; on them stand the
LangGraph nodes (``graph``: ``add_observational_memory``), the ``create_agent`` middleware
(``middleware``), the ``BaseChatMessageHistory`` replacement (``history``, wrapped by
``runnable_history``), callback handlers (``callbacks``) and the AI SDK UI stream adapter (``ui``).
No integration imports another for its step. They drive the engine's public methods; nothing
below imports them.
"""
