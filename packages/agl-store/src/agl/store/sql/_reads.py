"""Read operations of the SQL store: filtered, sorted, paginated queries run by ``Database.read``.

Semantics shared with the in-memory store (:mod:`agl.store._query`): predicates are pooled with
``filter_logic`` and no predicate matches everything; ``contains`` is a case-sensitive substring test;
``None`` sorts last ascending and first descending; ties and unsorted results keep creation order (the
``seq`` column), reversed for an unsorted descending query; ``total`` counts every match.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import sqlalchemy as sa
from agl.types import (
    FINISHED_STATUSES,
    Attempt,
    AttemptedRollout,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)

from . import _codec, schema
from ._steps import Ctx, execute, prepared

R = schema.rollouts
A = schema.attempts
S = schema.spans
W = schema.workers
RS = schema.resources

T = TypeVar("T")

__all__ = ["Page"]


class Page:
    """Filters, order and pagination of one query."""

    __slots__ = ("filter_logic", "limit", "offset", "sort_by", "sort_order")

    def __init__(
        self, sort_by: str | None, sort_order: str, limit: int, offset: int, filter_logic: str = "and"
    ):
        self.sort_by = sort_by
        self.sort_order = sort_order
        self.limit = limit
        self.offset = offset
        self.filter_logic = filter_logic


def contains(ctx: Ctx, column: sa.ColumnElement[Any], needle: str) -> sa.ColumnElement[bool]:
    """Case-sensitive substring test (SQLite's LIKE ignores case, so neither dialect uses LIKE)."""
    if ctx.dialect == "postgresql":
        return sa.func.strpos(column, needle) > 0
    return sa.func.instr(column, needle) > 0


def pool(predicates: list[sa.ColumnElement[bool]], logic: str) -> sa.ColumnElement[bool] | None:
    if not predicates:
        return None
    return sa.or_(*predicates) if logic == "or" else sa.and_(*predicates)


def _order_by(
    table: sa.Table, page: Page, sort_column: Callable[[str], sa.ColumnElement[Any]]
) -> list[sa.ColumnElement[Any]]:
    seq = table.c.seq
    if page.sort_by is None:
        return [seq.desc() if page.sort_order == "desc" else seq.asc()]
    column = sort_column(page.sort_by)
    if page.sort_order == "desc":
        return [column.desc().nulls_first(), seq.asc()]
    return [column.asc().nulls_last(), seq.asc()]


def _column_or_json(table: sa.Table, json_columns: frozenset[str]) -> Callable[[str], sa.ColumnElement[Any]]:
    def sort_column(name: str) -> sa.ColumnElement[Any]:
        column = table.c[name]
        return sa.cast(column, sa.Text) if name in json_columns else column

    return sort_column


def _paginate(
    conn: sa.Connection,
    query: sa.Select,
    where: sa.ColumnElement[bool] | None,
    count_from: sa.FromClause,
    page: Page,
    order: list[sa.ColumnElement[Any]],
    convert: Callable[[Any], T],
) -> PaginatedResult[T]:
    """One page of rows and the total number of matches (counted only when the page does not tell)."""

    def count() -> int:
        stmt = sa.select(sa.func.count()).select_from(count_from)
        if where is not None:
            stmt = stmt.where(where)
        return int(conn.execute(stmt).scalar_one())

    if page.limit == 0:
        return PaginatedResult(items=[], limit=0, offset=page.offset, total=count())
    stmt = query.order_by(*order)
    if where is not None:
        stmt = stmt.where(where)
    if page.limit > 0:
        stmt = stmt.limit(page.limit)
    if page.offset:
        stmt = stmt.offset(page.offset)
    rows = conn.execute(stmt).mappings().all()
    if (page.limit < 0 or len(rows) < page.limit) and (rows or not page.offset):
        total = page.offset + len(rows)  # the last page: nothing beyond it
    else:
        total = count()
    return PaginatedResult(
        items=[convert(row) for row in rows], limit=page.limit, offset=page.offset, total=total
    )


# -- rollouts and attempts -----------------------------------------------------------------------

_ROLLOUT_JSON = frozenset({"input", "config", "metadata"})
_ROLLOUT_COLUMNS = [
    R.c.rollout_id,
    R.c.input,
    R.c.start_time,
    R.c.end_time,
    R.c.mode,
    R.c.resources_id,
    R.c.status,
    R.c.config,
    R.c.metadata,
]
_WITH_LATEST_ATTEMPT = R.outerjoin(
    A, sa.and_(A.c.rollout_id == R.c.rollout_id, A.c.sequence_id == R.c.num_attempts)
)


def _rollouts_select() -> sa.Select:
    return sa.select(*_ROLLOUT_COLUMNS, *_codec.attempt_columns(_codec.ATTEMPT_PREFIX)).select_from(
        _WITH_LATEST_ATTEMPT
    )


def query_rollouts(
    conn: sa.Connection,
    ctx: Ctx,
    status_in: Sequence[str] | None,
    rollout_id_in: Sequence[str] | None,
    rollout_id_contains: str | None,
    page: Page,
) -> PaginatedResult[Rollout | AttemptedRollout]:
    predicates: list[sa.ColumnElement[bool]] = []
    if status_in is not None:
        predicates.append(R.c.status.in_(list(status_in)))
    if rollout_id_in is not None:
        predicates.append(R.c.rollout_id.in_(list(rollout_id_in)))
    if rollout_id_contains is not None:
        predicates.append(contains(ctx, R.c.rollout_id, rollout_id_contains))
    where = pool(predicates, page.filter_logic)
    order = _order_by(R, page, _column_or_json(R, _ROLLOUT_JSON))
    return _paginate(conn, _rollouts_select(), where, R, page, order, _codec.rollout_from_row)


def get_rollout(conn: sa.Connection, ctx: Ctx, rollout_id: str) -> Rollout | AttemptedRollout | None:
    stmt = prepared("get_rollout", lambda: _rollouts_select().where(R.c.rollout_id == sa.bindparam("rid")))
    rows = execute(conn, stmt, {"rid": rollout_id})
    return _codec.rollout_from_row(rows[0]) if rows else None


def finished_rollouts(conn: sa.Connection, ctx: Ctx, rollout_ids: Sequence[str]) -> list[Rollout]:
    """The finished rollouts among ``rollout_ids``, in request order (unknown ids omitted)."""
    found: dict[str, Rollout] = {}
    unique = list(dict.fromkeys(rollout_ids))
    for start in range(0, len(unique), 500):
        rows = conn.execute(
            sa.select(*_ROLLOUT_COLUMNS).where(
                R.c.rollout_id.in_(unique[start : start + 500]), R.c.status.in_(sorted(FINISHED_STATUSES))
            )
        ).mappings()
        for row in rows:
            found[row["rollout_id"]] = _codec.plain_rollout_from_row(row)
    return [found[rid] for rid in unique if rid in found]


def query_attempts(conn: sa.Connection, ctx: Ctx, rollout_id: str, page: Page) -> PaginatedResult[Attempt]:
    order = _order_by(A, page, _column_or_json(A, frozenset({"metadata"})))
    return _paginate(
        conn,
        sa.select(*_codec.attempt_columns()),
        A.c.rollout_id == rollout_id,
        A,
        page,
        order,
        _codec.attempt_from_row,
    )


def latest_attempt(conn: sa.Connection, ctx: Ctx, rollout_id: str) -> Attempt | None:
    row = (
        conn.execute(
            sa.select(*_codec.attempt_columns())
            .select_from(
                A.join(R, sa.and_(R.c.rollout_id == A.c.rollout_id, R.c.num_attempts == A.c.sequence_id))
            )
            .where(R.c.rollout_id == rollout_id)
        )
        .mappings()
        .first()
    )
    return _codec.attempt_from_row(row) if row is not None else None


# -- spans ---------------------------------------------------------------------------------------

_SPAN_COLUMNS = frozenset(
    {
        "rollout_id",
        "attempt_id",
        "span_id",
        "sequence_id",
        "trace_id",
        "parent_id",
        "name",
        "start_time",
        "end_time",
    }
)


def _span_sort_column(name: str) -> sa.ColumnElement[Any]:
    if name in _SPAN_COLUMNS:
        return S.c[name]
    return S.c.payload[name].as_string()  # nested documents (status, attributes...): by their JSON text


def query_spans(
    conn: sa.Connection,
    ctx: Ctx,
    rollout_id: str,
    attempt_id: str | None,
    exact: dict[str, str | None],
    substrings: dict[str, str | None],
    page: Page,
) -> PaginatedResult[Span]:
    if attempt_id == "latest":
        latest = latest_attempt(conn, ctx, rollout_id)
        if latest is None:
            return PaginatedResult(items=[], limit=page.limit, offset=page.offset, total=0)
        attempt_id = latest.attempt_id
    must = S.c.rollout_id == rollout_id
    if attempt_id is not None:
        must = sa.and_(must, S.c.attempt_id == attempt_id)
    predicates: list[sa.ColumnElement[bool]] = []
    for name, value in exact.items():
        if value is not None:
            predicates.append(S.c[name] == value)
    for name, value in substrings.items():
        if value is not None:
            predicates.append(contains(ctx, S.c[name], value))
    optional = pool(predicates, page.filter_logic)
    where = must if optional is None else sa.and_(must, optional)
    order = _order_by(S, page, _span_sort_column)
    payload = _codec.json_text(S.c.payload, ctx.dialect).label("payload")
    return _paginate(
        conn, sa.select(payload), where, S, page, order, lambda row: Span.model_validate_json(row["payload"])
    )


# -- resources and workers -----------------------------------------------------------------------

_RESOURCES_COLUMNS = [RS.c.resources_id, RS.c.create_time, RS.c.update_time, RS.c.version, RS.c.resources]


def query_resources(
    conn: sa.Connection, ctx: Ctx, resources_id: str | None, resources_id_contains: str | None, page: Page
) -> PaginatedResult[ResourcesUpdate]:
    predicates: list[sa.ColumnElement[bool]] = []
    if resources_id is not None:
        predicates.append(RS.c.resources_id == resources_id)
    if resources_id_contains is not None:
        predicates.append(contains(ctx, RS.c.resources_id, resources_id_contains))
    where = pool(predicates, "and")
    order = _order_by(RS, page, _column_or_json(RS, frozenset({"resources"})))
    return _paginate(conn, sa.select(*_RESOURCES_COLUMNS), where, RS, page, order, _codec.resources_from_row)


def get_resources(conn: sa.Connection, ctx: Ctx, resources_id: str | None) -> ResourcesUpdate | None:
    """The snapshot with this id, or the latest one when ``resources_id`` is None."""
    stmt = sa.select(*_RESOURCES_COLUMNS)
    if resources_id is None:
        stmt = stmt.order_by(RS.c.touch.desc()).limit(1)
    else:
        stmt = stmt.where(RS.c.resources_id == resources_id)
    row = conn.execute(stmt).mappings().first()
    return _codec.resources_from_row(row) if row is not None else None


def query_workers(
    conn: sa.Connection, ctx: Ctx, status_in: Sequence[str] | None, worker_id_contains: str | None, page: Page
) -> PaginatedResult[Worker]:
    predicates: list[sa.ColumnElement[bool]] = []
    if status_in is not None:
        predicates.append(W.c.status.in_(list(status_in)))
    if worker_id_contains is not None:
        predicates.append(contains(ctx, W.c.worker_id, worker_id_contains))
    where = pool(predicates, page.filter_logic)
    order = _order_by(W, page, _column_or_json(W, frozenset({"heartbeat_stats"})))
    columns = [W.c[name] for name in _codec.WORKER_FIELDS]
    return _paginate(conn, sa.select(*columns), where, W, page, order, _codec.worker_from_row)


def get_worker(conn: sa.Connection, ctx: Ctx, worker_id: str) -> Worker | None:
    columns = [W.c[name] for name in _codec.WORKER_FIELDS]
    row = conn.execute(sa.select(*columns).where(W.c.worker_id == worker_id)).mappings().first()
    return _codec.worker_from_row(row) if row is not None else None


def counts(conn: sa.Connection, ctx: Ctx) -> dict[str, int]:
    tables = {
        "total_rollouts": R,
        "total_attempts": A,
        "total_spans": S,
        "total_resources": RS,
        "total_workers": W,
    }
    return {
        key: int(conn.execute(sa.select(sa.func.count()).select_from(table)).scalar_one())
        for key, table in tables.items()
    }
