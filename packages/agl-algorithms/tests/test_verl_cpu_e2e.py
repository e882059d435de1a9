"""Real GRPO steps through verl 0.9.1 on CPU, on the embedded calc model: ``apps/train_calc_x.py
--algorithm verl --device cpu`` end to end (Ray, TransferQueue, an FSDP2 actor on gloo, the bridge, the LLM
proxy, agl's model server as the rollout, verl's naive weight sync, validation, the credit override).

Asserts that the steps ran, that the trainer's weights reached the rollout server (the greedy next-token
logprobs of a probe prompt change after the syncs), and that verl's own check of rollout against training
log-probabilities (``training/rollout_probs_diff_mean``, an absolute probability difference) stays small.
About two minutes on two idle cores; the asynchronous run (``--max-staleness 1``) two more."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")
pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[3]
APP = ROOT / "apps" / "train_calc_x.py"
MODEL = ROOT / "apps" / "calc_tiny" / "model"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _short_cpu_run(run_dir: Path, *flags: str) -> tuple[list[str], dict[str, str], str]:
    """Run the app for 2 small steps on CPU into ``run_dir`` (the run must pass); its arguments, environment
    and the end of its output."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false"}
    args = ["--algorithm", "verl", "--device", "cpu", "--steps", "2", "--prompts-per-step", "4", "--n", "2"]
    args += ["--val-size", "4", "--store", "memory", "--output-dir", str(run_dir), *flags]
    done = subprocess.run(
        [sys.executable, str(APP), *args], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env
    )
    tail = (done.stdout + done.stderr)[-6000:]
    assert done.returncode == 0, tail
    assert "steps: 2" in done.stdout and "validation accuracy:" in done.stdout, tail
    return args, env, tail


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_two_grpo_steps_through_verl_on_cpu_then_a_third_resumed_from_verls_checkpoint(
    tmp_path: Path,
) -> None:
    probe = tmp_path / "probe.jsonl"
    flags = ["--checkpoint-every", "1", "--trace-level", "trajectory", "--credit", "turn-discount"]
    args, env, tail = _short_cpu_run(tmp_path / "run", *flags, "--verl-probe-file", str(probe))

    steps = [r for r in _records(tmp_path / "run" / "verl_metrics.jsonl") if "critic/score/mean" in r["data"]]
    assert [r["step"] for r in steps] == [1, 2], tail
    for record in steps:
        data = record["data"]
        assert data["training/rollout_probs_diff_mean"] < 0.05, data
        assert data["agl/samples"] >= 1 and data.get("agl/samples_without_logprobs", 0) == 0, data
        assert "agl/credit_turn-discount/advantage_abs_mean" in data, data

    probes = _records(probe)
    assert [p["step"] for p in probes][:1] == [0] and len(probes) >= 3, probes
    first, last = probes[0]["replicas"][0], probes[-1]["replicas"][-1]
    assert "error" not in first and "error" not in last, probes
    shared = set(first) & set(last)
    assert shared, probes
    assert max(abs(first[t] - last[t]) for t in shared) > 1e-6, "the rollout server's weights did not change"

    # --resume: verl's own resume (resume_mode=auto in the run's checkpoint folder) continues at step 3
    run = tmp_path / "run"
    assert (run / "checkpoint" / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    more = [*args, "--resume", str(run)]
    more[more.index("--steps") + 1] = "3"
    resumed = subprocess.run(
        [sys.executable, str(APP), *more], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env
    )
    tail = (resumed.stdout + resumed.stderr)[-6000:]
    assert resumed.returncode == 0, tail
    assert "resume: continuing after step 2" in resumed.stdout, tail
    assert f"Resuming from {run / 'checkpoint' / 'global_step_2'}" in resumed.stdout + resumed.stderr, tail
    assert [r["step"] for r in _records(run / "verl_metrics.jsonl") if "critic/score/mean" in r["data"]] == [
        3
    ]
    app_records = _records(run / "metrics.jsonl")
    assert [r["step"] for r in app_records if r["kind"] == "train"] == [1, 2, 3]
    assert (run / "checkpoint" / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_asynchronous_grpo_steps_through_verl_on_cpu_stay_within_the_staleness_bound(tmp_path: Path) -> None:
    """``--max-staleness 1``: verl's colocate_async trainer under the agl hooks. Generation goes on across
    the update, the second step trains on samples one version behind (verl's own off-policy metrics, from
    the versions agl's model server stamped on each call), never more, with decoupled importance weights."""
    _, _, tail = _short_cpu_run(tmp_path / "run", "--max-staleness", "1")
    steps = [r for r in _records(tmp_path / "run" / "verl_metrics.jsonl") if "critic/score/mean" in r["data"]]
    assert [r["step"] for r in steps] == [1, 2], tail
    staleness = [r["data"]["training/off_policy/trajectory_staleness/max"] for r in steps]
    assert staleness[0] == 0 and staleness[1] == 1, staleness  # within K = 1, and asynchronous indeed
    for record in steps:
        data = record["data"]
        assert "rollout_corr/rollout_is_mean" in data, data  # --correction decoupled (the default)
        assert data["agl/samples"] >= 1 and data.get("agl/samples_without_logprobs", 0) == 0, data
