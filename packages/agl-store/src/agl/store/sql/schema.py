"""Tables and indexes of the SQL store (SQLAlchemy Core), and their versioned creation (migrations).

One schema serves SQLite and PostgreSQL. Every table has an autoincrementing ``seq`` column: it is the
creation order, the default order of every query and the tie-breaker of every sort. JSON documents
(task input, config, metadata, resources, spans) live in JSON columns; what is filtered or sorted on is
also kept in plain columns with indexes.

The database records its schema version in ``agl_schema``. :func:`read_version` reads it without any DDL
(so without locks that would wait for, or block, ordinary writes); only a database that is new or older
than :data:`SCHEMA_VERSION` is migrated (:func:`migrate`), one numbered step of :data:`MIGRATIONS` at a
time, under a lock that serializes the processes starting at once.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import exc as sa_exc
from sqlalchemy.schema import CreateIndex, CreateTable

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "attempts",
    "create_schema",
    "leases",
    "metadata",
    "migrate",
    "read_version",
    "replays",
    "resources",
    "rollouts",
    "schema_meta",
    "span_sequence_ids",
    "spans",
    "workers",
]

SCHEMA_VERSION = 3
"""The number of :data:`MIGRATIONS`; a store refuses a database of a newer version."""

metadata = sa.MetaData()

# Python compares strings by code point; so do SQLite's BINARY collation and PostgreSQL's "C" collation.
_Text = sa.String().with_variant(sa.String(collation="C"), "postgresql")
_Seq = sa.BigInteger().with_variant(sa.Integer(), "sqlite")  # INTEGER PRIMARY KEY is SQLite's rowid
_Float: sa.Double[float] = sa.Double()
_Json = sa.JSON(none_as_null=True)


def _seq() -> sa.Column[int]:
    return sa.Column("seq", _Seq, primary_key=True, autoincrement=True)


rollouts = sa.Table(
    "agl_rollouts",
    metadata,
    _seq(),
    sa.Column("rollout_id", _Text, nullable=False),
    sa.Column("input", _Json),
    sa.Column("start_time", _Float, nullable=False),
    sa.Column("end_time", _Float),
    sa.Column("mode", _Text),
    sa.Column("resources_id", _Text),
    sa.Column("status", _Text, nullable=False),
    sa.Column("config", _Json, nullable=False),
    sa.Column("metadata", _Json),
    # Copies of config fields, so the watchdog reads only rollouts that have limits.
    sa.Column("timeout_seconds", _Float),
    sa.Column("unresponsive_seconds", _Float),
    # Position in the queue: set while the status is queuing/requeuing, NULL otherwise.
    sa.Column("queue_pos", sa.BigInteger),
    # Attempts are numbered 1..num_attempts; the latest one has sequence_id == num_attempts.
    sa.Column("num_attempts", sa.Integer, nullable=False, server_default="0"),
    sa.Index("agl_rollouts_rollout_id", "rollout_id", unique=True),
    sa.Index("agl_rollouts_status", "status", "seq"),
    sa.Index("agl_rollouts_queue", "queue_pos"),
)

attempts = sa.Table(
    "agl_attempts",
    metadata,
    _seq(),
    sa.Column("rollout_id", _Text, nullable=False),
    sa.Column("attempt_id", _Text, nullable=False),
    sa.Column("sequence_id", sa.Integer, nullable=False),
    sa.Column("start_time", _Float, nullable=False),
    sa.Column("end_time", _Float),
    sa.Column("status", _Text, nullable=False),
    sa.Column("worker_id", _Text),
    sa.Column("last_heartbeat_time", _Float),
    sa.Column("metadata", _Json),
    sa.Index("agl_attempts_rollout_sequence", "rollout_id", "sequence_id", unique=True),
    sa.Index("agl_attempts_rollout_attempt", "rollout_id", "attempt_id", unique=True),
)

spans = sa.Table(
    "agl_spans",
    metadata,
    _seq(),
    sa.Column("rollout_id", _Text, nullable=False),
    sa.Column("attempt_id", _Text, nullable=False),
    sa.Column("span_id", _Text, nullable=False),
    sa.Column("sequence_id", sa.BigInteger, nullable=False),
    sa.Column("trace_id", _Text, nullable=False),
    sa.Column("parent_id", _Text),
    sa.Column("name", _Text, nullable=False),
    sa.Column("start_time", _Float),
    sa.Column("end_time", _Float),
    sa.Column("payload", _Json, nullable=False),  # the whole span, extras included
    sa.Index("agl_spans_identity", "rollout_id", "attempt_id", "span_id", unique=True),
    sa.Index("agl_spans_sequence", "rollout_id", "attempt_id", "sequence_id"),
)

resources = sa.Table(
    "agl_resources",
    metadata,
    _seq(),
    sa.Column("resources_id", _Text, nullable=False),
    sa.Column("create_time", _Float, nullable=False),
    sa.Column("update_time", _Float, nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("resources", _Json, nullable=False),
    # Increases with every add/update: the highest is the latest snapshot.
    sa.Column("touch", sa.BigInteger, nullable=False),
    sa.Index("agl_resources_resources_id", "resources_id", unique=True),
    sa.Index("agl_resources_touch", "touch"),
)

workers = sa.Table(
    "agl_workers",
    metadata,
    _seq(),
    sa.Column("worker_id", _Text, nullable=False),
    sa.Column("status", _Text, nullable=False),
    sa.Column("heartbeat_stats", _Json),
    sa.Column("last_heartbeat_time", _Float),
    sa.Column("last_dequeue_time", _Float),
    sa.Column("last_busy_time", _Float),
    sa.Column("last_idle_time", _Float),
    sa.Column("current_rollout_id", _Text),
    sa.Column("current_attempt_id", _Text),
    sa.Index("agl_workers_worker_id", "worker_id", unique=True),
    # no index on status: a store has as many workers as runners, and their status changes constantly
)

span_sequence_ids = sa.Table(
    "agl_span_sequence_ids",
    metadata,
    sa.Column("rollout_id", _Text, primary_key=True),
    sa.Column("value", sa.BigInteger, nullable=False),
)

schema_meta = sa.Table(
    "agl_schema",
    metadata,
    sa.Column("key", _Text, primary_key=True),
    sa.Column("value", _Text, nullable=False),
)

leases = sa.Table(
    "agl_leases",
    metadata,
    sa.Column("name", _Text, primary_key=True),
    sa.Column("holder", _Text, nullable=False),
    sa.Column("expires", _Float, nullable=False),
)
"""Named leases held by one process at a time (the watchdog: one active among a server's workers)."""

replays = sa.Table(
    "agl_replays",
    metadata,
    _seq(),
    sa.Column("key", _Text, nullable=False),  # sha256 of route + Idempotency-Key
    sa.Column("state", _Text, nullable=False),  # running | done | applied (writes logged, no answer)
    sa.Column("run_id", _Text, nullable=False),  # the server run that holds a running key
    sa.Column("claimed", _Float, nullable=False),
    sa.Column("status", sa.Integer),
    sa.Column("headers", _Json),
    sa.Column("body", sa.LargeBinary),
    sa.Column("request_hash", _Text),  # sha256 of the request's body: the key's, another body is refused
    sa.Column("writes", sa.Text),  # JSON [[write, result], ...]: the results of the request's writes
    sa.Index("agl_replays_key", "key", unique=True),
    sa.Index("agl_replays_claimed", "claimed"),
)
"""The first answer to each idempotency key, shared by a server's workers and kept across restarts; and,
until the answer is recorded, the results of the request's writes (see :mod:`._replay`)."""

_PG_DDL_LOCK = 0x61676C5F73746F  # any constant: serializes schema creation across processes


def _create_tables(*tables: sa.Table) -> Callable[[sa.Connection], None]:
    def create(conn: sa.Connection) -> None:
        for table in tables:
            conn.execute(CreateTable(table, if_not_exists=True))
            for index in sorted(table.indexes, key=lambda i: str(i.name)):
                conn.execute(CreateIndex(index, if_not_exists=True))

    return create


def _add_columns(table: sa.Table, *names: str) -> Callable[[sa.Connection], None]:
    """Add the columns ``names`` of ``table`` where the database's table lacks them (one created by an
    earlier step of the same migration has them already)."""

    def add(conn: sa.Connection) -> None:
        present = {column["name"] for column in sa.inspect(conn).get_columns(table.name)}
        for name in names:
            if name not in present:
                kind = table.c[name].type.compile(dialect=conn.dialect)
                conn.execute(sa.text(f"ALTER TABLE {table.name} ADD COLUMN {name} {kind}"))

    return add


MIGRATIONS: tuple[Callable[[sa.Connection], None], ...] = (
    # 1: the store's tables
    _create_tables(rollouts, attempts, spans, resources, workers, span_sequence_ids, schema_meta),
    # 2: leases (one watchdog among workers) and idempotent replays shared through the database
    _create_tables(leases, replays),
    # 3: replays keep the request's fingerprint and the results of its writes (logged with each write)
    _add_columns(replays, "request_hash", "writes"),
)
"""Step ``n`` (1-based) brings a database from version ``n - 1`` to ``n``. Only ever append."""
assert len(MIGRATIONS) == SCHEMA_VERSION


def read_version(conn: sa.Connection) -> int | None:
    """The schema version the database records, or ``None`` when it has no store yet. Runs no DDL."""
    if conn.dialect.name == "postgresql":
        exists = conn.execute(sa.text("SELECT to_regclass('agl_schema') IS NOT NULL")).scalar()
    else:
        exists = conn.execute(
            sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'agl_schema'")
        ).scalar()
    if not exists:
        return None
    found = conn.execute(
        sa.select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")
    ).scalar_one_or_none()
    return None if found is None else int(found)


def _read_version_locked(conn: sa.Connection) -> int | None:
    """:func:`read_version` on PostgreSQL after waiting for the advisory lock: ``to_regclass`` may answer
    from a catalog cache that predates the commit we waited for; reading the table itself refreshes it."""
    try:
        with conn.begin_nested():
            found = conn.execute(
                sa.select(schema_meta.c.value).where(schema_meta.c.key == "schema_version")
            ).scalar_one_or_none()
    except sa_exc.DBAPIError as error:
        if getattr(getattr(error, "orig", None), "sqlstate", None) != "42P01":  # undefined_table
            raise
        return None
    return None if found is None else int(found)


def check_version(found: int | None) -> bool:
    """Whether a database of version ``found`` is current; raises if it is newer than this agl-store."""
    if found is not None and found > SCHEMA_VERSION:
        raise RuntimeError(
            f"the database holds an agl store of schema version {found}, newer than this agl-store "
            f"(version {SCHEMA_VERSION}); upgrade agl-store"
        )
    return found == SCHEMA_VERSION


def migrate(conn: sa.Connection) -> None:
    """Bring the database to :data:`SCHEMA_VERSION`, inside the caller's write transaction.

    Safe when several processes start at once: SQLite serializes the transaction (``BEGIN IMMEDIATE``),
    PostgreSQL takes an advisory lock first; the version is read again under it.
    """
    if conn.dialect.name == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_DDL_LOCK})
        found = _read_version_locked(conn)
    else:
        found = read_version(conn)
    if check_version(found):
        return
    for step in MIGRATIONS[(found or 0) :]:
        step(conn)
    if found is None:
        conn.execute(sa.insert(schema_meta).values(key="schema_version", value=str(SCHEMA_VERSION)))
    else:
        conn.execute(
            sa.update(schema_meta)
            .where(schema_meta.c.key == "schema_version")
            .values(value=str(SCHEMA_VERSION))
        )


create_schema = migrate
"""The former name of :func:`migrate`."""
