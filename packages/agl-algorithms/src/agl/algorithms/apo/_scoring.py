"""APO's scoring: run a candidate's prompts on a batch of tasks through the store and runners, and read the rewards."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Awaitable, Sequence
from typing import Any, Literal, TypeVar

from agl.types import EnqueueRolloutRequest, NamedResources, Rollout, Span

from ..base import Algorithm
from ._beam import PromptCandidate, conversations
from ._history import RoundCounters
from ._llm import AllRolloutsFailed
from ._prompts import RolloutResultForAPO

__all__ = ["PROGRESS_EVERY_S", "RolloutScoring", "gather_owned"]

logger = logging.getLogger("agl.algorithms.apo")

PROGRESS_EVERY_S = 60.0
"""While waiting for a batch, log how many rollouts are still running this often."""

R = TypeVar("R")


async def gather_owned(awaitables: Sequence[Awaitable[R]]) -> list[R]:
    """Like ``asyncio.gather``, but when one fails the others are cancelled and awaited, not orphaned."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


class RolloutScoring(Algorithm):
    """APO's part that scores prompt candidates by running them: enqueue, wait (up to a deadline), read rewards.

    Stops the search with :class:`AllRolloutsFailed` when every rollout of a batch failed before any ever succeeded.
    """

    rollout_batch_timeout: float
    _resources: NamedResources
    _counters: RoundCounters

    def _resources_for(self, candidate: PromptCandidate) -> NamedResources:
        return {**self._resources, **candidate.templates}

    async def _wait_for(self, rollout_ids: list[str]) -> tuple[list[Rollout], list[str]]:
        """Finished rollouts (in request order) and the ids still unfinished at the batch deadline."""
        store = self.get_store()
        deadline = time.monotonic() + self.rollout_batch_timeout
        pending = list(rollout_ids)
        finished: dict[str, Rollout] = {}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            done = await store.wait_for_rollouts(
                rollout_ids=pending, timeout=min(remaining, PROGRESS_EVERY_S)
            )
            finished.update((r.rollout_id, r) for r in done)
            pending = [rid for rid in pending if rid not in finished]
            if pending and time.monotonic() < deadline:
                logger.info("waiting for %d of %d rollouts", len(pending), len(rollout_ids))
        return [finished[rid] for rid in rollout_ids if rid in finished], pending

    def _result_of(self, rollout: Rollout, spans: list[Span]) -> RolloutResultForAPO:
        from agl.tracer import final_reward_of

        records: list[dict[str, Any]] = self.get_adapter().adapt(spans) if spans else []
        return RolloutResultForAPO(
            rollout_id=rollout.rollout_id,
            status=rollout.status,
            final_reward=final_reward_of(rollout, spans),
            messages=[m for conv in conversations(records) for m in conv],
            records=list(records),
        )

    async def evaluate_prompt_on_batch(
        self, candidate: PromptCandidate, tasks: Sequence[Any], mode: Literal["train", "val"]
    ) -> tuple[float, list[RolloutResultForAPO]]:
        """Run ``candidate`` on ``tasks`` through the store and runners: (mean reward, results).

        The mean counts a missing reward as 0 over the rollouts that finished in time.
        """
        store = self.get_store()
        await store.update_resources(candidate.version, self._resources_for(candidate))
        rollouts = await store.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input=task, mode=mode, resources_id=candidate.version) for task in tasks]
        )
        if mode == "train":
            self._counters.train_rollouts += len(rollouts)
        else:
            self._counters.val_rollouts += len(rollouts)
        finished, unfinished = await self._wait_for([r.rollout_id for r in rollouts])
        if unfinished:
            logger.warning(
                "%d of %d %s rollouts of %s did not finish within rollout_batch_timeout=%gs; cancelling them",
                len(unfinished),
                len(rollouts),
                mode,
                candidate.version,
                self.rollout_batch_timeout,
            )
            for rollout_id in unfinished:
                try:
                    await store.update_rollout(rollout_id, status="cancelled")
                except ValueError as exc:  # finished meanwhile, or the store refused: nothing to cancel
                    logger.debug("could not cancel %s: %s", rollout_id, exc)
        spans = await store.query_spans_many([r.rollout_id for r in finished], "latest")
        results = [self._result_of(r, spans[r.rollout_id]) for r in finished]
        self._check_some_succeeded(rollouts, finished, candidate, mode)
        score = sum(r.final_reward or 0.0 for r in results) / max(1, len(results))
        return score, results

    def _check_some_succeeded(
        self, rollouts: Sequence[Rollout], finished: Sequence[Rollout], candidate: PromptCandidate, mode: str
    ) -> None:
        succeeded = sum(r.status == "succeeded" for r in finished)
        self._counters.succeeded_rollouts += succeeded
        # Slow rollouts (cut off by the batch timeout) say nothing about the agent; all of them ending unsuccessfully
        # before any ever succeeded does.
        if self._counters.succeeded_rollouts == 0 and rollouts and len(finished) == len(rollouts):
            statuses = Counter(r.status for r in finished)
            seen = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()) if n)
            raise AllRolloutsFailed(
                f"none of the {len(rollouts)} {mode} rollouts of {candidate.version} succeeded ({seen}), and none "
                "has so far: the agent cannot work. Check that its model endpoint is up and its credentials are "
                "right; the runners' log says why each attempt failed."
            )
