"""A runner's heartbeat: mark its attempts alive, report a system snapshot, and stop the agent of an attempt
the store has ended (timed out, unresponsive, taken over, its rollout cancelled)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING, Any

from agl.types import AttemptedRollout
from agl.types.timeouts import wait_within

from ._snapshot import system_snapshot
from .errors import AttemptEnded

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["HEARTBEAT_STEP_TIMEOUT", "RunningAttempts", "heartbeat_loop"]

logger = logging.getLogger(__name__)

HEARTBEAT_STEP_TIMEOUT = 5.0
"""Longest wait for one step of a heartbeat (the store's answer, the system snapshot)."""

_ENDED_ATTEMPT_STATUSES = frozenset({"timeout", "unresponsive", "failed", "succeeded"})
"""Attempt statuses after which the runner stops the agent: the store has ended (or given up on) the attempt."""


class RunningAttempts:
    """The attempts one runner is executing, shared by its attempt loop and its heartbeat.

    The attempt loop registers each attempt in :attr:`current` and its agent's task in :attr:`agent_tasks`;
    the heartbeat (:meth:`check`) marks them alive and, when the store has ended one, records why in
    :attr:`ended` and cancels its agent.
    """

    def __init__(self, worker_id: str = "Worker-Unknown") -> None:
        self.worker_id = worker_id
        """The runner's id with the store (for log lines)."""
        self.current: dict[str, AttemptedRollout] = {}
        self.agent_tasks: dict[str, asyncio.Future[Any]] = {}
        self.ended: dict[str, AttemptEnded] = {}

    def end(self, attempted: AttemptedRollout, reason: str, status: str | None) -> None:
        """Stop the agent of an attempt the store has ended."""
        attempt_id = attempted.attempt.attempt_id
        if attempt_id in self.ended or attempt_id not in self.current:
            # Already handled, or the runner has finished with the attempt while this heartbeat's answer was on
            # its way (often the very "succeeded" the runner just reported): nothing to stop.
            return
        self.ended[attempt_id] = AttemptEnded(reason, status)
        task = self.agent_tasks.get(attempt_id)
        if task is not None and task.done():
            return  # the agent has just returned: the store decides whether its outcome still counts
        logger.warning(
            "%s: rollout %s attempt %s: %s; cancelling its agent",
            self.worker_id,
            attempted.rollout_id,
            attempt_id,
            reason,
        )
        if task is not None:
            task.cancel()

    async def check(self, store: LightningStore) -> None:
        """Mark the current attempts alive and learn from the answers which ones the store has ended."""
        current = list(self.current.values())
        if not current:
            return
        now = time.time()
        for attempted in current:
            attempt = await store.update_attempt(
                attempted.rollout_id, attempted.attempt.attempt_id, last_heartbeat_time=now
            )
            if attempt.status in _ENDED_ATTEMPT_STATUSES:
                self.end(attempted, f"the store marked the attempt {attempt.status}", attempt.status)
        rollouts = await store.query_rollouts(rollout_id_in=sorted({a.rollout_id for a in current}))
        by_id = {r.rollout_id: r for r in rollouts}
        for attempted in current:
            found = by_id.get(attempted.rollout_id)
            if found is None:
                continue
            if found.status == "cancelled":
                self.end(attempted, "the rollout was cancelled", None)
            elif (
                isinstance(found, AttemptedRollout)
                and found.attempt.attempt_id != attempted.attempt.attempt_id
            ):
                self.end(attempted, f"attempt {found.attempt.attempt_id} took over the rollout", None)


async def heartbeat_loop(
    attempts: RunningAttempts,
    store: LightningStore,
    *,
    interval: float,
    jitter: float,
    include_gpu: bool,
) -> None:
    """Every ``interval`` (± ``jitter``) seconds until cancelled: :meth:`RunningAttempts.check`, then a system
    snapshot to ``store.update_worker``. A failed or slow heartbeat is logged and skipped."""
    worker_id = attempts.worker_id
    while True:
        # Jitter spreads the heartbeats of many runners; bounded so a short interval stays positive.
        spread = min(jitter, interval / 4)
        wait = interval + random.uniform(-spread, spread)
        # A step may take longer than a short interval on a loaded machine; it must not be cut off then.
        limit = max(wait, HEARTBEAT_STEP_TIMEOUT)
        try:
            # wait_within, not asyncio.wait_for: the runner stops this loop by cancelling it
            await wait_within(attempts.check(store), limit)
            snapshot = await wait_within(asyncio.to_thread(system_snapshot, include_gpu), limit)
            await wait_within(store.update_worker(worker_id, heartbeat_stats=snapshot), limit)
        except asyncio.TimeoutError:
            logger.warning("%s: heartbeat took longer than %.1fs; skipped", worker_id, limit)
        except Exception as exc:
            logger.warning("%s: heartbeat failed: %s", worker_id, exc)
        await asyncio.sleep(wait)
