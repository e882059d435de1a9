"""Span builders, and the attempt a span belongs to: what the store tests (and others) build their data from."""

from __future__ import annotations

from typing import Any

from agl.store import LightningStore
from agl.types import AttemptedRollout, RolloutConfig, Span, TraceStatus, new_span_id, new_trace_id

__all__ = ["claim", "make_span", "span_for"]


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
