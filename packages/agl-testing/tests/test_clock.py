"""ManualClock moves only when told to, by exactly what it is told."""

from __future__ import annotations

from agl.testing.clock import ManualClock
from hypothesis import given
from hypothesis import strategies as st


@given(st.floats(0, 1e9), st.lists(st.floats(0, 1e6), max_size=20))
def test_the_clock_reads_its_start_plus_every_advance(start: float, steps: list[float]) -> None:
    clock = ManualClock(start)
    for step in steps:
        before = clock()
        assert clock() == before  # reading does not move it
        clock.advance(step)
        assert clock() == before + step
