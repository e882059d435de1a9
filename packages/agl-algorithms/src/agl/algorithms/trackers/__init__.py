"""Experiment trackers: where :class:`~agl.algorithms.metrics.AlgorithmMetrics` sends each event's figures.

One small interface, :class:`MetricsSink` (``log(kind, step, figures)`` and ``close()``), and four
backends chosen by name (the apps' ``--logger jsonl,tensorboard,mlflow,wandb``):

- ``jsonl``: one JSON line per event in ``metrics.jsonl`` (no extra needed);
- ``tensorboard``: TensorBoard event files under ``tensorboard/``, written by ``tensorboard``'s own event
  file writer (``pip install 'agl-algorithms[tensorboard]'``);
- ``mlflow``: an MLflow run in MLflow's local file store ``mlruns/``, or wherever ``MLFLOW_TRACKING_URI``
  points when the user set it (``pip install 'agl-algorithms[mlflow]'``);
- ``wandb``: a Weights & Biases run in **offline** mode under ``wandb/``, unless the user set ``WANDB_MODE``
  (``pip install 'agl-algorithms[wandb]'``).

Nothing leaves the machine unless the user configures it (``MLFLOW_TRACKING_URI``, ``WANDB_MODE=online``).
Each tracker's library is imported only when that tracker is chosen; a missing one raises
:class:`TrackerUnavailable` naming the extra to install.

Figures are reported under ``<kind>/<name>`` (``train/reward``, ``validation/accuracy``...); nested
mappings are flattened with ``/``; only finite numbers are sent to the trackers (booleans, strings and
NaN stay in ``metrics.jsonl``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agl.types.extras import MissingExtraError

__all__ = [
    "TRACKERS",
    "MetricsSink",
    "TrackerUnavailable",
    "make_sink",
    "numeric_figures",
    "parse_loggers",
]

TRACKERS = ("jsonl", "tensorboard", "mlflow", "wandb")
"""The tracker names :func:`make_sink` knows, in the order the apps list them."""


@runtime_checkable
class MetricsSink(Protocol):
    """Receives every event of an :class:`~agl.algorithms.metrics.AlgorithmMetrics`.

    ``log`` is called with the event's kind (``"train"``, ``"validation"``, ``"round"``...), its step (the
    figures' own ``step`` or ``round`` when they have one, else the count of events of that kind) and the
    figures as the algorithm reported them; calls are serialised by the caller. ``close`` ends the run
    (flushes files, marks the tracker's run finished); it is called once.
    """

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class TrackerUnavailable(MissingExtraError):
    """A chosen tracker's library is not installed (the message names the extra that installs it)."""

    def __init__(self, tracker: str, distribution: str) -> None:
        super().__init__(
            f"the {tracker!r} logger needs {distribution}, which is not installed: "
            f"pip install 'agl-algorithms[{tracker}]'"
        )
        self.tracker = tracker


def parse_loggers(spec: str | Iterable[str]) -> tuple[str, ...]:
    """``"jsonl,tensorboard"`` (or a sequence of names) → the tracker names, checked, duplicates dropped.

    An empty spec or ``"none"`` means no tracker at all.
    """
    parts = spec.split(",") if isinstance(spec, str) else list(spec)
    names: list[str] = []
    for part in parts:
        name = part.strip().lower()
        if not name or name == "none":
            continue
        if name not in TRACKERS:
            raise ValueError(f"unknown logger {part.strip()!r}: choose from {', '.join(TRACKERS)}")
        if name not in names:
            names.append(name)
    return tuple(names)


def numeric_figures(figures: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The finite numbers of ``figures`` (nested mappings flattened to ``outer/inner``), as floats."""
    found: dict[str, float] = {}
    for key, value in figures.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            found.update(numeric_figures(value, f"{name}/"))  # pyright: ignore[reportUnknownArgumentType]  # figures are JSON-like
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            found[name] = float(value)
    return found


def make_sink(
    name: str,
    run_dir: str | Path,
    *,
    algorithm: str,
    run_name: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> MetricsSink:
    """The tracker ``name`` (one of :data:`TRACKERS`) writing under ``run_dir``.

    Args:
        name: ``jsonl``, ``tensorboard``, ``mlflow`` or ``wandb``.
        run_dir: The run's output directory (created if missing).
        algorithm: The algorithm's name (a tag of the MLflow and W&B runs).
        run_name: The MLflow / W&B run name (default: the directory's name).
        config: The run's settings, recorded as MLflow parameters and the W&B run's config.
    """
    root = Path(run_dir)
    root.mkdir(parents=True, exist_ok=True)
    label = run_name or root.resolve().name
    settings = dict(config or {})
    if name == "jsonl":
        from .jsonl import JsonlSink

        return JsonlSink(root / "metrics.jsonl")
    if name == "tensorboard":
        from ._tensorboard import TensorBoardSink

        return TensorBoardSink(root / "tensorboard")
    if name == "mlflow":
        from ._mlflow import MLflowSink

        return MLflowSink(root, algorithm=algorithm, run_name=label, config=settings)
    if name == "wandb":
        from ._wandb import WandbSink

        return WandbSink(root, algorithm=algorithm, run_name=label, config=settings)
    raise ValueError(f"unknown logger {name!r}: choose from {', '.join(TRACKERS)}")
