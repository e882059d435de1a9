"""Credit assignment shared by LocalGRPO and VERL: returns per turn and group advantages per turn."""

from __future__ import annotations

import math

import pytest
from agl.algorithms.credit import CreditAssignment, group_turn_advantages, turn_returns
from hypothesis import given
from hypothesis import strategies as st

rewards_st = st.lists(st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, -1.0])), min_size=1, max_size=6)


@given(rewards_st, st.one_of(st.none(), st.floats(-2, 2)))
def test_final_gives_every_turn_the_final_reward(rewards: list[float | None], final: float | None) -> None:
    out = turn_returns(rewards, final, CreditAssignment("final"))
    assert out == [0.0 if final is None else final] * len(rewards)


@given(st.integers(1, 6), st.floats(0.0, 1.0), st.floats(0.05, 1.0))
def test_turn_discount_with_only_a_final_reward_is_geometric(k: int, final: float, gamma: float) -> None:
    out = turn_returns([None] * k, final, CreditAssignment("turn-discount", turn_discount=gamma))
    for i, g in enumerate(out):
        assert math.isclose(g, final * gamma ** (k - 1 - i), rel_tol=1e-9, abs_tol=1e-12)


@given(rewards_st, st.floats(-1, 1))
def test_per_turn_returns_are_the_rewards_still_to_come(rewards: list[float | None], final: float) -> None:
    out = turn_returns(rewards, final, CreditAssignment("per-turn"))
    filled = [0.0 if r is None else r for r in rewards]
    if rewards[-1] is None:
        filled[-1] = final
    for i in range(len(rewards)):
        assert math.isclose(out[i], sum(filled[i:]), abs_tol=1e-9)


def test_per_turn_rewards_emitted_each_turn() -> None:
    # the agent emitted 0.2 after turn 0 and 1.0 at the end
    assert turn_returns([0.2, None, 1.0], 1.0, CreditAssignment("per-turn")) == pytest.approx([1.2, 1.0, 1.0])
    assert turn_returns([0.2, None, 1.0], 1.0, CreditAssignment("turn-discount", 0.5)) == pytest.approx(
        [0.2 + 0.25, 0.5, 1.0]
    )


def test_final_mode_advantages_equal_grpo_on_final_rewards() -> None:
    from agl.algorithms.local.grpo_core import group_advantages

    finals = [1.0, 0.0, 1.0, 0.5, 0.5]
    groups = [0, 0, 0, 1, 1]
    credit = CreditAssignment()
    per_turn = group_turn_advantages([credit.returns([None, None], f) for f in finals], finals, groups)
    plain = group_advantages(finals, groups)
    for a, b in zip(per_turn, plain, strict=True):
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a == pytest.approx([b, b])


def test_turn_discount_gives_earlier_turns_of_a_success_less_credit() -> None:
    credit = CreditAssignment("turn-discount", turn_discount=0.5)
    finals = [1.0, 0.0]
    out = group_turn_advantages([credit.returns([None] * 3, f) for f in finals], finals, [0, 0])
    success, failure = out
    assert success is not None and failure is not None
    assert success[0] < success[1] < success[2]
    assert failure == pytest.approx([-1.0, -1.0, -1.0], rel=1e-4)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="credit mode"):
        CreditAssignment.parse("sometimes")
    with pytest.raises(ValueError, match="turn_discount"):
        CreditAssignment("turn-discount", turn_discount=0.0)
    assert CreditAssignment.parse("turn_discount").mode == "turn-discount"
