"""Building blocks of the SQL store's write transactions.

Statements are built once and reused (:func:`prepared`): building a SQLAlchemy statement costs about as
much as running it on SQLite, and a reused statement also reuses its compiled form.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy as sa
from agl.types import (
    FINISHED_STATUSES,
    QUEUED_STATUSES,
    Attempt,
    NotFoundError,
    RolloutConfig,
    RolloutStatus,
    Worker,
)

from .. import _rules
from . import _codec
from ._codec import json_dumps, json_loads
from .schema import attempts as A
from .schema import rollouts as R
from .schema import workers as W

__all__ = ["Ctx", "Effects", "prepared", "sqlite_sql"]

if TYPE_CHECKING:
    from typing import TypeAlias

    from typing_extensions import Unpack

    AnySelect: TypeAlias = "sa.Select[Unpack[tuple[Any, ...]]]"
    """A ``SELECT`` of any columns (SQLAlchemy types a statement by its column types)."""


S = TypeVar("S")

_PREPARED: dict[Hashable, Any] = {}


def prepared(key: Hashable, build: Callable[[], S]) -> S:
    """The statement stored under ``key``, built by ``build()`` the first time."""
    try:
        return _PREPARED[key]
    except KeyError:
        statement = _PREPARED[key] = build()
        return statement


SQLITE_INDEXED_BY = "agl_sqlite_indexed_by"
"""Execution option ``(table, index)``: on SQLite, the statement reads ``table`` through ``index``
(``INDEXED BY``), where the planner, which has no statistics, would choose worse."""


class _Plan:
    """A statement compiled for SQLite: its SQL, parameter order, defaults and JSON columns."""

    __slots__ = ("columns", "defaults", "json_columns", "json_params", "names", "plain", "sql", "stmt")

    def __init__(self, stmt: Any, conn: sa.Connection, keys: tuple[str, ...]) -> None:
        compiled = stmt.compile(dialect=conn.dialect, column_keys=list(keys))
        if "POSTCOMPILE" in compiled.string:
            raise AssertionError("statements run by execute() cannot use IN lists; use one_of()")
        self.stmt = stmt  # keeps id(stmt) from being reused while the plan is cached
        self.sql: str = compiled.string
        indexed_by = stmt.get_execution_options().get(SQLITE_INDEXED_BY)
        if indexed_by is not None:
            table, index = indexed_by
            pattern, hinted = rf"\bFROM {table}\b", f"FROM {table} INDEXED BY {index}"
            self.sql, found = re.subn(pattern, hinted, self.sql, count=1)
            assert found, self.sql
        self.names: tuple[str, ...] = tuple(compiled.positiontup or ())
        self.defaults: dict[str, Any] = dict(compiled.params)
        self.json_params: frozenset[str] = frozenset(
            n for n in self.names if n in compiled.binds and isinstance(compiled.binds[n].type, sa.JSON)
        )
        self.json_columns: frozenset[str] = frozenset(
            c.name for c in getattr(stmt, "selected_columns", ()) if isinstance(c.type, sa.JSON)
        ) | frozenset(c.name for c in getattr(stmt, "_returning", ()) if isinstance(c.type, sa.JSON))
        # every parameter given by the caller and none JSON: a tuple in one step
        self.plain = not self.json_params and set(self.names) <= set(keys)
        self.columns: list[str] | None = None

    def values(self, params: dict[str, Any]) -> tuple[Any, ...]:
        if self.plain:
            return tuple([params[name] for name in self.names])
        out: list[Any] = []
        for name in self.names:
            value = params[name] if name in params else self.defaults[name]
            if name in self.json_params and value is not None:
                value = json_dumps(value)
            out.append(value)
        return tuple(out)


_SQLITE_PLANS: dict[tuple[int, tuple[str, ...]], _Plan] = {}


def sqlite_cursor(conn: sa.Connection) -> sqlite3.Cursor:
    """A cursor of ``conn``'s sqlite3 connection, kept on the connection (one per statement costs ~1 us)."""
    cursor: sqlite3.Cursor | None = conn.__dict__.get("_agl_cursor")
    if cursor is not None:
        return cursor
    driver = conn.connection.driver_connection
    assert driver is not None
    fresh: sqlite3.Cursor = driver.cursor()
    conn.__dict__["_agl_cursor"] = fresh
    return fresh


