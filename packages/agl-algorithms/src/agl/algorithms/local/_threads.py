"""The torch thread count of a :class:`~agl.algorithms.local.LocalGRPO` update: measured, not guessed."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

__all__ = ["ThreadChoice", "with_threads"]


class ThreadChoice:
    """Picks the torch thread count of the update from measured seconds per token: 1 or every core.

    The first updates try one thread and every core; later ones use the faster per token (re-tried every 10
    steps), so idle cores are used when they really are idle; one thread whenever the load average is above
    the number of cores + 1 (a busy machine is not oversubscribed: there two threads were 2-10x slower)."""

    def __init__(self, cores: int, every: int = 10) -> None:
        self.options = sorted({1, max(1, cores)})
        self.every = every
        self.cost: dict[int, float] = {}

    def pick(self, step: int) -> int:
        if self._busy():
            return 1  # more threads than idle cores: OpenMP's barriers wait for descheduled threads
        untried = [n for n in self.options if n not in self.cost]
        if untried:
            return untried[0]
        best = min(self.options, key=lambda n: self.cost[n])
        if len(self.options) > 1 and step % self.every == 0:
            return next(n for n in self.options if n != best)  # look again: the machine's load changes
        return best

    def _busy(self) -> bool:
        """Whether the machine runs more than one job per core besides this one (load average)."""
        try:
            return os.getloadavg()[0] > max(self.options) + 1
        except OSError:  # not available on this platform
            return False

    def record(self, threads: int, seconds_per_token: float) -> None:
        self.cost[threads] = seconds_per_token


def with_threads(threads: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn`` with ``threads`` torch threads, then restore the previous number."""
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(previous)
