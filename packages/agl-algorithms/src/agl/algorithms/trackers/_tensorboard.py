"""The ``tensorboard`` tracker: scalar summaries in TensorBoard event files, written by ``tensorboard`` itself."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from . import TrackerUnavailable, numeric_figures

__all__ = ["TensorBoardSink"]


class TensorBoardSink:
    """One event file in ``log_dir`` (``tensorboard --logdir`` it); each figure is the scalar ``kind/name``.

    Written with ``tensorboard``'s own ``EventFileWriter`` (what ``torch.utils.tensorboard`` uses), so
    neither TensorFlow nor torch is needed; flushed after every event.
    """

    def __init__(self, log_dir: str | Path) -> None:
        try:
            from tensorboard.compat.proto import (  # pyright: ignore[reportMissingTypeStubs]  # ships no type information
                event_pb2,
                summary_pb2,
            )
            from tensorboard.summary.writer import (  # pyright: ignore[reportMissingTypeStubs]  # ships no type information
                event_file_writer,
            )
        except ImportError as exc:
            raise TrackerUnavailable("tensorboard", "tensorboard") from exc
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._event: Any = event_pb2.Event
        self._summary: Any = summary_pb2.Summary
        self._writer: Any = event_file_writer.EventFileWriter(str(self.log_dir))

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None:
        values = [
            self._summary.Value(tag=f"{kind}/{name}", simple_value=value)
            for name, value in numeric_figures(figures).items()
        ]
        if not values:
            return
        event = self._event(wall_time=time.time(), step=step, summary=self._summary(value=values))
        self._writer.add_event(event)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
