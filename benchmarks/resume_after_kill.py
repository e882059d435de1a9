"""Kill -9 a default calc run, resume it, and compare it with a run that was never interrupted (issue 31).

Runs ``apps/train_calc_x.py`` with the app's defaults (40 steps, a checkpoint every 5) once through, then once
per kill point: the whole run (its runners and model server too) is killed with SIGKILL once the rollouts of
a given step are enqueued, or while a checkpoint is being written (its partial folder exists), and is started
again with ``--resume``. For each run it prints where it was killed, the checkpoint it continued from, the
final validation accuracy, and whether every training step was logged once and every step's rollouts were
counted once (the finished train rollouts in the store, less those marked as superseded by the resume, are
exactly steps x prompts x n).

    uv run benchmarks/resume_after_kill.py                  # kills in steps 11 and 23, and saving after 15
    uv run benchmarks/resume_after_kill.py --kill-in-step 4 --kill-during-save 2 -- --steps 20
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "apps" / "train_calc_x.py"


@dataclass
class Outcome:
    """One run's figures, read back from its metrics.jsonl and its store."""

    label: str
    resumed_from: int | None
    final_accuracy: float
    train_steps: list[int]
    finished_train_rollouts: int
    wall_s: float


def _checkpoints(run: Path) -> Path:
    return run / "checkpoint"


def _named_step(run: Path) -> int:
    latest = _checkpoints(run) / "latest"
    try:
        return int(latest.read_text().strip()[5:])
    except (FileNotFoundError, ValueError):
        return 0


def _noted(run: Path) -> set[int]:
    """The steps whose rollouts the run has noted since its last checkpoint."""
    try:
        return {int(step) for step in json.loads((_checkpoints(run) / "pending.json").read_text())["steps"]}
    except (FileNotFoundError, ValueError):
        return set()


def _saving(run: Path, after: int) -> bool:
    """A checkpoint past ``after`` is being written (its partial folder exists)."""
    try:
        names = os.listdir(_checkpoints(run))
    except FileNotFoundError:
        return False
    return any(n.startswith(".step-") and int(n.split(".")[1][5:]) > after for n in names)


def _start(argv: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(APP), *argv],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # the kill takes its runners and model server too
    )


def _kill_when(run: subprocess.Popen[bytes], condition: Callable[[], bool], deadline_s: float) -> None:
    deadline = time.monotonic() + deadline_s
    while not condition():
        if run.poll() is not None:
            raise SystemExit("the run ended before its kill point; choose an earlier one")
        if time.monotonic() > deadline:
            os.killpg(run.pid, signal.SIGKILL)
            raise SystemExit("the kill point was not reached in time")
        time.sleep(0.0005)  # a save of the embedded model takes tens of milliseconds: poll finely
    os.killpg(run.pid, signal.SIGKILL)
    run.wait()


def _finished_train_rollouts(run: Path) -> int:
    from agl.algorithms.local.checkpoint import SUPERSEDED
    from agl.store import SqlLightningStore

    async def count() -> int:
        store = SqlLightningStore(f"sqlite:///{run / 'store.sqlite'}")
        try:
            rollouts = (await store.query_rollouts(mode_in=["train"])).items
            counted = [r for r in rollouts if SUPERSEDED not in (r.metadata or {})]
            return sum(r.status in ("succeeded", "failed") for r in counted)
        finally:
            await store.close()

    return asyncio.run(count())


def _outcome(label: str, run: Path, resumed_from: int | None, wall_s: float) -> Outcome:
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    validations = [r for r in records if r["kind"] == "validation"]
    return Outcome(
        label=label,
        resumed_from=resumed_from,
        final_accuracy=max(validations, key=lambda r: r["step"])["accuracy"],
        train_steps=[r["step"] for r in records if r["kind"] == "train"],
        finished_train_rollouts=_finished_train_rollouts(run),
        wall_s=wall_s,
    )


def uninterrupted(flags: list[str], run: Path) -> Outcome:
    started = time.time()
    done = subprocess.run([sys.executable, str(APP), *flags, "--output-dir", str(run)], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit("the uninterrupted run failed")
    return _outcome("uninterrupted", run, None, time.time() - started)


def killed_and_resumed(flags: list[str], run: Path, label: str, kill_point: Callable[[], bool]) -> Outcome:
    started = time.time()
    _kill_when(_start([*flags, "--output-dir", str(run)]), kill_point, deadline_s=1800)
    resumed_from = _named_step(run)
    done = subprocess.run([sys.executable, str(APP), *flags, "--resume", str(run)], cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{label}: the resumed run failed")
    return _outcome(label, run, resumed_from, time.time() - started)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--kill-in-step",
        type=int,
        nargs="*",
        default=[11, 23],
        help="kill once this step's rollouts are enqueued",
    )
    p.add_argument(
        "--kill-during-save",
        type=int,
        nargs="*",
        default=[15],
        help="kill while the checkpoint after this step is written",
    )
    p.add_argument(
        "--prompts-per-step", type=int, default=16, help="as the app's default, for the rollout count"
    )
    p.add_argument("--n", type=int, default=8, help="as the app's default, for the rollout count")
    p.add_argument("app_flags", nargs="*", help="more flags for the app, after --")
    args = p.parse_args()
    flags = ["--prompts-per-step", str(args.prompts_per_step), "--n", str(args.n), *args.app_flags]
    steps = int(flags[flags.index("--steps") + 1]) if "--steps" in flags else 40

    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="agl-resume-") as tmp:
        outcomes.append(uninterrupted(flags, Path(tmp) / "whole"))
        for step in args.kill_in_step:
            run = Path(tmp) / f"in-{step}"
            outcomes.append(
                killed_and_resumed(flags, run, f"killed in step {step}", lambda r=run, s=step: s in _noted(r))
            )
        for step in args.kill_during_save:
            run = Path(tmp) / f"saving-{step}"
            outcomes.append(
                killed_and_resumed(
                    flags, run, f"killed saving after {step}", lambda r=run, s=step: _saving(r, s)
                )
            )

    expected = steps * args.prompts_per_step * args.n
    print(
        f"\n{'run':<26} {'resumed from':>12} {'final acc':>9} {'steps once':>10} {'rollouts':>9} {'wall s':>7}"
    )
    for o in outcomes:
        once = o.train_steps == list(range(1, steps + 1))
        rollouts = f"{o.finished_train_rollouts}/{expected}"
        resumed = "-" if o.resumed_from is None else f"step {o.resumed_from}"
        print(
            f"{o.label:<26} {resumed:>12} {o.final_accuracy:>9.1%} {once!s:>10} {rollouts:>9} {o.wall_s:>7.0f}"
        )


if __name__ == "__main__":
    main()
