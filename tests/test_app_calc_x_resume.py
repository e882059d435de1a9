"""A killed `apps/train_calc_x.py` run resumes (issue 31): kill -9 the whole run between two checkpoints, start
it again with `--resume RUN_DIR`, and it finishes the planned steps, each counted once: the first redone step
takes the rollouts that had finished, the later ones' rollouts (from weights the kill lost) are marked."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from agl.testing.processes import wait_until
from agl.types import Rollout

pytest.importorskip("torch")

from tests.test_app_calc_x import APP, MODEL, ROOT, run_app

STEPS, PROMPTS, N, VAL = 5, 4, 4, 8
FLAGS = ["--steps", str(STEPS), "--prompts-per-step", str(PROMPTS), "--n", str(N), "--val-size", str(VAL)]
FLAGS += ["--val-every", "2", "--checkpoint-every", "2", "--seed", "3"]


def _checkpoint_step(run: Path) -> int:
    latest = run / "checkpoint" / "latest"
    return int(latest.read_text().strip()[5:]) if latest.is_file() else 0


def _noted(run: Path) -> set[int]:
    """The steps whose rollouts the run has noted since its last checkpoint."""
    try:
        return {int(step) for step in json.loads((run / "checkpoint" / "pending.json").read_text())["steps"]}
    except FileNotFoundError:
        return set()


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_a_run_killed_between_checkpoints_resumes_and_counts_every_step_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    first = subprocess.Popen(
        [sys.executable, str(APP), *FLAGS, "--output-dir", str(run)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its runners and model server too: the kill takes the whole run
    )
    try:
        # the checkpoint of step 2 is named, step 3 trained, step 4's rollouts enqueued
        assert wait_until(lambda: 4 in _noted(run) or first.poll() is not None, 300, 0.005), "no step 4"
        assert first.poll() is None, first.stderr.read() if first.stderr else ""
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
        if first.stderr is not None:
            first.stderr.close()
    killed_at = _checkpoint_step(run)
    assert killed_at == 2

    second = run_app(*FLAGS, "--resume", str(run))
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    assert f"continuing after step {killed_at}" in second.stderr

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in records if m["kind"] == "train"] == list(range(1, STEPS + 1))
    assert sorted(m["step"] for m in records if m["kind"] == "validation") == [0, 2, 4, 5]

    from agl.algorithms.local.checkpoint import SUPERSEDED
    from agl.store import SqlLightningStore

    async def train_rollouts() -> list[Rollout]:
        store = SqlLightningStore(f"sqlite:///{run / 'store.sqlite'}")
        try:
            return list((await store.query_rollouts(mode_in=["train"])).items)
        finally:
            await store.close()

    rollouts = asyncio.run(train_rollouts())
    counted = [r.status for r in rollouts if SUPERSEDED not in (r.metadata or {})]
    # every step trained on PROMPTS * N finished rollouts; the only others are those the kill interrupted
    assert counted.count("succeeded") + counted.count("failed") == STEPS * PROMPTS * N
    assert {r.status for r in rollouts} <= {"succeeded", "failed", "cancelled"}
    superseded = [r for r in rollouts if SUPERSEDED in (r.metadata or {})]
    assert superseded and len(superseded) % (PROMPTS * N) == 0, "step 4's rollouts, marked"
