"""Validated configuration of Observational Memory.

Every option of the reference page lives here in snake_case. Validation happens
once, at construction, so a bad option fails fast with an ``OMConfigError``
naming the offending field instead of surfacing mid-conversation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .config_values import DEFAULT_BLOCK_AFTER as DEFAULT_BLOCK_AFTER
from .config_values import DEFAULT_MAX_OUTPUT_TOKENS as DEFAULT_MAX_OUTPUT_TOKENS
from .config_values import DEFAULT_MODEL as DEFAULT_MODEL
from .config_values import DEFAULT_MODEL_TIMEOUT_MS as DEFAULT_MODEL_TIMEOUT_MS
from .config_values import OBSERVER_DEFAULT_TEMPERATURE as OBSERVER_DEFAULT_TEMPERATURE
from .config_values import REFLECTOR_DEFAULT_TEMPERATURE as REFLECTOR_DEFAULT_TEMPERATURE
from .config_values import Duration as Duration
from .config_values import OMConfigError as OMConfigError
from .config_values import Scope as Scope
from .config_values import check_model_spec, check_timeout, timeout_seconds
from .config_values import parse_duration as parse_duration
from .config_values import ratio_tokens as ratio_tokens
from .field_docs import describe_fields


class _Strict(BaseModel):
    # allow_inf_nan=False: NaN passes every "<= 0" check and would only fail mid-conversation.
    # field docstrings become descriptions (describe_fields, module end; docs/configuration.md is
    # generated from them); defer_build: schemas are built on first use, after that.
    model_config = ConfigDict(
        extra="forbid", arbitrary_types_allowed=True, validate_assignment=False, allow_inf_nan=False,
        defer_build=True,
    )


class ModelSettings(_Strict):
    """Generation settings of the Observer or Reflector call."""

    temperature: float | None = None
    """Sampling temperature; `None`: 0.3 for the Observer, 0 for the Reflector."""
    max_output_tokens: int | None = None
    """Output limit of one call; `None`: 100,000 with the default model, the provider's own otherwise."""

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, v: float | None) -> float | None:
        if v is not None and not 0 <= v <= 2:
            raise ValueError("temperature must be between 0 and 2")
        return v

    @field_validator("max_output_tokens")
    @classmethod
    def _max_output(cls, v: int | None) -> int | None:
        if v is not None and v < 1:
            raise ValueError("max_output_tokens must be at least 1")
        return v


def _refuse_bool(value: Any) -> Any:
    """A token count given as ``True`` would silently mean 1 token (``bool`` is an ``int``)."""
    if isinstance(value, bool):
        raise ValueError(f"must be a number of tokens, got {value!r}")
    return value


