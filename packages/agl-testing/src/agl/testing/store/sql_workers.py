"""Code that SQL store tests run in other processes and threads (importable by spawned children)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import threading
from typing import Any

from agl.store import SqlLightningStore


def _store(url: str, engine_kwargs: dict[str, Any]) -> SqlLightningStore:
    return SqlLightningStore(url, **engine_kwargs)


async def _drain(store: SqlLightningStore, worker_id: str, batch: int) -> list[str]:
    """Dequeue until the queue stays empty; the ids claimed."""
    claimed: list[str] = []
    while True:
        got = await store.dequeue_many_rollouts(limit=batch, worker_id=worker_id, timeout=0.3)
        if not got:
            return claimed
        claimed.extend(r.rollout_id for r in got)
        await asyncio.sleep(0.01)  # "work" on it: gives every dequeuer of every process its turns


def drain_in_threads(
    url: str, engine_kwargs: dict[str, Any], threads: int, name: str, ready: Any = None
) -> list[str]:
    """``threads`` threads, each with its own event loop, draining the queue through ONE store object.

    ``ready`` (a barrier) is waited on once the store is open, so that several processes start together.
    """
    store = _store(url, engine_kwargs)

    async def connect() -> None:
        await store.get_latest_resources()  # connected, schema checked
        await store.release_loop_resources()  # this loop closes next

    asyncio.run(connect())
    if ready is not None:
        ready.wait()
    results: list[list[str]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def run(index: int) -> None:
        async def main() -> None:
            start.wait()
            results[index] = await _drain(store, f"{name}-t{index}", batch=1 + index % 3)
            await store.release_loop_resources()  # this thread's loop closes next

        asyncio.run(main())

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()

    async def close() -> None:
        await store.close()

    asyncio.run(close())
    return [rid for result in results for rid in result]


def drain_process(
    url: str, engine_kwargs: dict[str, Any], threads: int, name: str, queue: Any, ready: Any
) -> None:
    """Entry point of a spawned process: drain together with the others, report the claimed ids on ``queue``."""
    queue.put(drain_in_threads(url, engine_kwargs, threads, name, ready))


def enqueue_and_report(url: str, count: int) -> None:
    """Enqueue ``count`` rollouts one by one, printing each id once the store has acknowledged it."""

    async def main() -> None:
        store = SqlLightningStore(url)
        for i in range(count):
            rollout = await store.enqueue_rollout({"i": i})
            print(rollout.rollout_id, flush=True)
        await store.close()

    asyncio.run(main())


def enqueue_concurrently_and_report(url: str, count: int, tasks: int) -> None:
    """``tasks`` coroutines enqueueing at once (their writes are committed in groups), each printing a
    rollout's id once the store has acknowledged it."""

    async def main() -> None:
        store = SqlLightningStore(url)

        async def writer(index: int) -> None:
            for i in range(count // tasks):
                rollout = await store.enqueue_rollout({"task": index, "i": i})
                print(rollout.rollout_id, flush=True)

        await asyncio.gather(*(writer(t) for t in range(tasks)))
        await store.close()

    asyncio.run(main())


def open_and_enqueue(url: str, engine_kwargs: dict[str, Any], queue: Any, go: Any) -> None:
    """Entry point of a spawned process: open a store on a database that may not have its schema yet."""
    go.wait()

    async def main() -> str:
        store = _store(url, engine_kwargs)
        try:
            return (await store.enqueue_rollout("hello")).rollout_id
        finally:
            await store.close()

    try:
        queue.put(asyncio.run(main()))
    except Exception as exc:  # reported to the test rather than lost in a child's stderr
        queue.put(f"error: {exc!r}")


def kill_writer_after(url: str, count: int, tasks: int | None, acknowledged: int) -> list[str]:
    """Run this module's writer in a child process (``python -m agl.testing.store.sql_workers URL COUNT
    [TASKS]``: :func:`enqueue_and_report`, or :func:`enqueue_concurrently_and_report` with ``tasks``),
    ``kill -9`` it mid-stream once it has acknowledged ``acknowledged`` rollouts; their ids."""
    # python -m: this folder must not shadow the stdlib
    args = [sys.executable, "-m", "agl.testing.store.sql_workers", url, str(count)]
    if tasks is not None:
        args.append(str(tasks))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, bufsize=1)
    ids: list[str] = []
    assert proc.stdout is not None
    try:
        while len(ids) < acknowledged:
            line = proc.stdout.readline()
            assert line, f"the writer stopped early (exit code {proc.poll()})"
            ids.append(line.strip())
        proc.send_signal(signal.SIGKILL)  # it is still writing
    finally:
        proc.kill()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert proc.returncode == -signal.SIGKILL
    return ids


def stored_rollouts(url: str, rollout_ids: list[str]) -> tuple[int, int]:
    """How many of ``rollout_ids`` the database at ``url`` holds, and how many rollouts it holds in all."""

    async def main() -> tuple[int, int]:
        store = SqlLightningStore(url)
        try:
            found = await store.query_rollouts(rollout_id_in=rollout_ids)
            everything = await store.query_rollouts(limit=0)
            return found.total, everything.total
        finally:
            await store.close()

    return asyncio.run(main())


if __name__ == "__main__":  # python -m agl.testing.store.sql_workers URL COUNT [TASKS]
    if len(sys.argv) > 3:
        enqueue_concurrently_and_report(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    else:
        enqueue_and_report(sys.argv[1], int(sys.argv[2]))
