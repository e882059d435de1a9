"""Token-level turns of a rollout and the one rule that merges them into trajectories.

A :class:`Turn` is one LLM call as the model server returned it (exact prompt and generated token ids).
:func:`merge_turns` is shared by :class:`~agl.algorithms.local.LocalGRPO` and
:class:`~agl.algorithms.verl.VERL` (``trace_aggregator.level="trajectory"``): consecutive turns are merged
while turn k's prompt + response ids are a prefix of turn k+1's prompt ids; the merged trajectory is the
first turn's prompt plus everything after it as the response, masked 1 on generated tokens and 0 on the
environment/tool tokens in between. A break in the prefix starts a new trajectory (counted as a mismatch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Turn", "TurnTrajectory", "merge_turns"]


@dataclass
class Turn:
    """One LLM call: exact prompt and generated token ids, the generated tokens' logprobs, its reward."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None = None
    reward: float | None = None


@dataclass
class TurnTrajectory:
    """Consecutive turns merged into one token sequence (see :func:`merge_turns`)."""

    prompt_ids: list[int]
    """The first turn's prompt."""
    response_ids: list[int]
    """Everything after it: each later turn's new prompt tokens, then its generated tokens."""
    response_mask: list[int]
    """1 on generated tokens, 0 on environment tokens."""
    response_logprobs: list[float] | None
    """Per response token (0 on environment tokens); ``None`` unless every turn carries its logprobs."""
    token_turns: list[int]
    """Per response token: the index of the turn that generated it, -1 on environment tokens."""
    turns: list[int]
    """Indices of the turns this trajectory holds."""


def merge_turns(turns: Sequence[Turn], *, merge: bool = True) -> tuple[list[TurnTrajectory], int]:
    """The trajectories of one rollout's turns, in order, and the number of prefix mismatches.

    ``merge=False`` gives one trajectory per turn (no mismatches counted). A turn without response tokens
    takes part like any other (its trajectory may then have no generated token); callers that want such
    turns gone leave them out of ``turns``.
    """
    groups: list[list[int]] = []
    mismatches = 0
    context: list[int] = []
    for k, turn in enumerate(turns):
        if merge and groups:
            if turn.prompt_ids[: len(context)] == context:
                groups[-1].append(k)
                context = turn.prompt_ids + turn.response_ids
                continue
            mismatches += 1
        groups.append([k])
        context = turn.prompt_ids + turn.response_ids
    return [_trajectory(turns, group) for group in groups], mismatches


def _trajectory(turns: Sequence[Turn], group: list[int]) -> TurnTrajectory:
    first = turns[group[0]]
    response_ids: list[int] = []
    mask: list[int] = []
    token_turns: list[int] = []
    logprobs: list[float] | None = [] if all(turns[k].logprobs is not None for k in group) else None
    seen = len(first.prompt_ids)
    for k in group:
        turn = turns[k]
        env = turn.prompt_ids[seen:]  # empty for the first turn of the group
        response_ids += env + turn.response_ids
        mask += [0] * len(env) + [1] * len(turn.response_ids)
        token_turns += [-1] * len(env) + [k] * len(turn.response_ids)
        if logprobs is not None:
            logprobs += [0.0] * len(env) + list(turn.logprobs or ())
        seen = len(turn.prompt_ids) + len(turn.response_ids)
    return TurnTrajectory(list(first.prompt_ids), response_ids, mask, logprobs, token_turns, list(group))
