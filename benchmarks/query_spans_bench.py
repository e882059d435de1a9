"""``query_spans`` in process: p50/p99 of reading one rollout's spans back, ours or the reference's.

A store is filled with ``--rollouts`` rollouts of 10 spans (~1 KB attributes each, as in ``store_bench``);
then ``query_spans(rollout_id)`` is timed for random rollouts, twice each (a trainer reads a finished
rollout's spans once or twice). Runs against this repository's stores, or against the reference
agentlightning 0.3.0 installed in another environment:

    uv run benchmarks/query_spans_bench.py --backend memory --backend sqlite
    /tmp/ref-venv/bin/python benchmarks/query_spans_bench.py --impl ref --backend memory
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from typing import Any

SPANS_PER_ROLLOUT = 10


def _span(span_cls: Any, rollout_id: str, attempt_id: str, seq: int) -> Any:
    return span_cls.model_validate(
        {
            "rollout_id": rollout_id,
            "attempt_id": attempt_id,
            "sequence_id": seq,
            "trace_id": f"{random.getrandbits(128):032x}",
            "span_id": f"{random.getrandbits(64):016x}",
            "parent_id": None,
            "name": "bench",
            "status": {"status_code": "OK"},
            "attributes": {"payload": "x" * 1000, "index": seq},
            "events": [],
            "links": [],
            "start_time": time.time(),
            "end_time": time.time(),
            "context": None,
            "parent": None,
            "resource": {"attributes": {}, "schema_url": ""},
        }
    )


def _open(impl: str, backend: str, tmp: str) -> tuple[Any, Any]:
    if impl == "ref":
        from agentlightning.store import InMemoryLightningStore as RefMemory
        from agentlightning.types import Span as RefSpan

        if backend == "memory":
            return RefMemory(), RefSpan
        from agentlightning.store.sqlite import SqliteLightningStore  # type: ignore[import-not-found]

        return SqliteLightningStore(os.path.join(tmp, "ref.db")), RefSpan
    from agl.store import InMemoryLightningStore, SqlLightningStore
    from agl.types import Span

    if backend == "memory":
        return InMemoryLightningStore(), Span
    return SqlLightningStore(f"sqlite:///{os.path.join(tmp, 'bench.db')}"), Span


async def run(impl: str, backend: str, rollouts: int, reads: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        store, span_cls = _open(impl, backend, tmp)
        ids = []
        for i in range(rollouts):
            await store.enqueue_rollout(input={"task": i})
            claimed = await store.dequeue_rollout()
            rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
            await store.add_many_spans([_span(span_cls, rid, aid, s + 1) for s in range(SPANS_PER_ROLLOUT)])
            ids.append(rid)
        for rid in ids[:50]:  # warm up
            await store.query_spans(rid)
        times = []
        for _ in range(reads):
            rid = random.choice(ids)
            for _ in range(2):
                t0 = time.perf_counter()
                spans = await store.query_spans(rid)
                times.append(time.perf_counter() - t0)
            assert len(list(spans)) == SPANS_PER_ROLLOUT
        if hasattr(store, "close"):
            await store.close()
    times.sort()
    return statistics.median(times) * 1e6, times[int(0.99 * len(times))] * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--impl", choices=["agl", "ref"], default="agl")
    parser.add_argument("--backend", action="append", choices=["memory", "sqlite"])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    print(f"query_spans of one rollout ({SPANS_PER_ROLLOUT} spans of ~1 KB), load {os.getloadavg()[0]:.2f}")
    for backend in args.backend or ["memory"]:
        p50, p99 = asyncio.run(run(args.impl, backend, args.rollouts, args.reads))
        print(f"  {args.impl:<4} {backend:<7} p50 {p50:8.1f} µs   p99 {p99:8.1f} µs")


if __name__ == "__main__":
    main()
