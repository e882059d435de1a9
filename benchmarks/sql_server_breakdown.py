"""Where the SQL store server's CPU goes: the HTTP lifecycle of ``store_bench_http.py`` (16 coroutines in a
child process) against a :class:`LightningStoreServer` over a SQL store served from this process, so that
the store's own counters can be read: server CPU per rollout, the part spent running groups of writes
(``Database.flush_seconds``), commits and reads per rollout.

    uv run benchmarks/sql_server_breakdown.py [--rollouts 3000] [--backend sqlite|postgresql://...]
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
import time

from agl.store import LightningStoreServer, SqlLightningStore
from agl.store.http.server._gc import serving_gc
from store_bench_http import _free_port, _process_worker  # (benchmarks/ is on the path of its scripts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--backend", default="sqlite", help="sqlite (a fresh file) or a database URL")
    args = parser.parse_args()
    # (serving_gc: the collector settings `agl store` serves with)
    with tempfile.TemporaryDirectory() as tmp, serving_gc():
        url = f"sqlite:///{tmp}/bench.db" if args.backend == "sqlite" else args.backend
        store = SqlLightningStore(url)
        server = LightningStoreServer(store, host="127.0.0.1", port=_free_port())
        server.start()
        db = store._db  # pyright: ignore[reportPrivateUsage]  (its counters are what this measures)
        ctx = multiprocessing.get_context("spawn")
        results = ctx.Queue()
        client = ctx.Process(
            target=_process_worker, args=(server.endpoint, args.rollouts, args.concurrency, results)
        )
        before = (time.process_time(), db.flush_seconds, db.commits, db.reads)
        client.start()
        elapsed, _ = results.get(timeout=600)
        client.join()
        cpu, flush, commits, reads = (
            now - then
            for now, then in zip(
                (time.process_time(), db.flush_seconds, db.commits, db.reads), before, strict=True
            )
        )
        n = args.rollouts
        print(
            f"SQL store server breakdown ({url.split(':', 1)[0]}), {args.concurrency} coroutines, {n} rollouts"
        )
        print(f"  {n / elapsed:,.0f} rollouts/s ({5 * n / elapsed:,.0f} calls/s)")
        print(
            f"  server CPU per rollout: {1000 * cpu / n:.2f} ms (this process: server thread, pool threads)"
        )
        print(f"  of which groups of writes: {1000 * flush / n:.2f} ms ({100 * flush / cpu:.0f}%)")
        print(f"  commits per rollout: {commits / n:.2f}; reads per rollout: {reads / n:.2f}")
        print(f"  the rate a single-threaded server could serve at this CPU: {n / cpu:,.0f} rollouts/s")
        server.stop()


if __name__ == "__main__":
    main()
