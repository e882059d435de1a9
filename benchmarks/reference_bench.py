"""The reference (agentlightning 0.3.0) under the workloads of ``store_bench_http.py`` and ``trainer_bench.py``.

Run with a Python environment that has the reference installed (not this workspace's), e.g.

    uv venv /tmp/ref && uv pip install -p /tmp/ref agentlightning==0.3.0
    /tmp/ref/bin/python benchmarks/reference_bench.py --http-rollouts 1000 --tasks 500

- ``http``: its ``LightningStoreClient`` → its ``LightningStoreServer`` over an in-memory store in a separate
  process; each rollout: enqueue → dequeue → 10 spans (~1 KB attributes) in one ``add_many_spans`` →
  attempt succeeded → read back (5 calls), from one coroutine. Prints rollouts/s and calls/s.
- ``trainer``: its ``Trainer`` with the client-server strategy, ``--runners`` runners, a trivial agent that
  emits a reward; start-up (``fit()`` to the first finished rollout) and steady rollouts/s, as
  ``trainer_bench.py`` measures ours.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
SPANS_PER_ROLLOUT = 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _serve(port: int) -> None:
    from agentlightning.store import InMemoryLightningStore
    from agentlightning.store.client_server import LightningStoreServer

    async def main() -> None:
        server = LightningStoreServer(InMemoryLightningStore(), host="127.0.0.1", port=port)
        await server.run_forever()

    asyncio.run(main())


def _spans(rollout_id: str, attempt_id: str) -> list[Any]:
    import random

    from agentlightning.types import Span

    now = time.time()
    return [
        Span.model_validate(
            {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "sequence_id": i + 1,
                "trace_id": f"{random.getrandbits(128):032x}",
                "span_id": f"{random.getrandbits(64):016x}",
                "parent_id": None,
                "name": "bench",
                "status": {"status_code": "OK"},
                "attributes": {"payload": "x" * 1000, "index": i + 1},
                "events": [],
                "links": [],
                "start_time": now,
                "end_time": now,
                "context": None,
                "parent": None,
                "resource": {"attributes": {}, "schema_url": ""},
            }
        )
        for i in range(SPANS_PER_ROLLOUT)
    ]


async def _lifecycle(client: Any, n: int) -> None:
    for i in range(n):
        await client.enqueue_rollout(input={"task": i})
        claimed = await client.dequeue_rollout(worker_id="bench")
        assert claimed is not None
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        await client.add_many_spans(_spans(rid, aid))
        await client.update_attempt(rid, aid, status="succeeded")
        got = await client.get_rollout_by_id(rid)
        assert got is not None and got.status == "succeeded"


def http_lifecycle(rollouts: int) -> float:
    from agentlightning.store.client_server import LightningStoreClient

    port = _free_port()
    proc = multiprocessing.get_context("spawn").Process(target=_serve, args=(port,), daemon=True)
    proc.start()
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(address + "/v1/agl/health", timeout=1):
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit("the reference server did not start")

        async def run() -> float:
            client = LightningStoreClient(address)
            await _lifecycle(client, 5)  # warm up
            start = time.perf_counter()
            await _lifecycle(client, rollouts)
            elapsed = time.perf_counter() - start
            await client.close()
            return elapsed

        return asyncio.run(run())
    finally:
        proc.terminate()
        proc.join(10)


def trainer_one(n_runners: int, n_tasks: int) -> dict[str, Any]:
    """In a fresh process: one reference Trainer.fit() with timing marks."""
    from agentlightning import Trainer, algo, emit_reward, rollout
    from agentlightning.store import InMemoryLightningStore
    from agentlightning.types import LLM

    marks: dict[str, float] = {}

    @rollout
    async def agent(task: int, llm: LLM) -> None:
        emit_reward(1.0)

    @algo
    async def bench(store: Any, train_dataset: Any, initial_resources: Any) -> None:
        resources = await store.add_resources(initial_resources)
        marks["enqueue"] = time.perf_counter()
        rollouts = [
            await store.enqueue_rollout(input=t, resources_id=resources.resources_id) for t in train_dataset
        ]
        ids = [r.rollout_id for r in rollouts]
        await store.wait_for_rollouts(rollout_ids=ids[:1], timeout=None)
        marks["first"] = time.perf_counter()
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=None)
        marks["last"] = time.perf_counter()
        marks["succeeded"] = sum(r.status == "succeeded" for r in finished)

    trainer = Trainer(
        algorithm=bench,
        n_runners=n_runners,
        strategy="cs",
        store=InMemoryLightningStore(),
        port=_free_port(),
        initial_resources={"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")},
    )
    fit_start = time.perf_counter()
    trainer.fit(agent, list(range(n_tasks)))
    return {
        "impl": "reference",
        "n_runners": n_runners,
        "tasks": n_tasks,
        "succeeded": int(marks["succeeded"]),
        "startup_s": round(marks["first"] - fit_start, 3),
        "rollouts_per_s": round(n_tasks / (marks["last"] - marks["enqueue"]), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--http-rollouts", type=int, default=1000, help="0 skips the HTTP lifecycle")
    parser.add_argument("--tasks", type=int, default=500, help="0 skips the trainer")
    parser.add_argument("--runners", type=int, default=4)
    parser.add_argument("--one", nargs=2, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(trainer_one(*args.one)))
        return
    print(f"reference agentlightning, load {os.getloadavg()[0]:.2f}")
    if args.http_rollouts:
        elapsed = http_lifecycle(args.http_rollouts)
        rate = args.http_rollouts / elapsed
        print(f"HTTP lifecycle, 1 client: {rate:,.1f} rollouts/s = {rate * 5:,.0f} calls/s")
    if args.tasks:
        out = subprocess.run(
            [sys.executable, str(HERE), "--one", str(args.runners), str(args.tasks)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
            check=False,
        )
        if out.returncode != 0:
            raise SystemExit(f"reference trainer failed:\n{out.stderr[-3000:]}")
        result = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"trainer cs x{result['n_runners']}: {result['succeeded']}/{result['tasks']} ok, "
            f"start-up {result['startup_s']:.3f} s, {result['rollouts_per_s']:.1f} rollouts/s"
        )


if __name__ == "__main__":
    main()
