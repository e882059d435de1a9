"""``AglBridgeAgentLoop``: verl's agent loop that runs one store rollout per verl sample.

verl's V1 agent-loop worker calls :meth:`AglBridgeAgentLoop.run` once per (task, session). The loop
enqueues the task (the row's ``agl_task``) as a rollout, waits until a runner has executed the agent
(whose LLM calls went through the LLM proxy to vLLM, recording token ids), reads the spans of the latest
attempt, adapts them to triplets and converts those (:mod:`.convert`) to verl ``AgentLoopOutput`` s:
one per triplet (``transition``) or per merged trajectory (``trajectory``).

A training rollout without a usable sample raises :class:`NoTrainingSample` (logged with why): verl then
marks the group ``failure`` and, with ``trainer.v1.sampler.sync_refill_failed_groups`` (on by default),
replaces a group left without any trajectory by a fresh prompt. An empty ``[]`` would instead be a
"finished" group verl samples (and a whole batch of them stops the run). A validation rollout without a
sample gives one placeholder output (nothing generated, the fill-in reward), so it counts as a miss.

Every output carries ``min_global_steps`` / ``max_global_steps`` (the oldest and newest weight versions
that served its rollout's calls, as verl's own ``LLMServerClient`` sets them, for verl's metrics: recorded
on the spans by agl's model server, else the version when the prompt was submitted) and, when
``rollout.calculate_log_probs`` is on, ``response_logprobs`` (zeros where the server gave none, counted as
``agl/samples_without_logprobs``: verl refuses a batch where only some rows have them).

``sampling_params`` from verl are not used: the agent samples with the ``main_llm`` resource's
parameters, which the trainer publishes (training or validation ones).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import asdict
from typing import Any

from agl.types import AglError, RolloutConfig, Span
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from ..credit import CreditAssignment
from ..local.versions import span_weights_versions
from .convert import ConversionStats, LoopSample, convert_rollout, turns_from_triplets
from .dataset import read_task
from .runtime import get_runtime

__all__ = [
    "BRIDGE_STATS",
    "AglAgentLoopOutput",
    "AglBridgeAgentLoop",
    "NoTrainingSample",
    "placeholder_output",
    "recorded_versions",
    "to_agent_loop_output",
    "weight_version",
]

logger = logging.getLogger(__name__)

BRIDGE_STATS = ConversionStats()
"""Counters of every conversion this process made (rollouts, drops, truncations, empty rollouts)."""

TOKEN_RETURNS_KEY = "agl_token_returns"


class NoTrainingSample(AglError, RuntimeError):
    """A training rollout gave no sample: verl marks its session failed (and refills an empty group)."""


def weight_version(global_steps: int, mode: str) -> int:
    """The weight version that served a rollout in verl's sync trainer: a training step ``k`` samples with
    the weights of step ``k - 1`` (updated at its end); validation at step ``k`` with those of step ``k``."""
    return max(0, int(global_steps) - (1 if mode == "train" else 0))


def recorded_versions(spans: Iterable[Span], submitted: int) -> tuple[int, int]:
    """The oldest and newest weight versions that served a rollout's calls, as recorded on their spans (agl's
    model server stamps each answer; see :mod:`agl.algorithms.local.versions`); ``submitted``, the version
    when its prompt was submitted, for both when no call recorded one (vLLM stamps none)."""
    versions = span_weights_versions(spans).values()
    return (min(versions), max(versions)) if versions else (submitted, submitted)


class AglAgentLoopOutput(AgentLoopOutput):
    """verl's ``AgentLoopOutput`` plus the per-token credited returns (:mod:`agl.algorithms.credit`)."""

    token_returns: list[float] | None = None

    def as_dict(self) -> dict[str, Any]:
        import torch

        out = super().as_dict()
        returns = out.pop("token_returns", None)
        if returns is not None:
            out[TOKEN_RETURNS_KEY] = torch.tensor(returns, dtype=torch.float32)
        return out


def to_agent_loop_output(
    sample: LoopSample,
    rollout_id: str,
    num_turns: int,
    stats: ConversionStats | None = None,
    *,
    versions: tuple[int, int] = (0, 0),
    logprobs: bool = True,
) -> AglAgentLoopOutput:
    """verl's output for one sample (the final reward as ``reward_score``, on the last response token).

    ``versions``: the oldest and newest weight versions that generated it (``min_global_steps`` /
    ``max_global_steps``).
    ``logprobs``: always carry ``response_logprobs`` (zeros when the sample has none).
    """
    response_logprobs = sample.response_logprobs
    if logprobs and response_logprobs is None:
        response_logprobs = [0.0] * len(sample.response_ids)
    return AglAgentLoopOutput(
        prompt_ids=sample.prompt_ids,
        response_ids=sample.response_ids,
        response_mask=sample.response_mask,
        response_logprobs=response_logprobs,
        reward_score=sample.reward,
        num_turns=num_turns,
        metrics=AgentLoopMetrics(),
        token_returns=sample.token_returns,
        extra_fields={
            "reward_extra_info": {"agl_reward": sample.reward},
            "agl_rollout_id": rollout_id,
            "agl_turns": sample.turns,
            "agl_truncated": int(sample.truncated),
            "min_global_steps": versions[0],
            "max_global_steps": versions[1],
            # the rollout's conversion counters ride on its last output (see trainer.conversion_metrics)
            **({"agl_rollout_stats": asdict(stats)} if stats is not None else {}),
        },
    )


