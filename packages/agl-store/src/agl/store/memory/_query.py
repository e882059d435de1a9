"""Filtering, sorting and pagination of in-memory rows, with the same semantics as the SQL backend.

- Predicates are pooled with ``filter_logic``: ``"and"`` (all hold) or ``"or"`` (any holds); with no
  predicate at all, every row matches under both.
- ``contains`` is a case-sensitive substring test; a ``None`` value never contains anything.
- Sorting puts ``None`` last in ascending order and first in descending order; ties keep the input order.
- ``limit=-1`` is unlimited, ``limit=0`` returns no items; ``total`` counts every match.

Filters come declared by the query objects (:meth:`agl.types.StoreQuery.where`); :func:`predicates` turns
each :class:`~agl.types.Condition` into a test on a row, given how to read an attribute from a row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar, cast

from agl.types import Condition, InvalidRequestError, PaginatedResult, Where

from .._rules import sort_key_none_last

__all__ = [
    "Predicate",
    "Reader",
    "contains",
    "filter_rows",
    "filter_where",
    "page_of",
    "paginate",
    "predicate",
    "select_by_key",
    "sort_rows",
    "without",
]

T = TypeVar("T")
Predicate = Callable[[Any], bool]
Reader = Callable[[str], Callable[[Any], Any]]
"""Attribute name → a function that reads that attribute from a row."""


def contains(value: str | None, needle: str) -> bool:
    return value is not None and needle in value


def predicate(condition: Condition, read: Reader) -> Predicate:
    """A test of rows for one condition (same semantics as :meth:`Condition.test`, inlined for speed)."""
    get = read(condition.attribute)
    value = condition.value
    if condition.op == "exact":
        return lambda row: get(row) == value
    if condition.op == "within":
        return lambda row: get(row) in value
    return lambda row: contains(get(row), value)


def without(where: Where, attribute: str) -> Where:
    """``where`` without its must-hold conditions on ``attribute`` (a backend applied them by lookup)."""
    return Where([c for c in where.must if c.attribute != attribute], where.optional, where.logic)


def filter_where(rows: Iterable[T], where: Where, read: Reader) -> list[T]:
    """The rows that pass every must-hold condition and the pool of the optional ones."""
    must = [predicate(c, read) for c in where.must]
    optional = [predicate(c, read) for c in where.optional]
    if not must:
        return filter_rows(rows, optional, where.logic)
    if where.logic == "or" and len(optional) > 1:
        return [r for r in rows if all(p(r) for p in must) and any(p(r) for p in optional)]
    return filter_rows(rows, must + optional, "and")


def select_by_key(rows: Mapping[str, T], key: str, where: Where, read: Reader) -> list[T]:
    """:func:`filter_where` over ``rows.values()`` (in insertion order), looking the row up by id when a
    condition that must hold (or any condition, pooled with "and") pins the ``key`` attribute to one value."""
    pinned = where.must if where.logic == "or" and len(where.optional) > 1 else where.must + where.optional
    for condition in pinned:
        if condition.attribute == key and condition.op == "exact":
            found = [rows[condition.value]] if condition.value in rows else []
            rest = Where(
                [c for c in where.must if c is not condition],
                [c for c in where.optional if c is not condition],
                where.logic,
            )
            return filter_where(found, rest, read)
    return filter_where(rows.values(), where, read)


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
    """Sort by a model field (validated beforehand by the query object); ``get`` reads the field
    from a row that is not a model."""
    if sort_by is None:
        return rows if sort_order == "asc" else rows[::-1]
    field = sort_by

    def attribute(row: Any) -> Any:
        return getattr(row, field, None)

    read = get if get is not None else attribute
    try:
        return sorted(rows, key=lambda row: sort_key_none_last(read(row)), reverse=sort_order == "desc")
    except TypeError as exc:
        raise InvalidRequestError(
            f"cannot sort by {sort_by!r}: its values are not comparable with each other ({exc})"
        ) from exc


def paginate(rows: list[T], limit: int, offset: int) -> PaginatedResult[T]:
    total = len(rows)
    items = rows[offset:] if limit < 0 else rows[offset : offset + limit]
    return page_of(items, limit, offset, total)


def page_of(items: list[T], limit: int, offset: int, total: int) -> PaginatedResult[T]:
    """A page built without validation (the rows are the store's own)."""
    # model_construct of the unparametrised class (no PaginatedResult[T] class is made), typed here.
    return cast(
        "PaginatedResult[T]",
        PaginatedResult.model_construct(items=items, limit=limit, offset=offset, total=total),
    )
