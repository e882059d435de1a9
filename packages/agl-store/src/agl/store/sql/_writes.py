"""Write operations of the SQL store: each function is one transaction (``Database.write`` runs it).

They follow one pattern: lock the rollout rows they change (``FOR UPDATE``; SQLite is serialized by
``BEGIN IMMEDIATE`` instead), read the current state, let :mod:`agl.store._rules` decide what it becomes,
write it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa
from agl.types import (
    QUEUED_STATUSES,
    RUNNING_STATUSES,
    Attempt,
    AttemptedRollout,
    AttemptUpdate,
    EnqueueRolloutRequest,
    InvalidRequestError,
    NamedResources,
    NotFoundError,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutStatus,
    Worker,
    new_attempt_id,
    new_resources_id,
    new_rollout_id,
)
from pydantic import ValidationError

from .. import _rules
from . import _codec
from ._steps import (
    SQLITE_INDEXED_BY,
    Ctx,
    Effects,
    apply_attempt_status,
    attempted,
    execute,
    latest_attempt_row,
    lock_rollout,
    lock_rollout_with_attempt,
    mark_worker_idle,
    one_of,
    prepared,
    set_rollout_status,
    sync_worker,
    update_row,
    update_rows,
    upsert,
)
from .schema import attempts as A
from .schema import resources as RS
from .schema import rollouts as R
from .schema import workers as W

if TYPE_CHECKING:
    from ._steps import AnySelect


__all__ = ["KEEP"]

KEEP: Any = object()
"""``update_worker``'s ``heartbeat_stats`` argument meaning "leave as is"."""

_QUEUED = sorted(QUEUED_STATUSES)
_BY_QUEUE = {SQLITE_INDEXED_BY: (R.name, "agl_rollouts_queue")}
"""Rows with a queue position are few (queued or stale); without statistics SQLite's planner would scan
the whole table for the stale ones (time growing with the store) or sort the queued ones."""
assert any(index.name == "agl_rollouts_queue" for index in R.indexes)


def _invalid(exc: ValidationError) -> InvalidRequestError:
    return InvalidRequestError(str(exc))


# -- rollouts and the queue ----------------------------------------------------------------------


def _new_rollout(
    request: EnqueueRolloutRequest, status: RolloutStatus, now: float, latest: str | None
) -> Rollout:
    return Rollout(
        rollout_id=new_rollout_id(),
        input=request.input,
        start_time=now,
        mode=request.mode,
        resources_id=request.resources_id if request.resources_id is not None else latest,
        status=status,
        config=request.config.model_copy(deep=True) if request.config is not None else RolloutConfig(),
        metadata=dict(request.metadata) if request.metadata is not None else {},
    )


def _latest_resources_and_queue_tail(conn: sa.Connection) -> tuple[str | None, int]:
    def build() -> AnySelect:
        latest = sa.select(RS.c.resources_id).order_by(RS.c.touch.desc()).limit(1).scalar_subquery()
        tail = sa.select(sa.func.coalesce(sa.func.max(R.c.queue_pos), 0) + 1).scalar_subquery()
        return sa.select(latest.label("latest"), tail.label("tail"))

    (row,) = execute(conn, prepared("latest_and_tail", build))
    return row["latest"], int(row["tail"])


def enqueue(
    conn: sa.Connection, ctx: Ctx, eff: Effects, requests: Sequence[EnqueueRolloutRequest]
) -> list[Rollout]:
    if not requests:
        return []
    now = ctx.clock()
    latest, tail = _latest_resources_and_queue_tail(conn)
    rollouts = [_new_rollout(request, "queuing", now, latest) for request in requests]
    rows = [
        {**_codec.rollout_values(rollout), "queue_pos": tail + i, "num_attempts": 0}
        for i, rollout in enumerate(rollouts)
    ]
    execute(conn, prepared("insert_rollout", lambda: sa.insert(R)), rows)
    eff.queued = True
    return rollouts


