"""Credit assignment: which return each turn (LLM call) of a multi-turn rollout is trained on.

Shared by :class:`~agl.algorithms.local.LocalGRPO` and :class:`~agl.algorithms.verl.VERL`. A rollout of K
turns has per-turn rewards ``r_0 .. r_{K-1}`` (the reward the adapter attached to each triplet, i.e. an
``emit_reward`` made after that LLM call; ``None`` where none was) and a final reward ``R`` (the
rollout's last reward). Each mode turns them into per-turn returns ``G_k``:

- ``final`` (the default, the reference's "identical assignment"): ``G_k = R`` for every turn.
- ``per-turn``: ``G_k = r_k + G_{k+1}`` (the rewards still to come, undiscounted), with ``r_{K-1}``
  defaulting to ``R``; an agent that only emits the final reward gets ``final``'s returns.
- ``turn-discount`` (AReaL's ``apply_reward_discount``): ``G_k = r_k + gamma * G_{k+1}``, so with only a
  final reward turn k gets ``gamma**(K-1-k) * R``: the turns nearer the end get more of the credit.

GRPO then compares rollouts of one task: the group's baseline and scale are the mean and std of the
rollouts' final rewards (for ``final`` that is exactly GRPO on the final reward), and turn k's advantage is
``(G_k - mean) / (std + eps)`` (see :func:`group_turn_advantages`).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = ["CREDIT_MODES", "CreditAssignment", "CreditMode", "group_turn_advantages", "turn_returns"]

CreditMode = Literal["final", "per-turn", "turn-discount"]
CREDIT_MODES: tuple[CreditMode, ...] = ("final", "per-turn", "turn-discount")


@dataclass(frozen=True)
class CreditAssignment:
    """A credit-assignment setting (see the module docstring).

    Args:
        mode: ``final`` (default), ``per-turn`` or ``turn-discount``.
        turn_discount: gamma of ``turn-discount`` (AReaL's default 0.9); must lie in (0, 1].
        fillna: the reward of a rollout that reported none.
    """

    mode: CreditMode = "final"
    turn_discount: float = 0.9
    fillna: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in CREDIT_MODES:
            raise ValueError(f"credit mode {self.mode!r} is not one of {', '.join(CREDIT_MODES)}")
        if not 0.0 < self.turn_discount <= 1.0:
            raise ValueError(f"turn_discount must lie in (0, 1], got {self.turn_discount}")

    @classmethod
    def parse(cls, value: CreditAssignment | str | None, **kwargs: float) -> CreditAssignment:
        """Accept a setting, a mode name (``turn_discount`` also spelled with ``_``), or ``None`` (default)."""
        if isinstance(value, CreditAssignment):
            return value
        if value is None:
            return cls(**kwargs)  # pyright: ignore[reportArgumentType]
        return cls(mode=value.replace("_", "-"), **kwargs)  # pyright: ignore[reportArgumentType]

    def returns(self, turn_rewards: Sequence[float | None], final_reward: float | None) -> list[float]:
        """The per-turn returns of one rollout (see :func:`turn_returns`)."""
        return turn_returns(turn_rewards, final_reward, self)


def turn_returns(
    turn_rewards: Sequence[float | None], final_reward: float | None, credit: CreditAssignment | None = None
) -> list[float]:
    """Per-turn returns ``G_0 .. G_{K-1}`` of one rollout with K turns (module docstring)."""
    credit = credit or CreditAssignment()
    k = len(turn_rewards)
    if k == 0:
        return []
    final = credit.fillna if final_reward is None else float(final_reward)
    if credit.mode == "final":
        return [final] * k
    gamma = 1.0 if credit.mode == "per-turn" else credit.turn_discount
    rewards = [0.0 if r is None else float(r) for r in turn_rewards]
    if turn_rewards[-1] is None:
        rewards[-1] = final
    out = [0.0] * k
    running = 0.0
    for i in range(k - 1, -1, -1):
        running = rewards[i] + (gamma * running if i < k - 1 else 0.0)
        out[i] = running
    return out


def group_turn_advantages(
    returns: Sequence[Sequence[float]],
    final_rewards: Sequence[float],
    groups: Sequence[Hashable],
    eps: float = 1e-6,
) -> list[list[float] | None]:
    """GRPO advantages per turn: for each rollout (its per-turn returns) in its group, ``(G_k - mean) /
    (std + eps)`` with the mean and std of the group's final rewards.

    ``None`` for rollouts without turns and for every rollout of a group whose final rewards are all equal
    (no learning signal: :func:`~agl.algorithms.local.grpo_core.group_advantages` drops those too).
    """
    if not len(returns) == len(final_rewards) == len(groups):
        raise ValueError("returns, final_rewards and groups must have the same length")
    members: dict[Hashable, list[int]] = {}
    for i, g in enumerate(groups):
        if returns[i]:
            members.setdefault(g, []).append(i)
    out: list[list[float] | None] = [None] * len(returns)
    for idx in members.values():
        mean, std = _mean_std([float(final_rewards[i]) for i in idx])
        if std < eps:
            continue
        for i in idx:
            out[i] = [(float(g) - mean) / (std + eps) for g in returns[i]]
    return out


def _mean_std(values: Sequence[float]) -> tuple[float, float]:
    mean = sum(values) / len(values)
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
