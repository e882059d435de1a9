"""The reference's ``InMemoryLightningStore`` arguments, accepted so that its users' programs run as written.

``thread_safe`` chose a lock there; this store is always safe to share between threads. Its memory bound was a
threshold at which it evicted the spans of finished rollouts; here ``max_bytes`` bounds the store, evicting
whole finished rollouts, oldest first. ``eviction_memory_threshold`` becomes that bound (a fraction of the
machine's memory, or bytes); the other options have no counterpart and warn once with what to use instead.
"""

from __future__ import annotations

import os
from typing import Any

from agl.types.caller import warn_at_caller

__all__ = ["reference_memory_bound"]


def _machine_memory_bytes() -> int:
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


def reference_memory_bound(
    max_bytes: int | None,
    eviction_memory_threshold: float | None,
    safe_memory_threshold: float | None,
    span_size_estimator: Any,
    tracker: Any,
) -> int | None:
    """``max_bytes`` after the reference's memory options, warning about those without effect here."""
    if eviction_memory_threshold is not None:
        threshold = eviction_memory_threshold
        if isinstance(threshold, float) and 0 < threshold <= 1:
            threshold = int(threshold * _machine_memory_bytes())
        if threshold <= 0:
            raise ValueError(
                f"eviction_memory_threshold must be a fraction of memory in (0, 1] or bytes, got {threshold!r}"
            )
        warn_at_caller(
            f"InMemoryLightningStore(eviction_memory_threshold=...) bounds the store at {int(threshold)} bytes "
            "(max_bytes=): past it, whole finished rollouts are evicted, oldest first; pass max_bytes= instead",
            DeprecationWarning,
        )
        if max_bytes is None:
            max_bytes = int(threshold)
    ignored = {
        "safe_memory_threshold": safe_memory_threshold,
        "span_size_estimator": span_size_estimator,
        "tracker": tracker,
    }
    for name, value in ignored.items():
        if value is not None:
            warn_at_caller(
                f"InMemoryLightningStore({name}=...) has no effect here: the store's bound is max_bytes= and its "
                "figures are served at the store server's /metrics",
                UserWarning,
            )
    return max_bytes