def execute(
    conn: sa.Connection, stmt: Any, params: dict[str, Any] | list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Run a prepared statement (one parameter set, or a list for executemany); its rows as dicts.

    On SQLite the statement is compiled once and run straight on the driver's cursor: SQLAlchemy's
    execution machinery costs several times what SQLite needs for these small statements. JSON values
    are encoded and decoded here as SQLAlchemy would. On PostgreSQL it runs through SQLAlchemy.
    """
    if conn.dialect.name != "sqlite":
        result = conn.execute(stmt, params or {})
        return [dict(row) for row in result.mappings()] if result.returns_rows else []
    many = isinstance(params, list)
    first: dict[str, Any] = (params[0] if params else {}) if many else (params or {})
    key = (id(stmt), tuple(first))  # the caller's key order: no sorting per call
    plan = _PLANS_BY_CALL.get(key)
    if plan is None:
        plan = _PLANS_BY_CALL[key] = _plan(conn, stmt, tuple(sorted(first)))
    cursor = sqlite_cursor(conn)
    if many:
        cursor.executemany(plan.sql, [plan.values(p) for p in params])
        return []
    cursor.execute(plan.sql, plan.values(first))
    description = cursor.description
    if description is None:
        return []
    columns = plan.columns
    if columns is None:
        columns = plan.columns = [d[0] for d in description]
    rows = [dict(zip(columns, row, strict=True)) for row in cursor.fetchall()]
    if plan.json_columns:
        for row in rows:
            for name in plan.json_columns:
                value = row.get(name)
                if isinstance(value, str):  # (JSON numbers come back as numbers: NUMERIC affinity)
                    row[name] = json_loads(value)
    return rows


def _plan(conn: sa.Connection, stmt: Any, keys: tuple[str, ...]) -> _Plan:
    plan = _SQLITE_PLANS.get((id(stmt), keys))
    if plan is None:
        plan = _SQLITE_PLANS[(id(stmt), keys)] = _Plan(stmt, conn, keys)
    return plan


_PLANS_BY_CALL: dict[tuple[int, tuple[str, ...]], _Plan] = {}
"""Plans by statement and parameter names in the caller's order (several orders may share a plan)."""


def sqlite_sql(conn: sa.Connection, stmt: Any, names: tuple[str, ...]) -> str:
    """The SQLite SQL of a prepared statement whose parameters, in positional order, are ``names``: hot
    paths run it on the driver's cursor with a plain tuple (no dicts on the way in). Compiled once, and
    kept with the others (:data:`_SQLITE_PLANS`, whose query plans a test checks)."""
    key = (id(stmt), names)
    sql = _SQLITE_SQL.get(key)
    if sql is None:
        keys = tuple(sorted(names))
        plan = _Plan(stmt, conn, keys)
        if plan.names != names or not plan.plain:
            raise AssertionError(f"parameters {plan.names} are not {names}: {plan.sql}")
        _SQLITE_PLANS[(id(stmt), keys)] = plan
        sql = _SQLITE_SQL[key] = plan.sql
    return sql


_SQLITE_SQL: dict[tuple[int, tuple[str, ...]], str] = {}


def one_of(column: sa.ColumnElement[Any], values: Iterable[str]) -> sa.ColumnElement[bool]:
    """``column IN (values)`` written as ORs of equalities (SQLite still searches its index with it),
    so that the statement compiles to fixed SQL."""
    return sa.or_(*(column == value for value in sorted(values)))


@dataclass
class Ctx:
    """What every operation needs besides its arguments."""

    clock: Callable[[], float]
    dialect: str


@dataclass
class Effects:
    """What a committed write changed, so the store can wake its waiters."""

    queued: bool = False
    finished: set[str] = field(default_factory=set[str])


def upsert(ctx: Ctx, table: sa.Table) -> Any:
    """``INSERT`` with ``ON CONFLICT`` support in the current dialect."""
    if ctx.dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


# -- rollouts ------------------------------------------------------------------------------------

_LOCKED_ROLLOUT_COLUMNS = [*R.c, *(c.label("a_" + c.name) for c in A.c)]


def lock_rollout(conn: sa.Connection, rollout_id: str) -> dict[str, Any]:
    """The rollout's row, locked until the transaction ends. Unknown id → NotFoundError."""
    stmt = prepared(
        "lock_rollout", lambda: sa.select(R).where(R.c.rollout_id == sa.bindparam("rid")).with_for_update()
    )
    rows = execute(conn, stmt, {"rid": rollout_id})
    if not rows:
        raise NotFoundError(f"Rollout {rollout_id} not found")
    return rows[0]


def lock_rollout_with_attempt(
    conn: sa.Connection, rollout_id: str, attempt_id: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The locked rollout row and one of its attempt rows (``"latest"``: the latest), in one statement."""
    latest = attempt_id == "latest"

    def build() -> AnySelect:
        which = A.c.sequence_id == R.c.num_attempts if latest else A.c.attempt_id == sa.bindparam("aid")
        joined = R.outerjoin(A, sa.and_(A.c.rollout_id == R.c.rollout_id, which))
        return (
            sa.select(*_LOCKED_ROLLOUT_COLUMNS)
            .select_from(joined)
            .where(R.c.rollout_id == sa.bindparam("rid"))
            .with_for_update(of=R)
        )

    params = {"rid": rollout_id} if latest else {"rid": rollout_id, "aid": attempt_id}
    rows = execute(conn, prepared(("lock_rollout_with_attempt", latest), build), params)
    row = rows[0] if rows else None
    if row is None:
        raise NotFoundError(f"Rollout {rollout_id} not found")
    rollout = {c.name: row[c.name] for c in R.c}
    attempt = {c.name: row["a_" + c.name] for c in A.c} if row["a_seq"] is not None else None
    return rollout, attempt


def latest_attempt_row(conn: sa.Connection, rollout_id: str, sequence_id: int) -> dict[str, Any]:
    stmt = prepared(
        "attempt_by_sequence",
        lambda: sa.select(A).where(
            A.c.rollout_id == sa.bindparam("rid"), A.c.sequence_id == sa.bindparam("sid")
        ),
    )
    (row,) = execute(conn, stmt, {"rid": rollout_id, "sid": sequence_id})
    return row


def next_queue_pos(conn: sa.Connection) -> int:
    stmt = prepared("next_queue_pos", lambda: sa.select(sa.func.coalesce(sa.func.max(R.c.queue_pos), 0) + 1))
    (row,) = execute(conn, stmt)
    return int(next(iter(row.values())))


def update_row(conn: sa.Connection, table: sa.Table, seq: int, values: dict[str, Any]) -> None:
    """``UPDATE table SET values WHERE seq = :seq`` with a statement reused per set of columns."""
    if not values:
        return
    names = tuple(sorted(values))

    def build() -> sa.Update:
        return (
            sa.update(table)
            .where(table.c.seq == sa.bindparam("b_seq"))
            .values({name: sa.bindparam("b_" + name, type_=table.c[name].type) for name in names})
        )

    params = {"b_" + name: value for name, value in values.items()}
    params["b_seq"] = seq
    execute(conn, prepared(("update", table.name, names), build), params)


def update_rows(conn: sa.Connection, table: sa.Table, rows: Iterable[tuple[int, dict[str, Any]]]) -> None:
    """Several ``update_row`` with the same columns, in one executemany."""
    batch = list(rows)
    if not batch:
        return
    names = tuple(sorted(batch[0][1]))

    def build() -> sa.Update:
        return (
            sa.update(table)
            .where(table.c.seq == sa.bindparam("b_seq"))
            .values({name: sa.bindparam("b_" + name, type_=table.c[name].type) for name in names})
        )

    params = [{"b_seq": seq, **{"b_" + name: values[name] for name in names}} for seq, values in batch]
    execute(conn, prepared(("update", table.name, names), build), params)


def set_rollout_status(
    conn: sa.Connection, r: dict[str, Any], status: RolloutStatus, now: float, eff: Effects
) -> dict[str, Any]:
    """Columns to write when a rollout's status is set: end time and queue entry. Updates ``r``.

    Entering a queued status appends the rollout to the tail of the queue unless it still has an entry
    there; leaving one keeps the entry, which the next dequeue that reaches it discards (a stale entry).
    """
    values: dict[str, Any] = {
        "status": status,
        "end_time": _rules.rollout_end_time(status, r["status"], r["end_time"], now),
    }
    if status in FINISHED_STATUSES:
        eff.finished.add(r["rollout_id"])
    if status in QUEUED_STATUSES and r["queue_pos"] is None:
        values["queue_pos"] = next_queue_pos(conn)
        eff.queued = True
    r.update(values)
    return values


def apply_attempt_status(
    conn: sa.Connection, ctx: Ctx, eff: Effects, r: dict[str, Any], attempt: Attempt, now: float
) -> None:
    """After ``attempt``'s status was written: propagate it to the rollout (latest attempt only) and the worker."""
    if attempt.sequence_id == r["num_attempts"]:
        config = RolloutConfig.model_validate(r["config"])
        status = _rules.rollout_status_after_attempt(r["status"], attempt.status, attempt.sequence_id, config)
        if status is not None:
            update_row(conn, R, r["seq"], set_rollout_status(conn, r, status, now, eff))
    sync_worker(conn, ctx, attempt, now)


# -- workers -------------------------------------------------------------------------------------

_WORKER_STATE_FIELDS = (
    "status",
    "last_dequeue_time",
    "last_busy_time",
    "last_idle_time",
    "current_rollout_id",
    "current_attempt_id",
)


def sync_worker(
    conn: sa.Connection, ctx: Ctx, attempt: Attempt, now: float, *, dequeued: bool = False
) -> None:
    """Apply :func:`_rules.worker_after_attempt` to the attempt's worker (created if new)."""
    if not attempt.worker_id:
        return
    # The rule only sets fields (it never reads the worker's current state), so the fields it set on a
    # blank worker are exactly the columns to write: one upsert, no read.
    updated = _rules.worker_after_attempt(
        Worker(worker_id=attempt.worker_id), attempt, now, dequeued=dequeued
    )
    changed = updated.model_fields_set - {"worker_id"}
    upsert_worker(conn, ctx, attempt.worker_id, {name: getattr(updated, name) for name in changed})


def mark_worker_idle(conn: sa.Connection, ctx: Ctx, worker_id: str, now: float) -> None:
    """Apply :func:`_rules.worker_after_empty_dequeue` (which depends on the current status)."""
    stmt = prepared(
        "lock_worker", lambda: sa.select(W).where(W.c.worker_id == sa.bindparam("wid")).with_for_update()
    )
    rows = execute(conn, stmt, {"wid": worker_id})
    worker = _codec.worker_from_row(rows[0]) if rows else Worker(worker_id=worker_id)
    updated = _rules.worker_after_empty_dequeue(worker, now)
    upsert_worker(conn, ctx, worker_id, {name: getattr(updated, name) for name in _WORKER_STATE_FIELDS})


def upsert_worker(conn: sa.Connection, ctx: Ctx, worker_id: str, values: dict[str, Any]) -> None:
    names = tuple(sorted(values))

    def build() -> Any:
        stmt = upsert(ctx, W).values(
            worker_id=sa.bindparam("b_worker_id"), **{name: sa.bindparam("b_" + name) for name in names}
        )
        return stmt.on_conflict_do_update(
            index_elements=[W.c.worker_id], set_={name: stmt.excluded[name] for name in names}
        )

    params = {"b_" + name: value for name, value in values.items()}
    params["b_worker_id"] = worker_id
    execute(conn, prepared(("upsert_worker", ctx.dialect, names), build), params)


def attempted(r: dict[str, Any], attempt: Attempt) -> Any:
    """An ``AttemptedRollout`` from a rollout row and its attempt."""
    from agl.types import AttemptedRollout

    rollout = _codec.rollout_from_row(r)  # validated; so is the attempt
    return AttemptedRollout.model_construct(**dict(rollout), attempt=attempt)
