"""Store benchmark: the rollout lifecycle through a LightningStore in this process, per backend.

Each of N rollouts (default 2000) is enqueued, dequeued, given 10 spans of ~1 KB attributes in one
``add_many_spans`` (``--single-spans``: one ``add_span`` each, 14 calls a rollout), marked succeeded and
read back (``get_rollout_by_id``); prints ops/s and p50/p99 per
operation, rollouts/s and the wall time. Then the cost of filtered queries as the store grows: a status
filter matching 10 rollouts and an id filter matching 1 should not slow down with the store's size.

    uv run benchmarks/store_bench.py                              # memory, sqlite
    uv run benchmarks/store_bench.py --backend sqlite --backend postgres --rollouts 2000
    uv run benchmarks/store_bench.py --backend postgresql://user:pw@host/db
    uv run benchmarks/store_bench.py --http ...                   # the HTTP modes (store_bench_http.py)

Backends: ``memory``; ``sqlite`` (a fresh file in a temporary directory, WAL + synchronous=NORMAL:
durable across process crashes) or ``sqlite:///path``; ``postgres`` (a fresh schema in
``$AGL_BENCH_POSTGRES_URL``, default the local test database, dropped afterwards) or a
``postgresql://`` URL (used as is).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agl.store import LightningStore
from agl.types import Span

OPS = ("enqueue", "dequeue", "add_spans", "update_attempt", "get_rollout")
SPANS_PER_ROLLOUT = 10
DEFAULT_POSTGRES_URL = "postgresql://postgres:postgres@127.0.0.1:5432/agl_test"


def make_spans(rollout_id: str, attempt_id: str, first: int, count: int) -> list[Span]:
    payload = "x" * 1000
    return [
        Span.from_attributes(
            attributes={"payload": payload, "index": first + i},
            rollout_id=rollout_id,
            attempt_id=attempt_id,
            sequence_id=first + i,
            name="bench",
        )
        for i in range(count)
    ]


# -- backends --------------------------------------------------------------------------------------


async def _postgres_admin(url: str, sql: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextlib.asynccontextmanager
async def open_backend(name: str) -> AsyncIterator[LightningStore]:
    """A fresh, empty store of the named backend, closed (and its data removed) afterwards."""
    if name == "memory":
        from agl.store import InMemoryLightningStore

        store: LightningStore = InMemoryLightningStore()
        try:
            yield store
        finally:
            await store.close()
        return

    from agl.store import SqlLightningStore

    if name == "sqlite" or name.startswith("sqlite"):
        with tempfile.TemporaryDirectory() as tmp:
            url = f"sqlite:///{Path(tmp) / 'bench.db'}" if name == "sqlite" else name
            store = SqlLightningStore(url)
            try:
                yield store
            finally:
                await store.close()
        return
    if name == "postgres":
        url = os.environ.get("AGL_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL)
        schema = "agl_bench_" + secrets.token_hex(4)
        await _postgres_admin(url, f'CREATE SCHEMA "{schema}"')
        store = SqlLightningStore(url, connect_args={"server_settings": {"search_path": schema}})
        try:
            yield store
        finally:
            await store.close()
            await _postgres_admin(url, f'DROP SCHEMA "{schema}" CASCADE')
        return
    if name.startswith(("postgresql", "postgres://")):
        store = SqlLightningStore(name)
        try:
            yield store
        finally:
            await store.close()
        return
    raise SystemExit(f"unknown backend {name!r}: use memory, sqlite, postgres or a database URL")


# -- measurements ----------------------------------------------------------------------------------


async def lifecycle(
    store: LightningStore, n: int, latencies: dict[str, list[float]], *, single_spans: bool = False
) -> None:
    """``n`` rollouts one after another: 5 calls each, or 14 with ``single_spans`` (one ``add_span`` per span)."""
    clock = time.perf_counter
    for i in range(n):
        t0 = clock()
        await store.enqueue_rollout({"task": i})
        t1 = clock()
        # with several dequeuers, PostgreSQL's SKIP LOCKED may pass over a row: wait for work, do not miss it
        claimed = await store.dequeue_rollout(worker_id="bench", timeout=5)
        t2 = clock()
        assert claimed is not None
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        spans = make_spans(rid, aid, 1, SPANS_PER_ROLLOUT)
        if single_spans:
            for span in spans:
                await store.add_span(span)
        else:
            await store.add_many_spans(spans)
        t3 = clock()
        await store.update_attempt(rid, aid, status="succeeded")
        t4 = clock()
        got = await store.get_rollout_by_id(rid)
        t5 = clock()
        assert got is not None and got.status == "succeeded"
        for op, a, b in zip(OPS, (t0, t1, t2, t3, t4), (t1, t2, t3, t4, t5), strict=True):
            latencies[op].append(b - a)


async def run_lifecycle(
    store: LightningStore, rollouts: int, concurrency: int, single_spans: bool = False
) -> tuple[float, dict[str, list[float]]]:
    latencies: dict[str, list[float]] = defaultdict(list)
    await lifecycle(store, 5, defaultdict(list), single_spans=single_spans)  # warm up (schema, caches)
    share = [rollouts // concurrency + (1 if i < rollouts % concurrency else 0) for i in range(concurrency)]
    start = time.perf_counter()
    await asyncio.gather(*(lifecycle(store, n, latencies, single_spans=single_spans) for n in share))
    return time.perf_counter() - start, latencies


def percentile_ms(values: list[float], q: float) -> float:
    """The ``q`` quantile of latencies given in seconds, in milliseconds."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def print_operations(latencies: dict[str, list[float]], elapsed: float | None = None) -> None:
    """One line per operation: its rate (per second of the whole run with ``elapsed``, else per second spent
    in that operation) and its p50/p99 latency."""
    print(f"  {'operation':<16}{'ops/s':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for op in OPS:
        values = latencies.get(op, [])
        if values:
            rate = len(values) / (elapsed if elapsed is not None else sum(values))
            p50, p99 = percentile_ms(values, 0.5), percentile_ms(values, 0.99)
            print(f"  {op:<16}{rate:>10,.0f}{p50:>10.2f}{p99:>10.2f}")


def report(title: str, elapsed: float, rollouts: int, latencies: dict[str, list[float]]) -> None:
    print(f"\n{title}: {rollouts} rollouts in {elapsed:.2f} s = {rollouts / elapsed:,.0f} rollouts/s")
    print_operations(latencies)


async def _timed(repeats: int, call: Any) -> float:
    """Median seconds of ``await call()``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        await call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def query_scaling(store: LightningStore, sizes: list[int]) -> None:
    """Filtered queries as the store grows: 10 queued rollouts among ``size`` finished ones."""
    print("\nfiltered queries as the store grows (median of 20; 10 queued rollouts, 1 id):")
    print(f"  {'rollouts':>9}{'status=queuing ms':>20}{'rollout_id_in ms':>19}{'status=succeeded ms':>22}")
    have = 0
    for size in sizes:
        batch = size - have
        requests = [{"input": {"task": i}} for i in range(batch)]
        for start in range(0, batch, 500):
            await store.enqueue_many_rollouts(requests[start : start + 500])  # type: ignore[arg-type]
        while claimed := await store.dequeue_many_rollouts(limit=500):
            for rollout in claimed:
                await store.update_attempt(rollout.rollout_id, rollout.attempt.attempt_id, status="succeeded")
        have = size
        queued = [await store.enqueue_rollout({"task": "q"}) for _ in range(10)]
        target = queued[0].rollout_id
        by_status = await _timed(20, lambda: store.query_rollouts(status_in=["queuing"]))
        by_id = await _timed(20, lambda target=target: store.query_rollouts(rollout_id_in=[target]))
        page = await _timed(5, lambda: store.query_rollouts(status_in=["succeeded"], limit=10))
        print(f"  {size:>9,}{by_status * 1000:>20.2f}{by_id * 1000:>19.2f}{page * 1000:>22.2f}")
        await store.dequeue_many_rollouts(limit=10)  # keep exactly 10 queued for the next size


async def bench_backend(
    name: str, rollouts: int, concurrency: list[int], sizes: list[int], single_spans: bool = False
) -> None:
    print(f"\n=== backend {name} ===")
    calls = 4 + (SPANS_PER_ROLLOUT if single_spans else 1)
    for level in concurrency:
        async with open_backend(name) as store:
            cpu_start = time.process_time()
            elapsed, latencies = await run_lifecycle(store, rollouts, level, single_spans)
            cpu = time.process_time() - cpu_start
            spans = "single add_span calls" if single_spans else "one add_many_spans"
            report(
                f"lifecycle of {calls} calls ({spans}), {level} coroutine(s)", elapsed, rollouts, latencies
            )
            print(f"  {rollouts * calls / elapsed:,.0f} calls/s")
            # on a shared machine wall time depends on the neighbours; CPU time of this process does not
            print(f"  process CPU time {cpu:.2f} s = {rollouts / cpu:,.0f} rollouts per CPU-second")
    if sizes:
        async with open_backend(name) as store:
            await query_scaling(store, sizes)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--http" in argv:
        from store_bench_http import main as http_main

        http_main([a for a in argv if a != "--http"])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", "--n", type=int, default=2000, help="rollouts through the lifecycle")
    parser.add_argument("--backend", action="append", help="memory, sqlite, postgres or a URL; repeatable")
    parser.add_argument("--concurrency", default="1", help="comma-separated coroutine counts, e.g. 1,16")
    parser.add_argument(
        "--query-sizes", default="1000,4000", help="store sizes for the query-scaling table ('' to skip)"
    )
    parser.add_argument(
        "--single-spans",
        action="store_true",
        help=f"write the {SPANS_PER_ROLLOUT} spans of a rollout with one add_span each (14 calls a rollout)",
    )
    args = parser.parse_args(argv)
    backends = args.backend or ["memory", "sqlite"]
    concurrency = [int(c) for c in args.concurrency.split(",") if c]
    sizes = [int(s) for s in args.query_sizes.split(",") if s]
    print(f"store benchmark (in-process), {os.cpu_count()} CPUs, Python {sys.version.split()[0]}")
    for backend in backends:
        asyncio.run(bench_backend(backend, args.rollouts, concurrency, sizes, args.single_spans))


if __name__ == "__main__":
    main()
