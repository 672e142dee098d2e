"""The small interface OM's engine offers its extensions.

Recall, working memory, temporal markers, extractors and checkpoint branches plug into the
engine through this protocol, never by importing the engine's class: the engine imports them,
so they must not import it back (a test builds the package's import graph and fails on a cycle).
``ObservationalMemory`` satisfies it structurally.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from langchain_core.messages import BaseMessage

from ..foundation.config import OMConfig
from ..foundation.events import OMEvent
from ..foundation.tokens import TokenCounter
from ..store.base import OMRecord, OMStore, RecordStamp, StoredMessage

_T = TypeVar("_T")


@runtime_checkable
class MemoryHost(Protocol):
    """What an extension may read and call on the engine."""

    config: OMConfig
    store: OMStore
    counter: TokenCounter
    cache_limit: int
    section_providers: list[Callable[[Any, OMRecord, str, str], Awaitable[str | None]]]
    """Sections of OM's system message after the observation log (volatile)."""
    static_section_providers: list[Callable[[Any, OMRecord, str, str], Awaitable[str | None]]]
    """Sections before the log (static guidance, part of the cacheable prefix)."""
    message_listeners: list[Callable[[Any, str, str, list[StoredMessage]], Awaitable[None]]]
    working_memory: Any
    """The working memory extension, when configured (None otherwise)."""

    async def aensure_setup(self) -> None:
        """Create the store's tables once."""

    def resolve_resource(self, thread_id: str, resource_id: str | None) -> str:
        """The resource a thread's memory lives under (validates both ids)."""

    def record_thread(self, thread_id: str) -> str | None:
        """The record's thread id (None in resource scope)."""

    def thread_label(self, thread_id: str) -> str:
        """How a thread is named to OM's models (hashed when ids are obscured)."""

    def message_of(self, resource_id: str, stored: StoredMessage) -> BaseMessage:
        """A stored row as a LangChain message (parsed once)."""

    def queue_events(self, key: str, events: Sequence[OMEvent]) -> None:
        """Hold events for the record's next step."""

    async def aload_record(self, resource_id: str, thread_id: str) -> OMRecord:
        """The current record (shared with the engine's cache: never change it)."""

    async def arecord_at_stamp(self, resource_id: str, thread_id: str, stamp: RecordStamp | None) -> OMRecord:
        """``aload_record`` given the record's stamp the caller has just read."""

    def remember_thread_rows(self, resource_id: str, thread_id: str, rows: Sequence[StoredMessage],
                             parsed: dict[str, BaseMessage] | None = None) -> None:
        """A thread was created with exactly ``rows``: seed the engine's per-thread caches."""

    def parsed_messages(self, resource_id: str, thread_id: str) -> dict[str, BaseMessage]:
        """The thread's parsed messages the engine holds."""

    def knows_none_of(self, resource_id: str, thread_id: str, ids: Collection[str]) -> bool:
        """Whether the engine's caches of the thread are warm and know none of ``ids`` as stored
        (a hint: only the store can prove it)."""

    def run_sync(self, coro: Coroutine[Any, Any, _T], *, twin: str,
                 waits_on: Callable[[asyncio.AbstractEventLoop], bool] | None = None) -> _T:
        """Run a coroutine on OM's private loop (sync twins)."""
