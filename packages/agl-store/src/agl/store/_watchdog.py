"""When the store's watchdog may scan for timed-out and unresponsive attempts.

The watchdog has no thread of its own: it runs at the start of the store methods listed in
:data:`WATCHED_METHODS`, at most once per ``debounce_seconds`` of the store's clock. What a scan decides
is in :func:`agl.store._rules.watchdog_verdict`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["WATCHED_METHODS", "ScanDebouncer"]

WATCHED_METHODS: frozenset[str] = frozenset(
    {
        "start_rollout",
        "enqueue_rollout",
        "enqueue_many_rollouts",
        "dequeue_rollout",
        "dequeue_many_rollouts",
        "start_attempt",
        "query_rollouts",
        "get_rollout_by_id",
        "query_attempts",
        "get_latest_attempt",
        "update_resources",
        "wait_for_rollouts",
        "query_spans",
        "update_rollout",
        "update_attempt",
        "query_workers",
    }
)
"""Store methods that run a watchdog scan first (span writes, resources reads, sequence ids and worker
heartbeats do not: they must stay cheap)."""


class ScanDebouncer:
    """Allows one scan per ``debounce_seconds`` of ``clock``; the first call always scans. Thread-safe.

    ``debounce_seconds=0`` allows a scan on every call.
    """

    def __init__(self, clock: Callable[[], float], debounce_seconds: float) -> None:
        if debounce_seconds < 0:
            raise ValueError(f"scan_debounce_seconds must be >= 0, got {debounce_seconds}")
        self._clock = clock
        self._debounce = debounce_seconds
        self._last_scan: float | None = None
        self._lock = threading.Lock()

    def should_scan(self) -> bool:
        """True if a scan is due now; the caller then scans. Claims the slot atomically."""
        now = self._clock()
        with self._lock:
            last = self._last_scan
            if last is not None and self._debounce > 0 and 0 <= now - last < self._debounce:
                return False
            self._last_scan = now
            return True
