"""Filtering, sorting and pagination of in-memory rows, with the same semantics as the SQL backend.

- Predicates are pooled with ``filter_logic``: ``"and"`` (all hold) or ``"or"`` (any holds); with no
  predicate at all, every row matches under both.
- ``contains`` is a case-sensitive substring test; a ``None`` value never contains anything.
- Sorting puts ``None`` last in ascending order and first in descending order; ties keep the input order.
- ``limit=-1`` is unlimited, ``limit=0`` returns no items; ``total`` counts every match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from agl.types import InvalidRequestError, PaginatedResult

from ._rules import sort_key_none_last

__all__ = ["Predicate", "contains", "filter_rows", "paginate", "sort_rows"]

T = TypeVar("T")
Predicate = Callable[[Any], bool]


def contains(value: str | None, needle: str) -> bool:
    return value is not None and needle in value


def filter_rows(rows: Iterable[T], predicates: Sequence[Predicate], logic: str) -> list[T]:
    if not predicates:
        return list(rows)
    if len(predicates) == 1:
        (only,) = predicates
        return [row for row in rows if only(row)]
    if logic == "or":
        return [row for row in rows if any(p(row) for p in predicates)]
    return [row for row in rows if all(p(row) for p in predicates)]


def sort_rows(
    rows: list[T], sort_by: str | None, sort_order: str, get: Callable[[Any], Any] | None = None
) -> list[T]:
    """Sort by a model field (validated beforehand by ``_rules.validate_page``); ``get`` reads the field
    from a row that is not a model."""
    if sort_by is None:
        return rows if sort_order == "asc" else rows[::-1]
    field = sort_by
    read = get if get is not None else (lambda row: getattr(row, field, None))
    try:
        return sorted(rows, key=lambda row: sort_key_none_last(read(row)), reverse=sort_order == "desc")
    except TypeError as exc:
        raise InvalidRequestError(
            f"cannot sort by {sort_by!r}: its values are not comparable with each other ({exc})"
        ) from exc


def paginate(rows: list[T], limit: int, offset: int) -> PaginatedResult[T]:
    total = len(rows)
    items = rows[offset:] if limit < 0 else rows[offset : offset + limit]
    return PaginatedResult.model_construct(items=items, limit=limit, offset=offset, total=total)
