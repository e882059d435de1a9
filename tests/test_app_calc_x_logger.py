"""`apps/train_calc_x.py --logger` (issue 31): a short run's step metrics reach TensorBoard event files, an
MLflow file store and an offline W&B run, read back with each library's own reader."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "apps" / "train_calc_x.py"
MODEL = ROOT / "apps" / "calc_tiny" / "model"


def app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("train_calc_x_under_test", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_logger_flag_parses_any_combination(capsys: pytest.CaptureFixture[str]) -> None:
    parse_args: Any = app().parse_args
    assert parse_args([]).logger == ("jsonl",)
    assert parse_args(["--logger", "jsonl,tensorboard,mlflow,wandb"]).logger == (
        "jsonl",
        "tensorboard",
        "mlflow",
        "wandb",
    )
    assert parse_args(["--logger", "wandb"]).logger == ("wandb",)
    with pytest.raises(SystemExit) as exited:
        parse_args(["--logger", "jsonl,comet"])
    assert exited.value.code == 2
    assert "unknown logger 'comet'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="apps/calc_tiny/model not built")
def test_a_short_run_writes_every_tracker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    for module in ("tensorboard", "mlflow", "wandb"):
        pytest.importorskip(module)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("MLFLOW_", "WANDB_"))  # the defaults: a file store and an offline run
    }
    out = tmp_path / "run"
    result = subprocess.run(
        [
            sys.executable,
            str(APP),
            *("--steps", "2", "--prompts-per-step", "4", "--n", "4", "--val-size", "8", "--val-every", "1"),
            *("--seed", "1", "--output-dir", str(out), "--logger", "jsonl,tensorboard,mlflow,wandb"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**env, "WANDB_SILENT": "true"},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rewards = {m["step"]: m["reward"] for m in lines if m["kind"] == "train"}
    accuracy = {m["step"]: m["accuracy"] for m in lines if m["kind"] == "validation"}
    assert sorted(rewards) == [1, 2] and sorted(accuracy) == [0, 1, 2]

    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    events: Any = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tb = {e.step: e.value for e in events.Scalars("train/reward")}
    assert tb == pytest.approx(rewards)
    assert {e.step for e in events.Scalars("validation/accuracy")} == set(accuracy)

    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3 reads file stores only when allowed
    client: Any = MlflowClient(tracking_uri=(out / "mlruns").resolve().as_uri())
    (run,) = client.search_runs([client.get_experiment_by_name("agl").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["steps"] == "2"
    history = client.get_metric_history(run.info.run_id, "train/reward")
    assert {m.step: m.value for m in history} == pytest.approx(rewards)
    assert {m.key for m in client.get_metric_history(run.info.run_id, "train/update_s")} == {"train/update_s"}

    (wandb_run,) = (out / "wandb").glob("offline-run-*")
    inspected = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(wandb_run)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    items = [
        record["history"]["item"]
        for line in inspected.splitlines()
        if line.startswith("{") and (record := json.loads(line)).get("type") == "history"
    ]
    wb = {h["train/step"]: h["train/reward"] for h in items if "train/reward" in h}
    assert wb == pytest.approx(rewards)
    assert {h["validation/step"] for h in items if "validation/accuracy" in h} == set(accuracy)