class ObservationConfig(_Strict):
    """When and how the Observer runs."""

    model: Any = None
    """Observer model (any form the top-level `model` takes); unset: `reflection.model`, then the default model."""
    instruction: str | None = None
    """Extra instructions appended to the Observer's prompt (what to pay attention to in your domain)."""
    thread_title: bool = False
    """The Observer proposes a short thread title and updates it when the topic changes."""
    extract: list[Any] = Field(default_factory=list)
    """`Extractor`s run with each observation; their values are stored in the record's metadata."""
    manage_working_memory: bool = False
    """Adds a `WorkingMemoryExtractor`: the Observer maintains the resource's working memory."""
    observe_attachments: bool | Literal["auto"] | list[str] = True
    """Which images reach the Observer beside their `[Image #1: name.png]` placeholder: `True` all, `False` none,
    `"auto"` when the model takes images, or a MIME allow-list (`["image/*"]`). Other files are placeholders only."""
    message_tokens: int = 30_000
    """Unobserved-message tokens that trigger observation."""
    max_tokens_per_batch: int = 10_000
    """Most conversation tokens one Observer call takes; a larger backlog is observed in several calls, oldest first,
    each committed."""
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    """Generation settings of the Observer call (`temperature`, `max_output_tokens`)."""
    provider_options: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific options passed to the Observer call."""
    buffer_tokens: float | Literal[False] = 0.2
    """Background buffering interval: below 1 a fraction of `message_tokens`, 1 or more tokens; `False` turns buffering
    (and buffered reflection) off. Must stay below `message_tokens`."""
    buffer_on_idle: bool = False
    """Also buffer in the background when a turn ends (`aon_turn_end`, the graph's `om_turn_end` node)."""
    buffer_activation: float = 0.8
    """What an activation keeps: a ratio `r <= 1` leaves about `(1 - r) x message_tokens` of the window; a value `>=
    1000` keeps that many tokens."""
    activate_after_idle: Any = None
    """Activate buffered observations after this much inactivity, below the threshold too: ms, `"5m"`, `"1hr"`,
    `"auto"` (the provider's prompt-cache TTL) or `False`. Unset: the top-level value."""
    activate_on_provider_change: bool | None = None
    """Activate buffered observations when the agent's provider or model changes. Unset: the top-level value."""
    block_after: float | None = None
    """Force a blocking observation when buffering falls behind: `[1, 100)` a multiple of `message_tokens`, `>= 100`
    tokens. Unset: 1.2 with buffering."""
    previous_observer_tokens: int | Literal[False] = 2000
    """Budget of earlier observations shown to the Observer (🔴 lines kept first); `0` none, `False` no truncation."""
    model_timeout: Any = DEFAULT_MODEL_TIMEOUT_MS
    """Ceiling of one Observer attempt (ms, `"90s"`, `False`): a hung provider becomes a failure event, not a stalled
    step."""

    @field_validator("model_timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> Any:
        return check_timeout(v, "observation.model_timeout")

    def model_timeout_s(self) -> float | None:
        return timeout_seconds(self.model_timeout)

    @field_validator("message_tokens", "max_tokens_per_batch", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        return _refuse_bool(v)

    @field_validator("message_tokens", "max_tokens_per_batch")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be a positive number of tokens")
        return v

    @field_validator("buffer_tokens", mode="before")
    @classmethod
    def _buffer_tokens(cls, v: Any) -> Any:
        if v is True:
            raise ValueError("use a ratio (0-1), a token count, or false")
        if v is not False and isinstance(v, (int, float)) and v <= 0:
            raise ValueError("must be a ratio in (0, 1), a token count >= 1, or false")
        return v

    @field_validator("buffer_activation")
    @classmethod
    def _buffer_activation(cls, v: float) -> float:
        if v <= 0:
            raise ValueError("must be a ratio in (0, 1] or a token count >= 1000 to keep")
        if 1 < v < 1000:
            raise ValueError("values above 1 are tokens to keep and must be >= 1000; ratios are <= 1")
        return v

    @field_validator("previous_observer_tokens", mode="before")
    @classmethod
    def _previous(cls, v: Any) -> Any:
        if v is True:
            raise ValueError("use a token budget (>= 0) or false")
        if isinstance(v, (int, float)) and v < 0:
            raise ValueError("must be >= 0 (0 omits prior observations) or false")
        return v

    @field_validator("observe_attachments")
    @classmethod
    def _attachments(cls, v: Any) -> Any:
        if isinstance(v, list):
            for item in v:
                if not isinstance(item, str) or not item or (item != "*" and "/" not in item):
                    raise ValueError(f"{item!r} is not a MIME type, 'type/*' or '*'")
            return [item.lower() for item in v]
        return v

    @field_validator("activate_after_idle", mode="before")
    @classmethod
    def _idle(cls, v: Any) -> Any:
        return parse_duration(v, "observation.activate_after_idle")

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, v: Any) -> Any:
        return check_model_spec(v, "observation.model")

    @property
    def buffering_enabled(self) -> bool:
        return self.buffer_tokens is not False

    def buffer_interval_tokens(self) -> int:
        """The buffering interval in tokens (ratios are of ``message_tokens``)."""
        if self.buffer_tokens is False:
            return 0
        if self.buffer_tokens < 1:
            return max(1, ratio_tokens(self.message_tokens, self.buffer_tokens))
        return int(self.buffer_tokens)

    def block_after_tokens(self) -> int:
        """The token count past which a synchronous observation is forced."""
        value = self.block_after if self.block_after is not None else DEFAULT_BLOCK_AFTER
        if value < 100:
            return ratio_tokens(self.message_tokens, value)
        return int(value)

    def tokens_to_keep_after_activation(self) -> int:
        """Message tokens that should remain in the window after an activation."""
        if self.buffer_activation <= 1:
            return max(0, ratio_tokens(self.message_tokens, 1 - self.buffer_activation))
        return int(self.buffer_activation)


class ReflectionConfig(_Strict):
    """When and how the Reflector runs."""

    model: Any = None
    """Reflector model; unset: `observation.model`, then the default model."""
    instruction: str | None = None
    """Extra instructions appended to the Reflector's prompt."""
    extract: list[Any] = Field(default_factory=list)
    """`Extractor`s run with each reflection."""
    observation_tokens: int = 40_000
    """Observation-log tokens that trigger reflection."""
    model_settings: ModelSettings = Field(default_factory=ModelSettings)
    """Generation settings of the Reflector call."""
    provider_options: dict[str, Any] = Field(default_factory=dict)
    """Provider-specific options passed to the Reflector call."""
    buffer_activation: float = 0.5
    """Start a background reflection when the log reaches this fraction of `observation_tokens`."""
    activate_after_idle: Any = None
    """Idle activation of a buffered reflection (never inherited from the top level)."""
    activate_on_provider_change: bool = False
    """Activate a buffered reflection when the agent's provider or model changes (never inherited)."""
    block_after: float = DEFAULT_BLOCK_AFTER
    """Force a blocking reflection past this multiple (`< 100`) or size (`>= 100` tokens) of `observation_tokens`."""
    model_timeout: Any = DEFAULT_MODEL_TIMEOUT_MS
    """Ceiling of one Reflector attempt (ms, `"90s"`, `False`)."""

    @field_validator("model_timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> Any:
        return check_timeout(v, "reflection.model_timeout")

    def model_timeout_s(self) -> float | None:
        return timeout_seconds(self.model_timeout)

    @field_validator("observation_tokens", mode="before")
    @classmethod
    def _not_bool(cls, v: Any) -> Any:
        return _refuse_bool(v)

    @field_validator("observation_tokens")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be a positive number of tokens")
        return v

    @field_validator("buffer_activation")
    @classmethod
    def _ratio(cls, v: float) -> float:
        if not 0 < v <= 1:
            raise ValueError("must be a ratio in (0, 1] of observation_tokens")
        return v

    @field_validator("activate_after_idle", mode="before")
    @classmethod
    def _idle(cls, v: Any) -> Any:
        return parse_duration(v, "reflection.activate_after_idle")

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, v: Any) -> Any:
        return check_model_spec(v, "reflection.model")

    def block_after_tokens(self) -> int:
        if self.block_after < 100:
            return ratio_tokens(self.observation_tokens, self.block_after)
        return int(self.block_after)

    def buffer_start_tokens(self) -> int:
        return ratio_tokens(self.observation_tokens, self.buffer_activation)


class FailurePolicyConfig(_Strict):
    """What OM does when its own model calls fail (``failure_policy=`` option).

    OM's Observer / Reflector are paid, flaky services. Transient errors (429, 5xx, timeouts,
    connection resets) are retried ``max_retries`` times with exponential backoff and full jitter;
    permanent ones (auth, bad request, missing key) are never retried. Then ``on_failure`` applies:
    ``"continue"`` (default, for a live agent) lets the step go on without observing (the status
    carries ``observation_error`` and a ``data-om-observation-failed`` event is emitted);
    ``"raise"`` raises ``OMObservationError`` to the caller.
    """

    on_failure: Literal["continue", "raise"] = "continue"
    """`"continue"`: the step goes on without observing and `data-om-observation-failed` says why; `"raise"`: the
    caller gets `OMObservationError` (the turn's messages are stored). A string is shorthand:
    `failure_policy="raise"`."""
    max_retries: int = Field(default=2, ge=0, le=10)
    """Retries of a transient error (429, 408, 409, 5xx, timeouts) per model; permanent errors are never retried."""
    backoff: Any = 500.0
    """Backoff base in ms or a duration (`"500ms"`); doubles per retry, each wait uniform in `[0, that]`."""
    max_backoff: Any = 8000.0
    """Backoff cap, in ms or a duration (`"8s"`)."""
    turn_budget: Any = 60_000.0
    """Wall-clock budget for OM's model calls in one step (ms, `"30s"`, `False` unbounded). Background buffering is not
    bound by it."""
    hard_ceiling: int | None = Field(default=None, ge=1)
    """While the Observer fails, the context keeps only the newest unobserved messages that fit these tokens (nothing
    is deleted); with `"raise"`, passing it raises. `None`: twice `observation.block_after`'s tokens."""
    lease_ttl: Any = 10_000.0
    """How long (ms or a duration) a worker's lease on a record outlives the worker if it dies holding it (a live
    holder renews it every third of this)."""

    @field_validator("backoff", "max_backoff", "lease_ttl", mode="before")
    @classmethod
    def _durations(cls, v: Any, info: Any) -> Any:
        parsed = parse_duration(v, f"failure_policy.{info.field_name}")
        if parsed is None or parsed is False or parsed == "auto":
            raise OMConfigError(f"failure_policy.{info.field_name}", "expected a duration (ms, '500ms', '2s')")
        return parsed

    @field_validator("turn_budget", mode="before")
    @classmethod
    def _budget(cls, v: Any) -> Any:
        parsed = parse_duration(v, "failure_policy.turn_budget")
        if parsed is False or parsed is None:
            return False
        if parsed == "auto" or parsed <= 0:
            raise OMConfigError("failure_policy.turn_budget", "expected a positive duration (ms, '30s') or false")
        return parsed

    def turn_budget_s(self) -> float | None:
        return None if self.turn_budget is False else float(self.turn_budget) / 1000.0

    def background_bound_s(self) -> float:
        """How long a background cycle (buffering, reflection) may run before it is cancelled:
        twice the turn budget plus two lease ttls (140 s by default), 10 minutes without a
        budget. A cycle is a few model calls within the same retry policy as a turn's, so one
        still running past this waits on something that will not come."""
        budget = self.turn_budget_s()
        return (600.0 if budget is None else 2 * budget) + 2 * float(self.lease_ttl) / 1000.0


class RetrievalConfig(_Strict):
    """The ``recall`` tool: browsing (and optionally searching) the raw messages behind observations.

    Keyword search (``mode="search"``) needs nothing: it runs on the store's full-text index.
    ``vector=True`` adds semantic search and needs ``embeddings`` (the vectors are then kept in
    OM's store, so they survive restarts) or a LangChain ``VectorStore`` (``vector_store``).
    """

    vector: bool = False
    """Add semantic search to `recall`'s keyword search (needs `embeddings` or `vector_store`)."""
    scope: Scope = "resource"
    """`"resource"`: `recall` reads every thread of the user; `"thread"`: the current thread only."""
    instructions: str | None = None
    """Extra guidance on using `recall`, appended to OM's own."""
    vector_store: Any = None
    """A LangChain `VectorStore` (filterable by `resource_id` metadata) for semantic search."""
    embeddings: Any = None
    """A LangChain `Embeddings`: each message is embedded once and its vector kept in OM's store."""
    search_limit: int = Field(default=10, ge=1)
    """Most results one `recall` search returns."""

    @model_validator(mode="after")
    def _vector_needs_store(self) -> RetrievalConfig:
        if self.vector and self.vector_store is None and self.embeddings is None:
            raise OMConfigError(
                "retrieval.vector_store",
                "vector search needs embeddings=... (vectors are then kept in OM's store) or a "
                "LangChain VectorStore (vector_store=...)",
            )
        return self


def _reraise(exc: ValidationError, prefix: str) -> OMConfigError:
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first.get("loc", ()))
    field = f"{prefix}.{loc}" if prefix and loc else (prefix or loc)
    message = str(first.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    ctx_error = first.get("ctx", {}).get("error") if first.get("ctx") else None
    if isinstance(ctx_error, OMConfigError):
        return ctx_error
    return OMConfigError(field, message)


def _coerce(cls: type[_Strict], value: Any, prefix: str) -> Any:
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if isinstance(value, Mapping):
        try:
            return cls(**dict(value))
        except OMConfigError:
            raise
        except ValidationError as exc:
            raise _reraise(exc, prefix) from None
    raise OMConfigError(prefix, f"expected a dict or {cls.__name__}, got {type(value).__name__}")


class OMConfig(_Strict):
    """The whole configuration, cross-checked."""

    enabled: bool = True
    """`False` stores messages but never observes."""
    model: Any = None
    """Observer *and* Reflector model: an `init_chat_model` string (`provider:model` or `provider/model`), a chat
    model, a callable `(context) -> model`, a `ModelByInputTokens`, or a list of fallbacks; `"default"` is the
    default model. Not together with `observation.model` / `reflection.model`. Unset:
    `google_genai:gemini-2.5-flash`."""
    scope: Scope = "thread"
    """`"thread"`: one log per thread; `"resource"` (experimental): one log shared by all threads of a resource, which
    every call must then name."""
    observation: ObservationConfig = Field(default_factory=ObservationConfig)
    """When and how the Observer runs (`ObservationConfig` or a dict)."""
    reflection: ReflectionConfig = Field(default_factory=ReflectionConfig)
    """When and how the Reflector runs (`ReflectionConfig` or a dict)."""
    share_token_budget: bool = False
    """Messages and observations share `message_tokens + observation_tokens` (needs `buffer_tokens=False`)."""
    temporal_markers: bool = False
    """Insert a stored "time passed" marker before a user message sent 10 minutes or more after the last one."""
    retrieval: RetrievalConfig | None = None
    """`True` or a `RetrievalConfig` / dict: the `recall` tool over the raw messages (keyword search always)."""
    activate_after_idle: Any = None
    """Activate buffered observations after this much inactivity: ms, `"5m"`, `"1hr"`, `"auto"` or `False`. Not
    inherited by reflection."""
    activate_on_provider_change: bool = False
    """Activate buffered observations when the agent's provider or model changes. Not inherited by reflection."""
    obscure_thread_ids: bool = False
    """Hash thread ids in the prompts shown to the Observer (always on in resource scope)."""
    token_counter: Any = "auto"
    """`"auto"` (tiktoken `o200k_base`, shipped offline; else the estimator), `"tiktoken"`, `"estimator"` or a
    `TokenCounter`."""
    hooks: Any = None
    """`ObserveHooks(on_observation_start/end, on_reflection_start/end)`: called with `thread_id`, `resource_id`,
    `trigger`; end hooks also get `usage` and `error`. Hook errors are logged, not raised."""
    failure_policy: FailurePolicyConfig = Field(default_factory=FailurePolicyConfig)
    """When OM's own model calls fail: `"continue"`, `"raise"` or a dict of the `failure_policy.*` options."""
    on_debug_event: Callable[..., Any] | None = None
    """Called with every event, background ones included."""

    @classmethod
    def build(cls, **options: Any) -> OMConfig:
        """Construct from user options, turning every validation problem into ``OMConfigError``."""
        options = dict(options)
        user_obs = options.get("observation")
        obs_fields = set(user_obs.keys()) if isinstance(user_obs, Mapping) else (
            set(user_obs.model_fields_set) if isinstance(user_obs, ObservationConfig) else set()
        )
        user_ref = options.get("reflection")
        ref_fields = set(user_ref.keys()) if isinstance(user_ref, Mapping) else (
            set(user_ref.model_fields_set) if isinstance(user_ref, ReflectionConfig) else set()
        )
        options["observation"] = _coerce(ObservationConfig, user_obs, "observation")
        options["reflection"] = _coerce(ReflectionConfig, user_ref, "reflection")
        retrieval = options.get("retrieval")
        if retrieval is None or retrieval is False:
            options["retrieval"] = None
        elif retrieval is True:
            options["retrieval"] = RetrievalConfig()
        else:
            options["retrieval"] = _coerce(RetrievalConfig, retrieval, "retrieval")
        options["activate_after_idle"] = parse_duration(options.get("activate_after_idle"), "activate_after_idle")
        if options["activate_after_idle"] is None:
            options["activate_after_idle"] = False
        options["model"] = check_model_spec(options.get("model"), "model")
        policy = options.get("failure_policy")
        if isinstance(policy, str):
            policy = {"on_failure": policy}
        options["failure_policy"] = _coerce(FailurePolicyConfig, policy, "failure_policy")
        try:
            config = cls(**options)
        except OMConfigError:
            raise
        except ValidationError as exc:
            raise _reraise(exc, "") from None
        config._cross_check(obs_fields, ref_fields)
        return config

    def _cross_check(self, obs_fields: set[str], ref_fields: set[str]) -> None:
        obs, ref = self.observation, self.reflection
        if self.model is not None and obs.model is not None:
            raise OMConfigError("observation.model", "cannot be set together with the top-level model")
        if self.model is not None and ref.model is not None:
            raise OMConfigError("reflection.model", "cannot be set together with the top-level model")
        if obs.buffer_tokens is not False:
            interval = obs.buffer_tokens
            if interval >= 1 and interval >= obs.message_tokens:
                raise OMConfigError(
                    "observation.buffer_tokens",
                    f"must be below observation.message_tokens ({obs.message_tokens}), got {interval:g}",
                )
            if interval >= 1 and interval != int(interval):
                raise OMConfigError("observation.buffer_tokens", "token counts must be whole numbers")
        if self.share_token_budget and obs.buffer_tokens is not False and self.scope != "resource":
            raise OMConfigError(
                "share_token_budget",
                "is not compatible with async buffering yet; set observation.buffer_tokens to false",
            )
        if obs.block_after is not None:
            _check_block_after(obs.block_after, obs.message_tokens, "observation.block_after", "message_tokens")
            if obs.buffer_tokens is False and "block_after" in obs_fields:
                raise OMConfigError("observation.block_after", "only applies when observation.buffer_tokens is set")
        if "block_after" in ref_fields:
            _check_block_after(ref.block_after, ref.observation_tokens, "reflection.block_after", "observation_tokens")
        if obs.buffer_activation >= 1000 and obs.buffer_activation >= obs.message_tokens:
            raise OMConfigError(
                "observation.buffer_activation",
                f"tokens to keep ({obs.buffer_activation:g}) must be below message_tokens ({obs.message_tokens})",
            )
        if self.token_counter not in ("auto", "tiktoken", "estimator") and not hasattr(
            self.token_counter, "count_messages"
        ):
            raise OMConfigError("token_counter", "use 'auto', 'tiktoken', 'estimator' or a TokenCounter")

    # ---- derived behaviour -------------------------------------------------

    @property
    def buffering_enabled(self) -> bool:
        """Async buffering is off when disabled, in resource scope, or under a shared budget."""
        return self.observation.buffering_enabled and self.scope == "thread" and not self.share_token_budget

    @property
    def reflection_buffering_enabled(self) -> bool:
        return self.buffering_enabled

    @property
    def obscure_ids(self) -> bool:
        return self.obscure_thread_ids or self.scope == "resource"

    def observation_idle_ms(self) -> Duration:
        """Observation inherits the top-level idle activation unless it sets its own (False stops it)."""
        own: Duration = self.observation.activate_after_idle
        inherited: Duration = self.activate_after_idle
        return inherited if own is None else own

    def observation_activates_on_provider_change(self) -> bool:
        own = self.observation.activate_on_provider_change
        return self.activate_on_provider_change if own is None else own

    def reflection_idle_ms(self) -> Duration:
        """Reflection never inherits the top-level value."""
        own: Duration = self.reflection.activate_after_idle
        return own if own is not None else False

    def reflection_activates_on_provider_change(self) -> bool:
        """Reflection never inherits the top-level value either: it must be set on ``reflection``."""
        return self.reflection.activate_on_provider_change

    def uses_default_model(self, which: Literal["observation", "reflection"]) -> bool:
        spec = self.model_spec(which)
        return spec is None or spec == "default" or hasattr(spec, "get_thresholds")

    def model_spec(self, which: Literal["observation", "reflection"]) -> Any:
        """The model for the Observer or Reflector, following the page's fallback chain."""
        if self.model is not None:
            return self.model
        own = self.observation.model if which == "observation" else self.reflection.model
        other = self.reflection.model if which == "observation" else self.observation.model
        return own if own is not None else other

    def model_settings(self, which: Literal["observation", "reflection"]) -> ModelSettings:
        """Settings with defaults filled: temperature per role, 100k max output only on the default model."""
        settings = self.observation.model_settings if which == "observation" else self.reflection.model_settings
        temperature = settings.temperature
        if temperature is None:
            temperature = OBSERVER_DEFAULT_TEMPERATURE if which == "observation" else REFLECTOR_DEFAULT_TEMPERATURE
        max_output = settings.max_output_tokens
        if max_output is None and self.uses_default_model(which):
            max_output = DEFAULT_MAX_OUTPUT_TOKENS
        return ModelSettings(temperature=temperature, max_output_tokens=max_output)

    def hard_ceiling_tokens(self) -> int:
        """Unobserved tokens the agent's context may hold while the Observer is failing."""
        own = self.failure_policy.hard_ceiling
        if own is not None:
            return own
        return 2 * max(self.observation.block_after_tokens(), self.observation.message_tokens)

    def marker_config(self) -> dict[str, Any]:
        return {
            "message_tokens": self.observation.message_tokens,
            "observation_tokens": self.reflection.observation_tokens,
            "scope": self.scope,
        }


def _check_block_after(value: float, threshold: int, field: str, threshold_name: str) -> None:
    if value < 1:
        raise OMConfigError(field, f"must be >= 1 (a multiplier of {threshold_name}) or >= 100 tokens, got {value:g}")
    if value >= 100 and value <= threshold:
        raise OMConfigError(
            field, f"absolute value {value:g} must be greater than {threshold_name} ({threshold})"
        )


describe_fields(__name__, _Strict)
