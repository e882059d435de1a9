"""Write operations of the SQL store: each function is one transaction (``Database.write`` runs it).

They follow one pattern: lock the rollout rows they change (``FOR UPDATE``; SQLite is serialized by
``BEGIN IMMEDIATE`` instead), read the current state, let :mod:`agl.store._rules` decide what it becomes,
write it. Rollouts are locked in id order so that concurrent transactions cannot deadlock on them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa
from agl.types import (
    FINISHED_STATUSES,
    QUEUED_STATUSES,
    RUNNING_STATUSES,
    Attempt,
    AttemptedRollout,
    EnqueueRolloutRequest,
    InvalidRequestError,
    NamedResources,
    NotFoundError,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    Span,
    Worker,
    new_attempt_id,
    new_resources_id,
    new_rollout_id,
)
from pydantic import ValidationError

from .. import _rules
from . import _codec, schema
from ._codec import RawJson

R = schema.rollouts
A = schema.attempts
S = schema.spans
W = schema.workers

__all__ = ["Ctx", "Effects"]

_WORKER_STATE_FIELDS = (
    "status",
    "last_dequeue_time",
    "last_busy_time",
    "last_idle_time",
    "current_rollout_id",
    "current_attempt_id",
)


@dataclass
class Ctx:
    """What every operation needs besides its arguments."""

    clock: Callable[[], float]
    dialect: str


@dataclass
class Effects:
    """What a committed write changed, so the store can wake its waiters."""

    queued: bool = False
    finished: set[str] = field(default_factory=set)


def invalid(exc: ValidationError) -> InvalidRequestError:
    return InvalidRequestError(str(exc))


def upsert(ctx: Ctx, table: sa.Table) -> Any:
    """``INSERT`` with ``ON CONFLICT`` support in the current dialect."""
    if ctx.dialect == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(table)


# -- shared steps --------------------------------------------------------------------------------


def latest_resources_id(conn: sa.Connection) -> str | None:
    rs = schema.resources
    return conn.execute(sa.select(rs.c.resources_id).order_by(rs.c.touch.desc()).limit(1)).scalar()


def _next_queue_pos(conn: sa.Connection) -> int:
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(R.c.queue_pos), 0) + 1)).scalar_one())


def lock_rollout(conn: sa.Connection, rollout_id: str) -> dict[str, Any]:
    row = conn.execute(sa.select(R).where(R.c.rollout_id == rollout_id).with_for_update()).mappings().first()
    if row is None:
        raise NotFoundError(f"Rollout {rollout_id} not found")
    return dict(row)


def _attempt_row(conn: sa.Connection, rollout_id: str, *, sequence_id: int) -> dict[str, Any]:
    row = (
        conn.execute(sa.select(A).where(A.c.rollout_id == rollout_id, A.c.sequence_id == sequence_id))
        .mappings()
        .one()
    )
    return dict(row)


def _rollout_status_values(
    conn: sa.Connection, r: dict[str, Any], status: str, now: float, eff: Effects
) -> dict[str, Any]:
    """Columns to write when a rollout's status is set: end time and queue entry. Updates ``r``.

    Entering a queued status appends the rollout to the tail of the queue unless it still has an entry
    there; leaving one keeps the entry, which the next dequeue that reaches it discards (a stale entry).
    """
    values: dict[str, Any] = {
        "status": status,
        "end_time": _rules.rollout_end_time(status, r["status"], r["end_time"], now),  # type: ignore[arg-type]
    }
    if status in FINISHED_STATUSES:
        eff.finished.add(r["rollout_id"])
    if status in QUEUED_STATUSES and r["queue_pos"] is None:
        values["queue_pos"] = _next_queue_pos(conn)
        eff.queued = True
    r.update(values)
    return values


def _write_rollout(conn: sa.Connection, r: dict[str, Any], values: dict[str, Any]) -> None:
    if values:
        conn.execute(sa.update(R).where(R.c.seq == r["seq"]).values(**values))


def _sync_worker(
    conn: sa.Connection, ctx: Ctx, attempt: Attempt, now: float, *, dequeued: bool = False
) -> None:
    if not attempt.worker_id:
        return
    worker = _load_worker(conn, attempt.worker_id)
    _save_worker_state(conn, ctx, _rules.worker_after_attempt(worker, attempt, now, dequeued=dequeued))


def _load_worker(conn: sa.Connection, worker_id: str) -> Worker:
    row = conn.execute(sa.select(W).where(W.c.worker_id == worker_id).with_for_update()).mappings().first()
    return _codec.worker_from_row(row) if row is not None else Worker(worker_id=worker_id)


def _save_worker_state(conn: sa.Connection, ctx: Ctx, worker: Worker) -> None:
    """Write a worker's status and assignment; its heartbeat fields are left alone."""
    values = {name: getattr(worker, name) for name in _WORKER_STATE_FIELDS}
    stmt = upsert(ctx, W).values(worker_id=worker.worker_id, **values)
    conn.execute(stmt.on_conflict_do_update(index_elements=[W.c.worker_id], set_=values))


