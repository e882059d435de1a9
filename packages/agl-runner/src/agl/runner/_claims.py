"""How a runner's concurrent slots claim rollouts: one idle slot polls the store for all of them, within a budget."""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from agl.types import AttemptedRollout, ResourcesUpdate

from .events import ExecutionEvent

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["ClaimBudget", "ClaimGate", "Claimed", "claim", "claim_loop", "sleep_unless", "stopped"]

logger = logging.getLogger(__name__)

Claimed = tuple[AttemptedRollout, ResourcesUpdate | None]
"""A claimed rollout with the resources it runs with."""

RunClaimed = Callable[[AttemptedRollout, ResourcesUpdate | None, bool], Awaitable[Claimed | None]]
"""Runs a claimed rollout; with ``True``, claims the slot's next rollout as it reports (returned, or ``None``)."""


def stopped(event: ExecutionEvent | None) -> bool:
    """Whether ``event`` (if any) asks the runner to stop."""
    return event is not None and event.is_set()


class ClaimBudget:
    """How many rollouts a runner may still claim (``limit`` ``None``: no bound). Slots are taken before a
    claim is sent and given back when fewer rollouts came than were asked for."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.taken = 0

    @property
    def exhausted(self) -> bool:
        return self.limit is not None and self.taken >= self.limit

    def take(self, wanted: int) -> int:
        """Take up to ``wanted`` slots; returns how many were taken (0 once the budget is spent)."""
        granted = wanted if self.limit is None else max(0, min(wanted, self.limit - self.taken))
        self.taken += granted
        return granted

    def give_back(self, slots: int) -> None:
        self.taken -= slots


class ClaimGate:
    """What the claim loops of one runner share: the lock of the one loop that polls the store, how many
    loops wait for work, and the rollouts it claimed for them."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.idle = 0
        self.ready: collections.deque[Claimed] = collections.deque()


async def claim_loop(
    store: LightningStore,
    worker_id: str,
    event: ExecutionEvent | None,
    budget: ClaimBudget,
    gate: ClaimGate,
    run: RunClaimed,
    poll_timeout: Callable[[], float],
) -> None:
    """One slot of a runner: run what was claimed for it, else (one idle slot at a time) claim for every idle
    slot; return when ``event`` is set or the budget is spent."""
    backoff = 0.05
    while True:
        if gate.ready:  # claimed for this runner (counted in ``budget``): run it first
            rollout, resources = gate.ready.popleft()
            # A slot that will want work next claims it as it reports this rollout's outcome (one request).
            ask = not stopped(event) and budget.take(1) == 1
            following = await run(rollout, resources, ask)
            if following is not None:
                gate.ready.append(following)
            elif ask:
                budget.give_back(1)
            continue
        if stopped(event) or budget.exhausted:
            return
        # One idle loop at a time polls the store and claims work for every loop waiting behind it
        # (one store call instead of one long poll per idle slot: 64 slots would poll 64 times).
        gate.idle += 1
        try:
            async with gate.lock:
                if gate.ready or stopped(event):
                    continue
                limit = budget.take(gate.idle)  # given back below for what does not come
                if limit <= 0:
                    continue
                timeout = poll_timeout()
                asked = time.monotonic()
                try:
                    got = await claim(store, worker_id, limit, timeout)
                except Exception as exc:
                    budget.give_back(limit)
                    logger.warning("%s: dequeue failed (%s); retrying in %.2fs", worker_id, exc, backoff)
                    await sleep_unless(event, backoff)
                    backoff = min(backoff * 2, 2.0)
                    continue
                backoff = 0.05
                budget.give_back(limit - len(got))
                if not got:
                    if time.monotonic() - asked < min(timeout, 0.05) / 2:
                        # The store answered at once instead of waiting (no long poll): do not spin.
                        await sleep_unless(event, min(timeout, 0.05))
                    continue
                gate.ready.extend(got)
        finally:
            gate.idle -= 1


async def claim(store: LightningStore, worker_id: str, limit: int, timeout: float) -> list[Claimed]:
    """Claim up to ``limit`` rollouts (waiting up to ``timeout`` for the first), each with its resources: the
    snapshot its ``resources_id`` names, else the latest (see ``dequeue_many_rollouts_with_resources``)."""
    return await store.dequeue_many_rollouts_with_resources(limit=limit, worker_id=worker_id, timeout=timeout)


async def sleep_unless(event: ExecutionEvent | None, seconds: float) -> None:
    """Sleep ``seconds`` but wake early (within 50 ms) when ``event`` is set."""
    deadline = time.monotonic() + seconds
    while not stopped(event):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return
        await asyncio.sleep(min(remaining, 0.05))
