"""Catch a model string that can never work before the first conversation step does.

``ObservationalMemory(model="openai:gpt-5-mini")`` without ``OPENAI_API_KEY`` used to construct
fine and then fail on every step once the threshold was crossed. ``check_model_strings`` runs at
construction over the *explicit* model strings of the configuration and raises ``OMConfigError``
naming the option and, when that is the fix, the package to install or the environment variable
to set. It checks what can be known without a network call:

* the provider is one ``init_chat_model`` supports (``"foo:bar"`` is refused);
* the provider's integration package is importable (else: the extra to install, ``[openai]``, ``[google]``);
* the provider's API key variable is set (unless ``provider_options`` carries a key).

Providers that authenticate through ambient credentials (Vertex AI, Bedrock, Ollama, ...) are
only checked for their package. The default model (no model option) is not checked here, so
OM can be constructed in tests and tools without a key; its errors surface on the first call,
logged once (``failures.FailureLog``).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator, Mapping
from typing import Any

from ..foundation.config import OMConfig, OMConfigError
from ..foundation.extras import install_hint
from .models import PROVIDER_KEYS, ModelWithRetries, normalize_model_string

# option names through which a key can be passed instead of the environment
_KEY_OPTIONS = ("api_key", "openai_api_key", "google_api_key", "anthropic_api_key", "azure_ad_token",
                "azure_ad_token_provider", "credentials")


def _builtin_providers() -> dict[str, str]:
    """provider -> integration package, as ``init_chat_model`` knows them ({} if that moved)."""
    try:
        from langchain.chat_models import base
    except ImportError:  # pragma: no cover - langchain is a dependency
        return {}
    table = getattr(base, "_BUILTIN_PROVIDERS", None)
    if not isinstance(table, Mapping):
        return {}
    return {str(name): str(entry[0]).split(".")[0] for name, entry in table.items()}


def _infer_provider(model: str) -> str | None:
    try:
        from langchain.chat_models import base
    except ImportError:  # pragma: no cover
        return None
    infer = getattr(base, "_attempt_infer_model_provider", None)
    if infer is None:
        return None
    try:
        found = infer(model)
    except Exception:
        return None
    return str(found) if found else None


def _strings(spec: Any, field: str) -> Iterator[tuple[str, str]]:
    """Every ``(option path, model string)`` in a model option (lists and retry entries included)."""
    if isinstance(spec, str):
        if spec.strip().lower() != "default":
            yield field, spec
    elif isinstance(spec, ModelWithRetries):
        yield from _strings(spec.model, field)
    elif isinstance(spec, Mapping) and "model" in spec:
        yield from _strings(spec["model"], field)
    elif isinstance(spec, (list, tuple)):
        for index, item in enumerate(spec):
            yield from _strings(item, f"{field}[{index}]")
    elif hasattr(spec, "up_to"):
        for threshold, inner in dict(spec.up_to).items():
            yield from _strings(inner, f"{field}.up_to[{threshold}]")


def check_model_string(spec: str, field: str, provider_options: Mapping[str, Any] | None = None,
                       environ: Mapping[str, str] | None = None) -> None:
    """Raise ``OMConfigError(field, ...)`` when ``spec`` cannot work on this machine as configured."""
    env = os.environ if environ is None else environ
    normalized = normalize_model_string(spec)
    providers = _builtin_providers()
    if ":" in normalized and normalized.split(":", 1)[0] in providers:
        provider = normalized.split(":", 1)[0]
    else:
        inferred = _infer_provider(normalized)
        if inferred is None or (providers and inferred not in providers):
            head = normalized.split(":", 1)[0] if ":" in normalized else normalized
            known = ", ".join(sorted(providers)) if providers else "see init_chat_model"
            raise OMConfigError(field, f"unknown model provider in {spec!r} ({head!r}); use 'provider:model' "
                                       f"with one of: {known}")
        provider = inferred
    package = providers.get(provider)
    if package and importlib.util.find_spec(package) is None:
        raise OMConfigError(field, f"model {spec!r} needs the {package} package: {install_hint(package)}")
    keys = PROVIDER_KEYS.get(provider)
    options = provider_options or {}
    if keys and not any(env.get(k) for k in keys) and not any(options.get(k) for k in _KEY_OPTIONS):
        raise OMConfigError(field, f"model {spec!r} needs an API key: set the {' or '.join(keys)} environment "
                                   "variable (or pass the key in provider_options)")


def check_model_strings(config: OMConfig, environ: Mapping[str, str] | None = None) -> None:
    """Check every explicit model string of ``config`` (see the module docstring)."""
    if not config.enabled:
        return
    options = {**config.observation.provider_options, **config.reflection.provider_options}
    seen: set[str] = set()
    for spec, field in ((config.model, "model"), (config.observation.model, "observation.model"),
                        (config.reflection.model, "reflection.model")):
        for path, text in _strings(spec, field):
            if text in seen:
                continue
            seen.add(text)
            check_model_string(text, path, options, environ)
