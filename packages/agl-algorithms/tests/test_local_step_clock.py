"""``StepClock``: one definition of a step's phase seconds (wall and CPU) for both of LocalGRPO's loops."""

from __future__ import annotations

import pytest
from agl.algorithms.local._step_clock import StepClock


def test_the_phases_add_up_and_the_cpu_seconds_come_from_the_given_counter() -> None:
    readings = iter([10.0, 12.5, 13.0])
    clock = StepClock(lambda: next(readings))
    with pytest.raises(RuntimeError, match="rollout_done"):
        clock.figures()
    clock.rollout_done()
    clock.update_done()
    figures = clock.figures()
    assert (figures["rollout_cpu_s"], figures["update_cpu_s"], figures["step_cpu_s"]) == (2.5, 0.5, 3.0)
    assert figures["rollout_s"] >= 0 and figures["update_s"] >= 0
    assert figures["rollout_s"] + figures["update_s"] == pytest.approx(figures["step_s"])
    assert clock.rollout_s == figures["rollout_s"] and clock.step_s == figures["step_s"]
