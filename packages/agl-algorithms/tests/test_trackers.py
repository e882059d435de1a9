"""Experiment trackers: a short run's figures, written by TensorBoard, MLflow and W&B (offline) themselves,
read back with each library's own reader."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agl.algorithms.metrics import AlgorithmMetrics
from agl.algorithms.trackers import TrackerUnavailable, make_sink, numeric_figures, parse_loggers
from prometheus_client import CollectorRegistry

TRAIN = [{"step": s, "reward": 0.25 * s, "loss": 1.0 / s, "model_version": f"v{s}"} for s in (1, 2, 3)]
VALIDATION = [{"step": 0, "accuracy": 0.1}, {"step": 2, "accuracy": 0.6}]


@pytest.fixture
def offline_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No user configuration: the defaults (MLflow file store, W&B offline) are what is tested."""
    for name in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "WANDB_MODE", "WANDB_DIR", "WANDB_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "")  # restored afterwards (the sink sets it when unset) ...
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")  # ... and unset now
    monkeypatch.setenv("WANDB_SILENT", "true")


@pytest.fixture(autouse=True)
def no_wandb_service_left() -> Iterator[None]:
    """W&B keeps one service process per Python process until exit (its atexit hook ends it); a test process
    lives on, so end it after each test, or later tests that count their child processes would see it."""
    yield
    wandb = sys.modules.get("wandb")  # (None where a test hides the library)
    if wandb is not None:
        wandb.teardown()


def short_run(run_dir: Path, loggers: str) -> AlgorithmMetrics:
    metrics = AlgorithmMetrics.for_run(
        "local_grpo",
        run_dir,
        loggers,
        config={"lr": 1e-5, "n": 4, "credit": {"mode": "turn"}},
        registry=CollectorRegistry(),
    )
    metrics.log("validation", VALIDATION[0])
    for figures in TRAIN[:2]:
        metrics.log("train", figures)
    metrics.log("validation", VALIDATION[1])
    metrics.log("train", TRAIN[2])
    metrics.close()
    return metrics


def test_parse_loggers() -> None:
    assert parse_loggers("jsonl") == ("jsonl",)
    assert parse_loggers(" jsonl, TensorBoard ,mlflow,wandb,jsonl") == (
        "jsonl",
        "tensorboard",
        "mlflow",
        "wandb",
    )
    assert parse_loggers(["wandb"]) == ("wandb",)
    assert parse_loggers("") == parse_loggers("none") == ()
    with pytest.raises(ValueError, match="unknown logger 'comet'"):
        parse_loggers("jsonl,comet")


def test_numeric_figures_flatten_and_keep_only_finite_numbers() -> None:
    figures = {
        "a": 1,
        "b": True,
        "c": "x",
        "d": math.nan,
        "verl": {"critic/score/mean": 0.5, "x": {"y": 2.0}},
    }
    assert numeric_figures(figures) == {"a": 1.0, "verl/critic/score/mean": 0.5, "verl/x/y": 2.0}


def test_default_logger_is_the_jsonl_file_alone(tmp_path: Path) -> None:
    assert short_run(tmp_path, "jsonl").jsonl_path == tmp_path / "metrics.jsonl"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[1] == {"kind": "train", **TRAIN[0]}
    assert [line["kind"] for line in lines] == ["validation", "train", "train", "validation", "train"]


def test_tensorboard_event_files_hold_the_step_metrics(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import (
        EventAccumulator,
    )

    short_run(tmp_path, "tensorboard")
    accumulator: Any = EventAccumulator(str(tmp_path / "tensorboard"))
    accumulator.Reload()
    scalars = set(accumulator.Tags()["scalars"])
    assert {"train/reward", "train/loss", "train/step", "validation/accuracy"} <= scalars
    assert "train/model_version" not in scalars
    assert [(e.step, e.value) for e in accumulator.Scalars("train/reward")] == [
        (1, 0.25),
        (2, 0.5),
        (3, 0.75),
    ]
    assert [(e.step, round(e.value, 6)) for e in accumulator.Scalars("validation/accuracy")] == [
        (0, 0.1),
        (2, 0.6),
    ]


def test_mlflow_file_store_holds_the_step_metrics(tmp_path: Path, offline_env: None) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    short_run(tmp_path, "mlflow")
    client: Any = MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())
    experiment = client.get_experiment_by_name("agl")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["agl.algorithm"] == "local_grpo"
    assert run.info.run_name == tmp_path.name
    assert run.data.params == {"lr": "1e-05", "n": "4", "credit.mode": "turn"}
    history = client.get_metric_history(run.info.run_id, "train/reward")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5), (3, 0.75)]
    accuracy = client.get_metric_history(run.info.run_id, "validation/accuracy")
    assert sorted((m.step, m.value) for m in accuracy) == [(0, 0.1), (2, 0.6)]


