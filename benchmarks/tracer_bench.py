"""Tracer benchmark: spans emitted inside one trace context and delivered to a store.

For each tracer (OtelTracer, DummyTracer) and store (in-memory, the HTTP client against a server on 127.0.0.1),
emits N rewards (default 20,000) in one ``trace_context`` and prints the emit rate (what the agent pays), the
end-to-end rate (until the context exits with every span in the store) and the number of store batches.

    uv run benchmarks/tracer_bench.py [--spans 20000] [--no-http]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

from agl.store import InMemoryLightningStore, LightningStore
from agl.tracer import DummyTracer, OtelTracer, Tracer, emit_reward


async def bench(store: LightningStore, tracer: Tracer, n: int, label: str) -> None:
    tracer.init_worker(0, store)
    rollout = await store.start_rollout({"bench": True})
    assert rollout.attempt is not None
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    started = time.perf_counter()
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_started = time.perf_counter()
        for i in range(n):
            emit_reward(float(i))
        emit_seconds = time.perf_counter() - emit_started
    total = time.perf_counter() - started
    stored = (await store.query_spans(rid, aid, limit=1, sort_order="desc")).items
    assert stored and stored[0].sequence_id == n, "spans missing after the context exited"
    print(
        f"{type(tracer).__name__:12s} {label:8s} {n} spans: emit {n / emit_seconds:9,.0f} spans/s, "
        f"end-to-end {n / total:9,.0f} spans/s, {tracer.pipeline.stats.batches} batches"
    )
    tracer.teardown_worker(0)


@contextlib.asynccontextmanager
async def http_store() -> AsyncIterator[LightningStore]:
    from agl.store import LightningStoreClient, LightningStoreServer

    server = LightningStoreServer(InMemoryLightningStore(), port=0)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(server.endpoint)
    try:
        yield client
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=20_000)
    parser.add_argument("--no-http", action="store_true")
    args = parser.parse_args()
    for tracer_cls in (OtelTracer, DummyTracer):
        await bench(InMemoryLightningStore(), tracer_cls(), args.spans, "memory")
    if not args.no_http:
        async with http_store() as client:
            for tracer_cls in (OtelTracer, DummyTracer):
                await bench(client, tracer_cls(), args.spans, "http")


if __name__ == "__main__":
    asyncio.run(main())
