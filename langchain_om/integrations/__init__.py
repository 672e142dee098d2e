"""Integrations layer: where users attach OM.

LangGraph nodes (``add_observational_memory``), the ``create_agent`` middleware, the
``BaseChatMessageHistory`` replacement, callback handlers and the AI SDK UI stream adapter.
They drive the engine's public methods; nothing below imports them.
"""
