"""The seconds of a training step's two phases (generation, then the update), wall and CPU, for its metrics."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["StepClock"]


class StepClock:
    """Started at a step's start; :meth:`rollout_done` when its batch is in, :meth:`update_done` at its end.

    ``cpu_seconds``: the CPU seconds used so far by what the step measures (the training process and its
    model server's): a figure the machine's other jobs inflate far less than wall time.
    """

    def __init__(self, cpu_seconds: Callable[[], float]) -> None:
        self._cpu = cpu_seconds
        self._marks = [(time.perf_counter(), cpu_seconds())]

    def rollout_done(self) -> None:
        self._marks.append((time.perf_counter(), self._cpu()))

    def update_done(self) -> None:
        self._marks.append((time.perf_counter(), self._cpu()))

    @property
    def rollout_s(self) -> float:
        """Wall seconds from the start until the batch was in (after :meth:`rollout_done`)."""
        return self._marks[1][0] - self._marks[0][0]

    @property
    def step_s(self) -> float:
        """Wall seconds from the start to the last mark."""
        return self._marks[-1][0] - self._marks[0][0]

    def figures(self) -> dict[str, float]:
        """``rollout_s``, ``update_s``, ``step_s`` and their CPU counterparts (``*_cpu_s``)."""
        if len(self._marks) != 3:
            raise RuntimeError("StepClock.figures() needs rollout_done() and update_done() first")
        (t0, c0), (t1, c1), (t2, c2) = self._marks
        return {
            "rollout_s": t1 - t0,
            "update_s": t2 - t1,
            "step_s": t2 - t0,
            "rollout_cpu_s": c1 - c0,
            "update_cpu_s": c2 - c1,
            "step_cpu_s": c2 - c0,
        }
