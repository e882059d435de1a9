"""The ``wandb`` tracker: a Weights & Biases run, offline (files only) unless the user sets ``WANDB_MODE``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agl.types.env import read_env

from . import TrackerUnavailable, numeric_figures

__all__ = ["WandbSink"]


class WandbSink:
    """A W&B run in ``<run_dir>/wandb/`` (or ``WANDB_DIR``), project ``WANDB_PROJECT`` (default ``agl``).

    The mode is ``offline`` unless ``WANDB_MODE`` is set: the run is only written to disk, and
    ``wandb sync`` uploads it later if the user wants. Each kind gets its own step axis (``train/step``,
    ``validation/step``...) through ``define_metric``, so events of different kinds never fight over W&B's
    single global step. ``close`` finishes the run.
    """

    def __init__(
        self, run_dir: str | Path, *, algorithm: str, run_name: str, config: Mapping[str, Any]
    ) -> None:
        try:
            import wandb
        except ImportError as exc:
            raise TrackerUnavailable("wandb", "wandb") from exc
        directory = None if read_env("WANDB_DIR") else str(Path(run_dir).resolve())
        mode = None if read_env("WANDB_MODE") else "offline"
        init: Any = wandb.init
        self._run: Any = init(
            project=read_env("WANDB_PROJECT") or "agl",
            name=run_name,
            dir=directory,
            mode=mode,
            config=dict(config),
            tags=[algorithm],
            reinit="create_new",  # several runs in one process each keep their own
        )
        self.run_dir: Path | None = Path(self._run.dir).parent if getattr(self._run, "dir", None) else None
        """The run's own directory (``.../wandb/offline-run-<time>-<id>``, with its ``.wandb`` log)."""
        self._kinds: set[str] = set()

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None:
        axis = f"{kind}/step"
        if kind not in self._kinds:
            self._run.define_metric(axis)
            self._run.define_metric(f"{kind}/*", step_metric=axis)
            self._kinds.add(kind)
        data: dict[str, float] = {f"{kind}/{name}": value for name, value in numeric_figures(figures).items()}
        data[axis] = step
        self._run.log(data)

    def close(self) -> None:
        self._run.finish()
