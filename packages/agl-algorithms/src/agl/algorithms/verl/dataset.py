"""Task datasets → the parquet files verl's ``RLHFDataset`` reads.

Each row keeps the task whole as JSON (``agl_task``) with its mode (``agl_mode``: ``train`` / ``val``; verl
does not tell an agent loop whether it is validating), a ``prompt`` (a one-message chat that verl only
needs for its bookkeeping: the agent builds its own prompts), ``data_source`` and ``extra_info.index``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._json import is_dict

__all__ = ["read_task", "write_tasks"]


def _prompt_text(task: Any) -> str:
    if is_dict(task):
        for key in ("prompt", "question", "input", "query"):
            if isinstance(task.get(key), str):
                return task[key]
    return json.dumps(task, default=str)[:2000]


def write_tasks(tasks: Sequence[Any], path: str | Path, mode: str, data_source: str = "agl") -> Path:
    """Write ``tasks`` (JSON-serialisable task inputs) to ``path`` as parquet; returns the path."""
    pa, pq = _pyarrow()

    if mode not in ("train", "val", "test"):
        raise ValueError(f"mode must be train, val or test, got {mode!r}")
    if len(tasks) == 0:
        raise ValueError(f"no {mode} tasks to write")
    rows: list[dict[str, Any]] = []
    for i, task in enumerate(tasks):
        try:
            encoded = json.dumps(task)
        except TypeError as exc:
            raise TypeError(
                f"task {i} is not JSON-serialisable, which VERL needs to pass it to verl: {exc}"
            ) from exc
        rows.append(
            {
                "prompt": [{"role": "user", "content": _prompt_text(task)}],
                "agl_task": encoded,
                "agl_mode": mode,
                "data_source": data_source,
                "extra_info": {"index": i},
            }
        )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def read_task(row: dict[str, Any]) -> tuple[Any, str]:
    """The task input and mode of a row as verl hands it to an agent loop."""
    if "agl_task" not in row:
        raise KeyError("this row has no 'agl_task' column: VERL's data files are written by write_tasks()")
    return json.loads(row["agl_task"]), str(row.get("agl_mode", "train"))


def _pyarrow() -> tuple[Any, Any]:
    """``pyarrow`` and ``pyarrow.parquet``, typed ``Any``: pyarrow ships no type information."""
    import pyarrow  # pyright: ignore[reportMissingTypeStubs]  # ships no type information
    import pyarrow.parquet  # pyright: ignore[reportMissingTypeStubs]  # ships no type information

    return pyarrow, pyarrow.parquet
