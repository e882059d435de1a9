"""Lifecycle shared by tracers, runners and hooks that run in several workers."""

from __future__ import annotations

from typing import Any

__all__ = ["ParallelWorkerBase"]


class ParallelWorkerBase:
    """``init`` once, ``init_worker`` per worker, ``teardown_worker`` and ``teardown`` at the end; all no-ops by default."""

    worker_id: int | str | None = None

    def init(self, *args: Any, **kwargs: Any) -> None:
        """Called once in the main process before workers start."""

    def init_worker(self, worker_id: int | str, *args: Any, **kwargs: Any) -> None:
        """Called in each worker before it starts working."""
        self.worker_id = worker_id

    def teardown_worker(self, worker_id: int | str, *args: Any, **kwargs: Any) -> None:
        """Called in each worker when it stops."""

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        """Called once in the main process after all workers stopped."""
