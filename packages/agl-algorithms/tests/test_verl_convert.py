"""Triplets → verl agent-loop samples, both shapes: Hypothesis properties of the conversion (no verl)."""

from __future__ import annotations

import pytest
from agl.algorithms.adapter import Turn
from agl.algorithms.credit import CreditAssignment
from agl.algorithms.verl.convert import TraceLevel, convert_rollout, turns_from_triplets
from agl.types import Triplet
from hypothesis import given, settings
from hypothesis import strategies as st

ids = st.lists(st.integers(1, 500), min_size=1, max_size=8)


@st.composite
def conversations(draw: st.DrawFn, breaks: bool = False) -> tuple[list[Turn], list[int], int]:
    """Turns whose prompts extend the previous prompt+response (tool/env tokens in between); with
    ``breaks`` some turns start afresh. Returns the turns, the turns that break, and the env-token count."""
    n = draw(st.integers(1, 5))
    turns: list[Turn] = []
    broken: list[int] = []
    env_tokens = 0
    context = draw(ids)
    for k in range(n):
        if k and breaks and draw(st.booleans()):
            context = [9999, *draw(ids)]  # 9999 never ends a context: a real break
            broken.append(k)
        elif k:
            env = draw(st.lists(st.integers(1, 500), max_size=4))
            env_tokens += len(env)
            context = context + env
        response = draw(ids)
        logprobs = [-(i % 7) / 10 for i in range(len(response))]
        turns.append(Turn(list(context), response, logprobs, draw(st.one_of(st.none(), st.just(1.0)))))
        context = context + response
    return turns, broken, env_tokens


@given(conversations())
def test_transition_gives_one_sample_per_turn_with_all_tokens_generated(conv: tuple) -> None:
    turns, _, _ = conv
    samples, stats = convert_rollout(
        turns, level="transition", max_prompt_length=10**6, max_response_length=10**6
    )
    assert len(samples) == len(turns) == stats.samples
    for s, t in zip(samples, turns, strict=True):
        assert s.prompt_ids == t.prompt_ids and s.response_ids == t.response_ids
        assert s.response_mask == [1] * len(t.response_ids)
        assert s.response_logprobs is not None and len(s.response_logprobs) == len(s.response_ids)


@given(conversations())
def test_trajectory_merges_extending_turns_into_one_sample(conv: tuple) -> None:
    turns, _, env_tokens = conv
    (sample,), stats = convert_rollout(
        turns, level="trajectory", max_prompt_length=10**6, max_response_length=10**6
    )
    assert stats.prefix_mismatches == 0
    assert sample.prompt_ids == turns[0].prompt_ids
    assert sum(sample.response_mask) == sum(len(t.response_ids) for t in turns)  # generated tokens
    assert len(sample.response_ids) == sum(len(t.response_ids) for t in turns) + env_tokens
    assert sample.prompt_ids + sample.response_ids == turns[-1].prompt_ids + turns[-1].response_ids
    assert sample.response_logprobs is not None and len(sample.response_logprobs) == len(sample.response_ids)
    for m, lp in zip(sample.response_mask, sample.response_logprobs, strict=True):
        if m == 0:
            assert lp == 0.0  # environment tokens carry no logprob
    generated = [tok for tok, m in zip(sample.response_ids, sample.response_mask, strict=True) if m]
    assert generated == [tok for t in turns for tok in t.response_ids]


@given(conversations(breaks=True))
def test_a_prefix_break_starts_a_new_sample_and_is_counted(conv: tuple) -> None:
    turns, broken, _ = conv
    samples, stats = convert_rollout(
        turns, level="trajectory", max_prompt_length=10**6, max_response_length=10**6
    )
    assert stats.prefix_mismatches == len(broken)
    assert len(samples) == len(broken) + 1
    assert [s.turns[0] for s in samples] == [0, *broken]
    assert sorted(k for s in samples for k in s.turns) == list(range(len(turns)))


@settings(max_examples=60)
@given(conversations(), st.integers(1, 12), st.integers(1, 12), st.sampled_from(["transition", "trajectory"]))
def test_limits_drop_long_prompts_and_cut_long_responses(
    conv: tuple, max_p: int, max_r: int, level: TraceLevel
) -> None:
    turns, _, _ = conv
    samples, stats = convert_rollout(turns, level=level, max_prompt_length=max_p, max_response_length=max_r)
    unlimited, _ = convert_rollout(turns, level=level, max_prompt_length=10**6, max_response_length=10**6)
    too_long = [u for u in unlimited if len(u.prompt_ids) > max_p]
    assert stats.dropped_prompt_too_long == len(too_long)
    kept = [u for u in unlimited if len(u.prompt_ids) <= max_p]
    assert stats.truncated_responses == sum(len(u.response_ids) > max_r for u in kept)
    assert len(samples) <= len(kept)
    for s in samples:
        assert len(s.prompt_ids) <= max_p and len(s.response_ids) <= max_r
        assert len(s.response_mask) == len(s.response_ids) == len(s.token_returns)
        assert s.response_logprobs is None or len(s.response_logprobs) == len(s.response_ids)
        assert any(s.response_mask)


def test_a_rollout_without_triplets_is_counted_not_lost() -> None:
    samples, stats = convert_rollout([], max_prompt_length=8, max_response_length=8, final_reward=1.0)
    assert samples == [] and stats.rollouts_without_triplets == 1 and stats.rollouts == 1


def test_turns_from_triplets_skips_triplets_without_token_ids() -> None:
    triplets = [
        Triplet(prompt={"token_ids": [1, 2]}, response={"token_ids": [3], "logprobs": [-0.5]}, reward=None),
        Triplet(prompt={"token_ids": []}, response={"token_ids": [4]}, reward=None),
        Triplet(
            prompt={"token_ids": [1, 2, 3, 7]}, response={"token_ids": [5, 6], "logprobs": [-1.0]}, reward=1.0
        ),
    ]
    turns, skipped = turns_from_triplets(triplets)
    assert skipped == 1
    assert [t.response_ids for t in turns] == [[3], [5, 6]]
    assert turns[0].logprobs == [-0.5] and turns[1].logprobs is None  # wrong length: not trusted
    samples, _ = convert_rollout(turns, level="trajectory", max_prompt_length=99, max_response_length=99)
    (sample,) = samples
    assert sample.response_logprobs is None
    assert sample.reward == 1.0  # the last turn reward is the final reward


def test_sample_token_returns_follow_the_credit_mode() -> None:
    turns = [Turn([1], [2, 3]), Turn([1, 2, 3, 4], [5], reward=1.0)]
    credit = CreditAssignment("turn-discount", turn_discount=0.5)
    (traj,), _ = convert_rollout(
        turns, level="trajectory", max_prompt_length=9, max_response_length=9, credit=credit
    )
    assert traj.token_returns == [0.5, 0.5, 0.0, 1.0]  # env token 4 gets no credit
    trans, _ = convert_rollout(
        turns, level="transition", max_prompt_length=9, max_response_length=9, credit=credit
    )
    assert [s.token_returns for s in trans] == [[0.5, 0.5], [1.0]]
    assert {s.reward for s in trans} == {1.0}


def test_bad_level_is_refused() -> None:
    with pytest.raises(ValueError, match=r"trace_aggregator\.level"):
        convert_rollout([Turn([1], [2])], level="episode", max_prompt_length=4, max_response_length=4)  # pyright: ignore[reportArgumentType]
