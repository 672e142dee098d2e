"""Model-calls layer: talking to the Observer and the Reflector.

Prompts and transcripts, tolerant parsing of replies, model resolution (``init_chat_model``
strings, ``ModelByInputTokens``), retries, degenerate-output detection, credentials checks,
spend accounting and the failure policy. Depends on ``foundation`` and ``store`` only.
"""
