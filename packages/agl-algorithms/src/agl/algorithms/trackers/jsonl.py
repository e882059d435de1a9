"""The ``jsonl`` tracker: one JSON line ``{"kind": kind, **figures}`` per event, flushed at once."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["JsonlSink"]


class JsonlSink:
    """Appends each event to ``path`` (its directory is created); every figure is kept, numbers or not."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def log(self, kind: str, step: int, figures: Mapping[str, Any]) -> None:
        if self._file is None:
            raise ValueError(f"{self.path} is closed")
        self._file.write(json.dumps({"kind": kind, **figures}, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
