"""Throughput of ``agl store --workers N`` (1, 2, 4) with 16 concurrent clients, on SQLite and PostgreSQL.

Each client runs the lifecycle of ``store_bench_http`` (enqueue → dequeue → a batch of 10 spans → attempt
succeeded → read back) through ``LightningStoreClient``; 16 clients = 4 client processes x 4 coroutines.
Each configuration runs ``--repeats`` times on a fresh database; the median is reported with the load.

    uv run benchmarks/store_workers_bench.py --rollouts 800 --postgres postgresql://postgres:postgres@127.0.0.1:5432/agl
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator

from store_bench_http import _free_port, run_processes  # the benchmarks folder is on the path


@contextlib.contextmanager
def fresh_backend(kind: str, postgres_url: str, workdir: str) -> Iterator[str]:
    if kind == "sqlite":
        path = os.path.join(workdir, f"bench-{secrets.token_hex(4)}.db")
        yield f"sqlite:///{path}"
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path + suffix)
        return
    from agl.testing.postgres import fresh_postgres_database

    with fresh_postgres_database(postgres_url, prefix="agl_bench_") as url:
        yield url


@contextlib.contextmanager
def store_server(backend: str, workers: int) -> Iterator[str]:
    port = _free_port()
    args = [sys.executable, "-m", "agl.store.cli", "store", "--workers", str(workers), "--port", str(port)]
    proc = subprocess.Popen(
        [*args, "--backend", backend, "--log-level", "WARNING"], stdout=subprocess.DEVNULL
    )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(address + "/v1/agl/health", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("agl store did not start") from None
                time.sleep(0.1)
        time.sleep(1.0 if workers > 1 else 0.0)  # every worker listening (the parent answers none)
        yield address
    finally:
        proc.terminate()
        proc.wait(30)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=800)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--postgres",
        default=os.environ.get(
            "AGL_TEST_POSTGRES_URL", "postgresql://postgres:postgres@127.0.0.1:5432/agl_test"
        ),
        help="a PostgreSQL database URL; each run creates (and drops) a database next to it",
    )
    args = parser.parse_args(argv)
    print(f"{os.cpu_count()} CPUs; load before: {os.getloadavg()}")
    results: dict[tuple[str, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as workdir:
        for kind in args.backends.split(","):
            for workers in [int(w) for w in args.workers.split(",")]:
                for _ in range(args.repeats):
                    with (
                        fresh_backend(kind, args.postgres, workdir) as backend,
                        store_server(backend, workers) as address,
                    ):
                        elapsed, _ = run_processes(address, args.rollouts, 4, 4)
                    rate = args.rollouts / elapsed
                    results.setdefault((kind, workers), []).append(rate)
                    print(
                        f"{kind:8} workers={workers}: {rate:7.1f} rollouts/s (load {os.getloadavg()[0]:.2f})",
                        flush=True,
                    )
    print("\nmedian rollouts/s (16 clients):")
    for (kind, workers), rates in results.items():
        print(
            f"  {kind:8} workers={workers}: {statistics.median(rates):7.1f}  runs {[round(r, 1) for r in rates]}"
        )
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
