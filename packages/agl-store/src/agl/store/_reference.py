"""The reference's deprecated keywords of ``LightningStore``'s query methods, accepted with a warning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from agl.types.caller import warn_at_caller

__all__ = ["DEPRECATED_QUERY_ALIASES", "rollout_query_aliases"]

T = TypeVar("T")

DEPRECATED_QUERY_ALIASES: dict[str, dict[str, str]] = {
    "query_rollouts": {"status": "status_in", "rollout_ids": "rollout_id_in"},
}
"""The reference's deprecated keywords of the query methods, by method: old name -> the query field it means."""


def rollout_query_aliases(
    status_in: Sequence[T] | None,
    rollout_id_in: Sequence[str] | None,
    status: Sequence[T] | None,
    rollout_ids: Sequence[str] | None,
) -> tuple[Sequence[T] | None, Sequence[str] | None]:
    """``(status_in, rollout_id_in)`` with the deprecated ``status``/``rollout_ids`` filling in (the new names
    win when both are given), warning at the caller of ``query_rollouts`` when the old ones are used."""
    if status is None and rollout_ids is None:
        return status_in, rollout_id_in
    warn_at_caller(
        "query_rollouts(status=, rollout_ids=) are deprecated: use status_in= and rollout_id_in=",
        DeprecationWarning,
    )
    return (
        status_in if status_in is not None else status,
        rollout_id_in if rollout_id_in is not None else rollout_ids,
    )
