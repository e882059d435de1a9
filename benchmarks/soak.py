"""Soak benchmark: 16 clients drive ``agl store`` (its own process) for minutes; does it hold up over time?

Each client loops over the rollout lifecycle (enqueue → dequeue → one batch of 10 spans → attempt succeeded
→ read back: 5 requests) until the time is up. Clients are ``--processes`` processes of
``--clients / --processes`` coroutines each, every one with its own ``LightningStoreClient``. Printed per
``--window`` seconds: rollouts/s, requests/s, p50 and p99 request latency, server RSS (and the SQLite file's
size); then the whole run: per-operation p50/p99, and how throughput and RSS moved from the first window to
the last.

    uv run benchmarks/soak.py --minutes 5 --backend memory --backend sqlite
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import signal
import statistics
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from typing import Any

from agl.store import LightningStoreClient
from store_bench import OPS, lifecycle, percentile_ms  # the benchmarks folder is on a script's path
from store_bench_http import SERVER_PID, store_process


def _rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


async def _drive(address: str, coroutines: int, until: float, t0: float) -> list[tuple[float, list[float]]]:
    """Run lifecycles until ``until`` (a ``time.time()``); each rollout's (end, per-op latencies)."""
    done: list[tuple[float, list[float]]] = []

    async def one_client() -> None:
        client = LightningStoreClient(address)
        try:
            while time.time() < until:
                latencies: dict[str, list[float]] = defaultdict(list)
                await lifecycle(client, 1, latencies)
                done.append((time.time() - t0, [latencies[op][0] for op in OPS]))
        finally:
            await client.close()

    await asyncio.gather(*(one_client() for _ in range(coroutines)))
    return done


def _worker(address: str, coroutines: int, minutes: float, queue: Any, go: Any, start: Any) -> None:
    queue.put("ready")
    go.wait()  # every client process is up: the clock starts for all at once
    t0 = start.value
    queue.put(asyncio.run(_drive(address, coroutines, t0 + minutes * 60, t0)))


def _sample_rss(pid: int, db: str | None, t0: float, stop: threading.Event, out: list[Any]) -> None:
    while not stop.is_set():
        size = os.path.getsize(db) / 2**20 if db and os.path.exists(db) else None
        out.append((time.time() - t0, _rss_mib(pid), size))
        stop.wait(1.0)


def soak(backend: str, minutes: float, clients: int, processes: int, window: float) -> dict[str, Any]:
    try:
        return _soak(backend, minutes, clients, processes, window)
    except subprocess.TimeoutExpired:  # the server did not stop within 10 s of SIGTERM: say so, then kill it
        print(f"agl store did not stop within 10 s of SIGTERM (pid {SERVER_PID[0]}); killed")
        with contextlib.suppress(OSError):
            os.kill(SERVER_PID[0], signal.SIGKILL)
        return {}


