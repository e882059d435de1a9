"""What the store knows about a runner (a worker)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from .statuses import WorkerStatus

__all__ = ["Worker", "WorkerStatus"]


class Worker(BaseModel):
    """What the store knows about a runner."""

    worker_id: str
    status: WorkerStatus = "unknown"
    heartbeat_stats: dict[str, Any] | None = None
    last_heartbeat_time: float | None = None
    last_dequeue_time: float | None = None
    last_busy_time: float | None = None
    last_idle_time: float | None = None
    current_rollout_id: str | None = None
    current_attempt_id: str | None = None
