"""Calling OM's own models: one Observer or Reflector call with its settings bound, a per-attempt
timeout, retries over the resolved fallback chain, usage and provider metadata collected, and
the failure classified (``failures``) and logged once."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import RunnableConfig

from ..foundation.config import ModelSettings
from ..foundation.internal_calls import internal_call_metadata_for
from ..foundation.object_memo import ObjectMemo
from ..store.base import replace_lone_surrogates
from .failures import FAILURE_LOG, attempt_timeout, backoff_delay, classify_error
from .model_gate import invoke_gated
from .spend import add_to_process

try:  # langgraph is a dependency, but keep models usable on its own
    from langgraph.constants import TAG_NOSTREAM
except ImportError:  # pragma: no cover - langgraph always installed with this package
    TAG_NOSTREAM = "nostream"

from .models import (  # the resolution helpers this layer drives
    _POLICY_RETRIES,
    OM_TAG,
    RETRY_BACKOFF_S,
    ChatRunnable,
    ModelSelectionError,
    OMModelError,
    _declared_settings,
    _expand_async,
    _instantiate,
    _is_model_instance,
    describe_model,
)

logger = logging.getLogger("langchain_om.model_calls.models")


@dataclass
class ModelCallResult:
    """The outcome of one successful OM model call."""

    message: AIMessage
    text: str
    usage: dict[str, Any] | None
    provider_metadata: dict[str, Any]
    model_name: str
    attempts: int
    errors: list[tuple[str, int, BaseException]] = field(default_factory=list)


def message_text(message: BaseMessage) -> str:
    """The text of a model reply, whatever the content shape (str or blocks; reasoning skipped)."""
    content = message.content
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and block.get("type") in ("text", "output_text") and block.get("text"):
            parts.append(str(block["text"]))
    return "".join(parts)


def wire_safe(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """The prompt with every lone surrogate replaced by U+FFFD: a provider sends it as UTF-8,
    which cannot hold one (a message quoting ``os.fsdecode`` of a non-UTF-8 file name would
    fail every call, and the thread's memory with it). Unchanged messages are passed as they are."""
    safe: list[BaseMessage] = []
    for message in messages:
        content = message.content
        if isinstance(content, str):
            cleaned: Any = replace_lone_surrogates(content)
            changed = cleaned is not content
        else:
            cleaned = [_safe_block(block) for block in content]
            changed = any(new is not old for new, old in zip(cleaned, content, strict=True))
        safe.append(message.model_copy(update={"content": cleaned}) if changed else message)
    return safe


def _safe_block(block: Any) -> Any:
    if isinstance(block, str):
        return replace_lone_surrogates(block)
    if isinstance(block, dict) and isinstance(block.get("text"), str):
        text = replace_lone_surrogates(block["text"])
        return block if text is block["text"] else {**block, "text": text}
    return block


_name_of = ObjectMemo(describe_model)
"""``describe_model`` once per model object: a chat model's name comes from its LangSmith
parameters (~30 us), read on every call for what only names it in logs and errors."""


def _call_kwargs(model: ChatRunnable, settings: ModelSettings | None,
                 provider_options: Mapping[str, Any]) -> dict[str, Any]:
    """The settings a chat model instance is called with: only the kwargs it declares, so no
    provider receives an unknown parameter. Passed to ``ainvoke`` as ``model.bind(**kwargs)``
    would, without a binding and its config merge on every call."""
    if not isinstance(model, BaseChatModel):
        return {}
    kwargs = _declared_settings(type(model).model_fields, settings)
    kwargs.update(provider_options)
    return kwargs


def _call_config(role: str) -> RunnableConfig:
    return {
        "tags": [TAG_NOSTREAM, OM_TAG, f"om_{role}"],
        "run_name": f"om_{role}",
        "metadata": internal_call_metadata_for(role),  # an internal call: not the agent's (internal_calls.py)
    }


async def acall_om_model(
    spec: Any,
    messages: Sequence[BaseMessage],
    *,
    role: Literal["observer", "reflector"] | str,
    input_tokens: int,
    settings: ModelSettings | None = None,
    provider_options: Mapping[str, Any] | None = None,
    context: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
    backoff_s: float | None = None,
    default_retries: int = 0,
    max_backoff_s: float = 4.0,
) -> ModelCallResult:
    """Call the Observer / Reflector model through its fallback chain.

    Each model is tried ``1 + max_retries`` times (``default_retries`` for a model given
    without its own count) with exponential backoff and full jitter (``backoff_s`` base,
    default ``RETRY_BACKOFF_S``, capped at ``max_backoff_s``), then the next model. Only
    transient errors (429, 5xx, timeouts) are retried: a permanent one (auth, bad request,
    missing key) moves to the next model at once. Every attempt's timeout is cut to what the
    turn's budget has left (``failures.turn_budget``). A ``ModelSelectionError`` propagates at
    once; when everything fails, ``OMModelError`` carries every attempt's error.
    """
    links = await _expand_async(spec, input_tokens=input_tokens, context=context or {}, retries=_POLICY_RETRIES,
                                depth=0)
    base = RETRY_BACKOFF_S if backoff_s is None else backoff_s
    options = dict(provider_options or {})
    errors: list[tuple[str, int, BaseException]] = []
    attempts = 0
    config = _call_config(str(role))
    messages = wire_safe(messages)
    for link in links:
        name = _name_of(link.spec) if not callable(link.spec) or _is_model_instance(link.spec) else "model"
        try:
            model = _instantiate(link, settings, options)
            kwargs = {} if isinstance(link.spec, str) else _call_kwargs(model, settings, options)
            if model is not link.spec:  # a model given as an instance is named already
                name = _name_of(model)
        except ModelSelectionError:
            raise
        except Exception as exc:
            attempts += 1
            errors.append((name, 1, exc))
            FAILURE_LOG.report(str(role), name, exc, "permanent")
            continue
        retries = default_retries if link.retries == _POLICY_RETRIES else link.retries
        for attempt in range(retries + 1):
            attempts += 1
            try:
                limit = attempt_timeout(timeout_s)
                # one call at a time on a model with no async path; a timed-out call stops (model_gate)
                reply = await _within(invoke_gated(model, list(messages), config=config, kwargs=kwargs), limit)
            except ModelSelectionError:
                raise
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                errors.append((name, attempt + 1, exc))
                add_to_process(str(role), None, failed=True)
                kind = classify_error(exc)
                FAILURE_LOG.report(str(role), name, exc, kind)
                if kind == "permanent":
                    break
                if attempt < retries and base > 0:
                    delay = backoff_delay(attempt, base, max_backoff_s)
                    try:
                        left = attempt_timeout(None)
                    except Exception as spent:
                        errors.append((name, attempt + 1, spent))
                        break
                    await asyncio.sleep(delay if left is None else min(delay, left))
                continue
            message = reply if isinstance(reply, AIMessage) else AIMessage(content=message_text(reply)
                                                                           if isinstance(reply, BaseMessage)
                                                                           else str(reply))
            usage = dict(message.usage_metadata) if message.usage_metadata else None
            add_to_process(str(role), usage, message.response_metadata)
            return ModelCallResult(
                message=message,
                text=message_text(message),
                usage=usage,
                provider_metadata=dict(message.response_metadata or {}),
                model_name=name,
                attempts=attempts,
                errors=errors,
            )
    raise OMModelError(str(role), errors)


def call_om_model(spec: Any, messages: Sequence[BaseMessage], **kwargs: Any) -> ModelCallResult:
    """Sync twin of ``acall_om_model`` (runs it on a private event loop)."""
    return asyncio.run(acall_om_model(spec, messages, **kwargs))


ContextSpec = Callable[[Mapping[str, Any]], Any]
"""A dynamic model: receives the call context (thread_id, resource_id, role, input_tokens, ...)."""


async def _within(call: Awaitable[Any], limit: float | None) -> Any:
    """``await call`` for at most ``limit`` seconds, in the calling task: a cancelled caller
    cancels the model call directly (``asyncio.wait_for`` runs it in a task of its own and then
    waits for that task to wind down, which a provider's client may never do)."""
    if not limit:
        return await call
    timeout = getattr(asyncio, "timeout", None)  # Python 3.11+
    if timeout is None:
        return await asyncio.wait_for(call, limit)
    async with timeout(limit):
        return await call
