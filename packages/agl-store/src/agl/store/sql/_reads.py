"""Read operations of the SQL store: filtered, sorted, paginated queries run by ``Database.read``.

Filters are those the query objects declare (:meth:`agl.types.StoreQuery.where`), each on the column of
the same name. Semantics shared with the in-memory store (:mod:`agl.store.memory._query`): predicates are pooled
with ``filter_logic`` and no predicate matches everything; ``contains`` is a case-sensitive substring test;
``None`` sorts last ascending and first descending; ties and unsorted results keep creation order (the
``seq`` column), reversed for an unsorted descending query (spans of several rollouts: by rollout id, then creation);
``total`` counts every match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

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
from agl.types.query import (
    AttemptQuery,
    Condition,
    ResourcesQuery,
    RolloutQuery,
    SpanQuery,
    StoreQuery,
    Where,
    WorkerQuery,
)

from .. import _rules
from . import _codec
from ._steps import Ctx, execute, prepared
from .schema import attempts as A
from .schema import resources as RS
from .schema import rollouts as R
from .schema import spans as S
from .schema import workers as W

if TYPE_CHECKING:
    from ._steps import AnySelect


T = TypeVar("T")

__all__ = ["where_clause"]


def contains(ctx: Ctx, column: sa.ColumnElement[Any], needle: str) -> sa.ColumnElement[bool]:
    """Case-sensitive substring test (SQLite's LIKE ignores case, so neither dialect uses LIKE)."""
    if ctx.dialect == "postgresql":
        return sa.func.strpos(column, needle) > 0
    return sa.func.instr(column, needle) > 0


def pool(predicates: list[sa.ColumnElement[bool]], logic: str) -> sa.ColumnElement[bool] | None:
    if not predicates:
        return None
    if len(predicates) == 1:
        return predicates[0]
    return sa.or_(*predicates) if logic == "or" else sa.and_(*predicates)


def _condition(ctx: Ctx, table: sa.Table, condition: Condition) -> sa.ColumnElement[bool]:
    """One declared filter as SQL; the attribute it tests is a column of the same name."""
    column = table.c[condition.attribute]
    if condition.op == "exact":
        return column == condition.value
    if condition.op == "within":
        return column.in_(list(condition.value))
    return contains(ctx, column, condition.value)


def where_clause(ctx: Ctx, table: sa.Table, where: Where) -> sa.ColumnElement[bool] | None:
    """The must-hold conditions and the pool of the optional ones, all together."""
    parts = [_condition(ctx, table, c) for c in where.must]
    optional = pool([_condition(ctx, table, c) for c in where.optional], where.logic)
    if optional is not None:
        parts.append(optional)
    return pool(parts, "and")


def _order_by(
    table: sa.Table,
    page: RolloutQuery | AttemptQuery | ResourcesQuery | SpanQuery | WorkerQuery,
    ties: Sequence[sa.ColumnElement[Any]] = (),
) -> list[sa.ColumnElement[Any]]:
    """The sort column (``None`` last ascending, first descending), then ``ties``, then creation order;
    an unsorted descending query reverses all of it."""
    seq = table.c.seq
    sort_by = _rules.sort_field(page)
    if sort_by is None:
        if page.sort_order == "desc":
            return [*(t.desc() for t in ties), seq.desc()]
        return [*(t.asc() for t in ties), seq.asc()]
    column = table.c[sort_by]
    if page.sort_order == "desc":
        return [column.desc().nulls_first(), *ties, seq.asc()]
    return [column.asc().nulls_last(), *ties, seq.asc()]


def _paginate(
    conn: sa.Connection,
    query: AnySelect,
    where: sa.ColumnElement[bool] | None,
    count_from: sa.FromClause,
    page: StoreQuery,
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


def _rollouts_select() -> AnySelect:
    return sa.select(*_ROLLOUT_COLUMNS, *_codec.attempt_columns(_codec.ATTEMPT_PREFIX)).select_from(
        _WITH_LATEST_ATTEMPT
    )


def query_rollouts(
    conn: sa.Connection, ctx: Ctx, query: RolloutQuery
) -> PaginatedResult[Rollout | AttemptedRollout]:
    where = where_clause(ctx, R, query.where())
    return _paginate(conn, _rollouts_select(), where, R, query, _order_by(R, query), _codec.rollout_from_row)


def get_rollout(conn: sa.Connection, ctx: Ctx, rollout_id: str) -> Rollout | AttemptedRollout | None:
    stmt = prepared("get_rollout", lambda: _rollouts_select().where(R.c.rollout_id == sa.bindparam("rid")))
    rows = execute(conn, stmt, {"rid": rollout_id})
    return _codec.rollout_from_row(rows[0]) if rows else None


def _finished_among(conn: sa.Connection, select: AnySelect, rollout_ids: Sequence[str]) -> Iterator[Any]:
    """Rows of ``select`` for the finished rollouts among ``rollout_ids``, as mappings (500 ids a statement)."""
    unique = list(dict.fromkeys(rollout_ids))
    finished = sorted(FINISHED_STATUSES)
    for start in range(0, len(unique), 500):
        yield from conn.execute(
            select.where(R.c.rollout_id.in_(unique[start : start + 500]), R.c.status.in_(finished))
        ).mappings()


def finished_rollouts(
    conn: sa.Connection, ctx: Ctx, rollout_ids: Sequence[str]
) -> list[Rollout | AttemptedRollout]:
    """The finished rollouts among ``rollout_ids`` with their latest attempts, in request order (unknown ids
    omitted)."""
    found = {
        row["rollout_id"]: _codec.rollout_from_row(row)
        for row in _finished_among(conn, _rollouts_select(), rollout_ids)
    }
    return [found[rid] for rid in dict.fromkeys(rollout_ids) if rid in found]


def finished_rollout_ids(conn: sa.Connection, ctx: Ctx, rollout_ids: Sequence[str]) -> set[str]:
    """Which of ``rollout_ids`` have finished (ids only: what a waiter polls for)."""
    return {row["rollout_id"] for row in _finished_among(conn, sa.select(R.c.rollout_id), rollout_ids)}


def query_attempts(conn: sa.Connection, ctx: Ctx, query: AttemptQuery) -> PaginatedResult[Attempt]:
    where = where_clause(ctx, A, query.where())
    columns = sa.select(*_codec.attempt_columns())
    return _paginate(conn, columns, where, A, query, _order_by(A, query), _codec.attempt_from_row)


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


def query_spans(conn: sa.Connection, ctx: Ctx, query: SpanQuery) -> PaginatedResult[Span]:
    """One rollout's spans, or several rollouts' (each rollout's latest attempt through a join)."""
    single = isinstance(query.rollout_id, str)
    attempt_id = query.attempt_id
    source: sa.FromClause = S
    if attempt_id == "latest":
        if isinstance(query.rollout_id, str):
            latest = latest_attempt(conn, ctx, query.rollout_id)
            if latest is None:
                return PaginatedResult(items=[], limit=query.limit, offset=query.offset, total=0)
            attempt_id = latest.attempt_id
        else:
            source = S.join(R, R.c.rollout_id == S.c.rollout_id).join(
                A,
                sa.and_(
                    A.c.rollout_id == S.c.rollout_id,
                    A.c.sequence_id == R.c.num_attempts,
                    A.c.attempt_id == S.c.attempt_id,
                ),
            )
            attempt_id = None
    where = where_clause(ctx, S, query.where())
    if attempt_id is not None:
        scope = S.c.attempt_id == attempt_id
        where = scope if where is None else sa.and_(scope, where)
    order = _order_by(S, query, () if single else (S.c.rollout_id,))
    payload = _codec.json_text(S.c.payload, ctx.dialect).label("payload")
    return _paginate(
        conn,
        sa.select(payload).select_from(source),
        where,
        source,
        query,
        order,
        lambda row: Span.model_validate_json(row["payload"]),
    )


# -- resources and workers -----------------------------------------------------------------------

_RESOURCES_COLUMNS = [RS.c.resources_id, RS.c.create_time, RS.c.update_time, RS.c.version, RS.c.resources]


def query_resources(conn: sa.Connection, ctx: Ctx, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
    where = where_clause(ctx, RS, query.where())
    columns = sa.select(*_RESOURCES_COLUMNS)
    return _paginate(conn, columns, where, RS, query, _order_by(RS, query), _codec.resources_from_row)


def get_resources(conn: sa.Connection, ctx: Ctx, resources_id: str | None) -> ResourcesUpdate | None:
    """The snapshot with this id, or the latest one when ``resources_id`` is None."""
    if resources_id is None:
        stmt = prepared(
            "latest_resources", lambda: sa.select(*_RESOURCES_COLUMNS).order_by(RS.c.touch.desc()).limit(1)
        )
        rows = execute(conn, stmt)
    else:  # once per rollout (each runner fetches its rollout's resources): a statement built once
        stmt = prepared(
            "resources_by_id",
            lambda: sa.select(*_RESOURCES_COLUMNS).where(RS.c.resources_id == sa.bindparam("rsid")),
        )
        rows = execute(conn, stmt, {"rsid": resources_id})
    return _codec.resources_from_row(rows[0]) if rows else None


def query_workers(conn: sa.Connection, ctx: Ctx, query: WorkerQuery) -> PaginatedResult[Worker]:
    where = where_clause(ctx, W, query.where())
    columns = sa.select(*(W.c[name] for name in _codec.WORKER_FIELDS))
    return _paginate(conn, columns, where, W, query, _order_by(W, query), _codec.worker_from_row)


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
