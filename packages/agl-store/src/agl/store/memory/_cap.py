"""The optional cap of the in-memory store: limits, and the estimated memory cost of what it keeps.

The estimates were measured with ``benchmarks/memory_cost.py`` (``tracemalloc``, Python 3.11): a finished
rollout with one attempt and a small input costs about 3.7 KiB plus its input and metadata as JSON; a span
about 320 bytes plus its JSON; each further attempt about 1 KiB.
"""

from __future__ import annotations

from typing import Any

import pydantic_core
from agl.types import InvalidRequestError

__all__ = ["ATTEMPT_BYTES", "ROLLOUT_BYTES", "SPAN_BYTES", "MemoryCap", "rollout_size"]

ROLLOUT_BYTES = 3_700
"""Fixed cost of a rollout with its first attempt (without its input and metadata)."""
ATTEMPT_BYTES = 1_000
"""Cost of each attempt after the first."""
SPAN_BYTES = 320
"""Fixed cost of a span (without its JSON)."""


def rollout_size(request: Any) -> int:
    """Estimated bytes of a new rollout from its (checked) request."""
    size = ROLLOUT_BYTES + len(pydantic_core.to_json(request.input, inf_nan_mode="constants"))
    if request.metadata:
        size += len(pydantic_core.to_json(request.metadata, inf_nan_mode="constants"))
    return size


class MemoryCap:
    """``max_rollouts`` and ``max_bytes`` (either may be ``None``: no limit)."""

    def __init__(self, max_rollouts: int | None, max_bytes: int | None) -> None:
        given: list[tuple[str, object]] = [("max_rollouts", max_rollouts), ("max_bytes", max_bytes)]
        for name, value in given:  # checked at run time: callers may pass anything
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise InvalidRequestError(f"{name} must be a positive integer or None, not {value!r}")
        self.max_rollouts = max_rollouts
        self.max_bytes = max_bytes

    def excess(self, rollouts: int, size: int) -> tuple[int, int]:
        """How many rollouts and bytes over the cap these totals are (<= 0: within it)."""
        over_rollouts = 0 if self.max_rollouts is None else rollouts - self.max_rollouts
        over_bytes = 0 if self.max_bytes is None else size - self.max_bytes
        return over_rollouts, over_bytes

    def with_slack(self, rollouts: int, size: int) -> tuple[int, int]:
        """What to free for a need: the need plus a twentieth of the cap."""
        extra_rollouts = 0 if self.max_rollouts is None else self.max_rollouts // 20
        extra_bytes = 0 if self.max_bytes is None else self.max_bytes // 20
        return max(rollouts, 0) + extra_rollouts, max(size, 0) + extra_bytes

    def full_message(self, rollouts: int, size: int, evictable: int) -> str:
        limits: list[str] = []
        if self.max_rollouts is not None:
            limits.append(f"max_rollouts={self.max_rollouts} (holding {rollouts})")
        if self.max_bytes is not None:
            limits.append(f"max_bytes={self.max_bytes} (holding about {size})")
        return (
            f"the in-memory store is full: {', '.join(limits)}, and only {evictable} finished rollout(s) "
            "could be evicted; finish or cancel rollouts, raise the cap, or use a SQL store"
        )
