"""A runner's heartbeat stops when cancelled, even when the cancellation lands as one of its steps finishes.

Before the fix, ``asyncio.wait_for`` (Python < 3.12) returned the finished step's result instead, the loop ran
on, and ``runner.iter()`` waited for it forever after reaching its rollout limit (seen as a 20 s stall of
``test_attempt_ended`` about one run in three)."""

from __future__ import annotations

import asyncio
from typing import Any

from agl.runner._heartbeat import RunningAttempts, heartbeat_loop
from agl.store import InMemoryLightningStore
from agl.types import UNSET, Unset, Worker


class _HeldWorkerUpdates(InMemoryLightningStore):
    """The real in-memory store, whose ``update_worker`` answers only once the test opens ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: asyncio.Future[None] | None = None
        self.held = asyncio.Event()

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        worker = await super().update_worker(worker_id, heartbeat_stats)
        self.gate = asyncio.get_running_loop().create_future()
        self.held.set()
        await self.gate
        return worker


async def test_a_cancel_that_lands_as_a_heartbeat_step_finishes_stops_the_loop() -> None:
    store = _HeldWorkerUpdates()
    beats = asyncio.create_task(
        heartbeat_loop(RunningAttempts("w"), store, interval=0.01, jitter=0.0, include_gpu=False)
    )
    await store.held.wait()
    assert store.gate is not None
    store.gate.set_result(None)  # the step finishes at the loop's next turn ...
    beats.cancel()  # ... as the runner, done with its rollouts, stops the heartbeat
    done, _ = await asyncio.wait({beats}, timeout=10)
    assert beats in done and beats.cancelled(), "the heartbeat ran on after it was cancelled"
