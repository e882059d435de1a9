"""``merge_turns``: the one rule that merges a rollout's turns into trajectories (LocalGRPO and VERL)."""

from __future__ import annotations

from agl.algorithms.adapter import Turn, merge_turns
from agl.algorithms.verl.convert import convert_rollout
from hypothesis import given, settings
from hypothesis import strategies as st

tokens = st.lists(st.integers(1, 50), min_size=0, max_size=4)


@st.composite
def rollouts(draw: st.DrawFn) -> list[Turn]:
    """Turns that mostly extend the history as a conversation does, sometimes restart it, with or without
    logprobs and rewards."""
    turns: list[Turn] = []
    history: list[int] = []
    for _ in range(draw(st.integers(0, 5))):
        if draw(st.booleans()) and draw(st.booleans()):
            history = []  # a break: the next prompt does not extend the last turn
        prompt = history + draw(tokens)
        response = draw(tokens)
        logprobs = [-0.5] * len(response) if draw(st.booleans()) else None
        turns.append(Turn(prompt, response, logprobs, draw(st.one_of(st.none(), st.floats(-1, 1)))))
        history = prompt + response
    return turns


def _extends(turns: list[Turn], k: int) -> bool:
    context = turns[k - 1].prompt_ids + turns[k - 1].response_ids
    return turns[k].prompt_ids[: len(context)] == context


@given(rollouts())
@settings(max_examples=200, deadline=None)
def test_merged_trajectories_hold_every_turn_once_and_every_generated_token_in_order(
    turns: list[Turn],
) -> None:
    trajectories, mismatches = merge_turns(turns)
    assert [k for t in trajectories for k in t.turns] == list(range(len(turns)))
    breaks = sum(1 for k in range(1, len(turns)) if not _extends(turns, k))
    assert mismatches == breaks and len(trajectories) == (breaks + 1 if turns else 0)
    for t in trajectories:
        last = turns[t.turns[-1]]
        assert t.prompt_ids + t.response_ids == last.prompt_ids + last.response_ids
        assert len(t.response_mask) == len(t.token_turns) == len(t.response_ids)
        assert t.response_mask == [int(k >= 0) for k in t.token_turns]
        generated = [tok for tok, k in zip(t.response_ids, t.token_turns, strict=True) if k >= 0]
        assert generated == [tok for k in t.turns for tok in turns[k].response_ids]
        if all(turns[k].logprobs is not None for k in t.turns):
            assert t.response_logprobs == [-0.5 if k >= 0 else 0.0 for k in t.token_turns]
        else:
            assert t.response_logprobs is None


@given(rollouts())
@settings(max_examples=100, deadline=None)
def test_without_merging_each_turn_is_its_own_trajectory(turns: list[Turn]) -> None:
    trajectories, mismatches = merge_turns(turns, merge=False)
    assert mismatches == 0
    assert [(t.prompt_ids, t.response_ids, t.turns) for t in trajectories] == [
        (turn.prompt_ids, turn.response_ids, [k]) for k, turn in enumerate(turns)
    ]


@given(rollouts())
@settings(max_examples=100, deadline=None)
def test_verl_trajectory_samples_are_the_merged_trajectories(turns: list[Turn]) -> None:
    samples, stats = convert_rollout(
        turns, level="trajectory", max_prompt_length=10**6, max_response_length=10**6
    )
    trajectories, mismatches = merge_turns(turns)
    assert stats.prefix_mismatches == mismatches
    kept = [t for t in trajectories if any(t.response_mask)]
    assert [(s.prompt_ids, s.response_ids, s.response_mask, s.turns) for s in samples] == [
        (t.prompt_ids, t.response_ids, t.response_mask, t.turns) for t in kept
    ]
