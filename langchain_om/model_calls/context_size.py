"""A warning when a model's context window is smaller than the prompts OM sends it.

A local model is created with a fixed context (llama.cpp's ``n_ctx``, Ollama's ``num_ctx``, often
2,048 or 4,096 by default), and OM's Observer prompt (instructions, the previous log, a batch of
messages) plus its reply can be larger. The call then fails on every try, or worse, the runtime
silently drops the start of the prompt (Ollama does) and the model answers without OM's
instructions. Nothing tells the user why. So the first call of each role on such a model that
does not fit logs one warning naming the sizes and what to change.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["declared_context", "output_limit", "warn_if_too_small"]

logger = logging.getLogger("langchain_om.model_calls.context_size")

_CONTEXT_FIELDS = ("n_ctx", "num_ctx", "context_window", "max_context_tokens")
_OUTPUT_FIELDS = ("max_tokens", "num_predict", "max_new_tokens")
_warned: set[tuple[int, str]] = set()


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def declared_context(model: Any) -> int | None:
    """The model's context window in tokens, when the model object states one."""
    for name in _CONTEXT_FIELDS:
        found = _positive_int(getattr(model, name, None))
        if found:
            return found
    profile = getattr(model, "profile", None)
    value = profile.get("max_input_tokens") if isinstance(profile, dict) else None
    return _positive_int(value)


def output_limit(model: Any) -> int:
    """The model's own output limit (0 when it states none)."""
    for name in _OUTPUT_FIELDS:
        found = _positive_int(getattr(model, name, None))
        if found:
            return found
    return 0


def warn_if_too_small(model: Any, role: str, prompt_tokens: int) -> bool:
    """Log (once per model object and role) when prompt and output limit exceed the model's
    context. Returns whether the prompt does not fit."""
    context = declared_context(model)
    if context is None:
        return False
    reply = output_limit(model)
    if prompt_tokens + reply <= context:
        return False
    key = (id(model), role)
    if key not in _warned:
        _warned.add(key)
        logger.warning(
            "langchain-om: the %s model's context (%d tokens) is smaller than its prompt (about %d tokens) "
            "plus its output limit (%d): raise the model's context (n_ctx / num_ctx) or lower "
            "observation.message_tokens, observation.previous_observer_tokens or "
            "reflection.observation_tokens (docs/local-models.md)", role, context, prompt_tokens, reply)
    return True
