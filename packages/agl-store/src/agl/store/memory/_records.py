"""Records and small helpers of the in-memory store: what it keeps per rollout, the copies it hands out and
the checks on its inputs that only it needs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from agl.types import (
    Attempt,
    AttemptedRollout,
    InvalidRequestError,
    NamedResources,
    ResourcesUpdate,
    Rollout,
)

from ._spans import StoredSpan

__all__ = [
    "RolloutRecord",
    "copy_attempt",
    "copy_attempted",
    "copy_rollout",
    "new_metadata",
    "resources_update",
    "write_fields",
]


class RolloutRecord:
    """A rollout with everything hanging off it."""

    __slots__ = ("attempts", "order", "rollout", "size", "span_keys", "spans")

    def __init__(self, rollout: Rollout, order: int) -> None:
        self.rollout = rollout
        self.order = order
        self.size = 0  # estimated bytes, counted only by a store with a byte cap
        self.attempts: list[Attempt] = []
        self.spans: list[StoredSpan] = []
        self.span_keys: set[tuple[str, str]] = set()

    def find_attempt(self, attempt_id: str) -> Attempt | None:
        for attempt in reversed(self.attempts):
            if attempt.attempt_id == attempt_id:
                return attempt
        return None


def copy_attempt(attempt: Attempt) -> Attempt:
    if attempt.metadata is None:
        return attempt.model_copy()
    return attempt.model_copy(update={"metadata": dict(attempt.metadata)})


def copy_rollout(record: RolloutRecord) -> Rollout | AttemptedRollout:
    rollout = record.rollout
    fields = dict(rollout.__dict__)
    fields["config"] = rollout.config.model_copy()
    if rollout.metadata is not None:
        fields["metadata"] = dict(rollout.metadata)
    if record.attempts:
        return AttemptedRollout.model_construct(attempt=copy_attempt(record.attempts[-1]), **fields)
    return Rollout.model_construct(**fields)


def copy_attempted(record: RolloutRecord) -> AttemptedRollout:
    """:func:`copy_rollout` of a rollout that has an attempt (one just started or claimed)."""
    return cast(AttemptedRollout, copy_rollout(record))


def new_metadata(metadata: Any) -> dict[str, Any]:
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise InvalidRequestError(f"metadata must be a dict or None, not {type(metadata).__name__}")
    return dict(cast("dict[str, Any]", metadata))


def resources_update(
    resources_id: str, resources: NamedResources, create_time: float, update_time: float, version: int
) -> ResourcesUpdate:
    try:
        return ResourcesUpdate(
            resources_id=resources_id,
            create_time=create_time,
            update_time=update_time,
            version=version,
            resources=resources,
        )
    except ValueError as exc:
        raise InvalidRequestError(f"invalid resources: {exc}") from exc


def write_fields(record: Rollout | Attempt, changes: Mapping[str, Any]) -> None:
    """Set the fields of an update on a stored rollout or attempt, a metadata dict copied; ``status`` is left
    to the status rules."""
    for name, value in changes.items():
        if name != "status":
            setattr(record, name, dict(value) if name == "metadata" and value is not None else value)
