"""Extractors: named values OM pulls out of every observation or reflection.

An extractor without a schema is *inline*: the Observer/Reflector is asked to
write its value between ``<slug>`` tags in the same answer, so it costs no extra
call. An extractor with a pydantic schema runs as a follow-up structured call
after the main one. The built-in values (current task, suggested response,
thread title) go through the same pipeline, so every value — built-in or
custom — is persisted, reported in the end events and fails independently.
"""

from __future__ import annotations

import inspect
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import TAG_NOSTREAM
from pydantic import BaseModel

from ..foundation.config import OMConfigError
from ..foundation.events import ExtractionFailure
from ..foundation.fence import neutralise
from ..foundation.internal_calls import internal_call_metadata_for
from ..store.base import OMRecord

if TYPE_CHECKING:
    from .host import MemoryHost

logger = logging.getLogger("langchain_om.extensions.extractors")

Source = Literal["observation", "reflection"]
ExtractionContext = dict[str, Any]
"""What instruction/schema functions and ``on_extracted`` receive.

Keys: ``source`` ("observation" | "reflection"), ``slug``, ``thread_id``, ``resource_id``,
``memory`` (the ``ObservationalMemory``), ``record`` (the ``OMRecord`` before this cycle),
``request_context`` (the run config, ``RunnableConfig``, of the agent step that started the
cycle, also for a background buffering cycle; None when the step had none), ``main_agent``
(the id of the model the agent calls, e.g. ``"openai/gpt-5-mini"``, or None when unknown),
``previous_value`` (last persisted value or None) and, for ``on_extracted``, ``value``
(the extracted value), ``input_text`` and ``observations`` (the cycle's new text).
"""

BUILTIN_SLUGS = frozenset({"current-task", "suggested-response", "thread-title"})
RESERVED_TAGS = frozenset(
    {
        "observations",
        "observation",
        "observation-group",
        "current-task",
        "suggested-response",
        "thread-title",
        "reflection",
        "memory",
        "system",
        "user",
        "assistant",
        "working-memory",
    }
)
"""Tags the OM prompts and the context message already use; a custom slug may not reuse them."""

_SLUG_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_KEY_PART_RE = re.compile(r"^[A-Za-z0-9_-]+$")


def slugify(name: str) -> str:
    """``"User profile"`` -> ``"user-profile"``: lowercase letters, digits and single hyphens."""
    return re.sub(r"[^a-z0-9]+", "-", name.strip().lower()).strip("-")


class InlineSpec(NamedTuple):
    """What the Observer/Reflector prompt needs to request one inline value."""

    slug: str
    instructions: str
    previous_value: str | None


