"""CPU burnt by idle long polls on the SQL stores (issue 27, defect 10): 200 ``dequeue_rollout(timeout=3600)``
waiting on an empty queue, per 10 s, and how fast one of them is woken by an enqueue.

For each setting: the store's process CPU (user + system, every thread) over ``--seconds`` of idleness,
scaled to 10 s; for PostgreSQL also the server's CPU (its processes on this machine); then the time from an
enqueue to the waiter that claims it, from this process and (``--other``) from another process.

- ``sqlite``: one process on the file; ``sqlite-shared``: another process holds the same file open (the
  store cannot be notified across processes there: it watches the file);
- ``postgres``: the test PostgreSQL (``AGL_TEST_POSTGRES_URL`` or the embedded server).

``uv run python benchmarks/sql_idle_waiters_bench.py [--waiters 200] [--seconds 10] [--only sqlite]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agl.store import SqlLightningStore

_HOLDER = """
import asyncio, sys
from agl.store import SqlLightningStore
async def main():
    store = SqlLightningStore(sys.argv[1])
    await store.query_rollouts()  # a watched call: this process is known to use the file
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await store.close()
asyncio.run(main())
"""

_ENQUEUER = """
import asyncio, sys
from agl.store import SqlLightningStore
async def main():
    store = SqlLightningStore(sys.argv[1], **eval(sys.argv[2]))
    await store.get_latest_resources()
    print("ready", flush=True)
    sys.stdin.readline()
    await store.enqueue_rollout("from another process")
    print("sent", flush=True)
    await store.close()
asyncio.run(main())
"""


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _server_cpu() -> dict[int, float]:
    """CPU seconds of each PostgreSQL process of this machine, by pid (empty without psutil)."""
    try:
        import psutil
    except ImportError:
        return {}
    seconds: dict[int, float] = {}
    for process in psutil.process_iter(["name"]):
        if process.info["name"] in ("postgres", "postmaster"):
            with contextlib.suppress(psutil.Error):
                times = process.cpu_times()
                seconds[process.pid] = times.user + times.system
    return seconds


@contextlib.contextmanager
def _holder(url: str) -> Iterator[None]:
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    try:
        assert child.stdout.readline().strip() == b"ready"
        yield
    finally:
        child.stdin.close()
        child.wait(timeout=30)


async def _woken_after(store: SqlLightningStore, tasks: list[asyncio.Task[Any]], send: Any) -> float:
    began = time.perf_counter()
    await send()
    done, _ = await asyncio.wait(tasks, timeout=30, return_when=asyncio.FIRST_COMPLETED)
    elapsed = time.perf_counter() - began
    for task in done:
        tasks.remove(task)
    return elapsed if done else float("inf")


async def _other_process_send(url: str, kwargs: dict[str, Any]) -> Any:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _ENQUEUER, url, repr(kwargs), stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert child.stdout is not None and child.stdin is not None
    assert (await child.stdout.readline()).strip() == b"ready"

    async def send() -> None:
        assert child.stdin is not None and child.stdout is not None
        child.stdin.write(b"go\n")
        await child.stdin.drain()
        await child.stdout.readline()

    return child, send


async def measure(name: str, url: str, kwargs: dict[str, Any], waiters: int, seconds: float) -> None:
    store = SqlLightningStore(url, **kwargs)
    await store.ensure_schema()
    tasks = [
        asyncio.ensure_future(store.dequeue_rollout(worker_id=f"w{i}", timeout=3600)) for i in range(waiters)
    ]
    await asyncio.sleep(2.0)  # every waiter has made its first tries and backed off
    cpu, server, wall = _cpu(), _server_cpu(), time.perf_counter()
    await asyncio.sleep(seconds)
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    server_text = ""
    if server and url.startswith("postgres"):  # the processes there at both ends (its backends stay)
        after = _server_cpu()
        spent = sum(after[pid] - server[pid] for pid in server.keys() & after.keys())
        server_text = f", PostgreSQL server {spent * 10 / wall:6.2f} s"
    local = await _woken_after(store, tasks, lambda: store.enqueue_rollout("local"))
    child, send = await _other_process_send(url, kwargs)
    remote = await _woken_after(store, tasks, send)
    await child.wait()
    print(
        f"{name:>14}: {waiters} idle waiters burn {cpu * 10 / wall:6.2f} s CPU per 10 s (store process)"
        f"{server_text}; woken by an enqueue of this process in {local * 1000:7.1f} ms, "
        f"of another process in {remote * 1000:7.1f} ms"
    )
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await store.close()


async def _create(url: str) -> None:
    store = SqlLightningStore(url)
    await store.ensure_schema()
    await store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--waiters", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--only", choices=["sqlite", "sqlite-shared", "postgres"], action="append")
    args = parser.parse_args()
    only = set(args.only or ["sqlite", "sqlite-shared", "postgres"])
    with tempfile.TemporaryDirectory() as directory:
        if "sqlite" in only:
            url = f"sqlite:///{Path(directory) / 'alone.db'}"
            asyncio.run(measure("sqlite", url, {}, args.waiters, args.seconds))
        if "sqlite-shared" in only:
            url = f"sqlite:///{Path(directory) / 'shared.db'}"
            asyncio.run(_create(url))
            with _holder(url):
                asyncio.run(measure("sqlite-shared", url, {}, args.waiters, args.seconds))
    if "postgres" in only:
        from agl.testing.postgres import create_schema, drop_schema, require_postgres, schema_connect_args

        url = require_postgres()
        schema = asyncio.run(create_schema(url))
        try:
            asyncio.run(measure("postgres", url, schema_connect_args(schema), args.waiters, args.seconds))
        finally:
            asyncio.run(drop_schema(url, schema))
        from agl.testing.postgres import stop_test_server

        stop_test_server()


if __name__ == "__main__":
    main()
