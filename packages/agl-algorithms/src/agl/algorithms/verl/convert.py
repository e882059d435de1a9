"""Triplets of one rollout → verl agent-loop samples (pure functions; no verl import).

Two shapes, as the reference's ``agentlightning.trace_aggregator.level``:

- ``transition``: one sample per triplet (turn): its prompt ids, its response ids, mask all 1.
- ``trajectory``: consecutive turns merged by :func:`agl.algorithms.adapter.turns.merge_turns` (the rule
  LocalGRPO uses too): the first turn's prompt plus everything after it as the response, ``response_mask``
  1 on generated tokens and 0 on the environment/tool tokens in between (their logprobs are 0). A break
  in the prefix starts a new sample (counted as a mismatch).

Limits: a sample whose prompt is longer than ``max_prompt_length`` is dropped (counted); a response
longer than ``max_response_length`` is cut (counted). Each sample carries the rollout's final reward as
``reward`` and, per response token, the credited return of the turn that generated it (0 on environment
tokens; :mod:`agl.algorithms.credit`) as ``token_returns``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from agl.types import Triplet

from .._json import is_dict, is_list
from ..adapter.turns import Turn, merge_turns
from ..credit import CreditAssignment

__all__ = ["ConversionStats", "LoopSample", "TraceLevel", "convert_rollout", "turns_from_triplets"]

TraceLevel = Literal["transition", "trajectory"]


@dataclass
class LoopSample:
    """One verl agent-loop output before verl's types (see :func:`to_agent_loop_output`)."""

    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    response_logprobs: list[float] | None
    reward: float
    """The rollout's final reward (verl's ``reward_score``)."""
    token_returns: list[float]
    """Per response token: the credited return of the turn that generated it (0 on environment tokens)."""
    turns: list[int]
    """Indices of the turns this sample holds."""
    truncated: bool = False
    """Whether the response was cut to ``max_response_length``."""

    def cut(self, length: int) -> LoopSample:
        """This sample with its response cut to its first ``length`` tokens (``truncated``)."""
        logprobs = self.response_logprobs
        return replace(
            self,
            response_ids=self.response_ids[:length],
            response_mask=self.response_mask[:length],
            response_logprobs=None if logprobs is None else logprobs[:length],
            token_returns=self.token_returns[:length],
            truncated=True,
        )


@dataclass
class ConversionStats:
    """Counters of one or more conversions (add them up with ``+=``)."""

    rollouts: int = 0
    rollouts_without_triplets: int = 0
    triplets: int = 0
    triplets_without_tokens: int = 0
    samples: int = 0
    dropped_prompt_too_long: int = 0
    truncated_responses: int = 0
    prefix_mismatches: int = 0
    samples_without_logprobs: int = 0

    def __iadd__(self, other: ConversionStats) -> ConversionStats:
        for name in self.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        return self

    def as_metrics(self, prefix: str = "agl") -> dict[str, int]:
        return {f"{prefix}/{name}": getattr(self, name) for name in self.__dataclass_fields__}


def turns_from_triplets(triplets: Sequence[Triplet]) -> tuple[list[Turn], int]:
    """Token-level turns of the triplets (in order) and the number skipped for lacking token ids."""
    turns: list[Turn] = []
    skipped = 0
    for t in triplets:
        prompt: dict[str, Any] = t.prompt if is_dict(t.prompt) else {}
        response: dict[str, Any] = t.response if is_dict(t.response) else {}
        prompt_ids = [int(i) for i in prompt.get("token_ids") or ()]
        response_ids = [int(i) for i in response.get("token_ids") or ()]
        if not prompt_ids or not response_ids:
            skipped += 1
            continue
        logprobs: Any = response.get("logprobs")
        if not is_list(logprobs) or len(logprobs) != len(response_ids):
            logprobs = None
        else:
            logprobs = [float(x) for x in logprobs]
        turns.append(Turn(prompt_ids, response_ids, logprobs, t.reward))
    return turns, skipped


def _final_reward(turns: Sequence[Turn], final_reward: float | None) -> float | None:
    if final_reward is not None:
        return final_reward
    rewards = [t.reward for t in turns if t.reward is not None]
    return rewards[-1] if rewards else None


def convert_rollout(
    turns: Sequence[Turn],
    *,
    level: TraceLevel = "transition",
    max_prompt_length: int,
    max_response_length: int,
    final_reward: float | None = None,
    credit: CreditAssignment | None = None,
) -> tuple[list[LoopSample], ConversionStats]:
    """Samples of one rollout's turns, and what was dropped or cut on the way (module docstring).

    ``final_reward``: the rollout's final reward when known apart from the turns (``find_final_reward``),
    else the last turn reward; ``None`` becomes ``credit.fillna``.
    """
    if level not in ("transition", "trajectory"):
        raise ValueError(f"trace_aggregator.level must be 'transition' or 'trajectory', got {level!r}")
    if max_prompt_length <= 0 or max_response_length <= 0:
        raise ValueError("max_prompt_length and max_response_length must be positive")
    credit = credit or CreditAssignment()
    stats = ConversionStats(rollouts=1, triplets=len(turns))
    if not turns:
        stats.rollouts_without_triplets = 1
        return [], stats
    final = _final_reward(turns, final_reward)
    reward = credit.fillna if final is None else float(final)
    returns = credit.returns([t.reward for t in turns], final)

    trajectories, stats.prefix_mismatches = merge_turns(turns, merge=level == "trajectory")
    samples: list[LoopSample] = []
    for trajectory in trajectories:
        if len(trajectory.prompt_ids) > max_prompt_length:
            stats.dropped_prompt_too_long += 1
            continue
        sample = LoopSample(
            prompt_ids=trajectory.prompt_ids,
            response_ids=trajectory.response_ids,
            response_mask=trajectory.response_mask,
            response_logprobs=trajectory.response_logprobs,
            reward=reward,
            token_returns=[returns[k] if k >= 0 else 0.0 for k in trajectory.token_turns],
            turns=trajectory.turns,
        )
        if len(sample.response_ids) > max_response_length:
            stats.truncated_responses += 1
            sample = sample.cut(max_response_length)
        if any(sample.response_mask):
            samples.append(sample)
    stats.samples = len(samples)
    return samples, stats
