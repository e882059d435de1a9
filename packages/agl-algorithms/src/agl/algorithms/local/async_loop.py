"""LocalGRPO with ``max_staleness = K > 0``: the runners never wait for an update, the learner never waits
for a straggler.

Task groups (a task and its ``n`` samples) are kept waiting, ``K`` batches of them, each enqueued under the
resources published at the time. The learner takes the next batch of complete groups as soon as there is
one (:class:`~agl.algorithms.local.staleness.GroupPool`): a group any of whose calls were answered by
weights more than K versions behind the current ones is dropped, marked in the store (metadata
``{"dropped_as_stale_at": <version>}``), never deleted and never trained on; incomplete groups carry over.
Each call's weights version is the one the model server stamped on its answer and the proxy recorded (the
rollout's oldest; the version its group was enqueued under when no call recorded one). The update corrects
for the difference between the weights that generated a sample (their recorded logprobs) and the weights at
the start of the update (``correction``: decoupled PPO or truncated importance sampling); while it runs the
runners keep generating, and the model server swaps the new weights in between two generation batches.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from agl.store import LightningStore, annotate_rollout
from agl.types import Dataset, Rollout, Span, Triplet

from ._samples import batch_samples
from ._step_clock import StepClock
from .staleness import GroupPool, GroupState
from .versions import rollout_weights_version

if TYPE_CHECKING:
    from ..adapter.diagnosis import NoDataTally
    from ..credit import CreditAssignment
    from ._proxy import ServingProxy
    from ._serving import ServedModel
    from .config import GRPOConfig
    from .grpo_core import Correction, Sample

__all__ = ["AsyncTraining", "Learner"]

logger = logging.getLogger("agl.algorithms.local.grpo")

_FINISHED = ("succeeded", "failed", "cancelled")


class Learner(Protocol):
    """What the loop uses of its :class:`~agl.algorithms.local.LocalGRPO`."""

    config: GRPOConfig
    credit: CreditAssignment
    policy: Any
    tokenizer: Any
    server: ServedModel | None

    def cpu_seconds(self) -> float: ...

    def push_weights(self) -> int: ...

    async def enqueue(
        self, store: LightningStore, tasks: Sequence[Any], mode: str, resources_id: str
    ) -> list[str]: ...

    async def update(
        self, optimizer: Any, samples: list[Sample], step: int, correction: Correction = "none"
    ) -> dict[str, float]: ...

    async def publish_llm(
        self, store: LightningStore, proxy: ServingProxy, temperature: float, tag: str
    ) -> str: ...

    def episode(self, rollout: Rollout, spans: list[Span]) -> tuple[float, list[Triplet]]: ...

    async def tally_no_data(
        self, rollouts: list[Rollout], spans: list[list[Span]], step: int
    ) -> NoDataTally: ...

    def episode_metrics(
        self, rollouts: list[Rollout], episodes: list[tuple[float, list[Triplet]]]
    ) -> dict[str, float]: ...


@dataclass
class _Group:
    """One task enqueued ``n`` times under one weights version."""

    version: int
    rollout_ids: list[str]
    finished: dict[str, tuple[Rollout, list[Span]]] = field(
        default_factory=dict[str, tuple[Rollout, list[Span]]]
    )


class AsyncTraining:
    """The asynchronous training loop of one :class:`LocalGRPO` run (see the module docstring)."""

    def __init__(
        self,
        algorithm: Learner,
        store: LightningStore,
        proxy: ServingProxy,
        optimizer: Any,
        train_dataset: Dataset[Any],
        rng: random.Random,
    ) -> None:
        self.algorithm, self.store, self.proxy, self.optimizer = algorithm, store, proxy, optimizer
        self.train_dataset, self.rng = train_dataset, rng
        cfg = algorithm.config
        self.pool = GroupPool(cfg.max_staleness, cfg.prompts_per_step)
        self.groups: dict[int, _Group] = {}
        self.owner: dict[str, int] = {}  # rollout id -> group id
        self.ids = itertools.count()
        self.resources_id = ""

    @property
    def version(self) -> int:
        """The weights version the model server serves now."""
        assert self.algorithm.server is not None
        return self.algorithm.server.version

    async def start(self) -> None:
        """Publish the first weights and fill the queue."""
        await self._publish()
        await self._refill()

    async def step(self, step: int, validation: Callable[[], Awaitable[None]] | None) -> dict[str, Any]:
        """One update on the next batch of fresh complete groups; its metrics."""
        clock = StepClock(self.algorithm.cpu_seconds)
        engine_before = await asyncio.to_thread(self._engine_stats)
        validating = asyncio.ensure_future(validation()) if validation is not None else None
        try:
            batch_ids = await self._next_batch()
        except BaseException:
            if validating is not None:
                validating.cancel()
            raise
        await self._refill()  # the runners generate the next batches while this one trains
        clock.rollout_done()
        figures = await self._learn(batch_ids, step)
        waited = time.perf_counter()
        if validating is not None:
            await validating  # it samples the weights this update started from: swap after it
        waited = time.perf_counter() - waited
        if figures["samples"]:
            await asyncio.to_thread(self.algorithm.push_weights)
            await self._publish()
        clock.update_done()
        engine = await asyncio.to_thread(self._engine_stats)
        generated = engine["generated_tokens"] - engine_before["generated_tokens"]
        return {
            "step": step,
            **figures,
            "generated_tokens": generated,  # over the step, by every version of the weights served in it
            "generation_batches": engine["batches"] - engine_before["batches"],
            "tokens_per_s": generated / max(clock.step_s, 1e-9),
            "dropped_groups": self.pool.dropped_groups,
            "dropped_samples": self.pool.dropped_samples,
            **clock.figures(),
            "validation_wait_s": waited,
            "model_version": self.version,
        }

    async def finish(self) -> None:
        """Cancel what is still queued (nothing will train on it); finished rollouts stay as they are."""
        pending = self._pending()
        for rollout in await self.store.query_rollouts(
            rollout_id_in=pending, status_in=["queuing", "requeuing"]
        ):
            await self.store.update_rollout(rollout.rollout_id, status="cancelled")

    # -- pieces ------------------------------------------------------------------------------------

    def _pending(self) -> list[str]:
        """The rollouts enqueued and not yet finished."""
        return [rid for rid, gid in self.owner.items() if rid not in self.groups[gid].finished]

    def _engine_stats(self) -> dict[str, Any]:
        assert self.algorithm.server is not None
        return self.algorithm.server.stats

    async def _publish(self) -> None:
        temperature = self.algorithm.config.temperature
        self.resources_id = await self.algorithm.publish_llm(self.store, self.proxy, temperature, "train")

    async def _refill(self) -> None:
        """Keep ``K`` batches of groups waiting (queued, running or finished but not yet trained on): a batch
        enqueued now is trained on ``K`` updates later at most, so its staleness stays within ``K``."""
        cfg = self.algorithm.config
        open_groups = len(self.pool.waiting)
        target = cfg.max_staleness * cfg.prompts_per_step
        while open_groups < target:
            picked = self.rng.sample(range(len(self.train_dataset)), cfg.prompts_per_step)
            tasks = [self.train_dataset[i] for i in picked]
            each = [t for t in tasks for _ in range(cfg.n)]
            enqueued = await self.algorithm.enqueue(self.store, each, "train", self.resources_id)
            for k in range(len(tasks)):
                gid = next(self.ids)
                ids = enqueued[k * cfg.n : (k + 1) * cfg.n]
                self.groups[gid] = _Group(self.version, ids)
                self.owner.update(dict.fromkeys(ids, gid))
                self.pool.open(gid, cfg.n)
            open_groups += len(tasks)

    async def _next_batch(self) -> list[int]:
        """Wait until a batch of fresh complete groups is ready and take it (dropping the stale ones)."""
        deadline = time.monotonic() + self.algorithm.config.rollout_timeout_s
        while True:
            pick = self.pool.take(self.version)  # a full batch, or none; the stale groups in any case
            await self._drop(pick.dropped)
            if pick.batch:
                return [self._gid(g) for g in pick.batch]
            await self._refill()  # replaces what was dropped
            if time.monotonic() > deadline:
                raise TimeoutError("no batch of rollouts finished in time; are runners running?")
            await self._collect(min(deadline - time.monotonic(), 5.0))

    def _gid(self, state: GroupState) -> int:
        gid = state.group_id
        assert isinstance(gid, int)
        return gid

    async def _collect(self, timeout: float) -> None:
        """Record the rollouts that finished (with their spans and weights version) in the pool."""
        pending = self._pending()
        done = [r for r in await self.store.wait_for_rollouts(rollout_ids=pending, timeout=timeout)]
        done = [r for r in done if r.status in _FINISHED]
        if not done:
            return
        spans = await self.store.query_spans_many([r.rollout_id for r in done], "latest")
        for rollout in done:
            group = self.groups[self.owner[rollout.rollout_id]]
            trace = list(spans.get(rollout.rollout_id, []))
            group.finished[rollout.rollout_id] = (rollout, trace)
            recorded = rollout_weights_version(trace)
            self.pool.finish(self.owner[rollout.rollout_id], group.version if recorded is None else recorded)

    async def _drop(self, dropped: tuple[GroupState, ...]) -> None:
        """Mark the rollouts of groups too stale to train on (kept in the store, never deleted)."""
        for state in dropped:
            for rid in self.groups[self._gid(state)].rollout_ids:
                await annotate_rollout(self.store, rid, {"dropped_as_stale_at": self.version})
            self._forget(self._gid(state))

    def _forget(self, gid: int) -> None:
        for rid in self.groups.pop(gid).rollout_ids:
            self.owner.pop(rid, None)

    async def _learn(self, batch: list[int], step: int) -> dict[str, Any]:
        """The update on ``batch``'s groups and its figures."""
        algo, cfg = self.algorithm, self.algorithm.config
        members = [(gid, rid) for gid in batch for rid in self.groups[gid].rollout_ids]
        rollouts = [self.groups[gid].finished[rid][0] for gid, rid in members]
        traces = [self.groups[gid].finished[rid][1] for gid, rid in members]
        versions = [rollout_weights_version(t) for t in traces]
        stale = [
            self.version - (v if v is not None else self.groups[g].version)
            for (g, _), v in zip(members, versions, strict=True)
        ]
        for gid in batch:
            self._forget(gid)
        episodes = [algo.episode(r, t) for r, t in zip(rollouts, traces, strict=True)]
        no_data = await algo.tally_no_data(rollouts, traces, step)
        samples, kept_groups = batch_samples(
            episodes, [g for g, _ in members], algo.credit, behaviour_logprobs=True
        )
        correction: Correction = cfg.correction
        if correction != "none" and any(s.behaviour_logprobs is None for s in samples):
            logger.warning("step %d: some calls recorded no logprobs; this update is not corrected", step)
            correction = "none"
        stats = await algo.update(self.optimizer, samples, step, correction)
        histogram: dict[int, int] = {}
        for s in stale:
            histogram[s] = histogram.get(s, 0) + 1
        return {
            **algo.episode_metrics(rollouts, episodes),
            **no_data.as_metrics(),
            "groups_trained": kept_groups,
            "samples": len(samples),
            "loss": stats["loss"],
            "grad_norm": stats["grad_norm"],
            "update_threads": stats["threads"],
            "clip_fraction": stats["clip_fraction"],
            "is_ratio_mean": stats.get("is_ratio_mean", 1.0),
            "is_ratio_max": stats.get("is_ratio_max", 1.0),
            "staleness_max": max(stale, default=0),
            "staleness": histogram,
        }
