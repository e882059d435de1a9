"""What a store says of itself (capabilities, statistics) and what ``finish_attempt`` answers."""

from __future__ import annotations

from typing import NamedTuple

from agl.types import Attempt, AttemptedRollout, AttemptUpdate, ResourcesUpdate, Span
from typing_extensions import TypedDict

__all__ = ["FinishedAttempt", "LightningStoreCapabilities", "LightningStoreStatistics"]


class LightningStoreCapabilities(TypedDict, total=False):
    """What a store can be trusted with. Missing keys mean ``False``."""

    thread_safe: bool
    """Safe to call from several threads (each with its own event loop)."""
    async_safe: bool
    """Safe under concurrent coroutines of one event loop."""
    zero_copy: bool
    """One copy of the data shared across processes: usable from a forked or spawned child."""
    otlp_traces: bool
    """Accepts OTLP/HTTP traces at :meth:`LightningStore.otlp_traces_endpoint`."""


class LightningStoreStatistics(TypedDict, total=False):
    name: str
    total_rollouts: int
    total_attempts: int
    total_spans: int
    total_resources: int
    total_workers: int
    uptime: float


class AttemptFinish(NamedTuple):
    """The checked arguments of :meth:`LightningStore.finish_attempt`, as a backend's ``_finish_attempt`` gets them."""

    rollout_id: str
    attempt_id: str
    spans: list[Span]
    changes: AttemptUpdate
    """The attempt's fields to write (the outcome: status, metadata...)."""
    claim_next_for: str | None


class FinishedAttempt(NamedTuple):
    """What :meth:`LightningStore.finish_attempt` wrote, and the rollout it claimed next (if asked)."""

    spans: list[Span]
    """The spans stored, numbered (duplicates skipped)."""
    attempt: Attempt
    """The attempt as written."""
    next: tuple[AttemptedRollout, ResourcesUpdate | None] | None = None
    """The next rollout claimed for ``claim_next_for``, with its resources; ``None``: not asked, or none queued."""
