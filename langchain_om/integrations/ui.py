"""A LangGraph stream as the AI SDK's UI message stream, for ``useChat`` frontends.

``graph.astream(inputs, config, stream_mode=["messages", "custom"])`` of any graph or
``create_agent`` agent yields model tokens (``messages``) and OM's data parts (``custom``).
``ui_message_chunks`` turns that into the chunks of the AI SDK's UI message stream protocol
(``start``, ``start-step``, ``text-start``/``text-delta``/``text-end``, reasoning, tool input/output,
``data-om-*`` parts, ``finish-step``, ``finish``); ``ui_message_sse`` encodes them as the
server-sent events the AI SDK client reads (``data: <json>`` lines ended by ``data: [DONE]``),
and ``ui_message_response`` wraps that in a Starlette/FastAPI ``StreamingResponse`` with the
protocol's header. Starlette is needed only for the last one (``pip install "langchain-om[ui]"``).

OM's parts arrive with their ``id`` and ``transient`` (see ``langchain_om.foundation.events``): the
status part goes to the client's ``onData`` only, unless ``keep_status=True`` keeps one
status part per message, replaced in place at every step.

Failures: whatever fails inside the generator (the run, a payload the adapter cannot read) ends the
stream with one ``error`` part and ``[DONE]``, so the client never hangs on a half message. Its
``errorText`` is ``"An error occurred."`` unless ``on_error`` says otherwise (as the AI SDK's
``onError`` does: raw exception text can name an organization or a key); the error itself goes to
this module's logger. Payloads are written with ``wire_json``: any value, any string.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage, ToolMessage

from .wire_json import wire_json

if TYPE_CHECKING:
    from starlette.responses import StreamingResponse

__all__ = [
    "MASKED_ERROR_TEXT",
    "UI_MESSAGE_STREAM_HEADERS",
    "expose_error",
    "last_user_message",
    "ui_message_chunks",
    "ui_message_response",
    "ui_message_sse",
]

UI_MESSAGE_STREAM_HEADERS: Mapping[str, str] = {
    "content-type": "text/event-stream",
    "cache-control": "no-cache",
    "connection": "keep-alive",
    "x-vercel-ai-ui-message-stream": "v1",
    "x-accel-buffering": "no",  # nginx and friends must not hold the events back
}
OM_TAG = "langchain_om"
MASKED_ERROR_TEXT = "An error occurred."
"""The ``errorText`` a client gets by default (the AI SDK's own default text)."""
ErrorText = Callable[[BaseException], str]
"""``on_error``: the text the browser gets for an error (the AI SDK's ``onError``/``getErrorMessage``)."""
_log = logging.getLogger(__name__)


def expose_error(exc: BaseException) -> str:
    """An ``on_error`` that shows the exception as it is (``"RuntimeError: ..."``): for development
    servers only, since provider errors can name an organization, a project or a key prefix."""
    return f"{type(exc).__name__}: {exc}"


def _error_text(exc: BaseException, on_error: ErrorText | None) -> str:
    _log.error("langchain-om UI stream failed: %s: %s", type(exc).__name__, exc, exc_info=exc)
    if on_error is None:
        return MASKED_ERROR_TEXT
    try:
        text = on_error(exc)
    except Exception:  # a mapper's own bug must not leak the original text, nor cut the stream
        _log.exception("langchain-om UI stream: on_error raised; sending the masked text")
        return MASKED_ERROR_TEXT
    return text if isinstance(text, str) else MASKED_ERROR_TEXT
_DATA_PART_KEYS = ("type", "id", "data", "transient")


def _text_of(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content
                   if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str))


def _reasoning_of(message: BaseMessage) -> str:
    """Reasoning a model streamed: standard ``reasoning`` blocks, Anthropic ``thinking`` blocks,
    or ``additional_kwargs["reasoning_content"]`` (OpenAI-compatible servers)."""
    parts: list[str] = []
    if isinstance(message.content, list):
        for block in message.content:
            if isinstance(block, dict) and block.get("type") in ("reasoning", "thinking"):
                value = block.get(block["type"])
                if isinstance(value, str):
                    parts.append(value)
    extra = message.additional_kwargs.get("reasoning_content")
    if isinstance(extra, str):
        parts.append(extra)
    return "".join(parts)


def _data_part(payload: Any, keep_status: bool) -> dict[str, Any]:
    """A custom-stream payload as a UI data part.

    OM's parts (and any payload already shaped ``{"type": "data-…", "data": …}``) pass through
    with only the keys a data part may have; anything else becomes ``data-<payload.type>`` (or
    ``data-custom``) holding the payload, as ``@ai-sdk/langchain`` does.
    """
    kind = payload.get("type") if isinstance(payload, dict) else None
    if isinstance(kind, str) and kind.startswith("data-") and "data" in payload:
        part = {key: payload[key] for key in _DATA_PART_KEYS if key in payload}
        if keep_status and part["type"] == "data-om-status":
            part.pop("transient", None)
        return part
    part = {"type": f"data-{kind if isinstance(kind, str) and kind else 'custom'}", "data": payload}
    if isinstance(payload, dict) and isinstance(payload.get("id"), str):
        part["id"] = payload["id"]
    return part


