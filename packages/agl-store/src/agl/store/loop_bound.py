"""``LoopBoundStore``: one store, made for one event loop, shared safely by threads with loops of their own.

Apply it once, where a store enters a process or a thread pool (:func:`as_thread_safe` does nothing to a
store that is thread-safe already, which every built-in store is); code further in then calls the store
from whatever loop it runs on.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from ._forwarding import ForwardingStore
from .base import LightningStore, LightningStoreCapabilities

__all__ = ["LoopBoundStore", "as_thread_safe"]


class _LoopThread:
    """An event loop running forever in a daemon thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="agl-store-loop", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self.loop.close()


class LoopBoundStore(ForwardingStore):
    """Runs every call of ``store`` on one event loop, whichever thread or loop the caller is on.

    Args:
        store: The store to share (it stays owned by its creator: :meth:`close` does not close it).
        loop: The store's home loop. ``None`` starts a private loop thread on first use. When the home loop
            has closed, calls run on the caller's loop.
    """

    def __init__(self, store: LightningStore, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.store = store
        self._home = loop
        self._own: _LoopThread | None = None
        self._lock = threading.Lock()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        capabilities = LightningStoreCapabilities(**self.store.capabilities)
        capabilities.update(thread_safe=True, async_safe=True)
        return capabilities

    def otlp_traces_endpoint(self) -> str:
        return self.store.otlp_traces_endpoint()

    def _loop(self) -> asyncio.AbstractEventLoop:
        if self._home is not None:
            return self._home
        with self._lock:
            if self._own is None:
                self._own = _LoopThread()
            return self._own.loop

    async def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        loop = self._loop()
        if loop.is_closed() or loop is asyncio.get_running_loop():
            return await getattr(self.store, method)(*args, **kwargs)
        future = asyncio.run_coroutine_threadsafe(getattr(self.store, method)(*args, **kwargs), loop)
        return await asyncio.wrap_future(future)

    async def close(self) -> None:
        """Stop the private loop thread, if one was started; the wrapped store stays open."""
        with self._lock:
            own, self._own = self._own, None
        if own is not None:
            own.stop()


def as_thread_safe(store: LightningStore, loop: asyncio.AbstractEventLoop | None = None) -> LightningStore:
    """``store`` itself when it is thread-safe, else a :class:`LoopBoundStore` around it (home ``loop``)."""
    if store.capabilities.get("thread_safe", False):
        return store
    return LoopBoundStore(store, loop)
