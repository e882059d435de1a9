"""The room-selector task set: 60 requests with their expected answers, split into train and val."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

from .world import RoomRequest, best_room

__all__ = ["TASKS_FILE", "RoomTask", "load_tasks", "split_tasks"]

TASKS_FILE = Path(__file__).with_name("tasks.jsonl")


class RoomTask(TypedDict):
    id: str
    task_input: dict[str, Any]
    expected_choice: str


def load_tasks(path: Path = TASKS_FILE) -> list[RoomTask]:
    """Read the tasks and check each expected answer against the world's rules."""
    tasks: list[RoomTask] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        task = RoomTask(id=row["id"], task_input=row["task_input"], expected_choice=row["expected_choice"])
        truth = best_room(RoomRequest.from_dict(task["task_input"]))
        if truth != task["expected_choice"]:
            raise ValueError(
                f"{path}:{number}: task {task['id']} expects {task['expected_choice']!r} "
                f"but the world's rules give {truth!r}"
            )
        tasks.append(task)
    return tasks


def split_tasks(tasks: list[RoomTask]) -> tuple[list[RoomTask], list[RoomTask]]:
    """First half for training (critiques), second half for validation (scores)."""
    half = len(tasks) // 2
    return tasks[:half], tasks[half:]