def _attempted(r: dict[str, Any], attempt: Attempt) -> AttemptedRollout:
    rollout = _codec.rollout_from_row(r)
    return AttemptedRollout.model_validate({**dict(rollout), "attempt": attempt})


def _apply_attempt_status(
    conn: sa.Connection, ctx: Ctx, eff: Effects, r: dict[str, Any], attempt: Attempt, now: float
) -> None:
    """After ``attempt``'s status was written: propagate it to the rollout (latest attempt only) and the worker."""
    if attempt.sequence_id == r["num_attempts"]:
        config = RolloutConfig.model_validate(r["config"])
        status = _rules.rollout_status_from_attempt(attempt.status, attempt.sequence_id, config)
        if status != r["status"]:
            _write_rollout(conn, r, _rollout_status_values(conn, r, status, now, eff))
    _sync_worker(conn, ctx, attempt, now)


# -- rollouts and the queue ----------------------------------------------------------------------


def _new_rollout(request: EnqueueRolloutRequest, status: str, now: float, latest: str | None) -> Rollout:
    return Rollout(
        rollout_id=new_rollout_id(),
        input=request.input,
        start_time=now,
        mode=request.mode,
        resources_id=request.resources_id if request.resources_id is not None else latest,
        status=status,  # type: ignore[arg-type]
        config=request.config.model_copy(deep=True) if request.config is not None else RolloutConfig(),
        metadata=dict(request.metadata) if request.metadata is not None else {},
    )


def enqueue(
    conn: sa.Connection, ctx: Ctx, eff: Effects, requests: Sequence[EnqueueRolloutRequest]
) -> list[Rollout]:
    if not requests:
        return []
    now = ctx.clock()
    latest = latest_resources_id(conn) if any(r.resources_id is None for r in requests) else None
    base = _next_queue_pos(conn)
    rollouts = [_new_rollout(request, "queuing", now, latest) for request in requests]
    conn.execute(
        sa.insert(R),
        [
            {**_codec.rollout_values(rollout), "queue_pos": base + i, "num_attempts": 0}
            for i, rollout in enumerate(rollouts)
        ],
    )
    eff.queued = True
    return rollouts


def start_rollout(
    conn: sa.Connection, ctx: Ctx, eff: Effects, request: EnqueueRolloutRequest, worker_id: str | None
) -> AttemptedRollout:
    now = ctx.clock()
    latest = latest_resources_id(conn) if request.resources_id is None else None
    rollout = _new_rollout(request, "preparing", now, latest)
    attempt = Attempt(
        rollout_id=rollout.rollout_id,
        attempt_id=new_attempt_id(),
        sequence_id=1,
        start_time=now,
        worker_id=worker_id,
    )
    conn.execute(sa.insert(R).values(**_codec.rollout_values(rollout), queue_pos=None, num_attempts=1))
    conn.execute(sa.insert(A).values(**_codec.attempt_values(attempt)))
    _sync_worker(conn, ctx, attempt, now)
    return AttemptedRollout.model_validate({**dict(rollout), "attempt": attempt})