class _Translator:
    """Turns ``(mode, chunk)`` items into UI chunks, tracking the open step and text part."""

    def __init__(self, keep_status: bool) -> None:
        self.keep_status = keep_status
        self.message_id: str | None = None  # the model message whose text is streaming
        self.text_open = False
        self.reasoning_open = False
        self.step_open = False
        self.tool_chunks: dict[str, AIMessageChunk] = {}
        self.announced_tools: set[str] = set()
        self.finish_reason = "stop"

    def close_message(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.message_id is not None:
            out.extend(self._close_reasoning())
            if self.text_open:
                out.append({"type": "text-end", "id": self.message_id})
            gathered = self.tool_chunks.pop(self.message_id, None)
            if gathered is not None:
                out.extend(self._tool_inputs(gathered.tool_calls))
        if self.step_open:
            out.append({"type": "finish-step"})
        self.message_id, self.text_open, self.step_open = None, False, False
        return out

    def _close_reasoning(self) -> list[dict[str, Any]]:
        if not self.reasoning_open:
            return []
        self.reasoning_open = False
        return [{"type": "reasoning-end", "id": f"{self.message_id}-reasoning"}]

    def _tool_inputs(self, calls: Sequence[Any]) -> list[dict[str, Any]]:
        out = []
        for call in calls:
            call_id = call.get("id")
            if not call_id or call_id in self.announced_tools:
                continue
            self.announced_tools.add(call_id)
            self.finish_reason = "tool-calls"
            out.append({"type": "tool-input-available", "toolCallId": call_id, "toolName": call["name"],
                        "input": call.get("args", {}), "dynamic": True})
        return out

    def model_message(self, message: AIMessage | AIMessageChunk) -> list[dict[str, Any]]:
        message_id = message.id or "message"
        out: list[dict[str, Any]] = []
        if message_id != self.message_id:
            out.extend(self.close_message())
            self.message_id, self.step_open = message_id, True
            self.finish_reason = "stop"
            out.append({"type": "start-step"})
        reasoning = _reasoning_of(message)
        if reasoning:
            if not self.reasoning_open:
                self.reasoning_open = True
                out.append({"type": "reasoning-start", "id": f"{message_id}-reasoning"})
            out.append({"type": "reasoning-delta", "id": f"{message_id}-reasoning", "delta": reasoning})
        text = _text_of(message)
        if text:
            out.extend(self._close_reasoning())  # the answer starts: the thinking is over
            if not self.text_open:
                self.text_open = True
                out.append({"type": "text-start", "id": message_id})
            out.append({"type": "text-delta", "id": message_id, "delta": text})
        if isinstance(message, AIMessageChunk):
            if message.tool_call_chunks or message.tool_calls:
                previous = self.tool_chunks.get(message_id)
                merged = message if previous is None else previous + message
                self.tool_chunks[message_id] = merged if isinstance(merged, AIMessageChunk) else message
        elif message.tool_calls:
            out.extend(self._tool_inputs(message.tool_calls))
        return out

    def tool_result(self, message: ToolMessage) -> list[dict[str, Any]]:
        out = self.close_message()
        if message.status == "error":
            out.append({"type": "tool-output-error", "toolCallId": message.tool_call_id,
                        "errorText": _text_of(message), "dynamic": True})
        else:
            output = message.content if isinstance(message.content, str) else _text_of(message)
            out.append({"type": "tool-output-available", "toolCallId": message.tool_call_id, "output": output,
                        "dynamic": True})
        self.finish_reason = "stop"
        return out

    def item(self, item: Any) -> list[dict[str, Any]]:
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise TypeError("ui_message_chunks expects graph.astream(..., stream_mode=['messages', 'custom']) "
                            f"items (mode, chunk) or (namespace, mode, chunk); got {type(item).__name__}")
        mode, chunk = item[-2], item[-1]
        if mode == "custom":
            try:
                return [_data_part(chunk, self.keep_status)]
            except Exception:  # one unreadable payload (a dict subclass that raises) is not the run's failure
                _log.warning("langchain-om UI stream: a custom payload could not be read; sent as data-custom",
                             exc_info=True)
                return [{"type": "data-custom", "data": chunk}]  # wire_json writes whatever it holds
        if mode != "messages":
            return []  # other modes ("updates", "values") carry nothing the chat shows
        message, metadata = chunk
        if OM_TAG in ((metadata or {}).get("tags") or []):
            return []  # OM's own observer/reflector calls (also tagged nostream)
        if isinstance(message, (AIMessage, AIMessageChunk)):
            return self.model_message(message)
        if isinstance(message, ToolMessage):
            return self.tool_result(message)
        return []


async def ui_message_chunks(
    stream: AsyncIterator[Any],
    *,
    message_id: str | None = None,
    keep_status: bool = False,
    on_error: ErrorText | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The AI SDK UI message chunks of one LangGraph run.

    ``stream`` is ``graph.astream(..., stream_mode=["messages", "custom"])`` (``subgraphs=True``
    works too; other modes in the list are ignored). ``message_id`` names the assistant
    message (a fresh one is made when omitted). Any exception (from the graph, or an item this
    adapter cannot read, such as a stream without ``stream_mode`` as a list) becomes one ``error``
    chunk and ends the stream, as the protocol expects; ``on_error`` maps it to the text the client
    shows (default ``MASKED_ERROR_TEXT``; ``expose_error`` shows it as it is).
    """
    translator = _Translator(keep_status)
    yield {"type": "start", "messageId": message_id or f"msg-{uuid.uuid4().hex}"}
    try:
        try:
            async for item in stream:
                for chunk in translator.item(item):
                    yield chunk
            closing = translator.close_message()
        finally:  # stopped early (an error, a client that went away): the run stops too
            await _aclose(stream)
    except Exception as exc:  # the run failed, or sent what no UI part can hold: tell the client
        try:
            closing = translator.close_message()
        except Exception:  # the translator's own state is what broke: end without closing parts
            closing = []
        for chunk in closing:
            yield chunk
        yield {"type": "error", "errorText": _error_text(exc, on_error)}
        return
    for chunk in closing:
        yield chunk
    yield {"type": "finish", "finishReason": translator.finish_reason}


async def _aclose(stream: AsyncIterator[Any]) -> None:
    close = getattr(stream, "aclose", None)
    if close is None:
        return
    try:
        await close()
    except Exception:  # closing a failed run may fail again; the first error is the one to report
        _log.debug("langchain-om UI stream: closing the run failed", exc_info=True)


async def ui_message_sse(
    stream: AsyncIterator[Any], *, message_id: str | None = None, keep_status: bool = False,
    on_error: ErrorText | None = None,
) -> AsyncIterator[str]:
    """``ui_message_chunks`` as server-sent events: one ``data: <json>`` event per chunk, then ``[DONE]``.

    Every event is valid UTF-8 JSON whatever a payload holds (``wire_json``), and the stream always
    ends with ``[DONE]``: after the last part, or after an ``error`` part.
    """
    chunks = ui_message_chunks(stream, message_id=message_id, keep_status=keep_status, on_error=on_error)
    try:
        async for chunk in chunks:
            yield f"data: {wire_json(chunk)}\n\n"
    except Exception as exc:  # ui_message_chunks turns failures into parts; this is a last guard
        yield f"data: {wire_json({'type': 'error', 'errorText': _error_text(exc, on_error)})}\n\n"
    yield "data: [DONE]\n\n"


def ui_message_response(
    stream: AsyncIterator[Any],
    *,
    message_id: str | None = None,
    keep_status: bool = False,
    headers: Mapping[str, str] | None = None,
    on_error: ErrorText | None = None,
) -> StreamingResponse:
    """A Starlette (and so FastAPI) response streaming one run to ``useChat`` (``on_error``: see
    ``ui_message_chunks``)."""
    try:
        from starlette.responses import StreamingResponse
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError('ui_message_response needs Starlette: pip install "langchain-om[ui]"') from exc
    return StreamingResponse(
        ui_message_sse(stream, message_id=message_id, keep_status=keep_status, on_error=on_error),
        headers={**UI_MESSAGE_STREAM_HEADERS, **(headers or {})},
        media_type="text/event-stream",
    )


def last_user_message(body: Mapping[str, Any]) -> HumanMessage:
    """The newest user message of a ``useChat`` request body as a LangChain message.

    ``useChat`` posts ``{"id", "messages": [UIMessage…], …}``; a graph with a checkpointer
    already holds the earlier turns, so only the newest user turn is sent to it. Its text
    parts are joined; the UI message id becomes the LangChain message id.
    """
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise ValueError("messages: expected the list of UI messages useChat sends")
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "user":
            parts = message.get("parts")
            if not isinstance(parts, list):
                raise ValueError("messages[].parts: expected a list of UI message parts")
            text = "".join(str(part.get("text", "")) for part in parts
                           if isinstance(part, dict) and part.get("type") == "text")
            message_id = message.get("id")
            return HumanMessage(text, id=message_id if isinstance(message_id, str) and message_id else None)
    raise ValueError("messages: no user message to answer")
