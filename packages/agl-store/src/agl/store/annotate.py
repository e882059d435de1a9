"""Notes added to a rollout's metadata: the one way an algorithm marks a rollout without losing what is there."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from agl.types import UNSET, NotFoundError, Rollout, RolloutStatus, Unset

if TYPE_CHECKING:
    from .base import LightningStore

__all__ = ["annotate_rollout"]


async def annotate_rollout(
    store: LightningStore,
    rollout_id: str,
    notes: Mapping[str, Any],
    *,
    status: RolloutStatus | Unset = UNSET,
) -> Rollout:
    """Add ``notes`` to the rollout's metadata, keeping its other keys (``update_rollout(metadata=...)``
    replaces the whole document); ``status``: also set it, in the same write.

    The current metadata is read from the store, not from a copy the caller holds, so a note written since
    that copy was made is kept. Raises :class:`~agl.types.NotFoundError` for an unknown rollout.
    """
    current = await store.get_rollout_by_id(rollout_id)
    if current is None:
        raise NotFoundError(f"Rollout {rollout_id} not found")
    return await store.update_rollout(
        rollout_id, status=status, metadata={**(current.metadata or {}), **notes}
    )