def wandb_records(run_dir: Path, *options: str) -> str:
    """``wandb leet inspect``: wandb's own reader of a run's ``.wandb`` transaction log."""
    done = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", *options, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout


def test_wandb_offline_run_directory_holds_the_step_metrics(tmp_path: Path, offline_env: None) -> None:
    pytest.importorskip("wandb")
    short_run(tmp_path, "wandb")
    (run_dir,) = (tmp_path / "wandb").glob("offline-run-*")
    assert list(run_dir.glob("run-*.wandb"))
    history: list[Mapping[str, Any]] = [
        record["history"]["item"]
        for line in wandb_records(run_dir).splitlines()
        if line.startswith("{") and (record := json.loads(line)).get("type") == "history"
    ]
    train = [(h["train/step"], h["train/reward"]) for h in history if "train/reward" in h]
    assert train == [(1, 0.25), (2, 0.5), (3, 0.75)]
    validation = [
        (h["validation/step"], h["validation/accuracy"]) for h in history if "validation/accuracy" in h
    ]
    assert validation == [(0, 0.1), (2, 0.6)]
    summary = json.loads(wandb_records(run_dir, "--summary"))
    assert summary["state"] == "finished"
    assert summary["project"] == "agl"
    assert summary["config"]["credit"] == {"mode": "turn"}


def test_all_four_at_once(tmp_path: Path, offline_env: None) -> None:
    for module in ("tensorboard", "mlflow", "wandb"):
        pytest.importorskip(module)
    short_run(tmp_path, "jsonl,tensorboard,mlflow,wandb")
    assert {p.name for p in tmp_path.iterdir()} == {"metrics.jsonl", "tensorboard", "mlruns", "wandb"}
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 5
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))


@pytest.mark.parametrize(
    ("tracker", "module"), [("tensorboard", "tensorboard"), ("mlflow", "mlflow"), ("wandb", "wandb")]
)
def test_a_missing_library_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tracker: str, module: str
) -> None:
    for name in [module, *(m for m in sys.modules if m.startswith(f"{module}."))]:
        monkeypatch.setitem(
            sys.modules, name, None
        )  # importing it (or a loaded submodule) now raises ImportError
    with pytest.raises(TrackerUnavailable, match=rf"pip install 'agl-algorithms\[{tracker}\]'"):
        make_sink(tracker, tmp_path, algorithm="apo")
    with pytest.raises(TrackerUnavailable):
        AlgorithmMetrics.for_run("apo", tmp_path, f"jsonl,{tracker}", registry=CollectorRegistry())


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[tuple[str, int, dict[str, Any]]] = []
        self.closed = 0
        self.fail = fail

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None:
        if self.fail:
            raise RuntimeError("tracker down")
        self.events.append((kind, step, dict(figures)))

    def close(self) -> None:
        self.closed += 1


def test_steps_come_from_the_figures_or_count_per_kind(caplog: pytest.LogCaptureFixture) -> None:
    recorder, broken = Recorder(), Recorder(fail=True)
    registry = CollectorRegistry()
    metrics = AlgorithmMetrics("apo", registry=registry, sinks=[broken, recorder])
    metrics.log("round", {"round": 4, "best_score": 0.5})
    metrics.log("train", {"step": 7.0})
    metrics.log("event", {"x": 1})
    metrics.log("event", {"x": 2, "step": True})
    metrics.log("event", {"x": 3}, step=40)
    assert [(kind, step) for kind, step, _ in recorder.events] == [
        ("round", 4),
        ("train", 7),
        ("event", 1),
        ("event", 2),
        ("event", 40),
    ]
    assert "Recorder could not record a 'round' event" in caplog.text  # the broken one is skipped
    assert registry.get_sample_value("agl_algorithm_best_score", {"algorithm": "apo", "kind": "round"}) == 0.5
    metrics.close()
    metrics.close()
    metrics.log("event", {"x": 4})  # after close: the gauges only
    assert (recorder.closed, broken.closed, len(recorder.events)) == (1, 1, 5)


def test_local_grpo_reports_through_the_metrics_it_is_given(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from agl.algorithms.local import LocalGRPO

    metrics = AlgorithmMetrics.for_run(
        "local_grpo", tmp_path, "jsonl,tensorboard", registry=CollectorRegistry()
    )
    algorithm = LocalGRPO(str(tmp_path / "model"), steps=1, metrics=metrics)
    assert algorithm.metrics is metrics
    algorithm.metrics.log("train", TRAIN[0])  # what LocalGRPO.run does after each step
    metrics.close()
    assert json.loads((tmp_path / "metrics.jsonl").read_text()) == {"kind": "train", **TRAIN[0]}
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