def placeholder_output(
    prompt_ids: list[int], eos_id: int, reward: float, rollout_id: str, versions: tuple[int, int]
) -> AglAgentLoopOutput:
    """A validation rollout without a sample: nothing generated (one masked token), the fill-in reward."""
    sample = LoopSample(
        prompt_ids=prompt_ids or [eos_id],
        response_ids=[eos_id],
        response_mask=[0],
        response_logprobs=[0.0],
        reward=reward,
        token_returns=[0.0],
        turns=[],
    )
    return to_agent_loop_output(sample, rollout_id, num_turns=0, versions=versions)


@register("agl_bridge")
class AglBridgeAgentLoop(AgentLoopBase):
    """One store rollout per verl sample (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # pyright: ignore[reportIncompatibleMethodOverride]
        agl = self.config.get("agentlightning", {})
        runtime = get_runtime(agl)
        task, mode = read_task(kwargs)
        finished = await self._execute(runtime.store, agl, task, mode, kwargs)
        rid = finished.rollout_id
        spans = list((await runtime.store.query_spans(rid, "latest")).items)
        from agl.tracer import find_final_reward

        triplets = list(runtime.get_adapter().adapt(spans)) if spans else []
        turns, skipped = turns_from_triplets(triplets)
        fillna = float(agl.get("reward_fillna_value", 0.0))
        final = find_final_reward(spans) if finished.status == "succeeded" else fillna
        samples, stats, max_prompt = self._convert(agl, turns, final, fillna)
        stats.triplets_without_tokens = skipped
        stats.triplets += skipped
        logprobs = bool(self.rollout_config.get("calculate_log_probs", False))
        if logprobs:
            stats.samples_without_logprobs = sum(s.response_logprobs is None for s in samples)
        BRIDGE_STATS.__iadd__(stats)
        versions = recorded_versions(spans, weight_version(int(kwargs.get("global_steps", 0)), mode))
        if not samples:
            why = (
                f"rollout {rid} (task uid {kwargs.get('uid')}) gave no sample: status {finished.status}, "
                f"{len(spans)} spans, {len(triplets)} triplets ({skipped} without token ids), "
                f"{stats.dropped_prompt_too_long} dropped for a prompt over {max_prompt} tokens"
            )
            logger.warning("%s", why)
            if mode == "train":
                raise NoTrainingSample(why)
            reward = fillna if final is None else float(final)
            return [placeholder_output(self._prompt_ids(kwargs), self._eos_id(), reward, rid, versions)]
        last = len(samples) - 1
        return [
            to_agent_loop_output(
                s,
                rid,
                num_turns=len(turns),
                stats=stats if i == last else None,
                versions=versions,
                logprobs=logprobs,
            )
            for i, s in enumerate(samples)
        ]

    async def _execute(self, store: Any, agl: Any, task: Any, mode: Any, kwargs: dict[str, Any]) -> Any:
        """Enqueue the task as a rollout and wait until it is finished; the finished rollout."""
        timeout = float(agl.get("rollout_timeout_seconds", 1200.0))
        rollout = await store.enqueue_rollout(
            input=task,
            mode=mode,
            config=RolloutConfig(timeout_seconds=timeout, unresponsive_seconds=timeout),
            metadata={
                "data_id": str(kwargs.get("uid")),
                "session": int(kwargs.get("session_id", 0)),
                "step": int(kwargs.get("global_steps", 0)),
            },
        )
        rid = rollout.rollout_id
        deadline = time.monotonic() + timeout + 60.0
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"rollout {rid} did not finish within {timeout + 60:.0f}s: are runners running?"
                )
            done = await store.wait_for_rollouts(rollout_ids=[rid], timeout=min(left, 10.0))
            if done:
                return done[0]

    def _convert(
        self, agl: Any, turns: list[Any], final: float | None, fillna: float
    ) -> tuple[list[LoopSample], ConversionStats, int]:
        """The rollout's samples under the configured level, lengths and credit; the prompt limit used."""
        aggregator = agl.get("trace_aggregator", {})
        level = str(aggregator.get("level", "transition"))
        data = self.config.data
        if level == "trajectory":
            max_prompt = int(aggregator.get("trajectory_max_prompt_length", 2048))
            max_response = int(aggregator.get("trajectory_max_response_length", 8192))
        else:
            max_prompt, max_response = int(data.max_prompt_length), int(data.max_response_length)
        # verl pads to rollout.prompt_length / response_length: never exceed them
        max_prompt = min(max_prompt, int(self.rollout_config.prompt_length))
        max_response = min(max_response, int(self.rollout_config.response_length))
        credit_cfg = agl.get("credit", {})
        credit = CreditAssignment.parse(
            str(credit_cfg.get("mode", "final")),
            turn_discount=float(credit_cfg.get("turn_discount", 0.9)),
            fillna=fillna,
        )
        samples, stats = convert_rollout(
            turns,
            level=level,  # pyright: ignore[reportArgumentType]
            max_prompt_length=max_prompt,
            max_response_length=max_response,
            final_reward=final,
            credit=credit,
        )
        return samples, stats, max_prompt

    def _eos_id(self) -> int:
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return int(eos) if isinstance(eos, int) else 0

    def _prompt_ids(self, kwargs: dict[str, Any]) -> list[int]:
        """The row's chat prompt as token ids (empty when it cannot be rendered)."""
        raw = kwargs.get("raw_prompt")
        if not raw:
            return []
        tokenizer: Any = self.tokenizer
        try:
            ids: Any = tokenizer.apply_chat_template(list(raw), add_generation_prompt=True, tokenize=True)
        except Exception:  # a placeholder needs no exact prompt
            return []
        if not isinstance(ids, list):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return [int(i) for i in ids]  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
