"""The memory inspector: a read-only web app showing what OM holds for each thread (issue 47, item 5).

``langchain-om serve`` runs it (the ``[ui]`` extra: Starlette on uvicorn). One static page
(``inspector.html``, plain HTML and JavaScript, no build step) asks three JSON routes for the
threads, one thread's state and the raw messages behind a group, and polls the thread's state so
a conversation held by another process on the same database shows up turn by turn. The state is
computed by the same calls as ``langchain-om inspect``: the ``data-om-status`` payload the
integrations emit, the log rendered with the ages the model reads. Every route is a GET that only
reads; the page inserts stored text as text (``textContent``), never as HTML.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from importlib import resources
from typing import Any, Literal

from ..engine import ObservationalMemory
from ..extensions.recall import message_stamp
from ..foundation.clock import conversation_today
from ..foundation.extras import require_modules
from ..foundation.log_dates import LogDating
from ..foundation.messages import load_message
from ..store.base import OMRecord, OMStore, StoredMessage, implicit_resource

DEFAULT_MESSAGE_TOKENS = 30_000
DEFAULT_OBSERVATION_TOKENS = 40_000
TODAY_FROM = 20
"""The newest messages the page's "today" is read from, as the agent's context reads it (the newest
stamp, on the clock of the newest user message that states one)."""
THRESHOLDS_KEY = "om_thresholds"
"""Thread metadata where a writer may record its thresholds (the demo does); the inspector reports the
windows against them, else against its own settings."""
MESSAGES_PER_GROUP = 200
"""Most raw messages returned for one group (a group covers a few thousand tokens of messages)."""


def page_html() -> str:
    """The inspector's single page, shipped inside the package."""
    return resources.files(__package__).joinpath("inspector.html").read_text(encoding="utf-8")


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)).isoformat()


def _message_json(stored: StoredMessage) -> dict[str, Any]:
    try:
        message = load_message(stored.data)
        role, text = message.type, str(message.text)
        tool_calls = [call.get("name", "") for call in getattr(message, "tool_calls", None) or []]
    except Exception:  # a row another version wrote: show what can be shown, never fail the page
        role, text, tool_calls = str(stored.data.get("type", "?")), str(stored.data), []
    return {"id": stored.id, "seq": stored.seq, "role": role, "text": text, "toolCalls": tool_calls,
            "kind": stored.kind, "sent": message_stamp(stored), "tokens": stored.tokens, "observed": stored.observed}


def _timeline(record: OMRecord) -> list[dict[str, Any]]:
    """The cycles the record shows, oldest first: each group of the log is an observation (written by a
    blocking cycle), an activation (buffered notes swapped in) or a reflection; pending buffered chunks
    and a pending reflection are the cycles still waiting to activate."""
    kinds = {"observation": "observation", "buffered": "activation", "reflection": "reflection"}
    events: list[dict[str, Any]] = [
        {"at": _iso(group.created_at), "kind": kinds.get(group.source, group.source), "tokens": group.tokens,
         "group": group.id, "generation": group.generation, "pending": False}
        for group in record.groups
    ]
    events += [{"at": _iso(chunk.created_at), "kind": "buffered", "tokens": chunk.observation_tokens,
                "messageTokens": chunk.message_tokens, "messages": chunk.message_count, "group": None,
                "generation": record.generation_count, "pending": True} for chunk in record.buffered_chunks]
    if record.buffered_reflection is not None:
        pending = record.buffered_reflection
        events.append({"at": _iso(pending.created_at), "kind": "buffered-reflection", "tokens": pending.output_tokens,
                       "group": None, "generation": record.generation_count, "pending": True})
    return sorted(events, key=lambda event: event["at"] or "")