def _soak(backend: str, minutes: float, clients: int, processes: int, window: float) -> dict[str, Any]:
    db = None
    with contextlib.ExitStack() as stack:
        if backend == "sqlite":
            tmp = stack.enter_context(tempfile.TemporaryDirectory())
            db = f"{tmp}/soak.db"
            backend = f"sqlite:///{db}"
        address = stack.enter_context(store_process(backend))
        pid = SERVER_PID[0]
        print(f"\n=== backend {backend}: {clients} clients ({processes} processes), {minutes:g} min ===")
        print(f"load before: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f}")
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        go, start_at = ctx.Event(), ctx.Value("d", 0.0)
        per = [clients // processes + (1 if i < clients % processes else 0) for i in range(processes)]
        workers = [
            ctx.Process(target=_worker, args=(address, n, minutes, queue, go, start_at)) for n in per if n
        ]
        for w in workers:
            w.start()
        for _ in workers:
            assert queue.get(timeout=300) == "ready"
        t0 = start_at.value = time.time()
        go.set()
        samples: list[Any] = []
        stop = threading.Event()
        sampler = threading.Thread(target=_sample_rss, args=(pid, db, t0, stop, samples), daemon=True)
        sampler.start()
        results = [queue.get(timeout=minutes * 60 + 300) for _ in workers]
        for w in workers:
            w.join()
        stop.set()
        sampler.join()
        return _report(backend, db, minutes, window, results, samples)


def _report(
    backend: str, db: str | None, minutes: float, window: float, results: list[Any], samples: list[Any]
) -> dict[str, Any]:
    rollouts = sorted(r for part in results for r in part)
    duration = minutes * 60
    print(
        f"{'window':>11} {'rollouts/s':>10} {'requests/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'RSS MiB':>8}"
        + (f" {'DB MiB':>7}" if db else "")
    )
    windows = []
    start = 0.0
    while start < duration - 1e-9:
        end = min(start + window, duration)
        in_window = [lat for t, lat in rollouts if start <= t < end]
        requests = [x for lat in in_window for x in lat]
        rss = [s for s in samples if start <= s[0] < end] or samples[-1:]
        row = {
            "start": start,
            "rollouts_per_s": len(in_window) / (end - start),
            "requests_per_s": len(requests) / (end - start),
            "p50_ms": percentile_ms(requests, 0.5) if requests else float("nan"),
            "p99_ms": percentile_ms(requests, 0.99) if requests else float("nan"),
            "rss_mib": rss[-1][1],
            "db_mib": rss[-1][2],
        }
        windows.append(row)
        print(
            f"{start:5.0f}-{end:<5.0f} {row['rollouts_per_s']:10,.0f} {row['requests_per_s']:10,.0f} "
            f"{row['p50_ms']:7.1f} {row['p99_ms']:7.1f} {row['rss_mib']:8.1f}"
            + (f" {row['db_mib']:7.1f}" if db and row["db_mib"] is not None else "")
        )
        start = end
    print(
        f"total: {len(rollouts):,} rollouts in {duration:.0f} s = {len(rollouts) / duration:,.0f} rollouts/s"
    )
    for i, op in enumerate(OPS):
        values = [lat[i] for _, lat in rollouts]
        print(
            f"  {op:<16} p50 {percentile_ms(values, 0.5):7.2f} ms   p99 {percentile_ms(values, 0.99):7.2f} ms"
        )
    every = [x for _, lat in rollouts for x in lat]
    print(
        f"  all requests     p50 {percentile_ms(every, 0.5):7.2f} ms   p99 {percentile_ms(every, 0.99):7.2f} ms"
    )
    rates = [w["rollouts_per_s"] for w in windows]
    rss_values = [s[1] for s in samples]
    print(
        f"throughput per window: first {rates[0]:,.0f}, last {rates[-1]:,.0f}, "
        f"min {min(rates):,.0f}, median {statistics.median(rates):,.0f} rollouts/s"
    )
    print(
        f"server RSS: first {rss_values[0]:.1f} MiB, last {rss_values[-1]:.1f} MiB, max {max(rss_values):.1f} MiB "
        f"({(rss_values[-1] - rss_values[0]) / max(1, len(rollouts)) * 1024:.2f} KiB per rollout)"
    )
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return {"backend": backend, "windows": windows, "rollouts": len(rollouts)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--minutes", type=float, default=5.0, help="length of each backend's run (default: 5)"
    )
    parser.add_argument(
        "--backend", action="append", help="memory, sqlite or a URL; repeatable (default: both)"
    )
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (default: 16)")
    parser.add_argument("--processes", type=int, default=4, help="client processes (default: 4)")
    parser.add_argument(
        "--window", type=float, default=30.0, help="seconds per reported window (default: 30)"
    )
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.clients <= 0 or args.processes <= 0 or args.window <= 0:
        parser.error("--minutes, --clients, --processes and --window must be positive")
    print(f"soak: {os.cpu_count()} CPUs")
    for backend in args.backend or ["memory", "sqlite"]:
        soak(backend, args.minutes, args.clients, min(args.processes, args.clients), args.window)


if __name__ == "__main__":
    main()
