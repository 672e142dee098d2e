"""Resolving and calling the Observer / Reflector models.

A model option can be a ``"provider:model"`` string (``"provider/model"`` is
translated, because ``init_chat_model`` rejects the slash form), ``"default"``,
a ``BaseChatModel``, a callable ``context -> spec`` (sync or async), a
``ModelByInputTokens`` selector or a list of fallbacks (plain specs, dicts
``{"model": ..., "max_retries": ...}`` or ``ModelWithRetries``).

Resolution is lazy: strings are turned into chat models on the first call that
needs them (and cached). ``credentials.check_model_strings`` checks explicit strings
at construction (provider known, package installed, key set); everything else
surfaces on the first call, classified by ``failures.classify_error`` and logged once.

How generation settings reach the model
---------------------------------------
* Strings: ``temperature`` and the output limit are ``init_chat_model`` keyword
  arguments (``max_output_tokens`` for ``google_genai`` / ``google_vertexai``,
  ``max_tokens`` for every other provider), together with ``provider_options``
  (e.g. ``{"thinking_budget": 0}`` for Gemini, ``{"reasoning_effort": "low"}``
  for OpenAI). The constructed model is cached per string + settings.
* Instances: settings are bound with ``model.bind(...)`` only for the fields
  the model class declares (``temperature``, ``max_output_tokens`` or
  ``max_tokens``), because chat models forward bound kwargs into the provider
  request and an unknown kwarg would be rejected by the provider.
  ``provider_options`` are bound as call kwargs as given: pass only options the
  provider's request accepts.

Every call carries ``tags=[TAG_NOSTREAM, "langchain_om"]`` so OM's own tokens
never show up in a LangGraph ``stream_mode="messages"`` stream.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable
from pydantic import BaseModel, ConfigDict, field_validator

from ..foundation.config import DEFAULT_MODEL, ModelSettings
from ..foundation.extras import EXTRA_OF_MODULE, install_hint
from .failures import ErrorKind, classify_error

try:  # langgraph is a dependency, but keep models usable on its own
    from langgraph.constants import TAG_NOSTREAM
except ImportError:  # pragma: no cover - langgraph always installed with this package
    TAG_NOSTREAM = "nostream"

logger = logging.getLogger("langchain_om.model_calls.models")

OM_TAG = "langchain_om"
DEFAULT_MAX_RETRIES = 2
"""Retries of a ``ModelWithRetries`` (or dict entry) that does not say; plain specs get no retries."""

RETRY_BACKOFF_S = float(os.environ.get("LANGCHAIN_OM_RETRY_BACKOFF_S", "0.25"))
"""Base of the exponential backoff between retries of one model (doubles each retry, capped at 4s)."""

_GOOGLE_PROVIDERS = {"google_genai", "google_vertexai"}
PROVIDER_KEYS: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "google_genai": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
    "azure_openai": ("AZURE_OPENAI_API_KEY",),
    "mistralai": ("MISTRAL_API_KEY",),
    "groq": ("GROQ_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "fireworks": ("FIREWORKS_API_KEY",),
    "together": ("TOGETHER_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "perplexity": ("PPLX_API_KEY", "PERPLEXITY_API_KEY"),
    "openrouter": ("OPENROUTER_API_KEY",),
}
"""provider -> environment variables, any one of which holds its API key."""
_PROVIDER_ALIASES = {
    "google": "google_genai",
    "gemini": "google_genai",
    "vertex": "google_vertexai",
    "vertexai": "google_vertexai",
    "azure": "azure_openai",
    "aws": "bedrock",
    "amazon-bedrock": "bedrock",
    "mistral": "mistralai",
    "together": "together",
    "x-ai": "xai",
}

ChatRunnable = Runnable[Any, Any]
"""What a resolved model is: a ``BaseChatModel`` (or any runnable taking messages and returning a message)."""


class ModelSelectionError(ValueError):
    """No model fits (input above ``ModelByInputTokens``' largest threshold, or an invalid spec).

    It is never retried: the engine aborts the step (the reference page's "tripwire").
    """


class OMModelError(RuntimeError):
    """Every model of the fallback chain failed; ``errors`` holds ``(model, attempt, exception)``."""

    def __init__(self, role: str, errors: Sequence[tuple[str, int, BaseException]]) -> None:
        self.role = role
        self.errors = list(errors)
        details = "; ".join(f"{name} attempt {n}: {type(e).__name__}: {e}" for name, n, e in self.errors)
        super().__init__(f"{role} model failed after {len(self.errors)} attempt(s): {details}")

    @property
    def kind(self) -> ErrorKind:
        """``"permanent"`` when the last error cannot be cured by retrying (auth, bad request)."""
        return classify_error(self.errors[-1][2]) if self.errors else "transient"

    def reason(self) -> str:
        """One line: the last error, without the per-attempt history."""
        if not self.errors:
            return f"{self.role} model failed"
        name, _attempt, exc = self.errors[-1]
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"{self.role} model {name}: {type(exc).__name__}: {first[:300]}"


# --------------------------------------------------------------------------- specs


def normalize_model_string(spec: str) -> str:
    """``"openai/gpt-5-mini"`` -> ``"openai:gpt-5-mini"``; ``"default"`` -> the default model.

    ``init_chat_model`` only understands ``provider:model``; the slash form is what
    the reference page (and model routers) use, so both are accepted. ``google/``
    maps to ``google_genai`` (the Gemini API), the provider of the default model.
    """
    text = spec.strip()
    if not text:
        raise ModelSelectionError("model string must not be empty")
    if text.lower() == "default":
        return DEFAULT_MODEL
    if ":" in text.split("/", 1)[0]:
        provider, model = text.split(":", 1)
    elif "/" in text:
        provider, model = text.split("/", 1)
    else:
        return text  # a bare model name; init_chat_model infers the provider
    provider = provider.strip().lower()
    provider = _PROVIDER_ALIASES.get(provider, provider).replace("-", "_")
    return f"{provider}:{model.strip()}"


class ModelWithRetries(BaseModel):
    """One entry of a fallback list: a model and how many times to retry it before moving on."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    model: Any
    max_retries: int = DEFAULT_MAX_RETRIES

    @field_validator("max_retries")
    @classmethod
    def _retries(cls, v: int) -> int:
        if v < 0:
            raise ValueError("max_retries must be >= 0")
        return v


class ModelByInputTokens:
    """Pick a model by the size of the Observer / Reflector input.

    The smallest threshold that is >= the input wins; an input above the largest
    threshold raises ``ModelSelectionError`` (never silently uses the biggest model).
    """

    def __init__(self, up_to: Mapping[int, Any]) -> None:
        if not isinstance(up_to, Mapping) or not up_to:
            raise ValueError("ModelByInputTokens needs at least one {threshold: model} entry in up_to")
        for threshold, model in up_to.items():
            if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold <= 0:
                raise ValueError(f"ModelByInputTokens threshold {threshold!r} must be a positive integer")
            if model is None or (isinstance(model, str) and not model.strip()):
                raise ValueError(f"ModelByInputTokens threshold {threshold}: model must not be empty")
        self._entries: list[tuple[int, Any]] = sorted(up_to.items(), key=lambda kv: kv[0])

    @property
    def up_to(self) -> dict[int, Any]:
        return dict(self._entries)

    def get_thresholds(self) -> list[int]:
        """Thresholds in ascending order."""
        return [threshold for threshold, _ in self._entries]

    def resolve(self, input_tokens: int) -> Any:
        """The model spec for ``input_tokens`` (raises above the largest threshold)."""
        for threshold, model in self._entries:
            if input_tokens <= threshold:
                return model
        largest = self._entries[-1][0]
        raise ModelSelectionError(
            f"input of {input_tokens} tokens is above the largest ModelByInputTokens threshold ({largest})"
        )

    def __repr__(self) -> str:
        return f"ModelByInputTokens(up_to={self.up_to!r})"


# --------------------------------------------------------------------------- resolution

_model_cache: dict[str, BaseChatModel] = {}
_cache_lock = threading.Lock()


def _init_kwargs(
    normalized: str, settings: ModelSettings | None, provider_options: Mapping[str, Any]
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    if settings is not None:
        if settings.temperature is not None:
            kwargs["temperature"] = settings.temperature
        if settings.max_output_tokens is not None:
            provider = normalized.split(":", 1)[0] if ":" in normalized else ""
            key = "max_output_tokens" if provider in _GOOGLE_PROVIDERS else "max_tokens"
            kwargs[key] = settings.max_output_tokens
    kwargs.update(provider_options)
    return kwargs


def _model_from_string(
    spec: str, settings: ModelSettings | None = None, provider_options: Mapping[str, Any] | None = None
) -> BaseChatModel:
    """``init_chat_model`` once per string + settings; errors name the model and the likely fix."""
    normalized = normalize_model_string(spec)
    kwargs = _init_kwargs(normalized, settings, provider_options or {})
    key = normalized + "\x1f" + json.dumps(kwargs, sort_keys=True, default=repr)
    with _cache_lock:
        cached = _model_cache.get(key)
    if cached is not None:
        return cached
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:  # pragma: no cover - langchain is a dependency
        raise ImportError("langchain is needed to resolve model strings (pip install langchain)") from exc
    try:
        model = init_chat_model(normalized, **kwargs)
    except ImportError as exc:
        # init_chat_model re-raises the ModuleNotFoundError (which names the module) as its cause
        missing = (exc.name or getattr(exc.__cause__, "name", None) or "").split(".")[0]
        hint = f": {install_hint(missing)}" if missing in EXTRA_OF_MODULE else f": {exc}"
        raise ImportError(
            f"cannot load model {spec!r} ({normalized}): the provider package is not installed{hint}",
            name=exc.name,
        ) from exc
    except Exception as exc:
        provider = normalized.split(":", 1)[0] if ":" in normalized else ""
        keys = PROVIDER_KEYS.get(provider, ())
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        if keys and not any(os.environ.get(k) for k in keys):
            hint = f"no API key: set {' or '.join(keys)}"
        else:
            hint = "is the provider's API key set and valid?"
        raise RuntimeError(
            f"cannot create model {spec!r} ({normalized}): {hint} ({type(exc).__name__}: {first})"
        ) from exc
    if not isinstance(model, BaseChatModel):  # pragma: no cover - configurable models are not requested
        raise ModelSelectionError(f"model {spec!r} did not resolve to a chat model")
    with _cache_lock:
        _model_cache[key] = model
    return model


def _entry_retries(entry: Any) -> tuple[Any, int]:
    if isinstance(entry, ModelWithRetries):
        return entry.model, entry.max_retries
    if isinstance(entry, Mapping):
        if "model" not in entry:
            raise ModelSelectionError("a model list entry given as a dict needs a 'model' key")
        parsed = ModelWithRetries(**dict(entry))
        return parsed.model, parsed.max_retries
    return entry, _POLICY_RETRIES


_POLICY_RETRIES = -1
"""A link whose retries were not given: ``acall_om_model`` applies its ``default_retries``."""


def _is_model_instance(spec: Any) -> bool:
    return isinstance(spec, BaseChatModel) or (isinstance(spec, Runnable) and hasattr(spec, "ainvoke"))


def reads_input_tokens(spec: Any, depth: int = 0) -> bool:
    """Whether choosing a model from ``spec`` needs the prompt's token count: a ``ModelByInputTokens``
    or a callable (it receives the call context, the count included) anywhere in it.

    A plain model, a string or a list of them does not: the caller then skips counting the prompt,
    whose transcript is new text on every Observer call (~0.3 ms of CPU a call)."""
    if depth > 8:
        return True  # the expansion reports the nesting
    if spec is None or isinstance(spec, str) or _is_model_instance(spec):
        return False
    if isinstance(spec, ModelWithRetries):
        return reads_input_tokens(spec.model, depth + 1)
    if isinstance(spec, Mapping):
        return "model" not in spec or reads_input_tokens(spec["model"], depth + 1)
    if isinstance(spec, (list, tuple)):
        return any(reads_input_tokens(entry, depth + 1) for entry in spec)
    return True  # ModelByInputTokens, a dynamic model, or a spec the expansion will refuse


@dataclass
class _Link:
    """One link of the chain before strings are instantiated (so instantiation happens per attempt)."""

    spec: Any
    retries: int


def _expand_sync(spec: Any, *, input_tokens: int, context: Mapping[str, Any], retries: int, depth: int) -> list[_Link]:
    if depth > 8:
        raise ModelSelectionError("model spec nests too deeply (a callable returning itself?)")
    if spec is None:
        spec = "default"
    if isinstance(spec, str) or _is_model_instance(spec):
        return [_Link(spec, retries)]
    if isinstance(spec, ModelByInputTokens):
        return _expand_sync(spec.resolve(input_tokens), input_tokens=input_tokens, context=context,
                            retries=retries, depth=depth + 1)
    if isinstance(spec, ModelWithRetries) or isinstance(spec, Mapping):
        inner, own = _entry_retries(spec)
        return _expand_sync(inner, input_tokens=input_tokens, context=context, retries=own, depth=depth + 1)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ModelSelectionError("a model list must hold at least one model")
        links: list[_Link] = []
        for entry in spec:
            inner, own = _entry_retries(entry)
            links.extend(_expand_sync(inner, input_tokens=input_tokens, context=context, retries=own,
                                      depth=depth + 1))
        return links
    if callable(spec):
        produced = spec(context)
        if inspect.isawaitable(produced):
            if inspect.iscoroutine(produced):
                produced.close()
            raise ModelSelectionError("the model callable is async; use aresolve_chat_model / acall_om_model")
        return _expand_sync(produced, input_tokens=input_tokens, context=context, retries=retries, depth=depth + 1)
    raise ModelSelectionError(f"cannot use {type(spec).__name__} as a model")


async def _expand_async(
    spec: Any, *, input_tokens: int, context: Mapping[str, Any], retries: int, depth: int
) -> list[_Link]:
    if depth > 8:
        raise ModelSelectionError("model spec nests too deeply (a callable returning itself?)")
    if callable(spec) and not _is_model_instance(spec) and not isinstance(spec, (ModelByInputTokens, type)):
        produced = spec(context)
        if inspect.isawaitable(produced):
            produced = await produced
        return await _expand_async(produced, input_tokens=input_tokens, context=context, retries=retries,
                                   depth=depth + 1)
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ModelSelectionError("a model list must hold at least one model")
        links: list[_Link] = []
        for entry in spec:
            inner, own = _entry_retries(entry)
            links.extend(await _expand_async(inner, input_tokens=input_tokens, context=context, retries=own,
                                             depth=depth + 1))
        return links
    if isinstance(spec, (ModelWithRetries, Mapping)):
        inner, own = _entry_retries(spec)
        return await _expand_async(inner, input_tokens=input_tokens, context=context, retries=own, depth=depth + 1)
    if isinstance(spec, ModelByInputTokens):
        return await _expand_async(spec.resolve(input_tokens), input_tokens=input_tokens, context=context,
                                   retries=retries, depth=depth + 1)
    return _expand_sync(spec, input_tokens=input_tokens, context=context, retries=retries, depth=depth)


def _instantiate(link: _Link, settings: ModelSettings | None, provider_options: Mapping[str, Any]) -> ChatRunnable:
    if isinstance(link.spec, str):
        return _model_from_string(link.spec, settings, provider_options)
    return cast(ChatRunnable, link.spec)


def resolve_chat_model(
    spec: Any, *, input_tokens: int, context: Mapping[str, Any] | None = None
) -> list[tuple[ChatRunnable, int]]:
    """The fallback chain ``[(model, max_retries), ...]`` for ``spec`` (sync callables only).

    Strings are instantiated without OM's generation settings here; ``acall_om_model``
    instantiates them with the settings of the call.
    """
    links = _expand_sync(spec, input_tokens=input_tokens, context=context or {}, retries=_POLICY_RETRIES, depth=0)
    return [(_instantiate(link, None, {}), max(0, link.retries)) for link in links]


async def aresolve_chat_model(
    spec: Any,
    *,
    input_tokens: int,
    context: Mapping[str, Any] | None = None,
    settings: ModelSettings | None = None,
    provider_options: Mapping[str, Any] | None = None,
) -> list[tuple[ChatRunnable, int]]:
    """Async twin of ``resolve_chat_model``; callables may be ``async``.

    With ``settings`` / ``provider_options`` each model comes back configured with them: strings
    are instantiated with them, instances are copied with the fields they declare. A copy, not
    ``bind()``, because ``with_structured_output`` on a binding drops the bound kwargs.
    """
    links = await _expand_async(spec, input_tokens=input_tokens, context=context or {}, retries=_POLICY_RETRIES,
                                depth=0)
    options = dict(provider_options or {})
    chain: list[tuple[ChatRunnable, int]] = []
    for link in links:
        model = _instantiate(link, settings, options)
        if not isinstance(link.spec, str):
            model = configured_copy(model, settings, options)
        chain.append((model, max(0, link.retries)))
    return chain


def _declared_settings(fields: Mapping[str, Any], settings: ModelSettings | None) -> dict[str, Any]:
    """OM's generation settings under the names a model class declares (``max_output_tokens``
    or ``max_tokens``); settings it has no field for are left out."""
    out: dict[str, Any] = {}
    if settings is None:
        return out
    if settings.temperature is not None and "temperature" in fields:
        out["temperature"] = settings.temperature
    if settings.max_output_tokens is not None:
        name = next((n for n in ("max_output_tokens", "max_tokens") if n in fields), None)
        if name is not None:
            out[name] = settings.max_output_tokens
    return out


def configured_copy(model: ChatRunnable, settings: ModelSettings | None, provider_options: Mapping[str, Any]) -> Any:
    """A copy of a chat model instance with OM's generation settings set on the fields it declares;
    provider options it has no field for go into its ``model_kwargs`` when it has one."""
    if not isinstance(model, BaseChatModel) or (settings is None and not provider_options):
        return model
    fields = type(model).model_fields
    update = _declared_settings(fields, settings)
    extra: dict[str, Any] = {}
    for key, value in provider_options.items():
        if key in fields:
            update[key] = value
        else:
            extra[key] = value
    if extra and "model_kwargs" in fields:
        update["model_kwargs"] = {**(getattr(model, "model_kwargs", None) or {}), **extra}
    return model.model_copy(update=update) if update else model


# --------------------------------------------------------------------------- identity and capabilities


def describe_model(model: Any) -> str:
    """A ``provider/model`` identifier (used to detect a provider/model change between steps)."""
    if isinstance(model, str):
        normalized = normalize_model_string(model)
        return normalized.replace(":", "/", 1) if ":" in normalized else normalized
    if isinstance(model, BaseChatModel):
        provider = ""
        name = ""
        try:
            params = model._get_ls_params()
            provider = str(params.get("ls_provider") or "")
            name = str(params.get("ls_model_name") or "")
        except Exception:
            pass
        if not name:
            for attr in ("model_name", "model", "model_id"):
                value = getattr(model, attr, None)
                if isinstance(value, str) and value:
                    name = value
                    break
        if not provider:
            try:
                provider = model._llm_type
            except Exception:
                provider = type(model).__name__
        name = name.removeprefix("models/")
        return f"{provider}/{name}" if name else provider
    if isinstance(model, ModelWithRetries):
        return describe_model(model.model)
    if isinstance(model, Mapping) and "model" in model:
        return describe_model(model["model"])
    if isinstance(model, (list, tuple)) and model:
        return describe_model(model[0])
    return type(model).__name__


_IMAGE_CAPABLE: dict[str, tuple[str, ...]] = {
    "openai": ("gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4"),
    "azure_openai": ("gpt-4o", "gpt-4.1", "gpt-5"),
    "google_genai": ("gemini",),
    "google_vertexai": ("gemini",),
    "google": ("gemini",),
    "anthropic": ("claude-3", "claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "claude-4"),
}
_TEXT_ONLY: dict[str, tuple[str, ...]] = {
    "openai": ("gpt-3.5", "o1-mini", "o3-mini"),
    "anthropic": ("claude-2", "claude-instant"),
}


def model_supports_images(model: Any) -> bool | None:
    """True / False from a small capability table, None when the model is unknown."""
    if model is None:
        return None
    if isinstance(model, (list, tuple)):
        return model_supports_images(model[0]) if model else None
    if isinstance(model, ModelWithRetries):
        return model_supports_images(model.model)
    if isinstance(model, Mapping):
        return model_supports_images(model.get("model"))
    if isinstance(model, str) or isinstance(model, BaseChatModel):
        try:
            ident = describe_model(model)
        except ModelSelectionError:
            return None
    else:
        return None
    if "/" not in ident:
        return None
    provider, name = ident.split("/", 1)
    provider = _PROVIDER_ALIASES.get(provider.lower(), provider.lower())
    name = name.lower()
    if provider == "azure":
        provider = "azure_openai"
    if any(name.startswith(prefix) for prefix in _TEXT_ONLY.get(provider, ())):
        return False
    if any(name.startswith(prefix) for prefix in _IMAGE_CAPABLE.get(provider, ())):
        return True
    return None