def dequeue(
    conn: sa.Connection, ctx: Ctx, eff: Effects, limit: int, worker_id: str | None, mark_idle: bool
) -> list[AttemptedRollout]:
    """Claim up to ``limit`` queued rollouts in queue order; stale entries in front of them are discarded.

    ``SKIP LOCKED`` lets concurrent dequeuers on PostgreSQL pass each other's claims; the status is
    re-checked on the locked row, so a rollout is never claimed twice.
    """
    now = ctx.clock()
    rows = (
        conn.execute(
            sa.select(R)
            .where(R.c.queue_pos.is_not(None), R.c.status.in_(sorted(QUEUED_STATUSES)))
            .order_by(R.c.queue_pos, R.c.seq)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        .mappings()
        .all()
    )
    stale = sa.select(R.c.seq).where(R.c.queue_pos.is_not(None), R.c.status.not_in(sorted(QUEUED_STATUSES)))
    if len(rows) == limit:  # the queue was not exhausted: only entries before the last claimed one go
        stale = stale.where(R.c.queue_pos <= rows[-1]["queue_pos"])
    stale_seqs = list(conn.execute(stale.with_for_update(skip_locked=True)).scalars())
    if stale_seqs:
        conn.execute(sa.update(R).where(R.c.seq.in_(stale_seqs)).values(queue_pos=None))
    claimed: list[tuple[dict[str, Any], Attempt]] = []
    for row in rows:
        r = dict(row)
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
        conn.execute(sa.insert(A), [_codec.attempt_values(attempt) for _, attempt in claimed])
        conn.execute(
            sa.update(R)
            .where(R.c.seq == sa.bindparam("b_seq"))
            .values(status="preparing", end_time=None, queue_pos=None, num_attempts=sa.bindparam("b_num")),
            [{"b_seq": r["seq"], "b_num": r["num_attempts"]} for r, _ in claimed],
        )
        _sync_worker(conn, ctx, claimed[-1][1], now, dequeued=True)
    elif worker_id and mark_idle:
        _save_worker_state(conn, ctx, _rules.worker_after_empty_dequeue(_load_worker(conn, worker_id), now))
    return [_attempted(r, attempt) for r, attempt in claimed]


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
    conn.execute(sa.insert(A).values(**_codec.attempt_values(attempt)))
    values = _rollout_status_values(conn, r, "preparing", now, eff)
    values["num_attempts"] = r["num_attempts"] = attempt.sequence_id
    _write_rollout(conn, r, values)
    _sync_worker(conn, ctx, attempt, now)
    return _attempted(r, attempt)


def update_rollout(
    conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str, changes: dict[str, Any]
) -> Rollout:
    now = ctx.clock()
    r = lock_rollout(conn, rollout_id)
    current = _codec.rollout_from_row(r)
    try:
        updated = Rollout.model_validate({**current.model_dump(), **changes})
    except ValidationError as exc:
        raise invalid(exc) from exc
    values: dict[str, Any] = {name: getattr(updated, name) for name in changes if name != "status"}
    if "config" in changes:
        values["timeout_seconds"] = updated.config.timeout_seconds
        values["unresponsive_seconds"] = updated.config.unresponsive_seconds
    r.update(values)
    if "status" in changes:
        values.update(_rollout_status_values(conn, r, updated.status, now, eff))
    _write_rollout(conn, r, values)
    if r["num_attempts"]:
        latest = _codec.attempt_from_row(_attempt_row(conn, rollout_id, sequence_id=r["num_attempts"]))
        return _attempted(r, latest)
    return _codec.rollout_from_row(r)


def update_attempt(
    conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str, attempt_id: str, changes: dict[str, Any]
) -> Attempt:
    now = ctx.clock()
    r = lock_rollout(conn, rollout_id)
    if attempt_id == "latest":
        if r["num_attempts"] == 0:
            raise NotFoundError(f"No attempts found for rollout {rollout_id}")
        row = _attempt_row(conn, rollout_id, sequence_id=r["num_attempts"])
    else:
        found = (
            conn.execute(sa.select(A).where(A.c.rollout_id == rollout_id, A.c.attempt_id == attempt_id))
            .mappings()
            .first()
        )
        if found is None:
            raise NotFoundError(f"Attempt {attempt_id} not found for rollout {rollout_id}")
        row = dict(found)
    attempt = _codec.attempt_from_row(row)
    try:
        updated = Attempt.model_validate({**attempt.model_dump(), **changes})
    except ValidationError as exc:
        raise invalid(exc) from exc
    values = {name: getattr(updated, name) for name in changes}
    if "status" in changes:
        updated.end_time = values["end_time"] = _rules.attempt_end_time(updated.status, attempt.end_time, now)
    if values:
        conn.execute(sa.update(A).where(A.c.seq == row["seq"]).values(**values))
    if "status" in changes:
        _apply_attempt_status(conn, ctx, eff, r, updated, now)
    elif "worker_id" in changes:
        _sync_worker(conn, ctx, updated, now)
    return updated


# -- the watchdog --------------------------------------------------------------------------------


def find_unhealthy(conn: sa.Connection, ctx: Ctx) -> list[str]:
    """Ids of running rollouts whose latest attempt broke its limits (read-only)."""
    now = ctx.clock()
    rows = conn.execute(
        sa.select(R.c.config, *_codec.attempt_columns())
        .select_from(
            R.join(A, sa.and_(A.c.rollout_id == R.c.rollout_id, A.c.sequence_id == R.c.num_attempts))
        )
        .where(
            R.c.status.in_(sorted(RUNNING_STATUSES)),
            sa.or_(R.c.timeout_seconds.is_not(None), R.c.unresponsive_seconds.is_not(None)),
            A.c.status.in_(["preparing", "running"]),
        )
    ).mappings()
    return sorted(
        row["rollout_id"]
        for row in rows
        if _rules.watchdog_verdict(
            _codec.attempt_from_row(row), RolloutConfig.model_validate(row["config"]), now
        )
    )


def apply_watchdog(conn: sa.Connection, ctx: Ctx, eff: Effects, rollout_id: str) -> None:
    """Re-check one rollout under its lock and mark its latest attempt ``timeout``/``unresponsive``."""
    now = ctx.clock()
    try:
        r = lock_rollout(conn, rollout_id)
    except NotFoundError:
        return
    if r["status"] not in RUNNING_STATUSES or r["num_attempts"] == 0:
        return
    row = _attempt_row(conn, rollout_id, sequence_id=r["num_attempts"])
    attempt = _codec.attempt_from_row(row)
    verdict = _rules.watchdog_verdict(attempt, RolloutConfig.model_validate(r["config"]), now)
    if verdict is None:
        return
    end_time = _rules.attempt_end_time(verdict, attempt.end_time, now)
    conn.execute(sa.update(A).where(A.c.seq == row["seq"]).values(status=verdict, end_time=end_time))
    updated = attempt.model_copy(update={"status": verdict, "end_time": end_time})
    _apply_attempt_status(conn, ctx, eff, r, updated, now)


# -- spans ---------------------------------------------------------------------------------------


def _raise_counters(conn: sa.Connection, ctx: Ctx, highest: dict[str, int]) -> None:
    """Counters become at least the given values (explicit sequence ids are never reissued)."""
    c = schema.span_sequence_ids
    stmt = upsert(ctx, c)
    stmt = stmt.on_conflict_do_update(
        index_elements=[c.c.rollout_id],
        set_={"value": sa.case((c.c.value >= stmt.excluded.value, c.c.value), else_=stmt.excluded.value)},
    )
    conn.execute(stmt, [{"rollout_id": rid, "value": value} for rid, value in sorted(highest.items())])


def add_spans(conn: sa.Connection, ctx: Ctx, eff: Effects, spans: Sequence[Span]) -> list[int]:
    """Insert spans, skipping duplicates; returns the indexes of those stored. Unknown rollout/attempt → nothing stored."""
    now = ctx.clock()
    groups: dict[tuple[str, str], list[int]] = {}
    for i, span in enumerate(spans):
        groups.setdefault((span.rollout_id, span.attempt_id), []).append(i)
    rollout_rows = {rid: lock_rollout(conn, rid) for rid in sorted({rid for rid, _ in groups})}
    keys = list(groups)
    condition = (
        sa.and_(A.c.rollout_id == keys[0][0], A.c.attempt_id == keys[0][1])
        if len(keys) == 1
        else sa.tuple_(A.c.rollout_id, A.c.attempt_id).in_(keys)
    )
    attempt_rows = {
        (row["rollout_id"], row["attempt_id"]): dict(row)
        for row in conn.execute(sa.select(A).where(condition)).mappings()
    }
    for rid, aid in keys:
        if (rid, aid) not in attempt_rows:
            raise NotFoundError(f"Attempt {aid} not found for rollout {rid}")

    highest: dict[str, int] = {}
    for span in spans:
        highest[span.rollout_id] = max(highest.get(span.rollout_id, 0), span.sequence_id)
    _raise_counters(conn, ctx, highest)

    stmt = upsert(ctx, S).on_conflict_do_nothing(index_elements=[S.c.rollout_id, S.c.attempt_id, S.c.span_id])
    stmt = stmt.returning(S.c.rollout_id, S.c.attempt_id, S.c.span_id)
    params = [
        {
            "rollout_id": span.rollout_id,
            "attempt_id": span.attempt_id,
            "span_id": span.span_id,
            "sequence_id": span.sequence_id,
            "trace_id": span.trace_id,
            "parent_id": span.parent_id,
            "name": span.name,
            "start_time": span.start_time,
            "end_time": span.end_time,
            "payload": RawJson(span.model_dump_json()),
        }
        for span in spans
    ]
    inserted = {tuple(row) for row in conn.execute(stmt, params)}
    stored: list[int] = []
    touched: set[tuple[str, str]] = set()
    for i, span in enumerate(spans):
        key = (span.rollout_id, span.attempt_id, span.span_id)
        if key in inserted:
            inserted.discard(key)  # a span repeated within the batch is stored once
            stored.append(i)
            touched.add(key[:2])
    for rid, aid in keys:
        if (rid, aid) in touched:
            _heartbeat(conn, ctx, eff, rollout_rows[rid], attempt_rows[(rid, aid)], now)
    return stored


def _heartbeat(
    conn: sa.Connection, ctx: Ctx, eff: Effects, r: dict[str, Any], row: dict[str, Any], now: float
) -> None:
    before = row["status"]
    after = _rules.attempt_status_after_span(before)
    conn.execute(sa.update(A).where(A.c.seq == row["seq"]).values(last_heartbeat_time=now, status=after))
    row.update(last_heartbeat_time=now, status=after)
    if _rules.rollout_promoted_by_span(r["status"], before, row["sequence_id"] == r["num_attempts"]):
        _write_rollout(conn, r, _rollout_status_values(conn, r, "running", now, eff))
    if after != before:
        _sync_worker(conn, ctx, _codec.attempt_from_row(row), now)


def allocate_sequence_ids(conn: sa.Connection, ctx: Ctx, pairs: Sequence[tuple[str, str]]) -> list[int]:
    """One atomic increment per rollout; consecutive values handed out in request order."""
    counts: dict[str, int] = {}
    for rid, _ in pairs:
        counts[rid] = counts.get(rid, 0) + 1
    c = schema.span_sequence_ids
    next_value: dict[str, int] = {}
    for rid in sorted(counts):
        stmt = upsert(ctx, c).values(rollout_id=rid, value=counts[rid])
        stmt = stmt.on_conflict_do_update(
            index_elements=[c.c.rollout_id], set_={"value": c.c.value + stmt.excluded.value}
        ).returning(c.c.value)
        last = int(conn.execute(stmt).scalar_one())
        next_value[rid] = last - counts[rid] + 1
    result: list[int] = []
    for rid, _ in pairs:
        result.append(next_value[rid])
        next_value[rid] += 1
    return result


# -- resources and workers -----------------------------------------------------------------------


def _next_touch(conn: sa.Connection) -> int:
    rs = schema.resources
    return int(conn.execute(sa.select(sa.func.coalesce(sa.func.max(rs.c.touch), 0) + 1)).scalar_one())


def add_resources(conn: sa.Connection, ctx: Ctx, resources: NamedResources) -> ResourcesUpdate:
    now = ctx.clock()
    update = ResourcesUpdate(
        resources_id=new_resources_id(), create_time=now, update_time=now, version=1, resources=resources
    )
    conn.execute(
        sa.insert(schema.resources).values(
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
    rs = schema.resources
    stmt = upsert(ctx, rs).values(
        resources_id=resources_id,
        create_time=now,
        update_time=now,
        version=1,
        resources=resources,
        touch=_next_touch(conn),
    )
    stmt = stmt.on_conflict_do_update(
        index_elements=[rs.c.resources_id],
        set_={
            "version": rs.c.version + 1,
            "resources": stmt.excluded.resources,
            "update_time": stmt.excluded.update_time,
            "touch": stmt.excluded.touch,
        },
    ).returning(rs.c.create_time, rs.c.version)
    row = conn.execute(stmt).mappings().one()
    create_time, version = row["create_time"], row["version"]
    return ResourcesUpdate(
        resources_id=resources_id,
        create_time=create_time,
        update_time=now,
        version=version,
        resources=resources,
    )


def update_worker(conn: sa.Connection, ctx: Ctx, worker_id: str, heartbeat_stats: Any) -> Worker:
    """A heartbeat: create the worker if needed, stamp ``last_heartbeat_time``; never change its status."""
    now = ctx.clock()
    values: dict[str, Any] = {"last_heartbeat_time": now}
    if heartbeat_stats is not _KEEP:
        values["heartbeat_stats"] = heartbeat_stats
    stmt = upsert(ctx, W).values(worker_id=worker_id, status="unknown", **values)
    stmt = stmt.on_conflict_do_update(index_elements=[W.c.worker_id], set_=values).returning(*W.c)
    return _codec.worker_from_row(conn.execute(stmt).mappings().one())


_KEEP: Any = object()
"""``heartbeat_stats`` argument meaning "leave as is"."""
KEEP = _KEEP
