"""A GRPO batch's training sequences: its episodes' triplets turned into samples with their advantages."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from agl.types import Triplet
from agl.types.narrow import as_list

if TYPE_CHECKING:
    from ..credit import CreditAssignment
    from .grpo_core import Sample

__all__ = ["batch_samples", "pad_id"]


def batch_samples(
    episodes: Sequence[tuple[float, list[Triplet]]],
    groups: Sequence[Hashable],
    credit: CreditAssignment,
    *,
    behaviour_logprobs: bool = False,
) -> tuple[list[Sample], int]:
    """The samples of ``episodes`` (``(reward, triplets)``, each in group ``groups[i]``) and how many groups
    carry a learning signal. An episode without triplets (failed, or no token ids) is left out of its group
    rather than skewing the group's mean. ``behaviour_logprobs``: samples carry the recorded logprobs of
    their generated tokens (for an off-policy correction)."""
    from ..adapter.turns import Turn
    from ..credit import group_turn_advantages
    from .grpo_core import episode_samples, group_advantages

    def turn(t: Triplet) -> Turn:
        recorded = as_list(t.response.get("logprobs")) if behaviour_logprobs else None
        logprobs = [float(x) for x in recorded] if recorded is not None else None
        return Turn(list(t.prompt["token_ids"]), list(t.response["token_ids"]), logprobs)

    usable = [i for i, (_, triplets) in enumerate(episodes) if triplets]
    rewards = [episodes[i][0] for i in usable]
    samples: list[Sample] = []
    advantages: list[Any]
    if credit.mode == "final":
        advantages = group_advantages(rewards, [groups[i] for i in usable])
        for i, advantage in zip(usable, advantages, strict=False):
            if advantage is not None:
                samples += episode_samples([turn(t) for t in episodes[i][1]], advantage)
    else:  # one advantage per turn, so each turn is its own sequence
        returns = [credit.returns([t.reward for t in episodes[i][1]], episodes[i][0]) for i in usable]
        advantages = group_turn_advantages(returns, rewards, [groups[i] for i in usable])
        for i, turn_advantages in zip(usable, advantages, strict=False):
            for t, advantage in zip(episodes[i][1], turn_advantages or [], strict=False):
                samples += episode_samples([turn(t)], advantage)
    kept_groups = len({groups[i] for i, a in zip(usable, advantages, strict=False) if a is not None})
    return samples, kept_groups


def pad_id(tokenizer: Any) -> int:
    """The token id that pads a batch: the tokenizer's pad token, else its end-of-sequence token."""
    if tokenizer.pad_token_id is not None:
        return int(tokenizer.pad_token_id)
    return int(tokenizer.eos_token_id)
