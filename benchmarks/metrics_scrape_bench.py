"""Time of one ``/metrics`` store read (``StoreFigures.refresh``) at 10k and 50k rollouts (issue 27, defect 10).

"before": the old read, every rollout paged through (re-implemented here, same store calls); "after": the
incremental read, second scrape (the first reads every rollout once). In-memory store, 1 % of the rollouts in
flight. ``uv run python benchmarks/metrics_scrape_bench.py``
"""

from __future__ import annotations

import asyncio
import time

from agl.store import InMemoryLightningStore
from agl.store.metrics import StoreFigures


async def _old_read(store: InMemoryLightningStore) -> None:
    offset = 0
    while True:
        page = await store.query_rollouts(sort_by="rollout_id", limit=1000, offset=offset)
        counts: dict[str, int] = {}
        for rollout in page:
            counts[rollout.status] = counts.get(rollout.status, 0) + 1
        offset += len(page)
        if len(page) < 1000:
            return


async def bench(n: int) -> None:
    store = InMemoryLightningStore()
    for i in range(n):
        attempted = await store.start_rollout(input=i)
        if i % 100:
            await store.update_attempt(attempted.rollout_id, attempted.attempt.attempt_id, status="succeeded")
    began = time.perf_counter()
    await _old_read(store)
    before = time.perf_counter() - began
    figures = StoreFigures(store)
    began = time.perf_counter()
    await figures.refresh()
    first = time.perf_counter() - began
    await store.start_rollout(input="new")
    began = time.perf_counter()
    await figures.refresh()
    after = time.perf_counter() - began
    print(
        f"{n:>7} rollouts: before {before * 1000:8.1f} ms   after {after * 1000:7.1f} ms   (first scrape {first * 1000:.1f} ms)"
    )
    await store.close()


async def main() -> None:
    for n in (10_000, 50_000):
        await bench(n)


if __name__ == "__main__":
    asyncio.run(main())
