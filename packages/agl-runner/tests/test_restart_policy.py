"""The restart policy of lost runner processes: bounded, backing off, reset by a healthy run."""

from __future__ import annotations

import pytest
from agl.runner.strategies._supervise import RestartPolicy
from hypothesis import given
from hypothesis import strategies as st


@given(
    max_restarts=st.integers(0, 8),
    backoff=st.floats(0, 5, allow_nan=False),
    lives=st.lists(st.floats(0, 59.9, allow_nan=False), max_size=12),
)
def test_quick_deaths_get_at_most_max_restarts_growing_bounded_delays(
    max_restarts: int, backoff: float, lives: list[float]
) -> None:
    policy = RestartPolicy(max_restarts, backoff, max_backoff=30.0, healthy_after=60.0)
    delays = [policy.delay_for(0, lived) for lived in lives]
    granted = [d for d in delays if d is not None]
    assert len(granted) == min(len(lives), max_restarts)
    assert delays[: len(granted)] == granted  # once refused, refused for good (while deaths stay quick)
    assert granted == sorted(granted) and all(0 <= d <= 30.0 for d in granted)
    assert policy.delay_for(1, 0.0) == (
        None if max_restarts == 0 else min(30.0, backoff)
    )  # slots are separate


def test_a_process_that_lived_long_resets_its_slot() -> None:
    policy = RestartPolicy(2, 1.0, healthy_after=60.0)
    assert [policy.delay_for(0, 1.0) for _ in range(3)] == [1.0, 2.0, None]
    assert policy.delay_for(0, 61.0) == 1.0
    assert policy.restarts(0) == 1


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="max_restarts"):
        RestartPolicy(-1, 1.0)
    with pytest.raises(ValueError, match="restart_backoff"):
        RestartPolicy(1, -1.0)
