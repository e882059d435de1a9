"""HTTP modes of the store benchmark: ``LightningStoreClient`` → ``agl store`` (a separate process).

Each rollout goes through the lifecycle enqueue → dequeue → one batch of spans (10 x ~1 KB attributes)
→ attempt succeeded → read back, with 1 client, 16 concurrent coroutines and 4 client processes; then
spans alone through the batch endpoint; then server start-up time. Prints ops/s and p50/p99 per operation.

Run alone (``uv run benchmarks/store_bench_http.py --rollouts 1000``) or through
``benchmarks/store_bench.py --http``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from store_bench import (  # the benchmarks folder is on the path of a script run from it
    lifecycle,
    make_spans,
    percentile_ms,
    print_operations,
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _cpu_seconds(pid: int | None = None) -> float:
    """User + system CPU time of a process (this one by default), from /proc when available."""
    if pid is None:
        usage = os.times()
        return usage.user + usage.system
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


SERVER_PID: list[int] = []


@contextlib.contextmanager
def store_process(backend: str) -> Iterator[str]:
    """``agl store`` in a child process; yields its address."""
    port = _free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agl.store.cli",
            "store",
            "--port",
            str(port),
            "--backend",
            backend,
            "--log-level",
            "WARNING",
        ],
        stdout=subprocess.DEVNULL,
    )
    address = f"http://127.0.0.1:{port}"
    SERVER_PID[:] = [proc.pid]
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(address + "/v1/agl/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError("agl store did not start")
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


async def run_lifecycle(
    address: str, rollouts: int, concurrency: int
) -> tuple[float, dict[str, list[float]]]:
    client = LightningStoreClient(address)
    latencies: dict[str, list[float]] = defaultdict(list)
    await lifecycle(client, 5, defaultdict(list))  # warm up connections
    share = [rollouts // concurrency + (1 if i < rollouts % concurrency else 0) for i in range(concurrency)]
    start = time.perf_counter()
    await asyncio.gather(*(lifecycle(client, n, latencies) for n in share))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed, latencies


def _process_worker(address: str, rollouts: int, concurrency: int, queue: Any) -> None:
    elapsed, latencies = asyncio.run(run_lifecycle(address, rollouts, concurrency))
    queue.put((elapsed, dict(latencies)))


def run_processes(
    address: str, rollouts: int, processes: int, concurrency: int
) -> tuple[float, dict[str, list[float]]]:
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [
        ctx.Process(target=_process_worker, args=(address, rollouts // processes, concurrency, queue))
        for _ in range(processes)
    ]
    for w in workers:
        w.start()
    results = [queue.get(timeout=600) for _ in workers]
    for w in workers:
        w.join()
    merged: dict[str, list[float]] = defaultdict(list)
    for _, lat in results:
        for op, values in lat.items():
            merged[op].extend(values)
    # Wall time of the slowest worker's measured section (excludes process start-up).
    return max(e for e, _ in results), merged


async def run_spans(address: str, total: int, batch: int, concurrency: int) -> tuple[float, list[float]]:
    client = LightningStoreClient(address)
    claimed = []
    for _ in range(concurrency):
        await client.enqueue_rollout({"task": "spans"})
        got = await client.dequeue_rollout()
        assert got is not None
        claimed.append(got)
    latencies: list[float] = []

    # Spans are built before the clock starts: this measures the wire and the store, not span creation.
    per_writer = total // concurrency
    batches = [
        [
            make_spans(c.rollout_id, c.attempt.attempt_id, 1 + b * batch, batch)
            for b in range(per_writer // batch)
        ]
        for c in claimed
    ]

    async def writer(index: int, n: int) -> None:
        for spans in batches[index]:
            t0 = time.perf_counter()
            await client.add_many_spans(spans)
            latencies.append(time.perf_counter() - t0)

    start = time.perf_counter()
    await asyncio.gather(*(writer(i, total // concurrency) for i in range(concurrency)))
    elapsed = time.perf_counter() - start
    await client.close()
    return elapsed, latencies


def report(
    title: str,
    elapsed: float,
    rollouts: int,
    latencies: dict[str, list[float]],
    cpu: tuple[float, float] | None = None,
) -> None:
    print(f"\n{title}: {rollouts} rollouts in {elapsed:.2f} s = {rollouts / elapsed:,.0f} rollouts/s")
    if cpu is not None:
        server_cpu, client_cpu = cpu
        calls = sum(len(v) for v in latencies.values())
        print(
            f"  CPU per rollout: server {server_cpu / rollouts * 1000:.2f} ms, client {client_cpu / rollouts * 1000:.2f} ms"
            f" (capacity if each had a free core: {rollouts / max(server_cpu, client_cpu):,.0f} rollouts/s);"
            f" per call: server {server_cpu / calls * 1e6:.0f} us, client {client_cpu / calls * 1e6:.0f} us"
        )
    print_operations(latencies, elapsed)


def measure_startup(repeats: int = 5) -> list[float]:
    times = []
    for _ in range(repeats):
        server = LightningStoreServer(InMemoryLightningStore(), port=0)
        t0 = time.perf_counter()
        server.start()
        times.append(time.perf_counter() - t0)
        server.stop()
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--spans", type=int, default=20000)
    parser.add_argument("--span-batch", type=int, default=100)
    parser.add_argument("--backend", action="append", help="memory (default), sqlite, or a URL; repeatable")
    parser.add_argument("--modes", default="1,16,procs,spans,startup")
    args = parser.parse_args(argv)
    modes = set(args.modes.split(","))
    backends = args.backend or ["memory"]
    print(
        f"HTTP store benchmark: LightningStoreClient -> agl store (separate process), {os.cpu_count()} CPUs"
    )
    for backend in backends:
        with contextlib.ExitStack() as stack:
            if backend == "sqlite":
                tmp = stack.enter_context(tempfile.TemporaryDirectory())
                backend = f"sqlite:///{tmp}/bench.db"
            address = stack.enter_context(store_process(backend))
            print(f"\n=== backend {backend} ===")
            for concurrency, title in ((1, "1 client"), (16, "16 coroutines, one client")):
                if str(concurrency) not in modes:
                    continue
                server0, client0 = _cpu_seconds(SERVER_PID[0]), _cpu_seconds()
                elapsed, lat = asyncio.run(run_lifecycle(address, args.rollouts, concurrency))
                cpu = (_cpu_seconds(SERVER_PID[0]) - server0, _cpu_seconds() - client0)
                report(title, elapsed, args.rollouts, lat, cpu)
            if "procs" in modes:
                elapsed, lat = run_processes(address, args.rollouts, 4, 4)
                report("4 client processes x 4 coroutines", elapsed, args.rollouts, lat)
            if "spans" in modes:
                server0 = _cpu_seconds(SERVER_PID[0])
                elapsed, lat = asyncio.run(run_spans(address, args.spans, args.span_batch, 4))
                server_cpu = _cpu_seconds(SERVER_PID[0]) - server0
                print(
                    f"\nserver CPU per span: {server_cpu / args.spans * 1e6:.0f} us "
                    f"(capacity with a free core: {args.spans / server_cpu:,.0f} spans/s)"
                )
                print(
                    f"\nspans through the batch endpoint ({args.span_batch}/request, 4 writers): "
                    f"{args.spans / elapsed:,.0f} spans/s; per request p50 {percentile_ms(lat, 0.5):.1f} ms, "
                    f"p99 {percentile_ms(lat, 0.99):.1f} ms"
                )
    if "startup" in modes:
        times = measure_startup()
        print(
            f"\nserver start-up (LightningStoreServer.start until health answers): "
            f"median {statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