class Extractor:
    """A value OM extracts during observation (``observation.extract``) or reflection
    (``reflection.extract``).

    ``instructions`` and ``schema`` may be functions of an ``ExtractionContext``;
    ``on_extracted(context)`` (sync or async) may return a replacement value, and raising
    in it records an extraction failure for this slug only.
    """

    _allow_reserved = False

    def __init__(
        self,
        name: str,
        instructions: str | Callable[[ExtractionContext], str],
        schema: Any = None,
        include_previous_extraction: bool = True,
        metadata_key_path: str | Literal[False] | None = None,
        on_extracted: Callable[[ExtractionContext], Any] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise OMConfigError("extractor.name", "must be a non-empty string")
        slug = slugify(name)
        if not slug or not _SLUG_RE.match(slug):
            raise OMConfigError("extractor.name", f"{name!r} gives no usable slug (letters, digits, hyphens)")
        if not self._allow_reserved:
            if slug in BUILTIN_SLUGS:
                raise OMConfigError("extractor.name", f"slug {slug!r} is a built-in extractor and cannot be reused")
            if slug in RESERVED_TAGS:
                raise OMConfigError("extractor.name", f"slug {slug!r} is a reserved tag of the OM prompts")
        if not (isinstance(instructions, str) and instructions.strip()) and not callable(instructions):
            raise OMConfigError(f"extractor[{slug}].instructions", "must be a non-empty string or a function")
        if schema is not None and not _is_schema(schema) and not callable(schema):
            raise OMConfigError(
                f"extractor[{slug}].schema", "must be a pydantic model class, a JSON schema dict or a function"
            )
        if not isinstance(include_previous_extraction, bool):
            raise OMConfigError(f"extractor[{slug}].include_previous_extraction", "must be true or false")
        if metadata_key_path is None:
            metadata_key_path = f"extracted.{slug}"
        if metadata_key_path is True:  # type: ignore[comparison-overlap]  # runtime guard for untyped callers
            raise OMConfigError(f"extractor[{slug}].metadata_key_path", "use a dot path string or false")
        if metadata_key_path is not False:
            if not isinstance(metadata_key_path, str) or not all(
                _KEY_PART_RE.match(part) for part in metadata_key_path.split(".")
            ):
                raise OMConfigError(
                    f"extractor[{slug}].metadata_key_path",
                    f"{metadata_key_path!r} is not a dot path of names (e.g. 'extracted.profile')",
                )
        if on_extracted is not None and not callable(on_extracted):
            raise OMConfigError(f"extractor[{slug}].on_extracted", "must be callable")
        self.name = name
        self._slug = slug
        self.instructions = instructions
        self.schema = schema
        self.include_previous_extraction = include_previous_extraction
        self.metadata_key_path: str | Literal[False] = metadata_key_path
        self.on_extracted = on_extracted


    def attach(self, working_memory: Any, field: str) -> None:
        """Called once the engine is built, with its working memory (or None); an extractor that
        writes the working memory document checks it is there. Nothing by default."""
    @property
    def slug(self) -> str:
        """Stable identifier: the XML tag and the persistence key. Derived from ``name``; read-only."""
        return self._slug

    @property
    def inline(self) -> bool:
        """Inline extractors are answered inside the Observer/Reflector output."""
        return self.schema is None

    def __repr__(self) -> str:
        kind = "inline" if self.inline else "structured"
        return f"{type(self).__name__}(slug={self.slug!r}, {kind})"

    # -- hooks subclasses override ------------------------------------------------

    def resolve_instructions(self, context: ExtractionContext) -> str:
        text = self.instructions(context) if callable(self.instructions) else self.instructions
        if not isinstance(text, str) or not text.strip():
            raise ValueError("instructions function returned no text")
        return text

    def resolve_schema(self, context: ExtractionContext) -> Any:
        if self.schema is None or _is_schema(self.schema):
            return self.schema
        schema = self.schema(context)
        if schema is not None and not _is_schema(schema):
            raise TypeError(f"schema function returned {type(schema).__name__}, not a pydantic model or JSON schema")
        return schema

    async def previous_value(self, context: ExtractionContext) -> Any:
        """The value shown to the model as "previous"; by default the persisted one."""
        record: OMRecord = context["record"]
        if self.metadata_key_path is False:
            return None
        return get_path(record.metadata.get("om", {}), self.metadata_key_path)

    def parse_inline(self, raw: str) -> Any:
        """Turn the tagged text into the value (plain stripped text by default)."""
        return raw.strip()

    async def after_extracted(self, value: Any, context: ExtractionContext) -> Any:
        """Runs the user's ``on_extracted``; subclasses add side effects (working memory writes)."""
        if self.on_extracted is None:
            return value
        ctx = dict(context, value=value)
        replacement = self.on_extracted(ctx)
        if inspect.isawaitable(replacement):
            replacement = await replacement
        return value if replacement is None else replacement


class BuiltinExtractor(Extractor):
    """current-task / suggested-response / thread-title: prompted by the core prompt itself,
    read from the parsed output attribute of the same name."""

    _allow_reserved = True

    def __init__(self, slug: str, attribute: str, mirror_key: str) -> None:
        super().__init__(slug, f"built-in {slug}", metadata_key_path=f"extracted.{slug}")
        self.attribute = attribute
        self.mirror_key = mirror_key


def _is_schema(value: Any) -> bool:
    return (isinstance(value, type) and issubclass(value, BaseModel)) or isinstance(value, Mapping)


def get_path(root: Any, path: str) -> Any:
    node = root
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def set_path(root: dict[str, Any], path: str, value: Any) -> None:
    parts = path.split(".")
    node = root
    for part in parts[:-1]:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[parts[-1]] = value


def to_jsonable(value: Any) -> Any:
    """Values are persisted as JSON: pydantic objects become dicts."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    return value


class UnstorableValueError(ValueError):
    """An extracted value JSON cannot hold; it fails its extractor, never the cycle's commit."""


def check_storable(value: Any, where: str = "value") -> Any:
    """``value`` unchanged if JSON (UTF-8 text, no NaN) can hold it, else ``UnstorableValueError``.

    Run where a value is produced, so one bad extractor costs only its own value: left for the
    store to find, it would fail the commit of the whole observation, every cycle."""
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnstorableValueError(f"{where}: JSON cannot hold the number {value}")
        return value
    if isinstance(value, str):
        _check_text(value, where)
        return value
    if isinstance(value, list):
        for index, item in enumerate(value):
            check_storable(item, f"{where}[{index}]")
        return value
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise UnstorableValueError(f"{where}: JSON object keys must be strings, got {type(key).__name__}")
            _check_text(key, f"{where} key")
            check_storable(item, f"{where}[{key!r}]")
        return value
    raise UnstorableValueError(f"{where}: JSON cannot hold a {type(value).__name__}")


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UnstorableValueError(
            f"{where}: JSON text cannot hold the lone surrogate {text[exc.start]!r} at position {exc.start}"
        ) from None


def _show(value: Any) -> str:
    import json

    if isinstance(value, str):
        return value
    return json.dumps(to_jsonable(value), ensure_ascii=False, indent=2, default=str)


class ExtractionPipeline:
    """All extractors of one ``MemoryHost``; the engine calls it at its two seams."""

    def __init__(self, observation: Sequence[Extractor], reflection: Sequence[Extractor], *,
                 thread_title: bool) -> None:
        self.builtins: dict[Source, list[BuiltinExtractor]] = {
            "observation": [
                BuiltinExtractor("current-task", "current_task", "current_task"),
                BuiltinExtractor("suggested-response", "suggested_response", "suggested_response"),
            ],
            "reflection": [
                BuiltinExtractor("current-task", "current_task", "current_task"),
                BuiltinExtractor("suggested-response", "suggested_response", "suggested_response"),
            ],
        }
        if thread_title:
            self.builtins["observation"].append(BuiltinExtractor("thread-title", "thread_title", "thread_title"))
        self.custom: dict[Source, list[Extractor]] = {"observation": list(observation),
                                                      "reflection": list(reflection)}
        self._by_slug: dict[str, Extractor] = {}
        for extractor in [*self.builtins["observation"], *self.custom["observation"], *self.custom["reflection"]]:
            self._by_slug.setdefault(extractor.slug, extractor)

    @classmethod
    def from_config(cls, memory: MemoryHost, extra_observation: Sequence[Extractor] = ()
                    ) -> ExtractionPipeline:
        """Validate ``observation.extract`` / ``reflection.extract`` (types, unique slugs)."""
        obs_cfg, ref_cfg = memory.config.observation, memory.config.reflection
        observation_items = [*obs_cfg.extract, *extra_observation]
        seen: dict[str, str] = {}
        lists: dict[Source, list[Extractor]] = {"observation": [], "reflection": []}
        for source, items in (("observation", observation_items), ("reflection", list(ref_cfg.extract))):
            for index, item in enumerate(items):
                field = f"{source}.extract[{index}]"
                if not isinstance(item, Extractor):
                    raise OMConfigError(field, f"expected an Extractor, got {type(item).__name__}")
                if isinstance(item, BuiltinExtractor):
                    raise OMConfigError(field, f"{item.slug!r} is built in and always runs")
                item.attach(getattr(memory, "working_memory", None), field)
                if item.slug in seen:
                    raise OMConfigError(field, f"duplicate extractor slug {item.slug!r} (already in {seen[item.slug]})")
                seen[item.slug] = field
                lists[source].append(item)  # type: ignore[index]
        return cls(lists["observation"], lists["reflection"], thread_title=obs_cfg.thread_title)

    def extractors(self, source: Source) -> list[Extractor]:
        return [*self.builtins[source], *self.custom[source]]

    def get(self, slug: str) -> Extractor | None:
        return self._by_slug.get(slug)

    def _context(self, source: Source, extractor: Extractor, memory: Any, record: OMRecord,
                 thread_id: str | None, resource_id: str | None, request_context: RunnableConfig | None = None,
                 main_agent: str | None = None) -> ExtractionContext:
        return {
            "source": source,
            "slug": extractor.slug,
            "thread_id": thread_id if thread_id is not None else record.thread_id,
            "resource_id": resource_id if resource_id is not None else record.resource_id,
            "memory": memory,
            "record": record,
            "request_context": request_context,
            "main_agent": main_agent,
            "previous_value": None,
        }

    async def ainline_specs(self, source: Source, record: OMRecord, *, memory: Any = None,
                            thread_id: str | None = None, resource_id: str | None = None,
                            request_context: RunnableConfig | None = None,
                            main_agent: str | None = None) -> list[InlineSpec]:
        """The custom inline extractors the Observer/Reflector prompt must request.

        An extractor whose instructions cannot be built is left out of the prompt (its failure
        is reported by ``run``)."""
        specs: list[InlineSpec] = []
        for extractor in self.custom[source]:
            if not extractor.inline:
                continue
            ctx = self._context(source, extractor, memory, record, thread_id, resource_id, request_context,
                                main_agent)
            try:
                previous = await extractor.previous_value(ctx) if extractor.include_previous_extraction else None
                ctx["previous_value"] = previous
                instructions = extractor.resolve_instructions(ctx)
            except Exception as exc:
                logger.warning("langchain-om extractor %s: instructions failed: %s", extractor.slug, exc)
                continue
            specs.append(InlineSpec(extractor.slug, instructions, None if previous is None else _show(previous)))
        return specs

    def inline_specs(self, source: Source, record: OMRecord) -> list[InlineSpec]:
        """Sync variant for callers without a loop; extractors needing async previous values are
        shown without them."""
        specs: list[InlineSpec] = []
        for extractor in self.custom[source]:
            if not extractor.inline:
                continue
            ctx = self._context(source, extractor, None, record, None, None)
            previous = None
            if extractor.include_previous_extraction and extractor.metadata_key_path is not False:
                previous = get_path(record.metadata.get("om", {}), extractor.metadata_key_path)
            ctx["previous_value"] = previous
            try:
                instructions = extractor.resolve_instructions(ctx)
            except Exception:
                continue
            specs.append(InlineSpec(extractor.slug, instructions, None if previous is None else _show(previous)))
        return specs

    async def run(
        self,
        *,
        source: Source,
        memory: Any,
        record: OMRecord,
        parsed: Any,
        input_text: str,
        thread_id: str,
        resource_id: str,
        request_context: RunnableConfig | None = None,
        main_agent: str | None = None,
    ) -> tuple[dict[str, Any], list[ExtractionFailure]]:
        """Collect every value of this cycle. A failing extractor adds a failure and nothing else."""
        values: dict[str, Any] = {}
        failures: list[ExtractionFailure] = []
        observations = str(getattr(parsed, "observations", "") or "")
        inline_values = _inline_values(parsed)
        for extractor in self.extractors(source):
            ctx = self._context(source, extractor, memory, record, thread_id, resource_id, request_context,
                                main_agent)
            ctx["input_text"] = input_text
            ctx["observations"] = observations
            try:
                if isinstance(extractor, BuiltinExtractor):
                    value = getattr(parsed, extractor.attribute, None)
                    if isinstance(value, str):
                        value = value.strip() or None
                    if value is None:
                        continue
                    values[extractor.slug] = value
                    continue
                if extractor.include_previous_extraction:
                    ctx["previous_value"] = await extractor.previous_value(ctx)
                if extractor.inline:
                    raw = inline_values.get(extractor.slug)
                    if raw is None:
                        continue  # the model had nothing new to say for this slug
                    value = extractor.parse_inline(raw)
                else:
                    schema = extractor.resolve_schema(ctx)
                    if schema is None:
                        continue
                    value = await self._structured(memory, source, extractor, schema, ctx)
                if value is None:
                    continue
                value = await extractor.after_extracted(value, ctx)
                if value is None:
                    continue
                values[extractor.slug] = check_storable(to_jsonable(value), f"value of {extractor.slug!r}")
            except Exception as exc:
                logger.warning("langchain-om extractor %s failed: %s", extractor.slug, exc)
                failures.append(ExtractionFailure(slug=extractor.slug, error=f"{type(exc).__name__}: {exc}"))
        return values, failures

    async def _structured(self, memory: Any, source: Source, extractor: Extractor, schema: Any,
                          ctx: ExtractionContext) -> Any:
        """The follow-up call: the OM model of this role bound to ``schema`` via ``with_structured_output``,
        through the same fallback chain (list order, retries) as the main call."""
        from ..model_calls.models import ModelSelectionError, aresolve_chat_model

        prompt = structured_prompt(extractor, ctx)
        role = "observer" if source == "observation" else "reflector"
        spec = memory.config.model_spec(source)
        input_tokens = memory.counter.count_messages(prompt)
        model_context = {"thread_id": ctx["thread_id"], "resource_id": ctx["resource_id"], "role": role,
                         "input_tokens": input_tokens, "memory": memory, "purpose": "extraction",
                         "slug": extractor.slug}
        options = (memory.config.observation if source == "observation" else memory.config.reflection).provider_options
        chain = await aresolve_chat_model(spec if spec is not None else "default", input_tokens=input_tokens,
                                          context=model_context, settings=memory.config.model_settings(source),
                                          provider_options=options)
        config: RunnableConfig = {"tags": [TAG_NOSTREAM, "langchain_om", f"om_{role}_extract"],
                                  "run_name": f"om_extract_{extractor.slug}",
                                  "metadata": internal_call_metadata_for(f"{role}_extract")}
        last: Exception | None = None
        for model, retries in chain:
            if not hasattr(model, "with_structured_output"):
                last = TypeError(f"{type(model).__name__} has no with_structured_output")
                continue
            bound = model.with_structured_output(schema)
            for _attempt in range(retries + 1):
                try:
                    return await bound.ainvoke(prompt, config=config)
                except ModelSelectionError:
                    raise
                except Exception as exc:
                    last = exc
                    logger.warning("langchain-om extractor %s structured call failed: %s", extractor.slug, exc)
        raise last if last is not None else RuntimeError("no model for the structured extraction")

    def persist(self, record: OMRecord, values: Mapping[str, Any]) -> None:
        """Write a cycle's values into ``record.metadata["om"]`` at each extractor's key path,
        mirroring the built-ins to the legacy top-level keys."""
        if not values:
            return
        om_meta = record.metadata.setdefault("om", {})
        for slug, value in values.items():
            extractor = self.get(slug)
            path: str | Literal[False] = f"extracted.{slug}" if extractor is None else extractor.metadata_key_path
            if path is not False:
                set_path(om_meta, path, to_jsonable(value))
            if isinstance(extractor, BuiltinExtractor):
                record.metadata[extractor.mirror_key] = value


def _inline_values(parsed: Any) -> dict[str, str]:
    for attribute in ("extracted", "inline_values", "inline"):
        found = getattr(parsed, attribute, None)
        if isinstance(found, Mapping):
            return {str(k): str(v) for k, v in found.items() if v is not None}
    return {}


def structured_prompt(extractor: Extractor, ctx: ExtractionContext) -> list[BaseMessage]:
    """Messages of the follow-up structured call: the extractor's brief, then what OM just saw."""
    instructions = extractor.resolve_instructions(ctx)
    source = ctx["source"]
    what = "conversation transcript" if source == "observation" else "observation log being condensed"
    system = (
        "You extract one structured value for a memory system, from the material below. "
        f"The value is called '{extractor.slug}'. Fill the schema only with what the material supports; "
        "leave optional fields empty rather than guessing.\n\n"
        f"What to extract:\n{instructions}"
    )
    parts = [f"<input kind=\"{what}\">\n{neutralise(str(ctx.get('input_text', '')))}\n</input>"]
    if ctx.get("observations"):
        parts.append(f"<new-observations>\n{neutralise(ctx['observations'])}\n</new-observations>")
    if extractor.include_previous_extraction and ctx.get("previous_value") is not None:
        parts.append(
            "<previous-value>\n" + neutralise(_show(ctx["previous_value"])) + "\n</previous-value>\n"
            "Keep what is still true from the previous value and update what changed."
        )
    return [SystemMessage(content=system), HumanMessage(content="\n\n".join(parts))]
