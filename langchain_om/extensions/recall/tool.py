"""The ``recall`` tool object: binding to a conversation, the checks every mode shares, dispatch.

Without bound ids the tool reads the thread and resource from the run's config at call
time. Bad arguments and store failures become a ``ToolException`` (an error ``ToolMessage``
through ``handle_tool_error``), never an exception in the agent loop.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import AsyncCallbackManagerForToolRun, CallbackManagerForToolRun
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from pydantic import BaseModel, Field, ValidationError

from ...foundation.run_ids import ids_from_run_config
from ...store.base import InvalidStoreInput, replace_lone_surrogates
from .args import DEFAULT_TOKEN_BUDGET, MAX_LIMIT, MAX_PAGE, RecallInput, check_text
from .browse import messages_mode, threads_mode
from .render import OutputBudget
from .scope import RecallContext
from .search import search_mode

if TYPE_CHECKING:
    from ..host import MemoryHost

logger = logging.getLogger("langchain_om")


DESCRIPTION = (
    "Recall raw conversation history behind your observations. Observation groups show "
    'range="startId:endId": pass ONE of those ids as cursor to read the original messages '
    "(page=1 reads forward from it, page=-1 backward). mode=\"threads\" lists the user's "
    "conversations; thread_id reads one of them. detail=\"high\" or part_index shows full content, one "
    "part per call (next_call gives the arguments for the next part)."
)


def _tool_error(error: ToolException) -> str:
    return f"recall error: {error}"


def _validation_error(error: Any) -> str:
    problems: list[str] = []
    errors = error.errors() if hasattr(error, "errors") else []
    for item in errors[:5]:
        loc = ".".join(str(part) for part in item.get("loc", ())) or "arguments"
        problems.append(f"{loc}: {item.get('msg', 'invalid value')}")
    return "recall error: invalid arguments — " + ("; ".join(problems) or "could not read the arguments")


def _parse_arguments(kwargs: dict[str, Any]) -> RecallInput:
    """The model's arguments as a ``RecallInput``; invalid ones become a ``ToolException`` saying which."""
    try:
        return RecallInput(**kwargs)
    except ValidationError as exc:
        raise ToolException(_validation_error(exc).removeprefix("recall error: ")) from None


class RecallTool(BaseTool):
    """The ``recall`` tool bound to one ``ObservationalMemory`` (and optionally one conversation)."""

    name: str = "recall"
    description: str = DESCRIPTION
    args_schema: type[BaseModel] = RecallInput
    memory: Any = Field(exclude=True)
    """The ``MemoryHost`` whose store is read."""
    bound_thread_id: str | None = None
    bound_resource_id: str | None = None
    max_output_tokens: int = DEFAULT_TOKEN_BUDGET
    handle_tool_error: Any = _tool_error
    handle_validation_error: Any = _validation_error

    def _context(self, config: RunnableConfig | None) -> RecallContext:
        from ..host import MemoryHost

        om = self.memory
        if not isinstance(om, MemoryHost):
            raise ToolException("recall is not connected to an ObservationalMemory")
        config_thread, config_resource = ids_from_run_config(config)
        thread = self.bound_thread_id or config_thread
        resource = self.bound_resource_id or (config_resource if self.bound_thread_id is None else None)
        if not thread:
            raise ToolException(
                "recall needs the current thread: bind it with om.recall_tool(thread_id=...) or run with "
                'config={"configurable": {"thread_id": ...}}'
            )
        if self.bound_thread_id is None:
            from ..branches import active_branch

            # the run's branch of the thread (a run from an earlier checkpoint reads that branch)
            thread, resource = active_branch(om, thread, resource)
        try:
            resolved = om.resolve_resource(thread, resource)
        except ValueError as exc:
            raise ToolException(str(exc)) from None
        return RecallContext(om, resolved, thread)

    async def arecall(self, args: RecallInput, config: RunnableConfig | None = None) -> dict[str, Any]:
        """Run one recall (already-validated arguments). Raises ``ToolException`` on bad input."""
        ctx = self._context(config)
        await ctx.om.aensure_setup()
        await ctx.aprepare()
        if args.limit < 1:
            raise ToolException(f"limit: must be a positive number (got {args.limit})")
        if args.page is not None and abs(args.page) > MAX_PAGE:
            raise ToolException(f"page: must be between -{MAX_PAGE} and {MAX_PAGE} (got {args.page})")
        if args.part_index is not None and not 0 <= args.part_index <= 10_000:
            raise ToolException(f"part_index: must be between 0 and 10000 (got {args.part_index})")
        if args.tool_name is not None:
            check_text(args.tool_name, "tool_name", 256)
        capped = args.model_copy(update={"limit": min(args.limit, MAX_LIMIT)})
        budget = OutputBudget(ctx.om.counter, self.max_output_tokens)
        try:
            if capped.mode == "threads":
                return _utf8_safe(await threads_mode(ctx, capped, budget))
            if capped.mode == "search":
                return _utf8_safe(await search_mode(ctx, capped, budget))
            return _utf8_safe(await messages_mode(ctx, capped, budget))
        except ToolException:
            raise
        except InvalidStoreInput as exc:
            raise ToolException(str(exc)) from None
        except Exception as exc:  # a storage or vector-store failure: report, never crash the agent loop
            logger.warning("langchain-om recall failed: %s", exc, exc_info=True)
            raise ToolException(f"recall failed ({type(exc).__name__}); try again or with other arguments") from None

    async def _arun(
        self,
        config: RunnableConfig,
        run_manager: AsyncCallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        return await self.arecall(_parse_arguments(kwargs), config)

    def _run(
        self,
        config: RunnableConfig,
        run_manager: CallbackManagerForToolRun | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        args = _parse_arguments(kwargs)
        result: dict[str, Any] = self.memory.run_sync(self.arecall(args, config), twin="recall_tool.ainvoke(...)")
        return result


def _utf8_safe(result: dict[str, Any]) -> dict[str, Any]:
    """The result with lone surrogates of stored text as U+FFFD: it goes to the agent's model as
    UTF-8, and one that cannot be sent would stay in the agent's state and fail every later call."""
    return {key: replace_lone_surrogates(value) if isinstance(value, str) else value for key, value in result.items()}


def make_recall_tool(
    om: MemoryHost, *, thread_id: str | None = None, resource_id: str | None = None,
    max_output_tokens: int = DEFAULT_TOKEN_BUDGET,
) -> RecallTool:
    """Build the tool (``om.recall_tool`` calls this)."""
    if om.config.retrieval is None:
        raise ValueError("retrieval: the recall tool needs retrieval=True (or a RetrievalConfig)")
    if max_output_tokens < 100:
        raise ValueError("max_output_tokens: must be at least 100")
    return RecallTool(memory=om, bound_thread_id=thread_id, bound_resource_id=resource_id,
                      max_output_tokens=max_output_tokens)