def start_rollout(
    conn: sa.Connection, ctx: Ctx, eff: Effects, request: EnqueueRolloutRequest, worker_id: str | None
) -> AttemptedRollout:
    now = ctx.clock()
    latest, _ = _latest_resources_and_queue_tail(conn)
    rollout = _new_rollout(request, "preparing", now, latest)
    attempt = Attempt(
        rollout_id=rollout.rollout_id,
        attempt_id=new_attempt_id(),
        sequence_id=1,
        start_time=now,
        worker_id=worker_id,
    )
    execute(
        conn,
        prepared("insert_rollout", lambda: sa.insert(R)),
        [{**_codec.rollout_values(rollout), "queue_pos": None, "num_attempts": 1}],
    )
    execute(conn, prepared("insert_attempt", lambda: sa.insert(A)), [_codec.attempt_values(attempt)])
    sync_worker(conn, ctx, attempt, now)
    return AttemptedRollout.model_validate({**dict(rollout), "attempt": attempt})


def _claimable(conn: sa.Connection, limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` queued rollouts in queue order, locked; rows another transaction holds are
    skipped (``SKIP LOCKED``: concurrent dequeuers pass each other instead of waiting)."""

    def build() -> AnySelect:
        return (
            sa.select(R)
            .execution_options(**_BY_QUEUE)
            .where(R.c.queue_pos.is_not(None), one_of(R.c.status, _QUEUED))
            .order_by(R.c.queue_pos, R.c.seq)
            .limit(sa.bindparam("n"))
            .with_for_update(skip_locked=True)
        )

    return execute(conn, prepared("claimable", build), {"n": limit})


def _discard_stale_entries(conn: sa.Connection, up_to: int | None) -> None:
    """Drop queue entries of rollouts that left the queue while queued (started, cancelled...), up to
    ``up_to`` (a queue position; None: all), as a dequeue that walked past them would."""

    def build(bounded: bool) -> AnySelect:
        stmt = (
            sa.select(R.c.seq)
            .execution_options(**_BY_QUEUE)
            .where(R.c.queue_pos.is_not(None), sa.not_(one_of(R.c.status, _QUEUED)))
        )
        if bounded:
            stmt = stmt.where(R.c.queue_pos <= sa.bindparam("up_to"))
        return stmt.with_for_update(skip_locked=True)

    bounded = up_to is not None
    stmt = prepared(("stale_entries", bounded), lambda: build(bounded))
    stale = [row["seq"] for row in execute(conn, stmt, {"up_to": up_to} if bounded else {})]
    update_rows(conn, R, ((seq, {"queue_pos": None}) for seq in stale))


def has_queue_entries(conn: sa.Connection, ctx: Ctx) -> bool:
    """Whether the queue has any entry (a queued rollout, or a stale entry a dequeue would discard): a
    read, so that polling an empty queue takes no write lock."""
    stmt = prepared(
        "has_queue_entries", lambda: sa.select(R.c.seq).where(R.c.queue_pos.is_not(None)).limit(1)
    )
    return bool(execute(conn, stmt))


def mark_idle(conn: sa.Connection, ctx: Ctx, eff: Effects, worker_id: str) -> None:
    """What a dequeue that found nothing writes: the worker is idle (it dequeued just now)."""
    mark_worker_idle(conn, ctx, worker_id, ctx.clock())


def dequeue(
    conn: sa.Connection, ctx: Ctx, eff: Effects, limit: int, worker_id: str | None, mark_idle: bool
) -> list[AttemptedRollout]:
    """Claim up to ``limit`` queued rollouts in queue order; stale entries before them are discarded.

    The status is checked on the locked row, so a rollout is never claimed twice.
    """
    now = ctx.clock()
    rows = _claimable(conn, limit)
    _discard_stale_entries(conn, rows[-1]["queue_pos"] if len(rows) == limit else None)
    claimed: list[tuple[dict[str, Any], Attempt]] = []
    for r in rows:
        sequence_id = r["num_attempts"] + 1
        attempt = Attempt(
            rollout_id=r["rollout_id"],
            attempt_id=new_attempt_id(),
            sequence_id=sequence_id,
            start_time=now,
            worker_id=worker_id,
        )
        r.update(status="preparing", end_time=None, queue_pos=None, num_attempts=sequence_id)
        claimed.append((r, attempt))
    if claimed:
        execute(
            conn,
            prepared("insert_attempt", lambda: sa.insert(A)),
            [_codec.attempt_values(a) for _, a in claimed],
        )
        keys = ("status", "end_time", "queue_pos", "num_attempts")
        update_rows(conn, R, ((r["seq"], {k: r[k] for k in keys}) for r, _ in claimed))
        sync_worker(conn, ctx, claimed[-1][1], now, dequeued=True)
    elif worker_id and mark_idle:
        mark_worker_idle(conn, ctx, worker_id, now)
    return [attempted(r, attempt) for r, attempt in claimed]


def start_attempt(
    conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str, worker_id: str | None
) -> AttemptedRollout:
    now = ctx.clock()
    r = lock_rollout(conn, rollout_id)
    attempt = Attempt(
        rollout_id=rollout_id,
        attempt_id=new_attempt_id(),
        sequence_id=r["num_attempts"] + 1,
        start_time=now,
        worker_id=worker_id,
    )
    execute(conn, prepared("insert_attempt", lambda: sa.insert(A)), [_codec.attempt_values(attempt)])
    values = set_rollout_status(conn, r, "preparing", now, eff)
    values["num_attempts"] = r["num_attempts"] = attempt.sequence_id
    update_row(conn, R, r["seq"], values)
    sync_worker(conn, ctx, attempt, now)
    return attempted(r, attempt)


def update_rollout(
    conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str, changes: dict[str, Any]
) -> Rollout:
    now = ctx.clock()
    r, latest = lock_rollout_with_attempt(conn, rollout_id, "latest")
    current = _codec.rollout_from_row(r)
    try:
        updated = Rollout.model_validate({**current.model_dump(), **changes})
    except ValidationError as exc:
        raise _invalid(exc) from exc
    values: dict[str, Any] = {name: getattr(updated, name) for name in changes if name != "status"}
    if "config" in changes:
        values["timeout_seconds"] = updated.config.timeout_seconds
        values["unresponsive_seconds"] = updated.config.unresponsive_seconds
    r.update(values)
    if "status" in changes:
        values.update(set_rollout_status(conn, r, updated.status, now, eff))
    update_row(conn, R, r["seq"], values)
    if latest is not None:
        return attempted(r, _codec.attempt_from_row(latest))
    return _codec.rollout_from_row(r)


def update_attempt(
    conn: sa.Connection,
    ctx: Ctx,
    eff: Effects,
    rollout_id: str,
    attempt_id: str,
    changes: AttemptUpdate,
    *,
    outcome: bool = False,
) -> Attempt:
    """Write an attempt's fields under its rollout's lock; ``outcome``: a runner's final report, to which
    :func:`~agl.store._rules.outcome_changes` applies."""
    now = ctx.clock()
    r, row = lock_rollout_with_attempt(conn, rollout_id, attempt_id)
    if r["num_attempts"] == 0:
        raise NotFoundError(f"No attempts found for rollout {rollout_id}")
    if row is None:
        raise NotFoundError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
    attempt = _codec.attempt_from_row(row)
    if outcome:
        is_latest = attempt.sequence_id == r["num_attempts"]
        changes = _rules.outcome_changes(
            changes, attempt.metadata, is_latest=is_latest, rollout_status=r["status"]
        )
    try:
        updated = Attempt.model_validate({**attempt.model_dump(), **changes})
    except ValidationError as exc:
        raise _invalid(exc) from exc
    values = {name: getattr(updated, name) for name in changes}
    if "status" in changes:
        updated.end_time = values["end_time"] = _rules.attempt_end_time(updated.status, attempt.end_time, now)
    update_row(conn, A, row["seq"], values)
    if "status" in changes:
        apply_attempt_status(conn, ctx, eff, r, updated, now)
    elif "worker_id" in changes:
        sync_worker(conn, ctx, updated, now)
    return updated


# -- the watchdog --------------------------------------------------------------------------------


def find_unhealthy(conn: sa.Connection, ctx: Ctx) -> list[str]:
    """Ids of running rollouts whose latest attempt broke its limits (read-only), in creation order, as the
    memory store scans them: rollouts requeued by one scan queue up in the order they were created."""

    def build() -> AnySelect:
        latest = sa.and_(A.c.rollout_id == R.c.rollout_id, A.c.sequence_id == R.c.num_attempts)
        return (
            sa.select(R.c.config, *_codec.attempt_columns())
            .select_from(R.join(A, latest))
            .where(
                one_of(R.c.status, RUNNING_STATUSES),
                sa.or_(R.c.timeout_seconds.is_not(None), R.c.unresponsive_seconds.is_not(None)),
                one_of(A.c.status, ["preparing", "running"]),
            )
            .order_by(R.c.seq)
        )

    now = ctx.clock()
    rows = execute(conn, prepared("find_unhealthy", build))
    return [
        row["rollout_id"]
        for row in rows
        if _rules.watchdog_verdict(
            _codec.attempt_from_row(row), RolloutConfig.model_validate(row["config"]), now
        )
    ]


def apply_watchdog(conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str) -> None:
    """Re-check one rollout under its lock and mark its latest attempt ``timeout``/``unresponsive``."""
    now = ctx.clock()
    try:
        r = lock_rollout(conn, rollout_id)
    except NotFoundError:
        return
    if r["status"] not in RUNNING_STATUSES or r["num_attempts"] == 0:
        return
    row = latest_attempt_row(conn, rollout_id, r["num_attempts"])
    attempt = _codec.attempt_from_row(row)
    verdict = _rules.watchdog_verdict(attempt, RolloutConfig.model_validate(r["config"]), now)
    if verdict is None:
        return
    end_time = _rules.attempt_end_time(verdict, attempt.end_time, now)
    update_row(conn, A, row["seq"], {"status": verdict, "end_time": end_time})
    updated = attempt.model_copy(update={"status": verdict, "end_time": end_time})
    apply_attempt_status(conn, ctx, eff, r, updated, now)


# -- resources and workers -----------------------------------------------------------------------


def _next_touch(conn: sa.Connection) -> int:
    stmt = prepared("next_touch", lambda: sa.select(sa.func.coalesce(sa.func.max(RS.c.touch), 0) + 1))
    return int(conn.execute(stmt).scalar_one())


def add_resources(conn: sa.Connection, ctx: Ctx, resources: NamedResources) -> ResourcesUpdate:
    now = ctx.clock()
    update = ResourcesUpdate(
        resources_id=new_resources_id(), create_time=now, update_time=now, version=1, resources=resources
    )
    conn.execute(
        sa.insert(RS).values(
            resources_id=update.resources_id,
            create_time=now,
            update_time=now,
            version=1,
            resources=update.resources,
            touch=_next_touch(conn),
        )
    )
    return update


def update_resources(
    conn: sa.Connection, ctx: Ctx, resources_id: str, resources: NamedResources
) -> ResourcesUpdate:
    """Replace a snapshot (version + 1) or create it (version 1); either way it becomes the latest."""
    now = ctx.clock()
    stmt = upsert(ctx, RS).values(
        resources_id=resources_id,
        create_time=now,
        update_time=now,
        version=1,
        resources=resources,
        touch=_next_touch(conn),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[RS.c.resources_id],
        set_={
            "version": RS.c.version + 1,
            "resources": stmt.excluded.resources,
            "update_time": stmt.excluded.update_time,
            "touch": stmt.excluded.touch,
        },
    ).returning(RS.c.create_time, RS.c.version)
    row = conn.execute(stmt).mappings().one()
    return ResourcesUpdate(
        resources_id=resources_id,
        create_time=row["create_time"],
        update_time=now,
        version=row["version"],
        resources=resources,
    )


def update_worker(conn: sa.Connection, ctx: Ctx, worker_id: str, heartbeat_stats: Any) -> Worker:
    """A heartbeat: create the worker if needed, stamp ``last_heartbeat_time``; never change its status."""
    now = ctx.clock()
    values: dict[str, Any] = {"last_heartbeat_time": now}
    if heartbeat_stats is not KEEP:
        values["heartbeat_stats"] = heartbeat_stats
    stmt = upsert(ctx, W).values(worker_id=worker_id, status="unknown", **values)
    stmt = stmt.on_conflict_do_update(index_elements=[W.c.worker_id], set_=values).returning(*W.c)
    return _codec.worker_from_row(conn.execute(stmt).mappings().one())
