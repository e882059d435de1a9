"""A facade that lets threads with their own event loops share a store made for one event loop."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any

from agl.store import LightningStore, LightningStoreCapabilities

__all__ = ["LoopBoundStore"]


class _LoopThread:
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


def _delegate(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    async def method(self: LoopBoundStore, *args: Any, **kwargs: Any) -> Any:
        return await self._call(name, *args, **kwargs)

    method.__name__ = name
    return method


class LoopBoundStore(LightningStore):
    """Every call runs on one private event loop thread, whichever thread or loop the caller is on."""

    def __init__(self, store: LightningStore) -> None:
        self.store = store
        self._loop_thread = _LoopThread()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(
            **{**self.store.capabilities, "thread_safe": True, "async_safe": True}
        )

    def otlp_traces_endpoint(self) -> str:
        return self.store.otlp_traces_endpoint()

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        coroutine = getattr(self.store, name)(*args, **kwargs)
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop_thread.loop)
        return await asyncio.wrap_future(future)

    async def statistics(self) -> Any:
        return await self._call("statistics")

    async def close(self) -> None:
        """Stops the private loop; the wrapped store stays open (its owner closes it)."""
        self._loop_thread.stop()


for _name in sorted(LightningStore.__abstractmethods__):
    setattr(LoopBoundStore, _name, functools.wraps(getattr(LightningStore, _name))(_delegate(_name)))
LoopBoundStore.__abstractmethods__ = frozenset()
