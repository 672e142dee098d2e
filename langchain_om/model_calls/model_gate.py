"""How OM calls a model object that has no async path: one call at a time, and a call that timed
out stops instead of holding the model.

A chat model without ``_agenerate`` / ``_astream`` of its own (``ChatLlamaCpp`` over
llama-cpp-python, many local wrappers) runs ``ainvoke`` in a worker thread. Cancelling the
awaiting task does not stop that thread: a timed-out Observer call kept generating, and the next
call on the same model either ran beside it (llama.cpp is not safe to call from two threads at
once) or waited minutes for it. So OM runs such a model's calls itself:

* through a per-model gate (a ``threading.BoundedSemaphore``, so it holds across event loops and
  the threads of ``process``): at most ``concurrency_limit(model)`` OM calls run on one model
  object at once. The limit is 1 for a model with no async path and unbounded for one with its
  own async path (an API client). A model says it can take more (or fewer) at once with
  ``metadata={"om_max_concurrency": N}`` on the model object;
* streaming where the model can, so a call whose caller gave up (a timeout, a cancelled turn)
  stops at its next token and frees the gate; a model that cannot stream finishes its call,
  then frees the gate, and a call queued behind it that timed out meanwhile never starts.

``held(model)`` / ``aheld(model)`` take the same gate around the agent's own calls
(``ObservationalMemoryMiddleware`` does, ``bind_tools`` wrappers looked through), so an agent and
an Observer sharing one local model object are never run at once either.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any
from weakref import WeakKeyDictionary

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage

__all__ = ["CONCURRENCY_KEY", "aheld", "concurrency_limit", "gate_of", "has_async_path", "held", "invoke_gated"]

CONCURRENCY_KEY = "om_max_concurrency"
"""The key in a model's ``metadata`` that states how many calls it takes at once."""
_POLL_S = 0.05
"""How often a thread waiting for the gate looks whether its caller gave up."""

_gates: WeakKeyDictionary[Any, threading.BoundedSemaphore] = WeakKeyDictionary()
_ids: dict[int, threading.BoundedSemaphore] = {}
_gates_lock = threading.Lock()


def has_async_path(model: Any) -> bool:
    """Whether the model implements async calls itself (else ``ainvoke`` runs it in a thread)."""
    kind = type(model)
    if not isinstance(model, BaseChatModel):
        return True
    return kind._agenerate is not BaseChatModel._agenerate or kind._astream is not BaseChatModel._astream


def concurrency_limit(model: Any) -> int | None:
    """Calls OM runs on ``model`` at once: the model's stated ``om_max_concurrency``, else 1 for a
    model with no async path, else ``None`` (no limit)."""
    metadata = getattr(model, "metadata", None)
    if isinstance(metadata, Mapping):
        stated = metadata.get(CONCURRENCY_KEY)
        if isinstance(stated, int) and not isinstance(stated, bool) and stated > 0:
            return stated
    return None if has_async_path(model) else 1


def _unbound(model: Any) -> Any:
    """The chat model under ``bind_tools`` / ``bind`` wrappers (the agent's model is bound)."""
    for _ in range(8):
        inner = getattr(model, "bound", None)
        if inner is None:
            break
        model = inner
    return model


def gate_of(model: Any) -> threading.BoundedSemaphore | None:
    """The model object's gate (``None`` when its calls are not limited)."""
    model = _unbound(model)
    limit = concurrency_limit(model)
    if limit is None:
        return None
    with _gates_lock:
        try:
            gate = _gates.get(model)
            if gate is None:
                gate = _gates[model] = threading.BoundedSemaphore(limit)
        except TypeError:  # not weak-referenceable: keyed by id for the process's life
            gate = _ids.setdefault(id(model), threading.BoundedSemaphore(limit))
    return gate


@contextmanager
def held(model: Any) -> Iterator[None]:
    """Hold ``model``'s gate for a block (blocking this thread while another call runs)."""
    gate = gate_of(model)
    if gate is None:
        yield
        return
    with gate:
        yield


@asynccontextmanager
async def aheld(model: Any) -> AsyncIterator[None]:
    """Hold ``model``'s gate for a block without blocking the event loop (the agent's own call,
    in ``ObservationalMemoryMiddleware``)."""
    gate = gate_of(model)
    if gate is None:
        yield
        return
    while not gate.acquire(blocking=False):  # noqa: ASYNC110 - a semaphore shared across threads
        await asyncio.sleep(_POLL_S)
    try:
        yield
    finally:
        gate.release()


def _can_stream(model: BaseChatModel) -> bool:
    return type(model)._stream is not BaseChatModel._stream and not getattr(model, "disable_streaming", False)


def _run(model: BaseChatModel, messages: list[BaseMessage], config: Any, kwargs: dict[str, Any],
         gate: threading.BoundedSemaphore | None, gave_up: threading.Event) -> Any:
    """The call in the worker thread: wait for the gate unless the caller gave up, then stream
    (stopping when it gives up) or invoke."""
    if gate is not None:
        while not gate.acquire(timeout=_POLL_S):
            if gave_up.is_set():
                return None
    try:
        if gave_up.is_set():
            return None
        if not _can_stream(model):
            return model.invoke(messages, config=config, **kwargs)
        total: AIMessageChunk | None = None
        stream = model.stream(messages, config=config, **kwargs)
        try:
            for chunk in stream:
                total = chunk if total is None else total + chunk
                if gave_up.is_set():
                    return None
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if total is None:
            return AIMessage(content="")
        return AIMessage(content=total.content, additional_kwargs=total.additional_kwargs,
                         response_metadata=total.response_metadata, usage_metadata=total.usage_metadata,
                         id=total.id)
    finally:
        if gate is not None:
            gate.release()


async def invoke_gated(model: Any, messages: list[BaseMessage], *, config: Any, kwargs: dict[str, Any]) -> Any:
    """``model.ainvoke(messages)`` for a model with an async path and no stated limit; otherwise the
    call runs in a thread of its own behind the model's gate, and stops once the caller gives up."""
    gate = gate_of(model)
    if has_async_path(model) and gate is None:
        return await model.ainvoke(messages, config=config, **kwargs)
    if has_async_path(model):
        assert gate is not None
        while not gate.acquire(blocking=False):  # noqa: ASYNC110 - a semaphore shared across threads
            await asyncio.sleep(_POLL_S)
        try:
            return await model.ainvoke(messages, config=config, **kwargs)
        finally:
            gate.release()
    gave_up = threading.Event()
    context = contextvars.copy_context()
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(None, context.run, _run, model, messages, config, kwargs, gate, gave_up)
    try:
        return await future
    except BaseException:
        gave_up.set()
        raise
