"""What a strategy does about a runner process that died: give its attempts back and start a replacement.

A runner process that dies without reporting an exception (a signal, the OOM killer, ``os._exit`` in an
agent or a native library) is a *lost runner*. Its attempts are handed back to the store's retry policy at
once (marked ``unresponsive``, as the watchdog would mark them later), and a replacement is started after
a backoff, a bounded number of times per runner slot.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["RestartPolicy", "release_attempts_of", "runner_worker_name"]

logger = logging.getLogger(__name__)


def runner_worker_name(worker_id: Any) -> str:
    """The worker id a runner started with ``worker_id`` uses with the store (``LitAgentRunner`` convention)."""
    return f"Worker-{worker_id}"


class RestartPolicy:
    """How often and how soon a runner slot whose process died gets a replacement.

    Each slot may be replaced ``max_restarts`` times in a row; a process that lived ``healthy_after``
    seconds resets its slot's count. The n-th replacement in a row waits ``backoff * 2**(n-1)`` seconds
    (at most ``max_backoff``).
    """

    def __init__(
        self, max_restarts: int, backoff: float, *, max_backoff: float = 30.0, healthy_after: float = 60.0
    ) -> None:
        if max_restarts < 0:
            raise ValueError(f"max_restarts must be >= 0, got {max_restarts}")
        if backoff < 0:
            raise ValueError(f"restart_backoff must be >= 0, got {backoff}")
        self.max_restarts = max_restarts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.healthy_after = healthy_after
        self._in_a_row: dict[int, int] = {}

    def delay_for(self, slot: int, lived: float) -> float | None:
        """Seconds to wait before replacing the process of ``slot`` that lived ``lived`` seconds; ``None``:
        the slot used up its restarts."""
        if lived >= self.healthy_after:
            self._in_a_row[slot] = 0
        done = self._in_a_row.get(slot, 0)
        if done >= self.max_restarts:
            return None
        self._in_a_row[slot] = done + 1
        return min(self.max_backoff, self.backoff * 2**done)

    def restarts(self, slot: int) -> int:
        """Replacements of ``slot`` in a row so far."""
        return self._in_a_row.get(slot, 0)


async def release_attempts_of(store: LightningStore, worker: str, reason: str) -> list[str]:
    """Mark the live attempts of ``worker`` (a dead runner) ``unresponsive``; the store then retries or fails
    their rollouts by their config. Returns the rollout ids whose attempt was released."""
    released: list[str] = []
    live = await store.query_rollouts(status_in=["preparing", "running"])
    for rollout in live:
        attempt = getattr(rollout, "attempt", None)
        if attempt is None or attempt.worker_id != worker or attempt.status not in ("preparing", "running"):
            continue
        metadata = dict(attempt.metadata or {})
        metadata["error"] = {"type": "LostRunner", "message": reason, "traceback": ""}
        await store.update_attempt(
            rollout.rollout_id, attempt.attempt_id, status="unresponsive", metadata=metadata
        )
        released.append(rollout.rollout_id)
    if released:
        logger.warning(
            "released %d attempt(s) of %s to the retry policy: %s", len(released), worker, released
        )
    return released
