"""Synchronous against asynchronous GRPO on the calc app, back to back, same seed and budget.

Runs ``apps/train_calc_x.py`` once per ``--max-staleness`` value (0 is synchronous) with the same flags, then
prints per run: wall time to reach the target validation accuracy (first validation at or above it, counted
from the first training step), the final accuracy, s/step, and generated tokens per second of training.

    uv run benchmarks/async_vs_sync.py                      # K = 0, 1, 2 on the app's defaults
    uv run benchmarks/async_vs_sync.py --staleness 0 2 --steps 20 --val-every 2
    taskset -c 0 uv run benchmarks/async_vs_sync.py        # the same on one core
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "apps" / "train_calc_x.py"


@dataclass
class Figures:
    """One run's figures, read back from its metrics.jsonl."""

    wall_s: float
    step_s: list[float]
    cpu_s: list[float]  # CPU seconds of each step: the training process and its model server's
    rollout_s: list[float]
    update_s: list[float]
    generated_tokens: int
    validations: list[tuple[int, float]]  # (after step, accuracy)

    @property
    def s_per_step(self) -> float:
        return sum(self.step_s) / len(self.step_s)

    @property
    def cores_busy(self) -> float:
        """CPU seconds per wall second of the steps: how many cores the training process kept busy."""
        return sum(self.cpu_s) / sum(self.step_s)

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / sum(self.step_s)

    def seconds_to(self, target: float) -> float | None:
        """Training seconds until the first validation at or above ``target``."""
        for step, accuracy in self.validations:
            if accuracy >= target:
                return sum(self.step_s[:step])
        return None


def run(staleness: int, flags: list[str], out: Path) -> Figures:
    """One run of the app."""
    started = time.time()
    argv = [sys.executable, str(APP), *flags, "--max-staleness", str(staleness), "--output-dir", str(out)]
    done = subprocess.run(argv, capture_output=True, text=True)
    wall = time.time() - started
    if done.returncode != 0:
        raise SystemExit(f"K={staleness} failed:\n{done.stderr[-3000:]}")
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    return Figures(
        wall_s=wall,
        step_s=[r["step_s"] for r in train],
        cpu_s=[r.get("step_cpu_s", 0.0) for r in train],
        rollout_s=[r.get("rollout_s", 0.0) for r in train],
        update_s=[r.get("update_s", 0.0) for r in train],
        generated_tokens=sum(r["generated_tokens"] for r in train),
        validations=[(r["step"], r["accuracy"]) for r in records if r["kind"] == "validation"],
    )


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--staleness", type=int, nargs="+", default=[0, 1, 2], help="K values (0: synchronous)"
    )
    parser.add_argument(
        "--target", type=float, default=0.85, help="validation accuracy to reach (default 0.85)"
    )
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--val-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("app_flags", nargs="*", help="more flags for the app (after --)")
    args = parser.parse_args()
    flags = ["--steps", str(args.steps), "--val-every", str(args.val_every), "--seed", str(args.seed)]
    flags += args.app_flags
    print(f"calc app, {args.steps} steps, seed {args.seed}, validation every {args.val_every} steps")
    print(
        f"{'K':>3} {'to target s':>12} {'final acc':>10} {'s/step':>8} {'rollout':>8} {'update':>7} "
        f"{'cores busy':>10} {'tokens/s':>9} {'wall s':>8}"
    )
    with tempfile.TemporaryDirectory(prefix="agl-async-bench-") as tmp:
        for k in args.staleness:
            figures = run(k, flags, Path(tmp) / f"k{k}")
            reached = figures.seconds_to(args.target)
            final = figures.validations[-1][1] if figures.validations else None
            print(
                f"{k:>3} {('-' if reached is None else f'{reached:.1f}'):>12} "
                f"{('-' if final is None else f'{final:.1%}'):>10} {figures.s_per_step:>8.2f} "
                f"{_mean(figures.rollout_s):>8.2f} {_mean(figures.update_s):>7.2f} {figures.cores_busy:>10.2f} "
                f"{figures.tokens_per_s:>9.0f} {figures.wall_s:>8.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
