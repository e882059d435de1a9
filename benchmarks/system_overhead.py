"""The whole system's cost per step against the bare loop, run back to back on the same machine.

    uv run benchmarks/system_overhead.py              # 10 steps each
    uv run benchmarks/system_overhead.py --steps 40

Runs ``benchmarks/calc_local_bench.py`` (agent -> model server -> GRPO update; no store, runners or
proxy) and then ``apps/train_calc_x.py`` (runners, LLM proxy, SQLite store, adapter, LocalGRPO) with the
same model, seed, batch (16 x 8) and number of steps, and prints each one's median seconds per step and
their ratio (the whole system's overhead). Validation is kept small on both sides (64 questions, before
and after only) since it is not what is compared. Also prints the ratio of CPU seconds per step (each
process's own, every thread), which other jobs on the machine inflate far less than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    common = [f"--steps={args.steps}", f"--seed={args.seed}", "--val-size=64", f"--val-every={args.steps}"]
    with tempfile.TemporaryDirectory() as tmp:
        print(f"load average before: {os.getloadavg()[0]:.2f}", flush=True)
        bench_json = Path(tmp) / "bench.json"
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "benchmarks" / "calc_local_bench.py"),
                *common,
                f"--json={bench_json}",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        bench = json.loads(bench_json.read_text())
        bare, bare_cpu = bench["step_s"], bench.get("step_cpu_s", [])
        print(f"load average between: {os.getloadavg()[0]:.2f}", flush=True)
        out = Path(tmp) / "app"
        subprocess.run(
            [sys.executable, str(ROOT / "apps" / "train_calc_x.py"), *common, f"--output-dir={out}"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        train_rows = [r for r in rows if r.get("kind") == "train"]
        app = [float(r["step_s"]) for r in train_rows]
        app_cpu = [float(r["step_cpu_s"]) for r in train_rows if "step_cpu_s" in r]
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    b, a = statistics.median(bare), statistics.median(app)
    print(f"bare loop: median {b:.2f} s/step over {len(bare)} steps")
    print(f"whole system: median {a:.2f} s/step over {len(app)} steps")
    print(f"whole system / bare loop: {a / b:.2f}x per step")
    if bare_cpu and app_cpu:  # CPU seconds of each process per step: less sensitive to the machine's load
        bc, ac = statistics.median(bare_cpu), statistics.median(app_cpu)
        print(f"CPU per step: bare loop {bc:.2f} s, whole system {ac:.2f} s: {ac / bc:.2f}x")


if __name__ == "__main__":
    main()