class Inspector:
    """Reads one store for the page; one ``ObservationalMemory`` per scope and thresholds (cheap reads,
    shared caches)."""

    def __init__(self, store: OMStore, *, message_tokens: int | None = None,
                 observation_tokens: int | None = None) -> None:
        self.store = store
        self.message_tokens = message_tokens
        self.observation_tokens = observation_tokens
        self._oms: dict[tuple[str, int, int], ObservationalMemory] = {}

    def _om(self, scope: Literal["thread", "resource"], message_tokens: int,
            observation_tokens: int) -> ObservationalMemory:
        key = (scope, message_tokens, observation_tokens)
        if key not in self._oms:
            self._oms[key] = ObservationalMemory(
                self.store, scope=scope, observation={"message_tokens": message_tokens},
                reflection={"observation_tokens": observation_tokens})
        return self._oms[key]

    async def athreads(self, resource_id: str | None, limit: int = 200) -> dict[str, Any]:
        summaries = await self.store.alist_thread_summaries(resource_id, limit=limit)
        return {"resourceId": resource_id, "threads": [
            {"threadId": s.thread_id, "resourceId": s.resource_id, "title": s.title, "messageCount": s.message_count,
             "lastActivity": _iso(s.last_activity)} for s in summaries]}

    async def _resolve(self, thread_id: str, resource_id: str | None) -> tuple[str, Any]:
        resource = resource_id or implicit_resource(thread_id)
        thread = await self.store.aget_thread(resource, thread_id)
        if thread is None:
            raise LookupError(f"thread {thread_id!r} not found" + (f" for resource {resource_id!r}" if resource_id
                                                                   else " (without a resource)"))
        return resource, thread

    async def athread(self, thread_id: str, resource_id: str | None) -> dict[str, Any]:
        resource, thread = await self._resolve(thread_id, resource_id)
        scope: Literal["thread", "resource"] = "thread"
        if await self.store.aget_record(resource, thread_id) is None and \
                await self.store.aget_record(resource, None) is not None:
            scope = "resource"
        recorded = thread.metadata.get(THRESHOLDS_KEY) or {}
        message_tokens = int(self.message_tokens or recorded.get("message_tokens") or DEFAULT_MESSAGE_TOKENS)
        observation_tokens = int(self.observation_tokens or recorded.get("observation_tokens")
                                 or DEFAULT_OBSERVATION_TOKENS)
        om = self._om(scope, message_tokens, observation_tokens)
        record = await om.aget_record(thread_id, resource_id=resource_id)
        status = await om.astatus(thread_id, resource_id=resource_id)
        newest = await self.store.aget_messages(resource, thread_id, limit=TODAY_FROM, descending=True)
        stored = await self.store.acount_messages(resource, thread_id)
        recent = [load_message(row.data) for row in reversed(newest) if row.kind == "message"]
        today = conversation_today(recent, newest[0].created_at if newest else datetime.now(timezone.utc))
        dating = LogDating(today)
        log = [{"id": g.id, "source": g.source, "generation": g.generation, "tokens": g.tokens,
                "createdAt": _iso(g.created_at), "threadId": g.thread_id, "startId": g.start_id, "endId": g.end_id,
                "text": dating.annotate(g.text.strip())} for g in record.groups]
        version = f"{record.version}:{_iso(record.updated_at)}:{stored}:{newest[0].id if newest else ''}"
        return {
            "threadId": thread_id, "resourceId": resource_id, "title": thread.title, "scope": scope,
            "version": version, "today": today.isoformat(), "storedMessages": stored,
            "status": status.model_dump(mode="json", by_alias=True),
            "log": log, "currentTask": record.current_task, "suggestedResponse": record.suggested_response,
            "timeline": _timeline(record), "generation": record.generation_count,
        }

    async def agroup_messages(self, thread_id: str, resource_id: str | None, group_id: str) -> dict[str, Any]:
        resource, _ = await self._resolve(thread_id, resource_id)
        record = await self.store.aget_record(resource, thread_id) or await self.store.aget_record(resource, None)
        group = next((g for g in (record.groups if record else []) if g.id == group_id), None)
        if group is None:
            raise LookupError(f"group {group_id!r} is not in the log of thread {thread_id!r}")
        ends = {m.id: m.seq for m in await self.store.aget_messages_by_ids(resource, group.thread_id,
                                                                            [group.start_id, group.end_id])}
        first, last = ends.get(group.start_id), ends.get(group.end_id)
        rows = [] if first is None or last is None else await self.store.aget_messages(
            resource, group.thread_id, after_seq=first - 1, before_seq=last + 1, limit=MESSAGES_PER_GROUP)
        return {"group": group.id, "threadId": group.thread_id, "messages": [_message_json(m) for m in rows],
                "more": last is not None and first is not None and last - first + 1 > MESSAGES_PER_GROUP}

    def clear(self) -> None:
        """Drop the memory objects (they run no step, so no background work; the store is the app's)."""
        self._oms.clear()


def create_inspector_app(store: OMStore, *, message_tokens: int | None = None,
                         observation_tokens: int | None = None, close_store: bool = True) -> Any:
    """The Starlette app of the inspector over ``store`` (set up on startup, closed on shutdown unless
    ``close_store`` is false). Needs the ``[ui]`` extra."""
    require_modules("the memory inspector", ["starlette"], "ui")
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response
    from starlette.routing import Route

    inspector = Inspector(store, message_tokens=message_tokens, observation_tokens=observation_tokens)
    page = page_html()
    headers = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}

    def _param(request: Request, name: str) -> str | None:
        value = request.query_params.get(name)
        return value if value else None

    async def index(_: Request) -> Response:
        return HTMLResponse(page, headers={**headers, "Content-Security-Policy":
                                           "default-src 'self'; script-src 'unsafe-inline'; "
                                           "style-src 'unsafe-inline'; connect-src 'self'"})

    async def threads(request: Request) -> Response:
        return JSONResponse(await inspector.athreads(_param(request, "resource")), headers=headers)

    async def thread(request: Request) -> Response:
        thread_id = _param(request, "thread")
        if thread_id is None:
            return JSONResponse({"error": "thread: missing"}, status_code=400, headers=headers)
        try:
            return JSONResponse(await inspector.athread(thread_id, _param(request, "resource")), headers=headers)
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404, headers=headers)

    async def messages(request: Request) -> Response:
        thread_id, group_id = _param(request, "thread"), _param(request, "group")
        if thread_id is None or group_id is None:
            return JSONResponse({"error": "thread and group: both needed"}, status_code=400, headers=headers)
        try:
            body = await inspector.agroup_messages(thread_id, _param(request, "resource"), group_id)
        except LookupError as exc:
            return JSONResponse({"error": str(exc)}, status_code=404, headers=headers)
        return JSONResponse(body, headers=headers)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        await store.asetup()
        try:
            yield
        finally:
            inspector.clear()
            if close_store:
                await store.aclose()

    return Starlette(routes=[Route("/", index), Route("/api/threads", threads), Route("/api/thread", thread),
                             Route("/api/messages", messages)], lifespan=lifespan)
