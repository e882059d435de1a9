"""``LocalGRPO``: reinforcement learning of a Hugging Face causal LM on CPU or one GPU, through the store.

Each step enqueues every one of ``prompts_per_step`` tasks ``n`` times, waits for the rollouts, turns
their spans into triplets with the adapter (token ids recorded by the LLM proxy, never re-tokenised
text), computes group-normalised advantages, applies a clipped policy-gradient update to the generated
tokens, swaps the new weights into the model server and publishes a new resources snapshot.

Validation of a version of the weights (before training, and every ``val_every`` steps) runs at the same
time as the next step's rollouts, which sample the same weights, and its update; that step's weight swap
waits for it. So the first step starts as soon as the model server and the proxy are up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agl.store import LightningStore
from agl.types import Dataset, EnqueueRolloutRequest, NamedResources, Rollout, Span, Triplet
from agl.types.extras import requires_extra

from ..base import Algorithm, SupportsAdapt
from ..metrics import AlgorithmMetrics
from ..utils import running_proxy
from . import lora as _lora
from ._proxy import ServingProxy, serving_proxy
from ._samples import batch_samples, pad_id
from ._serving import ServedModel
from ._step_clock import StepClock
from ._threads import ThreadChoice, with_threads
from .async_loop import AsyncTraining
from .checkpoint import (
    Checkpoint,
    restore_optimizer,
    resume_point,
    supersede_later_steps,
    take_pending,
    write_checkpoint,
    write_pending,
)
from .config import GRPOConfig

if TYPE_CHECKING:
    from ..adapter.diagnosis import NoDataTally
    from .grpo_core import Correction, Sample

__all__ = ["GRPOConfig", "LocalGRPO"]

logger = logging.getLogger(__name__)

LLM_RESOURCE = "main_llm"


_ENGINE_COUNTERS = (
    "prefills",
    "decode_steps",
    "prompt_tokens",
    "prefilled_tokens",
    "prefix_tokens",
    "prefix_computes",
)
"""The model engine's counters whose change over a step goes into the step's metrics as ``engine_<name>``
(its generated tokens, batches and busy seconds have names of their own there)."""


class LocalGRPO(Algorithm):
    """GRPO with a local model server (see the module docstring).

    Args:
        model: a model directory (``save_pretrained`` format) or hub id.
        config: a :class:`GRPOConfig`; keyword arguments override its fields.
        on_step: called with each step's metrics (a dict) from the algorithm's thread. A dict on purpose,
            not a dataclass: its keys are open (``no_data_<reason>``, ``engine_<counter>``, the asynchronous
            loop's staleness figures), and it goes as it is into ``history``, checkpoints (JSON) and
            :class:`~agl.algorithms.metrics.AlgorithmMetrics`.
        on_validation: called with each validation's metrics.
        metrics: where the step and validation figures are reported (Prometheus, and ``metrics.jsonl`` when
            it has a path); default: an :class:`~agl.algorithms.metrics.AlgorithmMetrics` without a file.

    Datasets are sequences of task inputs (anything the agent accepts). After :meth:`run`, ``history``
    holds every step's metrics and ``validations`` every evaluation.
    """

    def __init__(
        self,
        model: str | Path,
        config: GRPOConfig | None = None,
        *,
        on_step: Callable[[dict[str, Any]], None] | None = None,
        on_validation: Callable[[dict[str, Any]], None] | None = None,
        metrics: AlgorithmMetrics | None = None,
        **overrides: Any,
    ) -> None:
        base = config or GRPOConfig()
        unknown = set(overrides) - set(asdict(base))
        if unknown:
            raise TypeError(f"unknown LocalGRPO settings: {', '.join(sorted(unknown))}")
        self.config = GRPOConfig(**{**asdict(base), **overrides})
        if self.config.n < 2:
            raise ValueError("GRPO needs n >= 2 samples per task to compare them")
        if self.config.max_staleness < 0 or self.config.correction not in ("none", "decoupled", "tis"):
            raise ValueError("max_staleness must be >= 0 and correction one of 'none', 'decoupled', 'tis'")
        from ..credit import CreditAssignment

        self.credit = CreditAssignment.parse(self.config.credit, turn_discount=self.config.turn_discount)
        self.model_path = str(model)
        self.on_step = on_step
        self.on_validation = on_validation
        self.metrics = metrics if metrics is not None else AlgorithmMetrics("local_grpo")
        self.history: list[dict[str, Any]] = []
        self.validations: list[dict[str, Any]] = []
        self.server: ServedModel | None = None
        """The model server of the run (started in :meth:`run`)."""
        self.policy: Any = None
        self.tokenizer: Any = None
        self.first_step_at: float | None = None
        """``time.time()`` when the first training step began (its rollouts were enqueued)."""
        self.startup: dict[str, float] = {}
        """``time.time()`` at each start-up milestone of :meth:`run`, in order: ``run`` (called),
        ``torch`` (imported), ``model`` (loaded), ``server`` (model server up), ``proxy`` (LLM proxy up)."""
        self._update_threads = ThreadChoice(os.cpu_count() or 1)
        self._resume_step: int | None = None
        self._no_data_run: NoDataTally | None = None  # over the training steps of the run
        """The first step of a resumed run: its rollouts noted before the kill are taken, not rerun."""

    # -- main loop -----------------------------------------------------------------------------

    async def run(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> None:
        self.startup = {"run": time.time()}
        cfg = self.config
        train_dataset = self._checked(train_dataset)
        resumed = self._resume_point()
        await self._start_serving(cfg)
        self.startup["server"] = time.time()
        rng = resumed.sampler() if resumed is not None else random.Random(cfg.seed)
        store = self.get_store()
        proxy = await self._prepare_proxy()
        proxy_lifetime = contextlib.AsyncExitStack()
        await proxy_lifetime.enter_async_context(running_proxy(proxy))
        self.startup["proxy"] = time.time()
        import torch

        optimizer = torch.optim.AdamW(self.policy.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
        if resumed is not None:
            restore_optimizer(resumed, optimizer)
            self.history, self.validations = resumed.history, resumed.validations
        steps_async = (
            AsyncTraining(self, store, proxy, optimizer, train_dataset, rng) if cfg.max_staleness else None
        )
        try:
            self.first_step_at = None
            if steps_async is not None:
                await steps_async.start()
            for step in range((resumed.step if resumed is not None else 0) + 1, cfg.steps + 1):
                validation = self._validation_before(step, store, proxy, val_dataset)
                if self.first_step_at is None:
                    self.first_step_at = time.time()
                if steps_async is not None:
                    metrics = await steps_async.step(step, validation)
                else:
                    metrics = await self._step(store, proxy, optimizer, train_dataset, rng, step, validation)
                self.history.append(metrics)
                self.metrics.log("train", metrics)
                if self.on_step is not None:
                    self.on_step(metrics)
                await self._checkpoint_after(step, rng, optimizer)
            await self._validate(store, proxy, val_dataset, step=cfg.steps)
            if cfg.checkpoint_dir:
                await asyncio.to_thread(self.save, Path(cfg.checkpoint_dir) / "final")
        finally:
            if steps_async is not None:
                await steps_async.finish()
            await proxy_lifetime.aclose()
            await asyncio.to_thread(self._serving.stop)

    def _checked(self, train_dataset: Dataset[Any] | None) -> Dataset[Any]:
        """``train_dataset`` if this run can train on it (``ValueError`` says why not)."""
        cfg = self.config
        if train_dataset is None or len(train_dataset) == 0:
            raise ValueError("LocalGRPO needs a non-empty train_dataset")
        if len(train_dataset) < cfg.prompts_per_step:
            raise ValueError(
                f"train_dataset has {len(train_dataset)} tasks, fewer than prompts_per_step={cfg.prompts_per_step}"
            )
        if cfg.model_server not in ("process", "thread"):
            raise ValueError(f"model_server must be 'process' or 'thread', got {cfg.model_server!r}")
        return train_dataset

    async def _start_serving(self, cfg: GRPOConfig) -> None:
        """Start the model server (its own process loads the model while this one does)."""
        self.server = None
        starting: asyncio.Future[Any] | None = None
        if cfg.model_server == "process":  # it imports torch and loads the model while this process does
            from .server_process import ModelServerProcess

            self.server = ModelServerProcess(
                _lora.served_model_path(self.model_path),
                served_model_name=cfg.served_model_name,
                max_batch_size=cfg.max_batch_size,
                device=cfg.device,
            )
            starting = asyncio.ensure_future(asyncio.to_thread(self.server.start))
        try:
            await self._load(cfg)
            if starting is not None:
                await starting
            else:
                from .server import ModelServer

                self.server = ModelServer(
                    _lora.served_copy(self.policy),
                    self.tokenizer,
                    served_model_name=cfg.served_model_name,
                    max_batch_size=cfg.max_batch_size,
                )
                await asyncio.to_thread(self.server.start)
        except BaseException:
            if starting is not None:
                await asyncio.gather(starting, return_exceptions=True)
            if self.server is not None:
                await asyncio.to_thread(self.server.stop)
            raise
        await asyncio.to_thread(_lora.serve_resumed_adapter, self._serving, self.policy, self.model_path)

    def _validation_before(
        self, step: int, store: LightningStore, proxy: ServingProxy, val_dataset: Dataset[Any] | None
    ) -> Callable[[], Awaitable[None]] | None:
        """The validation due before ``step`` (of the weights after the previous step), if any. It overlaps
        the step's rollouts (same weights) and update; the weight swap waits for it, so validating before
        training does not delay the first step."""
        previous, every = step - 1, self.config.val_every
        due = previous == 0 or (every and previous % every == 0)
        if not due or any(v["step"] == previous for v in self.validations):  # (done before a resume)
            return None
        return functools.partial(self._validate, store, proxy, val_dataset, step=previous)

    async def _checkpoint_after(self, step: int, rng: random.Random, optimizer: Any) -> None:
        cfg = self.config
        if cfg.checkpoint_dir and cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
            checkpoint = Checkpoint(step, rng.getstate(), self.history, self.validations)
            root = Path(cfg.checkpoint_dir)
            await asyncio.to_thread(write_checkpoint, root, checkpoint, self.save, optimizer, cfg.keep_last)

    @property
    def _serving(self) -> ServedModel:
        """The model server of the run in progress."""
        if self.server is None:
            raise RuntimeError("LocalGRPO's model server runs only while run() does")
        return self.server

    async def update(
        self, optimizer: Any, samples: list[Sample], step: int, correction: Correction = "none"
    ) -> dict[str, float]:
        """One GRPO update on ``samples`` (in a worker thread, with the measured number of torch threads);
        :func:`~agl.algorithms.local.grpo_core.grpo_update`'s figures and ``threads``."""
        from .grpo_core import grpo_update

        cfg = self.config
        threads = cfg.update_threads or self._update_threads.pick(step)
        started = time.perf_counter()
        stats = await asyncio.to_thread(
            with_threads,
            threads,
            grpo_update,
            self.policy,
            optimizer,
            samples,
            pad_id=pad_id(self.tokenizer),
            clip_eps=cfg.clip_eps,
            max_grad_norm=cfg.max_grad_norm,
            mini_batches=cfg.mini_batches,
            epochs=cfg.epochs,
            correction=correction,
            is_cap=cfg.is_cap,
        )
        if stats["tokens"]:
            self._update_threads.record(threads, (time.perf_counter() - started) / stats["tokens"])
        return {**stats, "threads": threads}

    def push_weights(self) -> int:
        """Swap the policy's current weights into the model server; the new version."""
        return self._serving.update_weights(_lora.merged_state_dict(self.policy))

    def cpu_seconds(self) -> float:
        """CPU seconds used so far by this process and by the model server's, if it has its own."""
        child = self.server.process_cpu_seconds() if self.server is not None else 0.0
        return time.process_time() + child

    async def _load(self, cfg: GRPOConfig) -> None:
        """Import torch, set its threads and seed, and load the policy and its tokenizer."""
        with requires_extra("agl-algorithms", "LocalGRPO"):
            import torch
        self.startup["torch"] = time.time()
        if cfg.torch_threads is not None:
            torch.set_num_threads(cfg.torch_threads)
        torch.manual_seed(cfg.seed)  # pyright: ignore[reportUnknownMemberType]  # torch leaves its parameter unannotated
        self.policy, self.tokenizer = await asyncio.to_thread(
            _lora.load_policy, self.model_path, cfg.lora, device=cfg.device
        )
        self.startup["model"] = time.time()

    def _resume_point(self) -> Checkpoint | None:
        """With ``resume``, the newest checkpoint, whose weights the run then starts from."""
        cfg = self.config
        resumed = resume_point(cfg.checkpoint_dir, cfg.steps) if cfg.resume else None
        if resumed is not None:
            self.model_path, self._resume_step = str(resumed.path), resumed.step + 1
        return resumed

    def save(self, directory: Path) -> Path:
        """Save the current policy and tokenizer with ``save_pretrained``."""
        directory.mkdir(parents=True, exist_ok=True)
        self.policy.save_pretrained(directory)
        self.tokenizer.save_pretrained(directory)
        return directory

    # -- pieces --------------------------------------------------------------------------------

    async def _prepare_proxy(self) -> ServingProxy:
        """The LLM proxy pointed at the model server (see :func:`serving_proxy`)."""
        store = self.get_store()
        logprobs = self.config.max_staleness > 0  # the behaviour policy of the correction
        return await serving_proxy(
            self.get_llm_proxy(), store, self.config.served_model_name, self._serving.url, logprobs=logprobs
        )

    async def publish_llm(
        self, store: LightningStore, proxy: ServingProxy, temperature: float, tag: str
    ) -> str:
        """Publish the proxy as the ``main_llm`` resource sampling at ``temperature``; its resources id."""
        llm = proxy.as_resource(
            model=self.config.served_model_name,
            sampling_parameters={"temperature": temperature, "max_tokens": self.config.max_tokens},
        )
        resources: NamedResources = {LLM_RESOURCE: llm}
        update = await store.add_resources(resources)
        logger.debug(
            "published %s resources %s (model version %d)", tag, update.resources_id, self._serving.version
        )
        return update.resources_id

    async def _run_rollouts(
        self, store: LightningStore, tasks: Sequence[Any], mode: str, resources_id: str
    ) -> tuple[list[Rollout], list[list[Span]]]:
        """Enqueue the tasks, wait until all finish, and return them with their spans (in task order)."""
        return await self._collect_rollouts(store, await self.enqueue(store, tasks, mode, resources_id))

    async def enqueue(
        self, store: LightningStore, tasks: Sequence[Any], mode: str, resources_id: str
    ) -> list[str]:
        """Enqueue ``tasks`` (in ``mode``, under ``resources_id``); their rollout ids, in order."""
        requests = [EnqueueRolloutRequest(input=t, mode=mode, resources_id=resources_id) for t in tasks]  # pyright: ignore[reportArgumentType]
        enqueued = await store.enqueue_many_rollouts(requests)
        return [r.rollout_id for r in enqueued]

    async def _enqueue_step(
        self, store: LightningStore, tasks: Sequence[Any], resources_id: str, step: int
    ) -> list[str]:
        """Enqueue a training step's tasks (after a resume: take the step's finished rollouts from before
        the kill), and note their ids with the checkpoints."""
        root = Path(self.config.checkpoint_dir) if self.config.checkpoint_dir else None
        ids = None
        if root is not None and step == self._resume_step:
            await supersede_later_steps(store, root, step)
            ids = await take_pending(store, root, step, tasks, resources_id)
        if ids is None:
            ids = await self.enqueue(store, tasks, "train", resources_id)
        if root is not None:
            await asyncio.to_thread(write_pending, root, step, ids)
        return ids

    async def _collect_rollouts(
        self, store: LightningStore, ids: list[str]
    ) -> tuple[list[Rollout], list[list[Span]]]:
        """Wait until the rollouts ``ids`` finish; return them with their spans (in order)."""
        finished: dict[str, Rollout] = {}
        deadline = time.monotonic() + self.config.rollout_timeout_s
        while len(finished) < len(ids):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(
                    f"{len(ids) - len(finished)} of {len(ids)} rollouts did not finish within "
                    f"{self.config.rollout_timeout_s:.0f}s; are runners running?"
                )
            pending = [i for i in ids if i not in finished]
            for rollout in await store.wait_for_rollouts(rollout_ids=pending, timeout=min(remaining, 5.0)):
                finished[rollout.rollout_id] = rollout
        # The wait brought each with its latest attempt, where the runner recorded the final reward; the
        # spans of the whole batch come in one query (one request).
        rollouts = [finished[i] for i in ids]
        spans = await store.query_spans_many(ids, "latest")
        return rollouts, [spans[i] for i in ids]

    def _adapter(self) -> SupportsAdapt:
        if self.has_adapter():
            return self.get_adapter()
        from ..adapter import LlmProxyTraceToTriplet

        self._default_adapter = getattr(self, "_default_adapter", None) or LlmProxyTraceToTriplet()
        return self._default_adapter

    def episode(self, rollout: Rollout, spans: list[Span]) -> tuple[float, list[Triplet]]:
        """A finished rollout's reward (0 unless it succeeded) and triplets."""
        from agl.tracer import final_reward_of

        triplets: list[Triplet] = list(self._adapter().adapt(spans)) if spans else []
        reward = final_reward_of(rollout, spans)
        if reward is None:
            rewards = [t.reward for t in triplets if t.reward is not None]
            reward = rewards[-1] if rewards else 0.0
        if rollout.status != "succeeded":
            reward = 0.0
        return float(reward), triplets

    async def tally_no_data(self, rollouts: list[Rollout], spans: list[list[Span]], step: int) -> NoDataTally:
        """Why the step's rollouts without training data have none (logged with the fixes, and noted on
        each such rollout in the store for the dashboard)."""
        from ..adapter.diagnosis import NoDataTally, diagnose, mark_no_data

        tally = NoDataTally()
        self._no_data_run = self._no_data_run or NoDataTally()
        marks: list[Awaitable[None]] = []
        for rollout, trace in zip(rollouts, spans, strict=True):
            reason = diagnose(rollout.status, trace)
            tally.add(reason)
            self._no_data_run.add(reason)
            if reason is not None:
                marks.append(mark_no_data(self.get_store(), rollout, reason))
        await asyncio.gather(*marks)
        if (message := tally.message(with_fixes=True)) is not None:
            logger.warning("step %d: %s", step, message)
        return tally

    def training_data_report(self) -> str | None:
        return None if self._no_data_run is None else self._no_data_run.message(with_fixes=True)

    def episode_metrics(
        self, rollouts: list[Rollout], episodes: list[tuple[float, list[Triplet]]]
    ) -> dict[str, float]:
        """``reward`` (mean), ``accuracy`` (at least ``success_threshold``), ``tool_use`` and ``failed`` of a
        batch of finished rollouts and their episodes (:meth:`episode`)."""
        rewards = [e[0] for e in episodes]
        return {
            "reward": sum(rewards) / len(rewards),
            "accuracy": sum(r >= self.config.success_threshold for r in rewards) / len(rewards),
            "tool_use": sum(self.tool_used(t) for _, t in episodes) / len(episodes),
            "failed": sum(r.status != "succeeded" for r in rollouts),
        }

    def tool_used(self, triplets: list[Triplet]) -> bool:
        """Whether an episode's responses use the tool (``tool_marker``)."""
        marker = self.config.tool_marker
        return any(marker in self.tokenizer.decode(t.response["token_ids"]) for t in triplets)

    async def _validate(
        self, store: LightningStore, proxy: ServingProxy, val_dataset: Dataset[Any] | None, step: int
    ) -> None:
        if val_dataset is None or len(val_dataset) == 0:
            return
        started = time.perf_counter()
        resources_id = await self.publish_llm(store, proxy, self.config.val_temperature, "validation")
        tasks = [val_dataset[i] for i in range(len(val_dataset))]
        rollouts, spans = await self._run_rollouts(store, tasks, "val", resources_id)
        episodes = [self.episode(r, s) for r, s in zip(rollouts, spans, strict=False)]
        metrics = {
            "step": step,
            **self.episode_metrics(rollouts, episodes),
            "seconds": time.perf_counter() - started,
        }
        self.validations.append(metrics)
        self.metrics.log("validation", metrics)
        logger.info("validation at step %d: %s", step, metrics)
        if self.on_validation is not None:
            self.on_validation(metrics)

    async def _step(
        self,
        store: LightningStore,
        proxy: ServingProxy,
        optimizer: Any,
        train_dataset: Dataset[Any],
        rng: random.Random,
        step: int,
        validation: Callable[[], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:

        cfg = self.config
        clock = StepClock(self.cpu_seconds)
        resources_id = await self.publish_llm(store, proxy, cfg.temperature, "train")
        picked = rng.sample(range(len(train_dataset)), cfg.prompts_per_step)
        tasks = [train_dataset[i] for i in picked for _ in range(cfg.n)]
        groups = [i for i in range(cfg.prompts_per_step) for _ in range(cfg.n)]
        engine_before = await asyncio.to_thread(lambda: self._serving.stats)
        ids = await self._enqueue_step(store, tasks, resources_id, step)
        validating = asyncio.ensure_future(validation()) if validation is not None else None
        try:
            rollouts, spans = await self._collect_rollouts(store, ids)
        except BaseException:
            if validating is not None:
                validating.cancel()
            raise
        clock.rollout_done()
        engine_now = await asyncio.to_thread(lambda: self._serving.stats)
        engine = {
            k: engine_now[k] - engine_before[k]
            for k in ("generated_tokens", "batches", "busy_s", *_ENGINE_COUNTERS)
        }
        generated, generation_batches, generation_s = (
            engine["generated_tokens"],
            engine["batches"],
            engine["busy_s"],
        )

        episodes = [self.episode(r, s) for r, s in zip(rollouts, spans, strict=False)]
        no_data = await self.tally_no_data(rollouts, spans, step)
        samples, kept_groups = batch_samples(episodes, groups, self.credit)
        stats = await self.update(optimizer, samples, step)
        threads = int(stats["threads"])
        waited = time.perf_counter()
        if validating is not None:
            await validating  # it samples the weights this step started from: swap after it
        waited = time.perf_counter() - waited
        if samples:
            await asyncio.to_thread(self.push_weights)  # (the LoRA merge too: off the event loop)
        clock.update_done()
        return {
            "step": step,
            **self.episode_metrics(rollouts, episodes),
            **no_data.as_metrics(),
            "groups_trained": kept_groups,
            "samples": len(samples),
            "loss": stats["loss"],
            "grad_norm": stats["grad_norm"],
            "generated_tokens": generated,
            "generation_batches": generation_batches,
            "generation_s": generation_s,
            "tokens_per_s": generated / max(clock.rollout_s, 1e-9),
            **{f"engine_{k}": engine[k] for k in _ENGINE_COUNTERS},
            # wall seconds, and CPU seconds of this whole process (every thread: runners, proxy, store, model
            # server) and of the model server's process if it has one
            **clock.figures(),
            "validation_wait_s": waited,
            "update_threads": threads,
            "model_version": self._serving.version,
        }
