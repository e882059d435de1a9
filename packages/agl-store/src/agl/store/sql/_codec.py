"""Conversions between the agl models and rows of the SQL store.

JSON columns are written with pydantic-core's serializer (fast, and it understands pydantic models);
a span is dumped once by pydantic and passed through as :class:`RawJson`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pydantic_core
import sqlalchemy as sa
from agl.types import (
    Attempt,
    AttemptedRollout,
    InvalidRequestError,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    Worker,
)

from . import schema

__all__ = [
    "RawJson",
    "attempt_from_row",
    "json_dumps",
    "json_loads",
    "json_text",
    "resources_from_row",
    "rollout_from_row",
    "worker_from_row",
]

ATTEMPT_PREFIX = "a_"
"""Label prefix of the latest attempt's columns when they are selected next to a rollout's."""


class RawJson(str):
    """A string that already is JSON: written to a JSON column as is."""

    __slots__ = ()


def json_dumps(value: Any) -> str:
    if isinstance(value, RawJson):
        return value
    try:
        return pydantic_core.to_json(value, inf_nan_mode="null").decode()
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidRequestError(
            f"the SQL store keeps data as JSON, and this value is not JSON-serializable: {exc}"
        ) from exc


def json_loads(text: str | bytes) -> Any:
    return pydantic_core.from_json(text)


def json_text(column: sa.ColumnElement[Any], dialect: str) -> sa.ColumnElement[str]:
    """A JSON column read as its text, to hand to ``model_validate_json`` without a detour through dicts."""
    if dialect == "postgresql":  # asyncpg decodes json itself: ask the server for text
        return sa.cast(column, sa.Text)
    return sa.type_coerce(column, sa.Text)


ATTEMPT_FIELDS = tuple(Attempt.model_fields)
ROLLOUT_FIELDS = tuple(Rollout.model_fields)
"""The columns of the rollouts and attempts tables named as the fields they hold."""


def rollout_from_row(row: Mapping[Any, Any]) -> Rollout | AttemptedRollout:
    """A rollout, with its latest attempt attached when the row carries one (``a_*`` columns)."""
    fields: dict[str, Any] = {name: row[name] for name in ROLLOUT_FIELDS}
    fields["config"] = RolloutConfig.model_validate(fields["config"])
    if row.get(ATTEMPT_PREFIX + "attempt_id") is not None:
        fields["attempt"] = attempt_from_row(row, prefix=ATTEMPT_PREFIX)
        return AttemptedRollout.model_validate(fields)
    return Rollout.model_validate(fields)


def attempt_from_row(row: Mapping[Any, Any], prefix: str = "") -> Attempt:
    return Attempt.model_validate({name: row[prefix + name] for name in ATTEMPT_FIELDS})


def attempt_columns(prefix: str = "") -> list[sa.ColumnElement[Any]]:
    columns = [schema.attempts.c[name] for name in ATTEMPT_FIELDS]
    return [c.label(prefix + c.name) for c in columns] if prefix else list(columns)


def attempt_values(attempt: Attempt) -> dict[str, Any]:
    """Column values of an attempt (one column per field)."""
    return {name: getattr(attempt, name) for name in ATTEMPT_FIELDS}


def rollout_values(rollout: Rollout) -> dict[str, Any]:
    """Column values of a rollout, config copies included (not ``queue_pos``/``num_attempts``)."""
    values = {name: getattr(rollout, name) for name in ROLLOUT_FIELDS}
    values["timeout_seconds"] = rollout.config.timeout_seconds
    values["unresponsive_seconds"] = rollout.config.unresponsive_seconds
    return values


def resources_from_row(row: Mapping[Any, Any]) -> ResourcesUpdate:
    return ResourcesUpdate.model_validate(
        {
            "resources_id": row["resources_id"],
            "create_time": row["create_time"],
            "update_time": row["update_time"],
            "version": row["version"],
            "resources": row["resources"],
        }
    )


WORKER_FIELDS = tuple(Worker.model_fields)


def worker_from_row(row: Mapping[Any, Any]) -> Worker:
    return Worker.model_validate({name: row[name] for name in WORKER_FIELDS})
