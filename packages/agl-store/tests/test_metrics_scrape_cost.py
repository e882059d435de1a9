"""A ``/metrics`` scrape reads what changed, not every rollout (issue 27, defect 10), with the same figures.

A real in-memory store counts the rollouts and attempts its queries return; the figures are checked against a
full recount (what the scrape computed before: every rollout, every attempt).
"""

from __future__ import annotations

from agl.store import InMemoryLightningStore
from agl.store.metrics import StoreFigures
from agl.types import Attempt, AttemptedRollout, PaginatedResult, Rollout, RolloutConfig
from agl.types.query import AttemptQuery, RolloutQuery
from prometheus_client.core import Metric


class CountingStore(InMemoryLightningStore):
    """The in-memory store, counting the rows its rollout and attempt queries return."""

    rows_read = 0

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        page = await super()._query_rollouts(query)
        self.rows_read += len(page.items)
        return page

    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        page = await super()._query_attempts(query)
        self.rows_read += len(page.items)
        return page


async def _fill(store: InMemoryLightningStore, finished: int) -> AttemptedRollout:
    """``finished`` rollouts that succeeded at once, one that took a retry, and a few in every other state."""
    for i in range(finished):
        attempted = await store.start_rollout(input=i)
        await store.update_attempt(attempted.rollout_id, attempted.attempt.attempt_id, status="succeeded")
    retry = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    await store.enqueue_rollout(input="retried", config=retry)
    first = await store.dequeue_rollout()
    assert first is not None
    await store.update_attempt(first.rollout_id, first.attempt.attempt_id, status="failed")
    await store.enqueue_rollout(input="queued")
    return await store.start_rollout(input="running")


async def _recount(store: InMemoryLightningStore) -> tuple[dict[str, int], dict[str, int]]:
    rollouts: dict[str, int] = {}
    attempts: dict[str, int] = {}
    for rollout in await store.query_rollouts():
        rollouts[rollout.status] = rollouts.get(rollout.status, 0) + 1
        for attempt in await store.query_attempts(rollout.rollout_id):
            attempts[attempt.status] = attempts.get(attempt.status, 0) + 1
    return rollouts, attempts


def _by_status(metrics: list[Metric], name: str) -> dict[str, int]:
    (family,) = [m for m in metrics if m.name == name]
    return {s.labels["status"]: int(s.value) for s in family.samples if s.value}


async def _scrape(figures: StoreFigures, store: CountingStore) -> tuple[int, list[Metric]]:
    before = store.rows_read
    await figures.refresh()
    return store.rows_read - before, list(figures.collect())


async def _rows_per_scrape(finished: int) -> int:
    store = CountingStore()
    try:
        running = await _fill(store, finished)
        figures = StoreFigures(store)
        await _scrape(figures, store)  # the first scrape reads everything once
        # Between scrapes: one rollout finishes, one is created and finished, one is created and left running.
        await store.update_attempt(running.rollout_id, running.attempt.attempt_id, status="failed")
        quick = await store.start_rollout(input="quick")
        await store.update_attempt(quick.rollout_id, quick.attempt.attempt_id, status="succeeded")
        await store.start_rollout(input="new")
        rows, metrics = await _scrape(figures, store)
        rollouts, attempts = await _recount(store)
        assert _by_status(metrics, "agl_store_rollouts") == rollouts
        assert _by_status(metrics, "agl_store_attempts") == attempts
        assert attempts["failed"] == 2 and attempts["succeeded"] == finished + 1
        return rows
    finally:
        await store.close()


async def test_a_scrape_reads_the_same_rows_whatever_the_number_of_rollouts() -> None:
    small, large = await _rows_per_scrape(20), await _rows_per_scrape(400)
    assert small == large, (small, large)
    assert large < 20


async def test_the_figures_stay_right_when_finished_rollouts_go_away() -> None:
    """A store that drops finished rollouts (the in-memory store's cap) is recounted from scratch."""
    store = CountingStore(max_rollouts=30)
    try:
        figures = StoreFigures(store)
        for round_ in range(3):
            await _fill(store, 20)
            _, metrics = await _scrape(figures, store)
            rollouts, attempts = await _recount(store)
            assert _by_status(metrics, "agl_store_rollouts") == rollouts, round_
            assert _by_status(metrics, "agl_store_attempts") == attempts, round_
    finally:
        await store.close()
