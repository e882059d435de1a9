"""End-to-end throughput of the Trainer: rollouts per second of a trivial agent, per strategy and runner count.

Each configuration runs in a fresh Python process (``PYTHONDONTWRITEBYTECODE=1``, as in CI), so import and
start-up costs count as they would for a user. Figures printed:

- ``import``: seconds to ``import agl.runner`` in a fresh process (median of 3);
- ``startup``: from ``Trainer.fit()`` to the first finished rollout (server start, runner processes, first
  claim, first trace flushed);
- ``rollouts/s``: tasks divided by the time from enqueueing them to the last one finishing;
- ``total``: the whole ``fit()`` call, shutdown included;
- ``cpu ms/rollout``: CPU time per rollout between enqueueing and the last rollout, of this process (the
  algorithm and, for ``cs``, the store server's thread) and of the runner processes together (``cs``): on a
  busy machine, where wall-clock figures mean little, these are what to compare.

    uv run benchmarks/trainer_bench.py                # 500 tasks, shm and cs, 1 and 4 runners
    uv run benchmarks/trainer_bench.py --tasks 2000 --runners 1 2 4 8
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
TARGETS = {"cs_startup_s": 1.0, "cs_4_rollouts_per_s": 250.0, "shm_rollouts_per_s": 1000.0, "import_s": 1.0}


def run_one(strategy: str, n_runners: int, n_tasks: int) -> dict[str, Any]:
    """Runs in the child process: one Trainer.fit() with timing marks."""
    started_import = time.perf_counter()
    from agl.algorithms import algo
    from agl.runner import Trainer, rollout
    from agl.store import InMemoryLightningStore
    from agl.tracer import emit_reward
    from agl.types import LLM, EnqueueRolloutRequest

    imported = time.perf_counter() - started_import
    marks: dict[str, float] = {}
    import psutil

    me = psutil.Process()

    def cpu_seconds() -> tuple[float, float]:
        """CPU seconds of this process and of its live child processes."""
        own = me.cpu_times()
        children = 0.0
        for child in me.children(recursive=True):
            try:
                times = child.cpu_times()
            except psutil.Error:
                continue
            children += times.user + times.system
        return own.user + own.system, children

    @rollout
    async def agent(task: int, llm: LLM) -> None:
        emit_reward(1.0)

    @algo
    async def bench(store: Any, train_dataset: Any, initial_resources: Any) -> None:
        resources = await store.add_resources(initial_resources)
        marks["cpu_main_0"], marks["cpu_children_0"] = cpu_seconds()
        marks["enqueue"] = time.perf_counter()
        rollouts = await store.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input=t, resources_id=resources.resources_id) for t in train_dataset]
        )
        ids = [r.rollout_id for r in rollouts]
        await store.wait_for_rollouts(rollout_ids=ids[:1], timeout=None)
        marks["first"] = time.perf_counter()
        finished = await store.wait_for_rollouts(rollout_ids=ids, timeout=None)
        marks["last"] = time.perf_counter()
        marks["cpu_main_1"], marks["cpu_children_1"] = cpu_seconds()
        marks["succeeded"] = sum(r.status == "succeeded" for r in finished)

    trainer = Trainer(
        algorithm=bench,
        n_runners=n_runners,
        strategy=strategy,
        store=InMemoryLightningStore(),
        port=0,
        initial_resources={"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")},
        progress=False,
    )
    fit_start = time.perf_counter()
    trainer.fit(agent, list(range(n_tasks)))
    fit_end = time.perf_counter()
    return {
        "strategy": strategy,
        "n_runners": n_runners,
        "tasks": n_tasks,
        "succeeded": int(marks["succeeded"]),
        "import_in_run_s": round(imported, 3),
        "startup_s": round(marks["first"] - fit_start, 3),
        "rollouts_per_s": round(n_tasks / (marks["last"] - marks["enqueue"]), 1),
        "total_s": round(fit_end - fit_start, 3),
        "cpu_main_ms_per_rollout": round((marks["cpu_main_1"] - marks["cpu_main_0"]) / n_tasks * 1000, 3),
        "cpu_runners_ms_per_rollout": round(
            (marks["cpu_children_1"] - marks["cpu_children_0"]) / n_tasks * 1000, 3
        ),
    }


def measure_import(repeat: int = 3) -> float:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    code = "import time; t = time.perf_counter(); import agl.runner; print(time.perf_counter() - t)"
    times = [
        float(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
            ).stdout
        )
        for _ in range(repeat)
    ]
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=500)
    parser.add_argument("--runners", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--strategies", nargs="+", default=["shm", "cs"])
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per line instead of a table"
    )
    parser.add_argument("--one", nargs=3, metavar=("STRATEGY", "N_RUNNERS", "TASKS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], int(args.one[1]), int(args.one[2]))))
        return

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    import_s = measure_import()
    results = []
    for strategy in args.strategies:
        for n in args.runners:
            out = subprocess.run(
                [sys.executable, str(HERE), "--one", strategy, str(n), str(args.tasks)],
                capture_output=True,
                text=True,
                env=env,
                check=False,
            )
            if out.returncode != 0:
                print(f"{strategy} x{n} failed:\n{out.stderr}", file=sys.stderr)
                continue
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    if args.json:
        print(json.dumps({"import_agl_runner_s": round(import_s, 3)}))
        for r in results:
            print(json.dumps(r))
        return
    print(
        f"import agl.runner (fresh process, no bytecode cache): {import_s:.3f} s (target <= {TARGETS['import_s']} s)"
    )
    print(
        f"{'strategy':>8} {'runners':>7} {'tasks':>6} {'ok':>5} {'startup s':>10} {'rollouts/s':>11} {'total s':>8}"
        f" {'cpu ms/rollout: main':>21} {'runners':>8}"
    )
    for r in results:
        print(
            f"{r['strategy']:>8} {r['n_runners']:>7} {r['tasks']:>6} {r['succeeded']:>5} "
            f"{r['startup_s']:>10.3f} {r['rollouts_per_s']:>11.1f} {r['total_s']:>8.3f}"
            f" {r['cpu_main_ms_per_rollout']:>21.3f} {r['cpu_runners_ms_per_rollout']:>8.3f}"
        )
    print(
        f"targets: cs start-up <= {TARGETS['cs_startup_s']} s, cs with 4 runners >= {TARGETS['cs_4_rollouts_per_s']}/s, "
        f"shm >= {TARGETS['shm_rollouts_per_s']}/s"
    )


if __name__ == "__main__":
    main()
