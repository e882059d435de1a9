"""Span writes of the SQL store: batched inserts, heartbeats, per-rollout sequence counters."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from agl.types import NotFoundError, Span
from agl.types.validation import span_json

from .. import _rules
from . import _codec
from ._codec import RawJson, json_loads
from ._steps import (
    Ctx,
    Effects,
    execute,
    prepared,
    set_rollout_status,
    sqlite_cursor,
    sqlite_sql,
    sync_worker,
    update_row,
    upsert,
)
from .schema import attempts as A
from .schema import rollouts as R
from .schema import span_sequence_ids as C
from .schema import spans as S

if TYPE_CHECKING:
    from ._steps import AnySelect


__all__ = ["add_spans", "allocate_sequence_ids"]


_ROLLOUT_COLUMNS_FOR_SPANS: tuple[str, ...] = (
    "seq",
    "rollout_id",
    "status",
    "end_time",
    "queue_pos",
    "num_attempts",
)


_ATTEMPT_COLUMNS = tuple(c.name for c in A.c)


def _lock_for_spans_stmt() -> AnySelect:
    joined = R.outerjoin(
        A, sa.and_(A.c.rollout_id == R.c.rollout_id, A.c.attempt_id == sa.bindparam("aid"))
    ).outerjoin(C, C.c.rollout_id == R.c.rollout_id)
    return (
        sa.select(
            *(R.c[name] for name in _ROLLOUT_COLUMNS_FOR_SPANS),
            *(c.label("a_" + c.name) for c in A.c),
            C.c.value.label("counter"),
        )
        .select_from(joined)
        .where(R.c.rollout_id == sa.bindparam("rid"))
        .with_for_update(of=R)
    )


def _lock_for_spans(
    conn: sa.Connection, ctx: Ctx, rollout_id: str, attempt_id: str
) -> tuple[dict[str, Any], dict[str, Any] | None, int]:
    """What a span write needs, in one statement: the locked rollout row (the columns a heartbeat may
    change or read, no JSON to decode), the attempt's row (None: no such attempt) and the rollout's
    sequence counter (0 if none yet)."""
    stmt = prepared("lock_for_spans", _lock_for_spans_stmt)
    if ctx.dialect == "sqlite":  # the hot path: straight on the driver, the row split by position
        cursor = sqlite_cursor(conn)
        found = cursor.execute(sqlite_sql(conn, stmt, ("aid", "rid")), (attempt_id, rollout_id)).fetchall()
        if not found:
            raise NotFoundError(f"Rollout {rollout_id} not found")
        values = found[0]
        n = len(_ROLLOUT_COLUMNS_FOR_SPANS)
        rollout = dict(zip(_ROLLOUT_COLUMNS_FOR_SPANS, values[:n], strict=True))
        attempt = None
        if values[n] is not None:
            attempt = dict(zip(_ATTEMPT_COLUMNS, values[n : n + len(_ATTEMPT_COLUMNS)], strict=True))
            if isinstance(attempt["metadata"], str):
                attempt["metadata"] = json_loads(attempt["metadata"])
        return rollout, attempt, int(values[-1] or 0)
    rows = execute(conn, stmt, {"rid": rollout_id, "aid": attempt_id})
    if not rows:
        raise NotFoundError(f"Rollout {rollout_id} not found")
    row = rows[0]
    rollout = {name: row[name] for name in _ROLLOUT_COLUMNS_FOR_SPANS}
    attempt = {c.name: row["a_" + c.name] for c in A.c} if row["a_seq"] is not None else None
    return rollout, attempt, int(row["counter"] or 0)


def _raise_counters(conn: sa.Connection, ctx: Ctx, highest: dict[str, int]) -> None:
    """Counters become at least the given values (explicit sequence ids are never reissued)."""

    def build() -> Any:
        stmt = upsert(ctx, C)
        keep = sa.case((C.c.value >= stmt.excluded.value, C.c.value), else_=stmt.excluded.value)
        return stmt.on_conflict_do_update(index_elements=[C.c.rollout_id], set_={"value": keep})

    stmt = prepared(("raise_counters", ctx.dialect), build)
    if ctx.dialect == "sqlite":
        sql = sqlite_sql(conn, stmt, ("rollout_id", "value"))
        sqlite_cursor(conn).executemany(sql, sorted(highest.items()))
        return
    rows = [{"rollout_id": rid, "value": value} for rid, value in sorted(highest.items())]
    execute(conn, stmt, rows)


_SPAN_COLUMNS = (
    "rollout_id",
    "attempt_id",
    "span_id",
    "sequence_id",
    "trace_id",
    "parent_id",
    "name",
    "start_time",
    "end_time",
    "payload",
)


def _span_row(span: Span) -> dict[str, Any]:
    row = {name: getattr(span, name) for name in _SPAN_COLUMNS[:-1]}  # the indexed fields, then the span
    row["payload"] = RawJson(span_json(span).decode())
    return row


def _span_values(span: Span) -> tuple[Any, ...]:
    """:func:`_span_row` as a tuple in the order of :data:`_SPAN_COLUMNS`."""
    return (
        span.rollout_id,
        span.attempt_id,
        span.span_id,
        span.sequence_id,
        span.trace_id,
        span.parent_id,
        span.name,
        span.start_time,
        span.end_time,
        span_json(span).decode(),
    )


def _insert_spans(conn: sa.Connection, ctx: Ctx, spans: Sequence[Span]) -> set[tuple[str, str, str]]:
    """Insert, skipping duplicates; the (rollout, attempt, span) ids actually inserted."""
    if ctx.dialect == "sqlite":
        return _insert_spans_sqlite(conn, ctx, spans)
    rows = [_span_row(span) for span in spans]

    def build() -> Any:
        stmt = upsert(ctx, S).on_conflict_do_nothing(
            index_elements=[S.c.rollout_id, S.c.attempt_id, S.c.span_id]
        )
        return stmt.returning(S.c.rollout_id, S.c.attempt_id, S.c.span_id)

    result = conn.execute(prepared(("insert_spans", ctx.dialect), build), rows)
    return {(row.rollout_id, row.attempt_id, row.span_id) for row in result}


def _insert_spans_sqlite(conn: sa.Connection, ctx: Ctx, spans: Sequence[Span]) -> set[tuple[str, str, str]]:
    """The hottest statement of the store, straight on the driver: one ``executemany``; only when the row
    count shows duplicates are the rows inserted one by one to learn which ones were stored."""

    def build() -> str:
        stmt = upsert(ctx, S).values({name: sa.bindparam(name) for name in _SPAN_COLUMNS})
        stmt = stmt.on_conflict_do_nothing(index_elements=[S.c.rollout_id, S.c.attempt_id, S.c.span_id])
        compiled = stmt.compile(dialect=conn.dialect)
        assert tuple(compiled.positiontup or ()) == _SPAN_COLUMNS, compiled.positiontup
        return compiled.string

    sql = prepared(("insert_spans_sql", ctx.dialect), build)
    cursor = sqlite_cursor(conn)
    if len(spans) == 1:  # one row: its row count says whether it was stored
        span = spans[0]
        cursor.execute(sql, _span_values(span))
        return {(span.rollout_id, span.attempt_id, span.span_id)} if cursor.rowcount == 1 else set()
    params = [_span_values(span) for span in spans]
    cursor.execute("SAVEPOINT agl_spans")
    cursor.executemany(sql, params)
    if cursor.rowcount == len(params):
        cursor.execute("RELEASE agl_spans")
        return {(span.rollout_id, span.attempt_id, span.span_id) for span in spans}
    # duplicates among them: start over one by one to learn which rows are new
    cursor.execute("ROLLBACK TO agl_spans")
    cursor.execute("RELEASE agl_spans")
    inserted: set[tuple[str, str, str]] = set()
    for span, values in zip(spans, params, strict=True):
        cursor.execute(sql, values)
        if cursor.rowcount == 1:
            inserted.add((span.rollout_id, span.attempt_id, span.span_id))
    return inserted


def add_spans(conn: sa.Connection, ctx: Ctx, eff: Effects, spans: Sequence[Span]) -> list[int]:
    """Insert spans, skipping duplicates; the indexes of those stored. All are validated first: an unknown
    rollout or attempt stores nothing. Each (rollout, attempt) that got a span has a heartbeat."""
    if len(spans) == 1:  # add_span: the same steps without the bookkeeping of several groups
        span = spans[0]
        r, row, counter = _lock_for_spans(conn, ctx, span.rollout_id, span.attempt_id)
        if row is None:
            raise NotFoundError(f"Attempt {span.attempt_id} not found for rollout {span.rollout_id}")
        if span.sequence_id > counter:
            _raise_counters(conn, ctx, {span.rollout_id: span.sequence_id})
        if not _insert_spans(conn, ctx, spans):
            return []
        _heartbeat(conn, ctx, eff, r, row, ctx.clock())
        return [0]
    return _add(conn, ctx, eff, spans, allocate=False)[1]


def add_spans_in_order(
    conn: sa.Connection, ctx: Ctx, eff: Effects, spans: Sequence[Span]
) -> tuple[list[Span], list[int]]:
    """Give each span the next sequence id of its rollout (in list order), then insert them as
    :func:`add_spans` does, in the same transaction: ``(numbered spans, indexes of those stored)``."""
    return _add(conn, ctx, eff, spans, allocate=True)


def _add(
    conn: sa.Connection, ctx: Ctx, eff: Effects, spans: Sequence[Span], *, allocate: bool
) -> tuple[list[Span], list[int]]:
    """Both writes: ids are allocated (``allocate``) after the rollouts are locked, the lock order of every
    writer (rollouts, then counters)."""
    now = ctx.clock()
    groups = list(dict.fromkeys((span.rollout_id, span.attempt_id) for span in spans))
    rollouts: dict[str, dict[str, Any]] = {}
    attempts: dict[tuple[str, str], dict[str, Any]] = {}
    counters: dict[str, int] = {}
    for rid, aid in sorted(groups):  # rollouts are locked in id order: no deadlock between batches
        r, row, counter = _lock_for_spans(conn, ctx, rid, aid)
        if row is None:
            raise NotFoundError(f"Attempt {aid} not found for rollout {rid}")
        rollouts.setdefault(rid, r)
        attempts[(rid, aid)] = row
        counters[rid] = counter

    if allocate:
        ids = allocate_sequence_ids(conn, ctx, [(s.rollout_id, s.attempt_id) for s in spans])
        spans = [s.with_sequence_id(seq) for s, seq in zip(spans, ids, strict=True)]
    else:
        highest: dict[str, int] = {}  # counters to raise; one already as high stays (they only grow)
        for span in spans:
            if span.sequence_id > max(highest.get(span.rollout_id, 0), counters[span.rollout_id]):
                highest[span.rollout_id] = span.sequence_id
        if highest:
            _raise_counters(conn, ctx, highest)

    inserted = _insert_spans(conn, ctx, spans)
    stored: list[int] = []
    touched: dict[tuple[str, str], None] = {}
    for i, span in enumerate(spans):
        key = (span.rollout_id, span.attempt_id, span.span_id)
        if key in inserted:
            inserted.discard(key)  # a span repeated within the batch is stored once
            stored.append(i)
            touched[key[:2]] = None
    for rid, aid in touched:
        _heartbeat(conn, ctx, eff, rollouts[rid], attempts[(rid, aid)], now)
    return list(spans), stored


def _heartbeat_stmt() -> sa.Update:
    return (
        sa.update(A)
        .where(A.c.seq == sa.bindparam("b_seq"))
        .values(status=sa.bindparam("b_status"), last_heartbeat_time=sa.bindparam("b_time"))
    )


def _heartbeat(
    conn: sa.Connection, ctx: Ctx, eff: Effects, r: dict[str, Any], row: dict[str, Any], now: float
) -> None:
    before = row["status"]
    after = _rules.attempt_status_after_span(before)
    if ctx.dialect == "sqlite":  # once per span write: straight on the driver
        stmt = prepared("span_heartbeat", _heartbeat_stmt)
        sql = sqlite_sql(conn, stmt, ("b_status", "b_time", "b_seq"))
        sqlite_cursor(conn).execute(sql, (after, now, row["seq"]))
    else:
        update_row(conn, A, row["seq"], {"last_heartbeat_time": now, "status": after})
    row.update(last_heartbeat_time=now, status=after)
    if after != before:
        sync_worker(conn, ctx, _codec.attempt_from_row(row), now)
    if _rules.rollout_promoted_by_span(r["status"], before, row["sequence_id"] == r["num_attempts"]):
        update_row(conn, R, r["seq"], set_rollout_status(conn, r, "running", now, eff))


def allocate_sequence_ids(conn: sa.Connection, ctx: Ctx, pairs: Sequence[tuple[str, str]]) -> list[int]:
    """One atomic increment per rollout; consecutive values handed out in request order."""
    counts: dict[str, int] = {}
    for rid, _ in pairs:
        counts[rid] = counts.get(rid, 0) + 1

    def build() -> Any:
        stmt = upsert(ctx, C).values(rollout_id=sa.bindparam("rid"), value=sa.bindparam("n"))
        return stmt.on_conflict_do_update(
            index_elements=[C.c.rollout_id], set_={"value": C.c.value + stmt.excluded.value}
        ).returning(C.c.value)

    stmt = prepared(("allocate_sequence_ids", ctx.dialect), build)
    next_value: dict[str, int] = {}
    for rid in sorted(counts):
        (row,) = execute(conn, stmt, {"rid": rid, "n": counts[rid]})
        last = int(row["value"])
        next_value[rid] = last - counts[rid] + 1
    result: list[int] = []
    for rid, _ in pairs:
        result.append(next_value[rid])
        next_value[rid] += 1
    return result
