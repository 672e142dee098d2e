"""``ObservationalMemoryMiddleware``: OM for ``langchain.agents.create_agent`` (LangChain v1).

The context is built in ``wrap_model_call`` / ``awrap_model_call`` and handed to the model
through ``request.override(messages=..., system_message=...)``: it reaches the model
without being written into checkpointed state. The raw messages live in OM's store
(recall pages through them); once observed they also leave the agent's state
(``remove_observed``), in the model node's own update: ``{"messages": [RemoveMessage...,
reply], "om_position": ...}``, one dict with the reply last, so ``stream_mode="updates"``
reads like any agent's. The checkpointed state stays as bounded as the context. Without
that, every checkpoint of a long conversation would re-serialize its whole history, and
every step would pay for it.

System prompt order: the user's own system prompt first, then OM's context. The user's
prompt never changes between steps and OM's observation log changes only when
observations change (its hints come last), so this order gives the longest prefix that
stays byte-identical across steps, which is what provider prompt caches reuse.
"""

from __future__ import annotations

import logging
import operator
import uuid
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from itertools import repeat
from typing import Annotated, Any, Literal, cast

from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.internal_call_transformer import InternalCallTransformer
from langchain.agents.middleware.types import ExtendedModelResponse, OmitFromInput
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.runtime import Runtime
from langgraph.types import Command, TracePolicy, omit_payload
from typing_extensions import NotRequired

from ..engine import ObservationalMemory, OMContext
from ..engine.step import aturn_end
from ..extensions.branches import POSITION_KEY, BranchRun, aposition, branch_root, is_checkpointed
from ..foundation.context import merge_system_messages
from ..model_calls.model_gate import aheld, held
from . import langsmith_hops
from .tools import om_tools
from .turn import TRIPWIRE_KEY, aprocess_on_branch, aturn_end_at_checkpoint, ids_from_config, tripwire_message

__all__ = ["TRIPWIRE_KEY", "ObservationalMemoryMiddleware", "merge_system_messages", "model_id", "tripwire_message"]

logger = logging.getLogger("langchain_om.integrations.middleware")


def _run_config() -> RunnableConfig:
    from langgraph.config import get_config

    try:
        return get_config()
    except RuntimeError as exc:
        raise RuntimeError("ObservationalMemoryMiddleware must run inside a create_agent graph") from exc


def model_id(model: Any) -> str | None:
    """``provider/model`` of a chat model, as OM's provider-change activation compares it."""
    if not isinstance(model, BaseChatModel):
        bound = getattr(model, "bound", None)
        if isinstance(bound, BaseChatModel):
            model = bound
        else:
            return None
    try:
        params = model._get_ls_params()
    except Exception:
        return None
    name = params.get("ls_model_name")
    provider = params.get("ls_provider")
    if not name:
        return None
    return f"{provider}/{name}" if provider else str(name)


class OMAgentState(AgentState[Any]):
    """The agent state plus OM's position, so memory follows the checkpoint (see ``branches.py``)."""

    om_position: NotRequired[Annotated[dict[str, Any] | None, OmitFromInput]]


