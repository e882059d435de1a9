"""Memory cost of the in-memory store: bytes per finished rollout (with its attempt) and per span.

Measured with ``tracemalloc`` (Python allocations, which is what the store holds) over ``--rollouts``
rollouts, each enqueued, claimed, given ``--spans`` spans and finished. Usage:
``uv run python benchmarks/memory_cost.py [--rollouts 5000] [--spans 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import tracemalloc

from agl.store import InMemoryLightningStore
from agl.types import Span, TraceStatus


def _span(rollout_id: str, attempt_id: str, i: int) -> Span:
    return Span(
        rollout_id=rollout_id,
        attempt_id=attempt_id,
        sequence_id=i,
        trace_id="a" * 32,
        span_id=f"{i:016x}",
        parent_id=None,
        name="openai.chat.completion",
        status=TraceStatus(status_code="OK"),
        attributes={"gen_ai.request.model": "model", "gen_ai.usage.prompt_tokens": 120, "reward": 0.5},
        start_time=1.0,
        end_time=2.0,
    )


async def measure(rollouts: int, spans: int) -> tuple[float, float]:
    store = InMemoryLightningStore()

    async def fill(with_spans: bool) -> None:
        for _ in range(rollouts):
            await store.enqueue_rollout({"question": "What is 17 * 23?", "id": 12345})
            claimed = await store.dequeue_rollout(worker_id="w")
            assert claimed is not None
            if with_spans:
                await store.add_many_spans(
                    [_span(claimed.rollout_id, claimed.attempt.attempt_id, i + 1) for i in range(spans)]
                )
            await store.update_attempt(claimed.rollout_id, "latest", status="succeeded")

    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    await fill(False)
    gc.collect()
    middle = tracemalloc.get_traced_memory()[0]
    await fill(True)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    per_rollout = (middle - before) / rollouts
    per_span = (after - middle - (middle - before)) / (rollouts * spans)
    return per_rollout, per_span


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=5000)
    parser.add_argument("--spans", type=int, default=10)
    args = parser.parse_args()
    per_rollout, per_span = asyncio.run(measure(args.rollouts, args.spans))
    print(f"per finished rollout (one attempt, small input): {per_rollout:,.0f} bytes")
    print(f"per span (3 attributes, as stored):              {per_span:,.0f} bytes")


if __name__ == "__main__":
    main()
