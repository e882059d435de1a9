"""Helpers for writing algorithms: dataset batching and injection of the store and the LLM proxy."""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

from agl.types import Dataset

from .base import Algorithm, SupportsLLMProxy

__all__ = ["batch_iter_over_dataset", "running_proxy", "with_llm_proxy", "with_store"]

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")
A = TypeVar("A", bound=Algorithm)


def batch_iter_over_dataset(
    dataset: Dataset[T], batch_size: int, *, rng: random.Random | None = None
) -> Iterator[list[T]]:
    """Endless batches of ``batch_size`` distinct items, reshuffled every epoch.

    A batch may straddle two epochs but never holds the same index twice. With ``batch_size >= len(dataset)``
    every batch is the whole dataset, shuffled.
    """
    n = len(dataset)
    if n == 0:
        raise ValueError("batch_iter_over_dataset needs a non-empty dataset")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    rng = rng or random.Random()
    if batch_size >= n:
        while True:
            order = list(range(n))
            rng.shuffle(order)
            yield [dataset[i] for i in order]
    order: list[int] = []
    while True:
        batch: list[int] = []
        while len(batch) < batch_size:
            if not order:
                order = list(range(n))
                rng.shuffle(order)
            # Skip indices already in this batch (only possible when the batch straddles epochs).
            index = order.pop()
            if index in batch:
                order.insert(0, index)
                continue
            batch.append(index)
        yield [dataset[i] for i in batch]


def with_store(
    func: Callable[Concatenate[A, Any, P], Awaitable[R]],
) -> Callable[Concatenate[A, P], Awaitable[R]]:
    """Decorate an ``async`` algorithm method to receive ``self.get_store()`` right after ``self``."""
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"@with_store needs a coroutine function; {func.__qualname__} is not async")

    @functools.wraps(func)
    async def wrapper(self: A, *args: P.args, **kwargs: P.kwargs) -> R:
        return await func(self, self.get_store(), *args, **kwargs)

    return wrapper


async def _lifecycle_call(proxy: SupportsLLMProxy, method: str) -> None:
    result = getattr(proxy, method)()
    if not inspect.isawaitable(result):
        raise TypeError(
            f"{type(proxy).__name__}.{method}() must be a coroutine function (async def): "
            "SupportsLLMProxy.start and stop are async"
        )
    await result


@asynccontextmanager
async def running_proxy(proxy: SupportsLLMProxy | None) -> AsyncGenerator[SupportsLLMProxy | None, None]:
    """Keep ``proxy`` running for the block and yield it.

    A proxy that is not running is started on entry and stopped on exit (also when the block raises); one
    that is already running, or ``None``, is left as it is. ``TypeError`` if ``start``/``stop`` is not async.
    """
    if proxy is None or proxy.is_running():
        yield proxy
        return
    await _lifecycle_call(proxy, "start")
    try:
        yield proxy
    finally:
        await _lifecycle_call(proxy, "stop")


def with_llm_proxy(
    required: bool = False, auto_start: bool = True
) -> Callable[
    [Callable[Concatenate[A, SupportsLLMProxy | None, P], Awaitable[R]]],
    Callable[Concatenate[A, P], Awaitable[R]],
]:
    """Decorate an ``async`` algorithm method to receive ``self.get_llm_proxy()`` right after ``self``.

    ``required=True`` raises ``ValueError`` when no proxy is set. With ``auto_start``, a proxy that is not
    running is started before the call and stopped after it (only if this decorator started it).
    """

    def decorate(
        func: Callable[Concatenate[A, SupportsLLMProxy | None, P], Awaitable[R]],
    ) -> Callable[Concatenate[A, P], Awaitable[R]]:
        if not inspect.iscoroutinefunction(func):
            raise TypeError(f"@with_llm_proxy needs a coroutine function; {func.__qualname__} is not async")

        @functools.wraps(func)
        async def wrapper(self: A, *args: P.args, **kwargs: P.kwargs) -> R:
            proxy = self.get_llm_proxy()
            if proxy is None and required:
                raise ValueError(
                    f"{type(self).__name__} needs an LLM proxy: pass llm_proxy=... to the Trainer "
                    "or call set_llm_proxy()"
                )
            if not auto_start:
                return await func(self, proxy, *args, **kwargs)
            async with running_proxy(proxy):
                return await func(self, proxy, *args, **kwargs)

        return wrapper

    return decorate
