"""``AglBridgeAgentLoop``: verl's agent loop that runs one store rollout per verl sample.

verl's V1 agent-loop worker calls :meth:`AglBridgeAgentLoop.run` once per (task, session). The loop
enqueues the task (the row's ``agl_task``) as a rollout, waits until a runner has executed the agent
(whose LLM calls went through the LLM proxy to vLLM, recording token ids), reads the spans of the latest
attempt, adapts them to triplets and converts those (:mod:`.convert`) to verl ``AgentLoopOutput`` s:
one per triplet (``transition``) or per merged trajectory (``trajectory``). A rollout without usable
triplets returns ``[]`` (verl skips the session; ``trainer.v1.sampler.sync_refill_failed_groups`` refills
an empty group) and is logged with why.

``sampling_params`` from verl are not used: the agent samples with the ``main_llm`` resource's
parameters, which the trainer publishes (training or validation ones).
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict
from typing import Any

from agl.types import RolloutConfig
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register

from ..credit import CreditAssignment
from .convert import ConversionStats, LoopSample, convert_rollout, turns_from_triplets
from .dataset import read_task
from .runtime import get_runtime

__all__ = ["BRIDGE_STATS", "AglAgentLoopOutput", "AglBridgeAgentLoop", "to_agent_loop_output"]

logger = logging.getLogger(__name__)

BRIDGE_STATS = ConversionStats()
"""Counters of every conversion this process made (rollouts, drops, truncations, empty rollouts)."""

TOKEN_RETURNS_KEY = "agl_token_returns"


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
    sample: LoopSample, rollout_id: str, num_turns: int, stats: ConversionStats | None = None
) -> AglAgentLoopOutput:
    """verl's output for one sample (the final reward as ``reward_score``, on the last response token)."""
    return AglAgentLoopOutput(
        prompt_ids=sample.prompt_ids,
        response_ids=sample.response_ids,
        response_mask=sample.response_mask,
        response_logprobs=sample.response_logprobs,
        reward_score=sample.reward,
        num_turns=num_turns,
        metrics=AgentLoopMetrics(),
        token_returns=sample.token_returns,
        extra_fields={
            "reward_extra_info": {"agl_reward": sample.reward},
            "agl_rollout_id": rollout_id,
            "agl_turns": sample.turns,
            "agl_truncated": int(sample.truncated),
            # the rollout's conversion counters ride on its last output (see trainer.conversion_metrics)
            **({"agl_rollout_stats": asdict(stats)} if stats is not None else {}),
        },
    )


@register("agl_bridge")
class AglBridgeAgentLoop(AgentLoopBase):
    """One store rollout per verl sample (see the module docstring)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:  # pyright: ignore[reportIncompatibleMethodOverride]
        agl = self.config.get("agentlightning", {})
        runtime = get_runtime(agl)
        store = runtime.store
        task, mode = read_task(kwargs)
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
        finished = None
        while finished is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"rollout {rid} did not finish within {timeout + 60:.0f}s: are runners running?"
                )
            done = await store.wait_for_rollouts(rollout_ids=[rid], timeout=min(left, 10.0))
            finished = done[0] if done else None
        spans = list((await store.query_spans(rid, "latest")).items)
        from agl.tracer import find_final_reward

        triplets = list(runtime.get_adapter().adapt(spans)) if spans else []
        turns, skipped = turns_from_triplets(triplets)
        final = find_final_reward(spans)
        fillna = float(agl.get("reward_fillna_value", 0.0))
        if finished.status != "succeeded":
            final = fillna
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
        stats.triplets_without_tokens = skipped
        stats.triplets += skipped
        BRIDGE_STATS.__iadd__(stats)
        if not samples:
            why = (
                f"status {finished.status}, {len(spans)} spans, {len(triplets)} triplets "
                f"({skipped} without token ids), {stats.dropped_prompt_too_long} dropped for a prompt over "
                f"{max_prompt} tokens"
            )
            logger.warning(
                "rollout %s (task uid %s) gave no training sample: %s", rid, kwargs.get("uid"), why
            )
            return []
        last = len(samples) - 1
        return [
            to_agent_loop_output(s, rid, num_turns=len(turns), stats=stats if i == last else None)
            for i, s in enumerate(samples)
        ]
