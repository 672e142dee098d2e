"""A private event loop in a daemon thread, behind OM's sync wrappers.

Sync callers (``process``, ``ObservationalChatMessageHistory``) must not lose
background buffering when their call returns, which ``asyncio.run`` would do by
closing its loop. One long-lived loop keeps those tasks alive between calls.

Called from inside another running event loop (a notebook cell, an async web handler), a
sync wrapper still works by handing its coroutine to this loop, except when the coroutine
would wait for background work running on the blocked caller's loop: that raises at once,
naming the async method to await, instead of deadlocking.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, refuse_in: Callable[[asyncio.AbstractEventLoop], bool] | None = None) -> None:
        """``refuse_in(loop)``: whether every call made from inside ``loop`` would wait for it
        (a store whose connections belong to that loop)."""
        self._refuse_in = refuse_in
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def _ensure(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="langchain-om-loop", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def run(
        self,
        coro: Coroutine[Any, Any, T],
        *,
        twin: str = "the a* method",
        waits_on: Callable[[asyncio.AbstractEventLoop], bool] | None = None,
    ) -> T:
        """Run ``coro`` on OM's loop and wait for it; ``twin`` names the async method to await instead.

        A sync call blocks the thread it is made on. Made from inside a running event loop, it
        blocks that loop until it returns, so it must not wait for anything that loop runs:
        ``waits_on(loop)`` says whether ``coro`` would (OM background work started there by
        the async methods, a store's pool opened there). Then it raises at once instead of
        waiting forever. While the loop is
        blocked nothing new can start on it, so the answer cannot change before ``coro`` runs.
        """
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and running is self._loop:
            coro.close()
            raise RuntimeError(f"sync langchain-om call made from inside OM's own event loop; use `await {twin}`")
        if running is not None and (
            (waits_on is not None and waits_on(running)) or (self._refuse_in is not None and self._refuse_in(running))
        ):
            coro.close()
            raise RuntimeError(
                "sync langchain-om call made from inside a running event loop: it would wait for work that "
                "runs on that loop (OM background work, or the store's connections), which cannot run while "
                f"the call blocks the loop. Use `await {twin}` instead."
            )
        future = asyncio.run_coroutine_threadsafe(coro, self._ensure())
        return future.result()

    def stop(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(timeout=5)
            loop.close()
