"""The ``mlflow`` tracker: one MLflow run, in MLflow's local file store unless the user points elsewhere."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agl.types.env import export_env, read_env

from . import TrackerUnavailable, numeric_figures

__all__ = ["MLflowSink"]

_KEY = re.compile(r"[^\w\-. /]")
_BATCH = 1000  # MLflow's limit of metrics (and of parameters: 100) in one log_batch
_PARAM_CHARS = 6000


class MLflowSink:
    """An MLflow run named ``run_name`` in the experiment ``MLFLOW_EXPERIMENT_NAME`` (default ``agl``).

    Where: ``MLFLOW_TRACKING_URI`` when the user set it; otherwise the file store ``<run_dir>/mlruns``
    (``mlflow ui --backend-store-uri <run_dir>/mlruns``). MLflow 3.x refuses file stores unless
    ``MLFLOW_ALLOW_FILE_STORE`` is true, so this sets it (when unset) for the default store. Each figure is
    the metric ``kind/name`` at the event's step; ``config`` becomes the run's parameters; ``close`` marks
    the run finished.
    """

    def __init__(
        self, run_dir: str | Path, *, algorithm: str, run_name: str, config: Mapping[str, Any]
    ) -> None:
        try:
            from mlflow import entities
            from mlflow.tracking import MlflowClient
        except ImportError as exc:
            raise TrackerUnavailable("mlflow", "mlflow (or mlflow-skinny)") from exc
        self._metric: Any = entities.Metric
        tracking_uri: str | None = None
        if read_env("MLFLOW_TRACKING_URI") is None:
            tracking_uri = (Path(run_dir) / "mlruns").resolve().as_uri()
            export_env("MLFLOW_ALLOW_FILE_STORE", "true", keep_existing=True)
        client: Any = MlflowClient(tracking_uri=tracking_uri)
        self._client = client
        self.tracking_uri: str = str(client.tracking_uri)
        name = read_env("MLFLOW_EXPERIMENT_NAME") or "agl"
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        run = client.create_run(experiment_id, run_name=run_name, tags={"agl.algorithm": algorithm})
        self.run_id: str = str(run.info.run_id)
        params = [
            entities.Param(_key(key), str(value)[:_PARAM_CHARS]) for key, value in _flat(config).items()
        ]
        for start in range(0, len(params), 100):
            client.log_batch(self.run_id, params=params[start : start + 100])

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None:
        millis = int(time.time() * 1000)
        metrics = [
            self._metric(_key(f"{kind}/{name}"), value, millis, step)
            for name, value in numeric_figures(figures).items()
        ]
        for start in range(0, len(metrics), _BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[start : start + _BATCH])

    def close(self) -> None:
        self._client.set_terminated(self.run_id)


def _key(name: str) -> str:
    """A name MLflow accepts (letters, digits, ``_ - . /`` and spaces)."""
    return _KEY.sub("_", name)


def _flat(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{prefix}{key}."))  # pyright: ignore[reportUnknownArgumentType]  # JSON-like settings
        elif value is not None:
            flat[f"{prefix}{key}"] = value
    return flat
