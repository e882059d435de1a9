"""``FastAlgorithm`` (what ``Trainer.dev`` accepts) and ``Baseline``: stream a dataset through the runners."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agl.types import (
    AttemptedRollout,
    Dataset,
    EnqueueRolloutRequest,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    Span,
    StatusCounts,
    Unset,
)
from agl.types.semconv import FINAL_REWARD_METADATA_KEY

from .base import Algorithm
from .utils import running_proxy

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["FINAL_REWARD_METADATA_KEY", "Baseline", "BaselineSummary", "FastAlgorithm"]

logger = logging.getLogger(__name__)

SpanVerbosity = Literal["keys", "key_values", "none"]


class FastAlgorithm(Algorithm):
    """Marker base class of algorithms cheap enough for :meth:`Trainer.dev` (smoke tests, debugging)."""


@dataclass
class BaselineSummary(StatusCounts):
    """What came back from one :class:`Baseline` run."""

    total: int = 0
    by_status: dict[str, int] = field(default_factory=dict[str, int])
    rewards: list[float] = field(default_factory=list[float])
    duration: float = 0.0

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    def __str__(self) -> str:
        mean = "n/a" if self.mean_reward is None else f"{self.mean_reward:.4f}"
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.by_status.items())) or "none"
        rate = self.total / self.duration if self.duration > 0 else 0.0
        return (
            f"{self.total} rollouts in {self.duration:.2f}s ({rate:.1f}/s): {statuses}; "
            f"mean reward {mean} over {len(self.rewards)} rewarded"
        )


class Baseline(FastAlgorithm):
    """Enqueue every item of the datasets, wait for the rollouts to finish and log what came back.

    Args:
        n_epochs: passes over the datasets.
        max_in_flight: at most this many unfinished rollouts at a time (``None``: enqueue everything at once).
        max_queue_length: the reference's limit: enqueue more only while fewer than this many rollouts wait
            in the queue (``queuing``/``requeuing``; running ones do not count). ``None``: no limit. Both
            limits may be combined.
        polling_interval: longest wait for results before progress is logged again (the store wakes the
            wait as soon as everything asked for is finished).
        span_verbosity: what each rollout's log line shows of its spans: names (``keys``), names and
            attributes (``key_values``) or nothing (``none``). Per-rollout logs are at INFO level.
        rollout_config: retry and timeout policy given to every rollout.
        train_split: accepted for compatibility with the reference; must lie in (0, 1); unused.

    After :meth:`run`, :attr:`summary` holds the counts by status and the rewards.
    """

    def __init__(
        self,
        *,
        n_epochs: int = 1,
        max_in_flight: int | None = None,
        max_queue_length: int | None = None,
        polling_interval: float = 1.0,
        span_verbosity: SpanVerbosity = "keys",
        rollout_config: RolloutConfig | None = None,
        train_split: float = 0.5,
        enqueue_batch_size: int = 256,
    ) -> None:
        if n_epochs < 1:
            raise ValueError(f"n_epochs must be >= 1, got {n_epochs}")
        if not 0 < train_split < 1:
            raise ValueError(f"train_split must lie strictly between 0 and 1, got {train_split}")
        if max_in_flight is not None and max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1 or None, got {max_in_flight}")
        if max_queue_length is not None and max_queue_length < 1:
            raise ValueError(f"max_queue_length must be >= 1 or None, got {max_queue_length}")
        if polling_interval <= 0:
            raise ValueError(f"polling_interval must be > 0, got {polling_interval}")
        if span_verbosity not in ("keys", "key_values", "none"):
            raise ValueError(f"span_verbosity must be 'keys', 'key_values' or 'none', got {span_verbosity!r}")
        self.n_epochs = n_epochs
        self.max_in_flight = max_in_flight
        self.max_queue_length = max_queue_length
        self.polling_interval = polling_interval
        self.span_verbosity: SpanVerbosity = span_verbosity
        self.rollout_config = rollout_config
        self.train_split = train_split
        self.enqueue_batch_size = max(1, enqueue_batch_size)
        self.summary = BaselineSummary()

    async def run(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> None:
        store = self.get_store()
        work: list[tuple[Any, RolloutMode]] = []
        sources: tuple[tuple[Dataset[Any] | None, RolloutMode], ...] = (
            (train_dataset, "train"),
            (val_dataset, "val"),
        )
        for dataset, mode in sources:
            if dataset is not None:
                work.extend((dataset[i], mode) for i in range(len(dataset)))
        self.summary = BaselineSummary()
        if not work:
            logger.error("Baseline has nothing to do: both train_dataset and val_dataset are empty or None")
            return
        async with running_proxy(self.get_llm_proxy()):
            resources_id: str | None = None
            initial = self.get_initial_resources()
            if initial:
                resources_id = (await store.update_resources("default", initial)).resources_id
            started = time.monotonic()
            for epoch in range(self.n_epochs):
                logger.info("Baseline epoch %d/%d: %d rollouts", epoch + 1, self.n_epochs, len(work))
                await self._run_epoch(store, work, resources_id)
            self.summary.duration = time.monotonic() - started
        logger.info("Baseline finished: %s", self.summary)

    async def _run_epoch(
        self, store: LightningStore, work: Sequence[tuple[Any, RolloutMode]], resources_id: str | None
    ) -> None:
        pending: dict[str, Rollout] = {}
        next_item = 0
        while next_item < len(work) or pending:
            room = len(work) - next_item
            if self.max_in_flight is not None:
                room = min(room, self.max_in_flight - len(pending))
            queue_full = False
            if self.max_queue_length is not None and room > 0 and pending:
                waiting = await store.query_rollouts(
                    status_in=["queuing", "requeuing"], rollout_id_in=list(pending)
                )
                room = min(room, self.max_queue_length - len(waiting))
                queue_full = room <= 0
            elif self.max_queue_length is not None:
                room = min(room, self.max_queue_length)
            while room > 0:
                chunk = work[next_item : next_item + min(room, self.enqueue_batch_size)]
                requests = [
                    EnqueueRolloutRequest(
                        input=item, mode=mode, resources_id=resources_id, config=self.rollout_config
                    )
                    for item, mode in chunk
                ]
                for rollout in await store.enqueue_many_rollouts(requests):
                    pending[rollout.rollout_id] = rollout
                next_item += len(chunk)
                room -= len(chunk)
            # A full queue frees up when a rollout starts running, which no wait reports: look again soon.
            timeout = min(self.polling_interval, 0.05) if queue_full else self.polling_interval
            finished = await store.wait_for_rollouts(rollout_ids=list(pending), timeout=timeout)
            # The wait brings each with its latest attempt (and its reward); one query more the spans of
            # those that need them.
            rollouts = [r for r in finished if pending.pop(r.rollout_id, None) is not None]
            if rollouts:
                wanted = [r.rollout_id for r in rollouts if self._needs_spans(r)]
                spans = await store.query_spans_many(wanted, "latest") if wanted else {}
                for rollout in rollouts:
                    await self._harvest(store, rollout, spans.get(rollout.rollout_id, []))
            if finished:
                logger.debug("Baseline: %d finished, %d pending", len(finished), len(pending))

    def _needs_spans(self, rollout: Rollout) -> bool:
        """Whether :meth:`_harvest` reads the spans: to log them, or for a reward the runner did not record."""
        attempt = rollout.attempt if isinstance(rollout, AttemptedRollout) else None
        if attempt is None:
            return False
        if logger.isEnabledFor(logging.INFO):
            return True
        from agl.tracer import recorded_final_reward

        return isinstance(recorded_final_reward(attempt), Unset)

    async def _harvest(self, store: LightningStore, rollout: Rollout, spans: list[Span]) -> None:
        """Count a finished rollout and, at INFO level, log its attempts and spans (of its latest attempt)."""
        summary = self.summary
        summary.total += 1
        status: RolloutStatus = rollout.status
        summary.by_status[status] = summary.by_status.get(status, 0) + 1
        attempt = rollout.attempt if isinstance(rollout, AttemptedRollout) else None
        from agl.tracer import final_reward_of

        verbose = logger.isEnabledFor(logging.INFO)
        # The runner recorded the final reward in the attempt; spans only for attempts written without it.
        reward = final_reward_of(attempt, spans) if attempt is not None else None
        if isinstance(reward, (int, float)) and not isinstance(reward, bool):
            summary.rewards.append(float(reward))
        if not verbose:
            return
        duration = (rollout.end_time or time.time()) - rollout.start_time
        attempts = await store.query_attempts(rollout.rollout_id)
        attempt_text = ", ".join(
            f"#{a.sequence_id} {a.attempt_id} {a.status} on {a.worker_id}" for a in attempts
        )
        if self.span_verbosity == "keys":
            span_text = ", ".join(s.name for s in spans)
        elif self.span_verbosity == "key_values":
            span_text = "; ".join(f"{s.name} {s.attributes}" for s in spans)
        else:
            span_text = f"{len(spans)} spans"
        logger.info(
            "Rollout %s (%s) %s in %.3fs, reward %s; attempts: %s; spans: %s",
            rollout.rollout_id,
            rollout.mode,
            status,
            duration,
            reward,
            attempt_text,
            span_text,
        )
        if self.has_adapter() and spans:
            try:
                logger.info("Rollout %s adapted: %s", rollout.rollout_id, self.get_adapter().adapt(spans))
            except Exception:
                logger.exception("Adapter failed on the spans of rollout %s", rollout.rollout_id)
