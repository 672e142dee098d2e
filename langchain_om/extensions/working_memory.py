"""Working memory: one small, always-visible document per resource (user) or thread.

Observations are a dated log that grows and gets condensed; working memory is the
opposite — a short document of the *current* state (name, preferences, goals) that
is overwritten in place. It is a markdown document shaped by ``template`` or, with
``schema``, a JSON object validated by a pydantic model. It is stored through the
OM store (``aget_value`` / ``aput_value``, namespace ``working_memory``) and shown
to the agent in the OM system message.

Who writes it:

* ``agent_managed=True``: the agent itself, through the ``update_working_memory``
  tool (``om.working_memory_tools()``; the middleware adds it automatically).
* ``observation.manage_working_memory=True``: the Observer, through
  ``WorkingMemoryExtractor`` in the normal extractor pipeline. This defaults
  ``agent_managed`` to False and ``use_state_signals`` to True.

``use_state_signals`` (concretely): the extractor is shown the current document and
told to emit an update only when the conversation signals a change of state (a new
durable fact, a correction, a goal reached or dropped, a changed preference). Its
output is then treated as a *delta*: no tag / an identical document means "no
change" (nothing is written), and with a schema only the fields the model fills are
merged into the stored object (fields it leaves empty keep their value). With state
signals off, the extractor must return the complete document on every cycle and
the result replaces the stored one (with a schema: missing fields are cleared).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Optional

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import BaseModel, Field, ValidationError, create_model

from ..foundation.config import OMConfig, OMConfigError
from ..foundation.fence import neutralise
from ..foundation.run_ids import ids_from_run_config
from ..store.base import OMRecord, thread_key, utcnow
from .extractors import ExtractionContext, Extractor

if TYPE_CHECKING:
    from .host import MemoryHost

NAMESPACE = "working_memory"
WORKING_MEMORY_SLUG = "working-memory"
TOOL_NAME = "update_working_memory"

DEFAULT_TEMPLATE = """# About the user
- Name:
- Location / time zone:
- Language and tone they prefer:

# Preferences and constraints
-

