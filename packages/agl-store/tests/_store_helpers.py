"""Small builders shared by the store conformance tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agl.store import LightningStore
from agl.types import AttemptedRollout, RolloutConfig, Span, TraceStatus, new_span_id, new_trace_id

T = TypeVar("T")


def make_span(
    rollout_id: str,
    attempt_id: str,
    sequence_id: int,
    *,
    name: str = "step",
    span_id: str | None = None,
    trace_id: str = "a" * 32,
    parent_id: str | None = None,
    start_time: float | None = None,
    attributes: dict[str, Any] | None = None,
) -> Span:
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=sequence_id,
        trace_id=trace_id or new_trace_id(),
        span_id=span_id or new_span_id(),
        parent_id=parent_id,
        name=name,
        status=TraceStatus(status_code="OK"),
        attributes=attributes if attributes is not None else {"k": sequence_id},
        start_time=start_time,
        end_time=None if start_time is None else start_time + 1.0,
    )


async def claim(
    store: LightningStore,
    config: RolloutConfig | None = None,
    worker_id: str | None = None,
    input: Any = "task",
) -> AttemptedRollout:
    """Enqueue one rollout and dequeue it: the usual way a runner gets an attempt."""
    await store.enqueue_rollout(input, config=config)
    claimed = await store.dequeue_rollout(worker_id=worker_id)
    assert claimed is not None
    return claimed


async def span_for(store: LightningStore, rollout: AttemptedRollout, **kwargs: Any) -> Span:
    """Store one span for the rollout's current attempt (a heartbeat)."""
    sequence_id = await store.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id)
    span = make_span(rollout.rollout_id, rollout.attempt.attempt_id, sequence_id, **kwargs)
    stored = await store.add_span(span)
    assert stored is not None
    return stored


def run_in_threads(count: int, work: Callable[[int], Awaitable[T]]) -> list[T]:
    """Run ``work(i)`` in ``count`` threads, each in its own new event loop; re-raise the first error."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []
    barrier = threading.Barrier(count)

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = asyncio.run(work(i))  # type: ignore[arg-type]
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=target, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish in time"
    if errors:
        raise errors[0]
    return results
