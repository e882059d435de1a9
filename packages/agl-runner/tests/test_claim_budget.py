"""ClaimBudget: a runner never holds more claims than ``max_rollouts``, and what it gives back can be taken again."""

from __future__ import annotations

from agl.runner._claims import ClaimBudget
from hypothesis import given
from hypothesis import strategies as st

operations = st.lists(st.tuples(st.sampled_from(["take", "give_back"]), st.integers(0, 5)), max_size=40)


@given(st.one_of(st.none(), st.integers(0, 10)), operations)
def test_taken_stays_within_the_limit_and_matches_what_was_granted(
    limit: int | None, steps: list[tuple[str, int]]
) -> None:
    budget = ClaimBudget(limit)
    held = 0
    for operation, count in steps:
        if operation == "take":
            granted = budget.take(count)
            assert 0 <= granted <= count
            if limit is None:
                assert granted == count
            else:
                assert granted == min(count, limit - held)
            held += granted
        else:
            back = min(count, held)  # a loop gives back only slots it took
            budget.give_back(back)
            held -= back
        assert budget.taken == held
        assert limit is None or held <= limit
        assert budget.exhausted == (limit is not None and held >= limit)