# Ongoing goals and projects
-
"""

_OPTION_KEYS = {"enabled", "scope", "template", "schema", "agent_managed", "use_state_signals"}


@dataclass(frozen=True)
class WorkingMemorySettings:
    """Validated ``working_memory=`` option, defaults resolved."""

    enabled: bool = False
    scope: Literal["resource", "thread"] = "resource"
    template: str = DEFAULT_TEMPLATE
    schema: type[BaseModel] | None = None
    agent_managed: bool = True
    use_state_signals: bool = False

    @classmethod
    def build(cls, option: Any, *, manage_working_memory: bool) -> WorkingMemorySettings:
        """``None``/``False`` off, ``True`` on with defaults, or a dict of the fields above.

        ``observation.manage_working_memory`` turns working memory on when it was not configured
        and changes the defaults of ``agent_managed`` (False) and ``use_state_signals`` (True)."""
        if option is None or option is False:
            if not manage_working_memory:
                return cls()
            option = {}
        if option is True:
            option = {}
        if not isinstance(option, Mapping):
            raise OMConfigError("working_memory", f"expected true/false or a dict, got {type(option).__name__}")
        unknown = set(option) - _OPTION_KEYS
        if unknown:
            raise OMConfigError(f"working_memory.{sorted(unknown)[0]}", "is not a working memory option")
        enabled = option.get("enabled", True)
        if not isinstance(enabled, bool):
            raise OMConfigError("working_memory.enabled", "must be true or false")
        if manage_working_memory and not enabled:
            raise OMConfigError("observation.manage_working_memory", "needs working_memory enabled")
        scope = option.get("scope", "resource")
        if scope not in ("resource", "thread"):
            raise OMConfigError("working_memory.scope", f"must be 'resource' or 'thread', got {scope!r}")
        schema = option.get("schema")
        if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise OMConfigError("working_memory.schema", "must be a pydantic BaseModel class")
        template = option.get("template")
        if template is not None:
            if schema is not None:
                raise OMConfigError("working_memory.template", "cannot be combined with working_memory.schema")
            if not isinstance(template, str) or not template.strip():
                raise OMConfigError("working_memory.template", "must be a non-empty markdown string")
        flags: dict[str, bool] = {}
        for name, default in (("agent_managed", not manage_working_memory),
                              ("use_state_signals", manage_working_memory)):
            value = option.get(name, default)
            if not isinstance(value, bool):
                raise OMConfigError(f"working_memory.{name}", "must be true or false")
            flags[name] = value
        return cls(enabled=enabled, scope=scope, template=template or DEFAULT_TEMPLATE, schema=schema,
                   agent_managed=flags["agent_managed"], use_state_signals=flags["use_state_signals"])


def partial_model(schema: type[BaseModel]) -> type[BaseModel]:
    """The same fields, all optional: the shape of a state-signal delta."""
    fields: dict[str, Any] = {}
    for name, info in schema.model_fields.items():
        fields[name] = (Optional[info.annotation], Field(default=None, description=info.description))  # noqa: UP045
    model: type[BaseModel] = create_model(f"{schema.__name__}Update", __doc__=schema.__doc__, **fields)
    return model


class WorkingMemory:
    """Reads, writes and renders the working memory documents of one ``MemoryHost``."""

    def __init__(self, memory: MemoryHost, settings: WorkingMemorySettings) -> None:
        self.memory = memory
        self.settings = settings

    @classmethod
    def from_option(cls, memory: MemoryHost, option: Any) -> WorkingMemory | None:
        """Validate the option and register the context section; None when disabled."""
        settings = WorkingMemorySettings.build(
            option, manage_working_memory=memory.config.observation.manage_working_memory
        )
        if not settings.enabled:
            return None
        working = cls(memory, settings)
        memory.section_providers.append(working.section)
        return working

    @staticmethod
    def observer_extractors(config: OMConfig) -> list[Extractor]:
        """``observation.manage_working_memory``: the Observer keeps the document, through a
        ``WorkingMemoryExtractor`` (unless the caller configured one already)."""
        configured = [*config.observation.extract, *config.reflection.extract]
        if config.observation.manage_working_memory and not any(
                isinstance(item, WorkingMemoryExtractor) for item in configured):
            return [WorkingMemoryExtractor()]
        return []

    # ------------------------------------------------------------------ storage

    def _key(self, thread_id: str) -> str:
        return "resource" if self.settings.scope == "resource" else f"thread:{thread_key(thread_id)}"

    def _resource(self, thread_id: str, resource_id: str | None) -> str:
        return self.memory.resolve_resource(thread_id, resource_id)

    async def aget(self, thread_id: str, *, resource_id: str | None = None) -> str | dict[str, Any] | None:
        """The current document: markdown text, a JSON object (with a schema), or None if never written."""
        await self.memory.aensure_setup()
        stored = await self.memory.store.aget_value(
            self._resource(thread_id, resource_id), NAMESPACE, self._key(thread_id)
        )
        if isinstance(stored, Mapping) and "value" in stored:
            value = stored["value"]
            if isinstance(value, (str, dict)):
                return value
        return None

    async def aset(self, thread_id: str, value: Any, *, resource_id: str | None = None,
                   merge: bool = False) -> str | dict[str, Any]:
        """Replace (or, with ``merge``, update the given fields of) the document; returns what is stored.

        The merge runs inside the store's atomic read-modify-write (``aupdate_value``): two
        concurrent updates of different fields (the agent's tool and the Observer, or two
        workers) both survive, where a read here and a write later would lose one."""
        update = self._checked_input(value, merge=merge)
        await self.memory.aensure_setup()
        fmt = "json" if self.settings.schema else "markdown"

        def apply(stored: Any) -> Any:
            current = stored.get("value") if isinstance(stored, Mapping) else None
            document = self._document(update, current if isinstance(current, dict) else None, merge=merge)
            return {"format": fmt, "value": document, "updated_at": utcnow().isoformat()}

        stored = await self.memory.store.aupdate_value(
            self._resource(thread_id, resource_id), NAMESPACE, self._key(thread_id), apply
        )
        document: str | dict[str, Any] = stored["value"]
        return document

    def get(self, thread_id: str, **kwargs: Any) -> str | dict[str, Any] | None:
        return self.memory.run_sync(self.aget(thread_id, **kwargs), twin="om.working_memory.aget(...)")

    def set(self, thread_id: str, value: Any, **kwargs: Any) -> str | dict[str, Any]:
        return self.memory.run_sync(self.aset(thread_id, value, **kwargs), twin="om.working_memory.aset(...)")

    def _checked_input(self, value: Any, *, merge: bool) -> str | dict[str, Any]:
        """The caller's value in its stored shape (markdown text, or the given fields), checked
        before the store is touched."""
        schema = self.settings.schema
        if schema is None:
            if not isinstance(value, str) or not value.strip():
                raise ValueError("working memory: expected a non-empty markdown document")
            return value.strip()
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", exclude_none=merge)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"working memory: expected a JSON object for {schema.__name__}: {exc}") from None
        if not isinstance(value, Mapping):
            raise ValueError(f"working memory: expected an object matching {schema.__name__}")
        return {str(k): v for k, v in value.items() if not (merge and v is None)}

    def _document(self, update: str | dict[str, Any], current: dict[str, Any] | None, *,
                  merge: bool) -> str | dict[str, Any]:
        """The document to store: markdown as given, or the (merged) object validated by the schema."""
        schema = self.settings.schema
        if schema is None or isinstance(update, str):
            return update
        merged = {**(current or {}), **update} if merge else dict(update)
        try:
            return schema.model_validate(merged).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ())) or schema.__name__
            raise ValueError(f"working memory field {where}: {first.get('msg')}") from None

    # ------------------------------------------------------------------ context

    def describe_shape(self) -> str:
        if self.settings.schema is not None:
            return json.dumps(self.settings.schema.model_json_schema(), ensure_ascii=False)
        return self.settings.template.strip()

    def render(self, document: str | dict[str, Any] | None) -> str | None:
        if document is None and not self.settings.agent_managed:
            return None
        if document is None:
            body = "(empty — nothing recorded yet). Its shape:\n" + self.describe_shape()
        elif isinstance(document, str):
            body = document
        else:
            body = json.dumps(document, ensure_ascii=False, indent=2)
        who = "this user" if self.settings.scope == "resource" else "this conversation"
        lead = (f"Working memory: the current, durable facts about {who} (it survives across "
                f"{'conversations' if self.settings.scope == 'resource' else 'long gaps'}). Trust it over older "
                "observations when they disagree.")
        if self.settings.agent_managed:
            lead += (f" When something in it changes or you learn a durable new fact, call the `{TOOL_NAME}` tool"
                     " with the update; do not mention the tool to the user.")
        else:
            lead += " It is kept up to date automatically; you never need to edit it."
        return f"{lead}\n\n<working-memory>\n{neutralise(body)}\n</working-memory>"

    async def section(self, memory: MemoryHost, record: OMRecord, resource_id: str,
                      thread_id: str) -> str | None:
        """``om.section_providers`` entry: the working memory block of the OM system message."""
        document = await self.aget(thread_id, resource_id=resource_id)
        return self.render(document)

    # ------------------------------------------------------------------ tools

    def tools(self, *, thread_id: str | None = None, resource_id: str | None = None) -> list[BaseTool]:
        """``update_working_memory`` for the main agent (empty unless ``agent_managed``).

        Without explicit ids the tool reads ``thread_id`` / ``resource_id`` from
        ``config["configurable"]`` at call time, like the OM graph nodes do."""
        if not self.settings.agent_managed:
            return []
        working = self
        schema = self.settings.schema

        def ids(config: RunnableConfig | None) -> tuple[str, str | None]:
            config_thread, config_resource = ids_from_run_config(config)
            thread = thread_id or config_thread
            resource = resource_id or config_resource
            if not thread:
                raise ToolException("update_working_memory needs a thread_id in config['configurable']")
            if thread_id is None:
                from .branches import active_branch

                # the run's branch of the thread: a run from an earlier checkpoint writes that branch's document
                thread, resource = active_branch(working.memory, str(thread), resource)
            return str(thread), (str(resource) if resource else None)

        if schema is None:
            async def update_markdown(content: str, config: RunnableConfig) -> str:
                thread, resource = ids(config)
                try:
                    await working.aset(thread, content, resource_id=resource)
                except ValueError as exc:
                    raise ToolException(str(exc)) from None
                return "Working memory updated."

            return [StructuredTool.from_function(
                coroutine=update_markdown, name=TOOL_NAME, handle_tool_error=True,
                description=("Replace the working memory document with an updated version. Pass the COMPLETE "
                             "markdown document (keep the template's headings and every fact that is still true)."
                             " Shape:\n" + self.settings.template.strip()),
            )]

        delta = partial_model(schema)

        async def update_fields(config: RunnableConfig, **fields: Any) -> str:
            thread, resource = ids(config)
            try:
                await working.aset(thread, fields, resource_id=resource, merge=True)
            except ValueError as exc:
                raise ToolException(str(exc)) from None
            return "Working memory updated."

        return [StructuredTool.from_function(
            coroutine=update_fields, name=TOOL_NAME, args_schema=delta, handle_tool_error=True,
            description=("Update the working memory. Pass only the fields that changed; fields you leave out "
                         "keep their value."),
        )]


class WorkingMemoryExtractor(Extractor):
    """Lets the Observer keep working memory current through the normal extractor pipeline.

    Markdown working memory is an inline value (``<working-memory>…</working-memory>`` in the
    Observer output); with a schema it is a structured follow-up call. Either way the value goes
    to the working memory store, never into ``om.extracted`` (``metadata_key_path=False``)."""

    _allow_reserved = True

    def __init__(self, instructions: str | None = None) -> None:
        super().__init__(WORKING_MEMORY_SLUG, instructions or "keep the working memory current",
                         metadata_key_path=False)
        self._extra_instructions = instructions
        self._working: WorkingMemory | None = None

    def attach(self, working: WorkingMemory | None, field: str) -> None:
        if working is None:
            raise OMConfigError(field, "WorkingMemoryExtractor needs working_memory enabled")
        self._working = working
        self.schema = None if working.settings.schema is None else (
            partial_model(working.settings.schema) if working.settings.use_state_signals
            else working.settings.schema)

    @property
    def working(self) -> WorkingMemory:
        if self._working is None:
            raise RuntimeError("WorkingMemoryExtractor is not attached to an MemoryHost")
        return self._working

    def resolve_instructions(self, context: ExtractionContext) -> str:
        settings = self.working.settings
        about = "the user" if settings.scope == "resource" else "this conversation"
        text = (f"Maintain the working memory: a short document of the current, durable facts about {about} "
                "(identity, preferences, constraints, ongoing goals) — not a log of events. ")
        if settings.schema is None:
            text += "Write it as markdown following this template:\n" + settings.template.strip() + "\n"
        if settings.use_state_signals:
            text += ("State signals: the current working memory is shown as the previous value. Emit an update "
                     "ONLY when the conversation signals a change of state — a new durable fact, a correction, "
                     "a goal reached or abandoned, a changed preference. If nothing changed, emit nothing.")
            if settings.schema is not None:
                text += " Fill only the fields that changed; leave the others empty."
            else:
                text += " When you do emit, write the complete updated document."
        else:
            text += "Always return the complete, up-to-date document, keeping everything that is still true."
        if self._extra_instructions:
            text += "\n" + self._extra_instructions
        return text

    async def previous_value(self, context: ExtractionContext) -> Any:
        return await self.working.aget(context["thread_id"], resource_id=context["resource_id"])

    async def after_extracted(self, value: Any, context: ExtractionContext) -> Any:
        value = await super().after_extracted(value, context)
        signals = self.working.settings.use_state_signals
        current = context.get("previous_value")
        if current is None:
            current = await self.previous_value(context)
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", exclude_none=signals)
        if signals:
            if isinstance(value, str) and current is not None and value.strip() == str(current).strip():
                return None
            if isinstance(value, dict):
                value = {k: v for k, v in value.items() if v is not None}
                if not value or (isinstance(current, dict) and all(current.get(k) == v for k, v in value.items())):
                    return None
        return await self.working.aset(context["thread_id"], value, resource_id=context["resource_id"],
                                       merge=signals)
