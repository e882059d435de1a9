"""APO, automatic prompt optimisation: beam search over prompt templates driven by textual gradients.

Each round, for every parent prompt in the beam, APO runs the agent on a few training tasks (through
the store and the runners), shows the transcripts to a critic model that writes a critique (the
"textual gradient"), and asks an editor model to rewrite the prompt accordingly. Parents and
children are scored on one validation batch and the best ``beam_width`` survive; the leader is
scored on the whole validation set and the best prompt ever seen is kept and, at the end,
published to the store as the latest resources.

This module holds the search (rounds, beam, history); the scoring of candidates by rollouts is in
``_scoring.py``, the critique and edit LLM calls that make children in ``_editing.py``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
import warnings
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from agl.types import Dataset, NamedResources, PromptTemplate

from ..base import SupportsLLMProxy
from ..metrics import AlgorithmMetrics
from ..utils import batch_iter_over_dataset, with_llm_proxy
from ._beam import PromptCandidate, select_parents, top_candidates
from ._editing import PromptEditing
from ._history import APORoundSummary, RoundCounters, templates_json
from ._llm import RetryPolicy
from ._prompts import poml_module
from ._scoring import gather_owned

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["APO", "APORoundSummary"]

logger = logging.getLogger("agl.algorithms.apo")

T_task = TypeVar("T_task")


class APO(PromptEditing, Generic[T_task]):
    """Automatic prompt optimisation by textual gradients and beam search.

    Args:
        async_openai_client: an ``openai.AsyncOpenAI`` (any OpenAI-compatible endpoint) for the
            critic and editor calls; ``None`` builds one from ``OPENAI_API_KEY``/``OPENAI_BASE_URL``
            for each run, closed when the run ends (a client passed here stays the caller's to close).
        gradient_model: model that writes the critique.
        apply_edit_model: model that rewrites the prompt.
        diversity_temperature: sampling temperature of both calls.
        gradient_batch_size: training tasks run per critique (all of them are shown to the critic).
        val_batch_size: validation tasks per beam-selection step.
        beam_width: prompts kept per round, and parents drawn per round.
        branch_factor: children generated per parent.
        beam_rounds: number of rounds.
        rollout_batch_timeout: seconds to wait for one batch of rollouts; those still running then
            are cancelled and left out of the score.
        run_initial_validation: score the seed on the whole validation set first.
        prompt_names: which prompt templates of the initial resources to optimise: ``None`` for the
            first one, or one name or several (each child edits one of them, in turn, critiqued
            with the LLM calls that used it).
        retry_policy: retries of critique and edit calls.
        llm_timeout: seconds before one critique or edit request times out.
        max_concurrent_llm_calls: critique and edit requests in flight at once.
        seed: seed of APO's random choices (batches, parents, prompt variants).
        history_path: append every event (candidate, score, skip, round) to this JSON-lines file.
        on_round_end: called with each :class:`APORoundSummary` as soon as the round ends.
        metrics: where each round's scores are reported (Prometheus, and a JSON-lines file when it has a path);
            default: an :class:`~agl.algorithms.metrics.AlgorithmMetrics` without a file.
        poml_trace_dir: write POML's traces of the rendered critique and edit prompts here.
        _poml_trace: the reference's debugging flag, deprecated: ``True`` means ``poml_trace_dir="pomltrace"``.
    """

    def __init__(
        self,
        async_openai_client: AsyncOpenAI | None = None,
        *,
        gradient_model: str = "gpt-5-mini",
        apply_edit_model: str = "gpt-4.1-mini",
        diversity_temperature: float = 1.0,
        gradient_batch_size: int = 4,
        val_batch_size: int = 16,
        beam_width: int = 4,
        branch_factor: int = 4,
        beam_rounds: int = 3,
        rollout_batch_timeout: float = 3600.0,
        run_initial_validation: bool = True,
        prompt_names: str | Sequence[str] | None = None,
        retry_policy: RetryPolicy | None = None,
        llm_timeout: float = 120.0,
        max_concurrent_llm_calls: int = 8,
        seed: int | None = None,
        history_path: str | Path | None = None,
        on_round_end: Callable[[APORoundSummary], None] | None = None,
        poml_trace_dir: str | Path | None = None,
        metrics: AlgorithmMetrics | None = None,
        _poml_trace: bool | None = None,
    ) -> None:
        for name, value in [
            ("gradient_batch_size", gradient_batch_size),
            ("val_batch_size", val_batch_size),
            ("beam_width", beam_width),
            ("branch_factor", branch_factor),
            ("max_concurrent_llm_calls", max_concurrent_llm_calls),
        ]:
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        if beam_rounds < 0:
            raise ValueError(f"beam_rounds must be 0 or more, got {beam_rounds}")
        if rollout_batch_timeout <= 0:
            raise ValueError(f"rollout_batch_timeout must be positive, got {rollout_batch_timeout}")
        self._client = async_openai_client
        self._owns_client = False  # made by APO from the environment: closed at the end of each run
        self.gradient_model = gradient_model
        self.apply_edit_model = apply_edit_model
        self.diversity_temperature = diversity_temperature
        self.gradient_batch_size = gradient_batch_size
        self.val_batch_size = val_batch_size
        self.beam_width = beam_width
        self.branch_factor = branch_factor
        self.beam_rounds = beam_rounds
        self.rollout_batch_timeout = rollout_batch_timeout
        self.run_initial_validation = run_initial_validation
        self.prompt_names = [prompt_names] if isinstance(prompt_names, str) else prompt_names
        self.retry_policy = retry_policy or RetryPolicy()
        self.llm_timeout = llm_timeout
        self.max_concurrent_llm_calls = max_concurrent_llm_calls
        self.seed = seed
        self.history_path = Path(history_path) if history_path is not None else None
        self.on_round_end = on_round_end
        self.poml_trace_dir = _poml_trace_dir(poml_trace_dir, _poml_trace)
        self.metrics = metrics if metrics is not None else AlgorithmMetrics("apo")

        self.history: list[dict[str, Any]] = []
        """Every event of the last run, as written to ``history_path``."""
        self.rounds: list[APORoundSummary] = []
        self._best: PromptCandidate | None = None
        self._version_counter = 0
        self._resources: NamedResources = {}
        self._names: list[str] = []
        self._rng = random.Random(seed)
        self._counters = RoundCounters()
        self._llm_slots: asyncio.Semaphore | None = None

    # -- results -------------------------------------------------------------------------------

    def get_best_candidate(self) -> PromptCandidate:
        """The best candidate found (its templates, version and full-validation score)."""
        if self._best is None:
            raise ValueError(
                "No best prompt yet: APO.get_best_prompt() is available after run() (or Trainer.fit)"
            )
        return self._best

    def get_best_prompt(self, name: str | None = None) -> PromptTemplate:
        """The best prompt template found: the one named ``name``, or the first optimised one."""
        best = self.get_best_candidate()
        if name is None:
            return best.prompt_template
        if name not in best.templates:
            raise ValueError(f"{name!r} is not an optimised prompt; optimised: {', '.join(best.templates)}")
        return best.templates[name]

    def get_best_prompts(self) -> dict[str, PromptTemplate]:
        """Every optimised prompt template of the best candidate, by resource name."""
        return dict(self.get_best_candidate().templates)

    # -- checks --------------------------------------------------------------------------------

    def _check_inputs(self, train_dataset: Dataset[Any] | None, val_dataset: Dataset[Any] | None) -> None:
        missing = [
            name
            for name, data in [("train_dataset", train_dataset), ("val_dataset", val_dataset)]
            if data is None or len(data) == 0
        ]
        if missing:
            raise ValueError(
                f"APO needs both a train_dataset (to critique prompts) and a val_dataset (to score them); "
                f"missing or empty: {', '.join(missing)}"
            )
        resources = self.get_initial_resources()
        if not resources:
            raise ValueError(
                "APO needs initial resources holding the PromptTemplate to optimise, e.g. "
                "Trainer(initial_resources={'prompt_template': PromptTemplate(template=..., engine='f-string')})"
            )
        templates = [name for name, r in resources.items() if isinstance(r, PromptTemplate)]
        if not templates:
            raise ValueError(
                f"APO found no PromptTemplate in the initial resources (names: {', '.join(resources)}); "
                "add the prompt to optimise as a PromptTemplate"
            )
        names = list(self.prompt_names) if self.prompt_names is not None else templates[:1]
        if not names:
            raise ValueError("prompt_names is empty: name at least one PromptTemplate to optimise")
        for name in names:
            if name not in resources:
                raise ValueError(
                    f"prompt_names has {name!r}, which is not in the initial resources ({', '.join(resources)})"
                )
            if not isinstance(resources[name], PromptTemplate):
                raise ValueError(
                    f"initial resource {name!r} is a {type(resources[name]).__name__}, not a PromptTemplate; "
                    f"prompt templates: {', '.join(templates)}"
                )
        from ..adapter import TraceToMessages

        adapter = self.get_adapter() if self.has_adapter() else None
        if not isinstance(adapter, TraceToMessages):
            raise ValueError(
                "APO reads the agent's LLM calls as messages: use adapter=TraceToMessages() "
                f"(from agl.algorithms.adapter), got {type(adapter).__name__ if adapter is not None else 'no adapter'}"
            )
        self._resources = dict(resources)
        self._names = list(dict.fromkeys(names))

    # -- versions and children ------------------------------------------------------------------

    def _next_version(self) -> str:
        version = f"v{self._version_counter}"
        self._version_counter += 1
        return version

    def _adopt_children(
        self,
        round_no: int,
        jobs: list[tuple[PromptCandidate, str]],
        outcomes: Sequence[PromptCandidate | tuple[str, str | None]],
    ) -> list[PromptCandidate]:
        """Version the children in the order they were asked for (not the order they finished) and log them."""
        children: list[PromptCandidate] = []
        for (parent, name), outcome in zip(jobs, outcomes, strict=True):
            if not isinstance(outcome, PromptCandidate):
                reason, critique = outcome
                self._counters.skipped += 1
                logger.warning(
                    "round %d: skipped a child of %s (%s): %s", round_no, parent.version, name, reason
                )
                self._record(
                    {
                        "event": "skipped",
                        "round": round_no,
                        "parent": parent.version,
                        "edited": name,
                        "reason": reason,
                        "critique": critique,
                    }
                )
                continue
            outcome.version = self._next_version()
            children.append(outcome)
            self._record(
                {
                    "event": "candidate",
                    "round": round_no,
                    "version": outcome.version,
                    "parent": parent.version,
                    "edited": name,
                    "critique": outcome.critique,
                    "templates": templates_json(outcome),
                }
            )
        return children

    # -- history -------------------------------------------------------------------------------

    def _record(self, event: dict[str, Any]) -> None:
        event = {"time": time.time(), **event}
        self.history.append(event)
        if self.history_path is not None:
            self.history_path.parent.mkdir(parents=True, exist_ok=True)
            with self.history_path.open("a", encoding="utf-8") as fh:
                fh.write(json.dumps(event, default=str) + "\n")

    def _end_round(
        self,
        round_no: int,
        scored: Sequence[PromptCandidate],
        beam: Sequence[PromptCandidate],
        leader_score: float | None,
        started: float,
    ) -> None:
        best = self.get_best_candidate()
        counters = self._counters
        summary = APORoundSummary(
            round=round_no,
            candidates=[
                {"version": c.version, "parent": c.parent, "edited": c.edited, "score": c.score}
                for c in scored
            ],
            beam=[c.version for c in beam],
            leader=beam[0].version if beam else None,
            leader_val_score=leader_score,
            best_version=best.version,
            best_score=best.full_val_score if best.full_val_score is not None else float("-inf"),
            train_rollouts=counters.train_rollouts,
            val_rollouts=counters.val_rollouts,
            llm_requests=counters.stats.requests,
            llm_calls_ok=counters.stats.succeeded,
            children_skipped=counters.skipped,
            seconds=round(time.monotonic() - started, 3),
        )
        self.rounds.append(summary)
        self._record({"event": "round", **asdict(summary)})
        self.metrics.log("round", asdict(summary))
        self._counters = RoundCounters()
        logger.info(
            "round %d: beam %s, leader %s scores %s on the full val set; best so far %s (%.3f)",
            round_no,
            summary.beam,
            summary.leader,
            leader_score,
            best.version,
            summary.best_score,
        )
        if self.on_round_end is not None:
            self.on_round_end(summary)

    # -- the search ----------------------------------------------------------------------------

    async def run(
        self, train_dataset: Dataset[Any] | None = None, val_dataset: Dataset[Any] | None = None
    ) -> None:
        """Optimise the prompt(s). ``ValueError`` when the prompt, the adapter or a dataset is missing."""
        self._check_inputs(train_dataset, val_dataset)
        assert train_dataset is not None and val_dataset is not None
        await self._run(train_dataset, val_dataset)

    @with_llm_proxy()
    async def _run(self, llm_proxy: SupportsLLMProxy | None, train: Dataset[Any], val: Dataset[Any]) -> None:
        self.history, self.rounds = [], []
        self._best = None
        self._version_counter = 0
        self._rng = random.Random(self.seed)
        self._counters = RoundCounters()
        self._llm_slots = asyncio.Semaphore(self.max_concurrent_llm_calls)
        if self.poml_trace_dir is not None:
            poml_module("APO(poml_trace_dir=...)").set_trace(True, trace_dir=self.poml_trace_dir)
        try:
            await self._search(train, val)
        finally:
            if self.poml_trace_dir is not None:
                poml_module("APO(poml_trace_dir=...)").set_trace(False)
            if self._owns_client and self._client is not None:  # its connections belong to this run's loop
                client, self._client, self._owns_client = self._client, None, False
                await client.close()
        best = self.get_best_candidate()
        await self.get_store().update_resources(best.version, self._resources_for(best))
        self._record({"event": "published", "version": best.version, "score": best.full_val_score})
        logger.info(
            "published the best prompt %s (val score %s) as the latest resources",
            best.version,
            best.full_val_score,
        )

    async def _search(self, train: Dataset[Any], val: Dataset[Any]) -> None:
        rng = self._rng
        train_batches: Iterator[list[Any]] = batch_iter_over_dataset(train, self.gradient_batch_size, rng=rng)
        val_batches: Iterator[list[Any]] = batch_iter_over_dataset(val, self.val_batch_size, rng=rng)
        val_all = [val[i] for i in range(len(val))]

        seed_templates = {name: self._resources[name] for name in self._names}
        seed = PromptCandidate(version=self._next_version(), templates=seed_templates)  # pyright: ignore[reportArgumentType]
        self._record(
            {
                "event": "candidate",
                "round": 0,
                "version": seed.version,
                "parent": None,
                "edited": None,
                "critique": None,
                "templates": templates_json(seed),
            }
        )
        self._best = seed
        started = time.monotonic()
        if self.run_initial_validation:
            seed.full_val_score, _ = await self.evaluate_prompt_on_batch(seed, val_all, "val")
            seed.score = seed.full_val_score
            self._record(
                {
                    "event": "score",
                    "round": 0,
                    "version": seed.version,
                    "split": "val_full",
                    "score": seed.full_val_score,
                }
            )
            self._end_round(0, [seed], [seed], seed.full_val_score, started)
        beam = [seed]

        for round_no in range(1, self.beam_rounds + 1):
            started = time.monotonic()
            parents = select_parents(beam, self.beam_width, rng)
            jobs: list[tuple[PromptCandidate, str]] = []
            work: list[Awaitable[PromptCandidate | tuple[str, str | None]]] = []
            for i, parent in enumerate(parents):
                for j in range(self.branch_factor):
                    name = self._names[(i * self.branch_factor + j) % len(self._names)]
                    jobs.append((parent, name))
                    child_rng = random.Random(rng.random())
                    work.append(self._make_child(parent, name, next(train_batches), round_no, child_rng))
            children = self._adopt_children(round_no, jobs, await gather_owned(work))

            candidates = [*beam, *children]
            val_batch = next(val_batches)
            scores = await gather_owned(
                [self.evaluate_prompt_on_batch(c, val_batch, "val") for c in candidates]
            )
            for candidate, (score, _) in zip(candidates, scores, strict=True):
                candidate.score = score
                self._record(
                    {
                        "event": "score",
                        "round": round_no,
                        "version": candidate.version,
                        "split": "val_batch",
                        "score": score,
                    }
                )
            beam = top_candidates(candidates, self.beam_width)

            leader = beam[0]
            leader_score, _ = await self.evaluate_prompt_on_batch(leader, val_all, "val")
            leader.full_val_score = leader_score
            self._record(
                {
                    "event": "score",
                    "round": round_no,
                    "version": leader.version,
                    "split": "val_full",
                    "score": leader_score,
                }
            )
            best = self.get_best_candidate()
            if best.full_val_score is None or leader_score > best.full_val_score:
                self._best = replace(leader)  # a snapshot: the leader's scores change in later rounds
            self._end_round(round_no, candidates, beam, leader_score, started)


def _poml_trace_dir(poml_trace_dir: str | Path | None, poml_trace: bool | None) -> str | Path | None:
    """``poml_trace_dir``, or what the reference's ``_poml_trace`` flag meant (tracing into ``pomltrace``)."""
    if poml_trace is None:
        return poml_trace_dir
    if poml_trace and poml_trace_dir is not None:
        raise ValueError("APO takes poml_trace_dir=... or the deprecated _poml_trace=True, not both")
    spelling = (
        "poml_trace_dir='pomltrace'"
        if poml_trace
        else "nothing (tracing is off unless poml_trace_dir is given)"
    )
    warnings.warn(
        f"APO(_poml_trace=...) is deprecated: pass {spelling} (same meaning)",
        DeprecationWarning,
        stacklevel=3,
    )
    return "pomltrace" if poml_trace else poml_trace_dir
