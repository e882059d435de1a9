"""Shared helpers of the agl-tracer tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from agl.store import InMemoryLightningStore, LightningStore
from agl.tracer import OtelTracer
from agl.types import Span


def new_store() -> InMemoryLightningStore:
    return InMemoryLightningStore(scan_debounce_seconds=0.0)


def worker_tracer(store: LightningStore) -> OtelTracer:
    """An ``OtelTracer`` initialised as worker 0 writing to ``store``."""
    tracer = OtelTracer()
    tracer.init_worker(0, store)
    return tracer


async def new_attempt(store: LightningStore, task: Any = None) -> tuple[str, str]:
    rollout = await store.start_rollout({"task": task})
    assert rollout.attempt is not None
    return rollout.rollout_id, rollout.attempt.attempt_id


async def spans_of(store: LightningStore, rollout_id: str, attempt_id: str | None = None) -> list[Span]:
    return list((await store.query_spans(rollout_id, attempt_id)).items)


async def poll_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.01) -> None:
    """Poll an (async or sync) predicate until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


def names(spans: Sequence[Span]) -> list[str]:
    return [s.name for s in spans]