class ObservationalMemoryMiddleware(AgentMiddleware[OMAgentState, Any, Any]):
    """Observational Memory as ``create_agent`` middleware.

    ``agent = create_agent(model, tools, middleware=[ObservationalMemoryMiddleware(om)],
    checkpointer=...)``; invoke with ``config={"configurable": {"thread_id": ...,
    "resource_id": ...}}`` (``user_id`` is accepted for ``resource_id``), or name the user in
    LangChain's runtime context (``context_schema=Context``, ``invoke(..., context=Context(user_id=
    ...))``; see docs/context.md for the precedence). Each model call
    is one OM step: exactly one ``data-om-status`` event precedes it. The middleware
    contributes OM's tools (``om_tools``): ``recall`` when retrieval is on and
    ``update_working_memory`` when working memory is agent-managed. When OM aborts a step
    (e.g. no tier of a ``ModelByInputTokens`` fits), the model is not called and the step's
    answer is a tripwire ``AIMessage`` (empty content, reason under
    ``response_metadata["om_tripwire"]``). Sync (``invoke``) and async
    (``ainvoke``/``astream``) agents both work; the sync path uses OM's own loop thread, so
    don't run a sync agent from inside a running event loop's thread.

    ``remove_observed`` (default on): messages OM has observed leave the agent's state in the
    same update as the model's answer (``RemoveMessage``s first, the reply last under
    ``"messages"``), so checkpoints stay bounded and every streamed update is one dict.
    They stay in OM's store: ``recall`` and ``om.store.aget_messages`` return them.
    Pair a durable checkpointer with a durable OM store (SQLite, PostgreSQL); turn it off to
    keep the whole raw conversation in state.

    ``keep_in_state`` (with ``remove_observed``): ``"unobserved"`` (default) leaves OM's whole
    unobserved window in state, so the state reads like the model's view; ``"turn"`` keeps
    only the current turn (the newest human message onwards), since the model's context is
    built from OM's store anyway. Each checkpoint then holds a turn instead of a context
    window: the smallest checkpoints, for long-running agents on a durable checkpointer.

    ``inline_untraced_hooks`` (default on): when LangSmith is not tracing, the ``traceable`` that
    ``create_agent`` puts around ``awrap_model_call`` runs its set-up and tear-down on the loop
    instead of two thread hops per model call (``langsmith_hops``; a LangSmith runtime override
    is set only if none is set yet). Off: LangSmith is left exactly as it is.

    OM's own model calls are LangChain internal calls (``foundation/internal_calls.py``): the
    ``InternalCallTransformer`` this class declares keeps them out of the agent's ``run.messages``
    and v3 event stream. Its hook spans record no payload (``trace_policy``, LangChain's
    ``TracePolicy(process_inputs=omit_payload)``): the conversation and OM's large log stay out of
    every hook span, which keeps its timing; the agent's model-call span still holds the messages.
    ``trace_hook_payloads=True`` records them as LangChain would by default.
    """

    transformers: Sequence[Any] = (InternalCallTransformer,)
    trace_policy: TracePolicy | None = TracePolicy(process_inputs=omit_payload)

    def __init__(
        self, om: ObservationalMemory, *, remove_observed: bool = True,
        keep_in_state: Literal["unobserved", "turn"] = "unobserved", inline_untraced_hooks: bool = True,
        trace_hook_payloads: bool = False,
    ) -> None:
        if not isinstance(om, ObservationalMemory):
            raise TypeError(f"om: expected an ObservationalMemory, got {type(om).__name__}")
        if not isinstance(remove_observed, bool):
            raise TypeError(f"remove_observed: expected a bool, got {type(remove_observed).__name__}")
        if keep_in_state not in ("unobserved", "turn"):
            raise ValueError(f"keep_in_state: expected 'unobserved' or 'turn', got {keep_in_state!r}")
        if not isinstance(inline_untraced_hooks, bool):
            raise TypeError(f"inline_untraced_hooks: expected a bool, got {type(inline_untraced_hooks).__name__}")
        if not isinstance(trace_hook_payloads, bool):
            raise TypeError(f"trace_hook_payloads: expected a bool, got {type(trace_hook_payloads).__name__}")
        if trace_hook_payloads:
            self.trace_policy = None  # the process-wide default (configure_trace_policy), else full payloads
        self.inline_untraced_hooks = inline_untraced_hooks  # read by langsmith_hops (HOOK_FLAG)
        if inline_untraced_hooks:
            langsmith_hops.install()
        self.om = om
        self.state_schema = OMAgentState
        self.remove_observed = remove_observed
        self.keep_in_state = keep_in_state
        self.tools: Sequence[BaseTool] = om_tools(om)
        # thread -> (position, messages) the model node's end of turn stored and wrote: the
        # run's after_agent finds its state unchanged and skips four store reads (bounded LRU)
        self._turn_ends: OrderedDict[tuple[str, str | None], tuple[dict[str, Any], list[BaseMessage]]] = OrderedDict()

    @property
    def name(self) -> str:
        return "ObservationalMemoryMiddleware"

    def _request(self, request: ModelRequest[Any], context: OMContext) -> ModelRequest[Any]:
        # the caller's system messages in state are instructions: they lead, in their order,
        # after the agent's own prompt and ahead of OM's context
        system = request.system_message
        for instruction in context.instructions:
            system = merge_system_messages(system, cast("SystemMessage", instruction))
        system = merge_system_messages(system, context.system_message)
        return request.override(messages=cast("list[AnyMessage]", list(context.messages)), system_message=system)

    def _finish(
        self, response: ModelResponse[Any], request: ModelRequest[Any], context: OMContext,
        branch: str, resource_id: str | None,
    ) -> tuple[ModelResponse[Any], list[BaseMessage], bool]:
        """The model node's answer with the removal of observed messages in front of it, the
        state's messages after this update, and whether the answer ends the turn.

        The removals travel in the answer's own ``messages`` (``RemoveMessage`` first, the reply
        last) rather than in a second ``Command``: LangGraph streams a node that returns two
        updates of the same key as a list of dicts, and ``stream_mode="updates"`` users read
        ``update["model"]["messages"][-1]`` (issue 31)."""
        state_messages = _plain_only((request.state or {}).get("messages", []))
        removals: list[BaseMessage] = []
        if self.remove_observed:
            observed = self.om.observed_state_ids(branch, request.messages, context, resource_id=resource_id,
                                                  keep_unobserved=self.keep_in_state == "unobserved")
            # most steps nothing leaves: then neither the repair check nor a set of the state's ids
            # walks the state (each pass over a checkpointer's fresh copies costs ~1 us a message)
            if observed and not _repaired_by_agent(state_messages):
                # only ids that are in state now: an outer middleware may have rewritten request.messages
                in_state = set(map(_ID, state_messages))
                removals = [RemoveMessage(id=mid) for mid in observed if mid in in_state]
        replies = [_with_id(m) for m in response.result]
        if removals:
            gone = {m.id for m in removals}
            after = [m for m in state_messages if m.id not in gone] + replies
        else:
            after = state_messages + replies
        answer = ModelResponse(result=[*removals, *replies], structured_response=response.structured_response)
        return answer, after, _ends_turn(response)

    async def _aturn_end(self, after: list[BaseMessage], branch: str, resource_id: str | None) -> dict[str, Any]:
        """The end of a turn, in the model node that wrote the final answer: store it (and buffer on
        idle), so the position beside the answer already covers it and ``after_agent`` has nothing
        to write (an update holding only ``om_position`` breaks ``update["messages"]`` loops)."""
        config = _run_config()
        # the engine's turn end (what ``om.aon_turn_end`` runs), for the head its append committed:
        # the position then needs no read of its own (``SupportsHeadAppend``)
        head = await aturn_end(self.om, branch, after, resource_id=resource_id, config=config)
        position = await aposition(self.om, BranchRun(branch_root(branch), branch, resource_id), head,
                                   checkpointed=is_checkpointed(config))
        key = ids_from_config(config)
        # no move_to_end: a sync twin on OM's loop thread may pop the key in between (a miss, not an error)
        self._turn_ends.pop(key, None)
        self._turn_ends[key] = (position, after)
        while len(self._turn_ends) > self.om.cache_limit:
            try:
                self._turn_ends.popitem(last=False)  # an entry lost here only costs after_agent its reads
            except KeyError:
                break
        return position

    async def _astep(self, request: ModelRequest[Any]) -> tuple[OMContext, BranchRun]:
        """The OM step; the position is read once the model answered (``_aposition``), not here:
        at the end of a turn ``_aturn_end`` reads it anyway, after storing the answer."""
        config = _run_config()
        return await aprocess_on_branch(self.om, request.state or {}, _plain(request.messages), config,
                                        live=True, current_model=model_id(request.model))

    async def _aposition(self, run: BranchRun) -> dict[str, Any]:
        return await aposition(self.om, run, checkpointed=is_checkpointed(_run_config()))

    async def _aunchanged_since_turn_end(self, state: OMAgentState, config: RunnableConfig) -> bool:
        """Whether the run's state is what the model node's end of turn stored and wrote: the same
        position and the very same message objects (an ``after_model`` edit or a ``return_direct``
        tool makes new ones). Then the turn end has nothing to store and the position stands; only
        the run's live events close. A state of another run on the thread never matches."""
        ended = self._turn_ends.pop(ids_from_config(config), None)
        if ended is None or state.get(POSITION_KEY) != ended[0]:
            return False
        now = state["messages"]
        if len(now) != len(ended[1]) or not all(map(operator.is_, now, ended[1])):  # pointers, in C
            return False
        await self.om._live_runs.aclose(config)  # the run ends here, as aturn_end_at_checkpoint would close it
        return True

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        context, run = await self._astep(request)
        if context.aborted:
            return _answer(ModelResponse(result=[tripwire_message(context.aborted)]), await self._aposition(run))
        async with aheld(request.model):  # a local model shared with OM runs one call at a time (model_gate)
            response = await handler(self._request(request, context))
        answer, after, ends = self._finish(response, request, context, run.branch, run.resource_id)
        if ends:
            position = await self._aturn_end(after, run.branch, run.resource_id)
        else:
            position = await self._aposition(run)
        return _answer(answer, position)

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]:
        context, run = self.om._loop.run(self._astep(request))
        if context.aborted:
            return _answer(ModelResponse(result=[tripwire_message(context.aborted)]),
                           self.om._loop.run(self._aposition(run)))
        with held(request.model):
            response = handler(self._request(request, context))
        answer, after, ends = self._finish(response, request, context, run.branch, run.resource_id)
        if ends:
            position = self.om._loop.run(self._aturn_end(after, run.branch, run.resource_id))
        else:
            position = self.om._loop.run(self._aposition(run))
        return _answer(answer, position)


    async def aafter_agent(self, state: OMAgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        config = _run_config()
        if await self._aunchanged_since_turn_end(state, config):
            return None
        position = await aturn_end_at_checkpoint(self.om, state, _plain(state["messages"]), config)
        return _position_update(state, position)

    def after_agent(self, state: OMAgentState, runtime: Runtime[Any]) -> dict[str, Any] | None:
        config = _run_config()
        if self.om._loop.run(self._aunchanged_since_turn_end(state, config)):
            return None
        position = self.om._loop.run(aturn_end_at_checkpoint(self.om, state, _plain(state["messages"]), config))
        return _position_update(state, position)


def _position_update(state: OMAgentState, position: dict[str, Any]) -> dict[str, Any] | None:
    """``after_agent`` closes the run; it writes ``om_position`` only when the turn stored something
    after the model's final answer (another middleware's ``after_model`` edit, a ``return_direct``
    tool): normally the model node's update already holds it, and this node's update is None."""
    return None if state.get(POSITION_KEY) == position else {POSITION_KEY: position}


def _answer(response: ModelResponse[Any], position: dict[str, Any]) -> ExtendedModelResponse[Any]:
    """The model node's update: one dict, ``messages`` (the reply last) and ``om_position``."""
    return ExtendedModelResponse(model_response=response, command=Command(update={POSITION_KEY: position}))


_ID = operator.attrgetter("id")
_AI_TYPES = frozenset({"ai", "AIMessageChunk"})
_TOOL_TYPES = frozenset({"tool", "ToolMessageChunk"})


def _repaired_by_agent(messages: list[BaseMessage]) -> bool:
    """Whether ``create_agent`` answers an invalid tool call itself this step: it then rewrites the
    whole message list (``REMOVE_ALL_MESSAGES``), under which a ``RemoveMessage`` would be kept as
    a message. The removals wait for the next step then. (Compared by ``type``: an ``isinstance``
    that fails goes through pydantic's metaclass, a few times the cost, on every message.) Nearly
    always no message holds an invalid tool call: that is seen in C, without a Python pass."""
    if not any(map(dict.get, map(vars, messages), repeat("invalid_tool_calls"))):
        return False
    invalid = [call for m in messages if m.type in _AI_TYPES for call in cast("AIMessage", m).invalid_tool_calls]
    if not invalid:
        return False
    answered = {cast("ToolMessage", m).tool_call_id for m in messages if m.type in _TOOL_TYPES}
    return any(call.get("id") not in answered for call in invalid)


def _with_id(message: BaseMessage) -> BaseMessage:
    """The reply with an id, so OM stores it under the id the agent's state will hold."""
    if message.id:
        return message
    return message.model_copy(update={"id": str(uuid.uuid4())})


def _ends_turn(response: ModelResponse[Any]) -> bool:
    """Whether the agent stops after this answer: a structured response, or no tool call to run."""
    if response.structured_response is not None:
        return True
    last = next((m for m in reversed(response.result) if isinstance(m, AIMessage)), None)
    return last is None or not last.tool_calls


def _plain_only(messages: Sequence[Any]) -> list[BaseMessage]:
    """The ``BaseMessage`` objects among ``messages`` (the type of each is looked at once per type)."""
    kinds = set(map(type, messages))  # in C: no Python pass over a long state
    if all(issubclass(kind, BaseMessage) for kind in kinds):
        return list(messages)
    return [m for m in messages if isinstance(m, BaseMessage)]


def _plain(messages: Sequence[Any]) -> list[BaseMessage]:
    """The messages as a list, each checked to be a ``BaseMessage`` once per distinct type (an
    ``isinstance`` through pydantic's metaclass per message costs more than the rest of the pass)."""
    out = list(messages)
    for kind in set(map(type, out)):
        if not issubclass(kind, BaseMessage):
            raise TypeError(f"messages: expected BaseMessage objects, got {kind.__name__}")
    return out
