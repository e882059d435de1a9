"""``SqlReplayCache``: which answers it replays, that a new key costs no read of the database (holds in
memory), and the write log (issue 27, defect 3): every write of the store's API made for a request under
an idempotency key keeps its result with the key in its own transaction, so a retry whose answer a crash
lost gets the first try's result instead of writing again; a key that comes back with another body is
refused."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import sqlalchemy as sa
from agl.store import SqlLightningStore
from agl.store.http.server._replay import KeyReused, RecordedAnswer, WriteLog, current_writes
from agl.store.sql import schema
from agl.store.sql._replay import SqlReplayCache
from agl.testing.clock import ManualClock
from agl.testing.spans import make_span
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.types import EnqueueRolloutRequest, NotFoundError, PromptTemplate


def _runs(claimed: object) -> bool:
    """Whether a claim lets its request run for real: a write log with nothing of an earlier try."""
    return isinstance(claimed, WriteLog) and not claimed.entries


def _answer(n: int) -> RecordedAnswer:
    return RecordedAnswer(201, [(b"content-type", b"application/json")], b'{"n": %d}' % n)


def _on_a_fresh_store(
    backend: str, tmp_path: Path, body: Callable[[SqlLightningStore], Awaitable[None]]
) -> None:
    """Runs ``body`` on a store of a new, empty ``backend`` database, and closes the store after."""

    async def main(url: str, kwargs: dict[str, Any]) -> None:
        store = SqlLightningStore(url, **kwargs)
        try:
            await body(store)
        finally:
            await store.close()

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_replays_what_this_run_and_the_one_before_recorded_within_its_bounds(
    backend: str, tmp_path: Path
) -> None:
    async def main(store: SqlLightningStore) -> None:
        clock = ManualClock(1_000_000.0)
        cache = SqlReplayCache(store, "run-1", shared_holds=False, ttl_seconds=60, max_entries=3, clock=clock)
        for n in range(4):
            assert _runs(await cache.claim(b"k%d" % n))
            await cache.release(b"k%d" % n, _answer(n))
        assert _runs(await cache.claim(b"k0"))  # past max_entries: applied again, not replayed
        await cache.release(b"k0", None)
        assert await cache.claim(b"k3") == _answer(3)
        assert _runs(await cache.claim(b"new"))
        await cache.release(b"new", None)  # forgotten: a retry runs for real
        assert _runs(await cache.claim(b"new"))
        await cache.release(b"new", None)

        restarted = SqlReplayCache(
            store, "run-2", shared_holds=False, ttl_seconds=60, max_entries=3, clock=clock
        )
        assert await restarted.claim(b"k2") == _answer(2)
        clock.advance(61)  # past the ttl: applied again
        assert _runs(await restarted.claim(b"k3"))
        await restarted.release(b"k3", _answer(30))
        assert await restarted.claim(b"k3") == _answer(30)

    _on_a_fresh_store(backend, tmp_path, main)


def test_a_new_key_is_claimed_without_reading_the_database(tmp_path: Path) -> None:
    async def main(store: SqlLightningStore) -> None:
        cache = SqlReplayCache(store, "run", shared_holds=False)
        assert _runs(await cache.claim(b"first"))  # the first claim reads the keys with answers
        await cache.release(b"first", _answer(1))
        reads_before = store._db.reads
        for n in range(20):
            assert _runs(await cache.claim(b"fresh-%d" % n))
            await cache.release(b"fresh-%d" % n, _answer(n))
        assert store._db.reads == reads_before
        assert await cache.claim(b"first") == _answer(1)  # a real retry reads its answer
        assert store._db.reads == reads_before + 1

    _on_a_fresh_store("sqlite", tmp_path, main)


# -- the write log: a write's result is kept with the key in the write's own transaction -------------------


class _Request:
    """One request answered under an idempotency key, as the server runs it: claim, the store calls with
    the claim's write log current, release (or a crash: no release, and the next run of the server)."""

    def __init__(self, store: SqlLightningStore, run: str, *, shared_holds: bool = False) -> None:
        self.store = store
        self.cache = SqlReplayCache(store, run, shared_holds=shared_holds)
        self.commits = 0
        """Transactions the store call committed (not the claim's)."""

    async def call(self, key: bytes, op: Any, fingerprint: str = "body") -> tuple[Any, WriteLog]:
        claimed = await self.cache.claim(key, fingerprint)
        assert isinstance(claimed, WriteLog), claimed
        current_writes.set(claimed)
        before = self.store._db.commits
        try:
            return await op(), claimed
        finally:
            self.commits = self.store._db.commits - before
            current_writes.set(None)


async def _counts(store: SqlLightningStore) -> tuple[int, int, int, int]:
    rollouts = (await store.query_rollouts()).items
    attempts = spans = 0
    for rollout in rollouts:
        attempts += (await store.query_attempts(rollout.rollout_id, limit=0)).total
        spans += (await store.query_spans(rollout.rollout_id, limit=0)).total
    return len(rollouts), attempts, spans, (await store.query_resources(limit=0)).total


def _operations(store: SqlLightningStore, ids: dict[str, str]) -> dict[str, Any]:
    """Each write of the store's API, as a retry after a crash would repeat it (same arguments)."""
    rid, aid = ids["rollout"], ids["attempt"]
    ordered = [make_span(rid, aid, 0, name=f"in-order-{i}") for i in range(3)]
    explicit = [make_span(rid, aid, 7), make_span(rid, aid, 8)]
    last = [make_span(rid, aid, 0, name="last")]
    return {
        "enqueue": lambda: store.enqueue_many_rollouts(
            cast("list[EnqueueRolloutRequest]", [{"input": 1}, {"input": 2}])
        ),
        "start_rollout": lambda: store.start_rollout({"q": 1}, worker_id="w2"),
        "dequeue": lambda: store.dequeue_many_rollouts(limit=2, worker_id="w3"),
        "start_attempt": lambda: store.start_attempt(ids["queued"], worker_id="w4"),
        "update_attempt": lambda: store.update_attempt(rid, aid, status="running", metadata={"k": 1}),
        "update_rollout": lambda: store.update_rollout(ids["queued"], metadata={"m": 2}),
        "add_spans": lambda: store.add_many_spans(explicit),
        "add_spans_in_order": lambda: store.add_spans_in_order(ordered),
        "finish_attempt": lambda: store.finish_attempt(
            rid, aid, last, status="succeeded", claim_next_for="w1"
        ),
        "add_resources": lambda: store.add_resources({"p": PromptTemplate(template="t", engine="f-string")}),
        "update_resources": lambda: store.update_resources(
            "named", {"p": PromptTemplate(template="u", engine="f-string")}
        ),
        "update_worker": lambda: store.update_worker("w9", heartbeat_stats={"gpu": 1}),
        "sequence_ids": lambda: store.get_many_span_sequence_ids([(rid, aid), (rid, aid)]),
    }


async def _setup(store: SqlLightningStore) -> dict[str, str]:
    first = await store.enqueue_rollout({"setup": 1})
    queued = await store.enqueue_rollout({"setup": 2})
    await store.enqueue_rollout({"setup": 3})
    claimed = await store.dequeue_rollout(worker_id="w1")
    assert claimed is not None and claimed.rollout_id == first.rollout_id
    return {"rollout": first.rollout_id, "attempt": claimed.attempt.attempt_id, "queued": queued.rollout_id}


OPERATIONS = list(_operations(None, {"rollout": "", "attempt": "", "queued": ""}))  # pyright: ignore[reportArgumentType]


@pytest.mark.parametrize("backend", SQL_BACKENDS)
@pytest.mark.parametrize("shared_holds", [False, True], ids=["one-process", "workers"])
@pytest.mark.parametrize("operation", OPERATIONS)
def test_a_write_whose_answer_was_lost_is_replayed_not_applied_again(
    backend: str, shared_holds: bool, operation: str, tmp_path: Path
) -> None:
    """The server dies after the write committed and before its answer was recorded (no release): the next
    run's claim finds the write's result under the key, and the retried call returns it without writing."""

    async def main(store: SqlLightningStore) -> None:
        ids = await _setup(store)
        op = _operations(store, ids)[operation]
        first, log = await _Request(store, "run-1", shared_holds=shared_holds).call(b"k", op)
        assert log.entries, "the write logged nothing"
        before = await _counts(store)
        retry = _Request(store, "run-2", shared_holds=shared_holds)
        again, replayed = await retry.call(b"k", op)
        assert again == first
        assert all(replayed.used), replayed
        assert await _counts(store) == before, "written again"
        if operation != "finish_attempt":  # (its claim of the next rollout found none: runs again)
            assert retry.commits == 0, "written again"

    _on_a_fresh_store(backend, tmp_path, main)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_long_polled_dequeue_logs_only_its_claim(backend: str, tmp_path: Path) -> None:
    """Empty polls and the idle mark log nothing; the claim that ends the wait is what a retry gets, even
    with the queue empty by then."""

    async def main(store: SqlLightningStore) -> None:

        async def dequeue() -> Any:
            return await store.dequeue_rollout(worker_id="w", timeout=5)

        async def enqueue_later() -> str:
            await asyncio.sleep(0.3)
            return (await store.enqueue_rollout({"late": True})).rollout_id

        (claimed, log), rid = await asyncio.gather(
            _Request(store, "run-1").call(b"d", dequeue), enqueue_later()
        )
        assert claimed is not None and claimed.rollout_id == rid
        assert [name.rsplit(".", 1)[1] for name, _ in log.entries] == ["dequeue"]
        again, _ = await _Request(store, "run-2").call(b"d", dequeue)
        assert again == claimed
        empty, log = await _Request(store, "run-2").call(b"e", lambda: store.dequeue_rollout(worker_id="w"))
        assert empty is None and not log.entries

    _on_a_fresh_store(backend, tmp_path, main)


@pytest.mark.parametrize("shared_holds", [False, True], ids=["one-process", "workers"])
def test_a_fault_after_a_write_keeps_its_log_for_the_retry(shared_holds: bool, tmp_path: Path) -> None:
    """A request that wrote, then failed (released without an answer), is not applied again by its retry
    in the same run; one that failed before writing runs again."""

    async def main(store: SqlLightningStore) -> None:
        request = _Request(store, "run", shared_holds=shared_holds)
        first, _ = await request.call(b"k", lambda: store.enqueue_rollout({"once": 1}))
        await request.cache.release(b"k", None)
        again, _ = await request.call(b"k", lambda: store.enqueue_rollout({"once": 1}))
        await request.cache.release(b"k", None)
        assert again == first and (await store.query_rollouts(limit=0)).total == 1
        assert _runs(await request.cache.claim(b"failed-before-writing", "body"))
        await request.cache.release(b"failed-before-writing", None)
        assert _runs(await request.cache.claim(b"failed-before-writing", "body"))

    _on_a_fresh_store("sqlite", tmp_path, main)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
@pytest.mark.parametrize("shared_holds", [False, True], ids=["one-process", "workers"])
def test_a_key_with_another_body_is_refused(backend: str, shared_holds: bool, tmp_path: Path) -> None:
    async def main(store: SqlLightningStore) -> None:
        cache = SqlReplayCache(store, "run-1", shared_holds=shared_holds)
        assert _runs(await cache.claim(b"answered", "body-1"))
        await cache.release(b"answered", _answer(1))
        with pytest.raises(KeyReused):
            await cache.claim(b"answered", "body-2")
        assert await cache.claim(b"answered", "body-1") == _answer(1)
        # a write logged by a try that died: its retry with another body is refused too
        await _Request(store, "run-1", shared_holds=shared_holds).call(
            b"logged", lambda: store.enqueue_rollout(1), "body-1"
        )
        restarted = SqlReplayCache(store, "run-2", shared_holds=shared_holds)
        with pytest.raises(KeyReused):
            await restarted.claim(b"logged", "body-2")

    _on_a_fresh_store(backend, tmp_path, main)


def test_a_write_that_fails_logs_nothing_and_group_commit_logs_each_write(tmp_path: Path) -> None:
    async def main(store: SqlLightningStore) -> None:
        with pytest.raises(NotFoundError):
            await _Request(store, "run-1").call(b"bad", lambda: store.start_attempt("ro-unknown"))
        keys = [b"g%d" % n for n in range(8)]

        async def one(key: bytes) -> tuple[Any, WriteLog]:
            return await _Request(store, "run-1").call(
                key, lambda: store.enqueue_rollout({"k": key.decode()})
            )

        firsts = await asyncio.gather(*(one(key) for key in keys))  # committed in groups
        assert store._db.batched_writes > 0
        restarted = _Request(store, "run-2")
        log = await restarted.cache.claim(b"bad", "body")
        assert isinstance(log, WriteLog) and not log.entries
        await restarted.cache.release(b"bad", None)
        for key, (first, _) in zip(keys, firsts, strict=True):
            again, _ = await restarted.call(key, lambda key=key: store.enqueue_rollout({"k": key.decode()}))
            assert again == first
        assert (await store.query_rollouts(limit=0)).total == len(keys)

    _on_a_fresh_store("sqlite", tmp_path, main)


def test_the_spans_a_write_numbered_are_logged_by_reference(tmp_path: Path) -> None:
    """``add_spans_in_order`` and ``finish_attempt`` answer with the request's own spans, numbered: their log
    keeps an index and a sequence id per span, not the spans again (the retry's body has them)."""

    async def main(store: SqlLightningStore) -> None:
        ids = await _setup(store)
        rid, aid = ids["rollout"], ids["attempt"]
        big = "x" * 5_000
        spans = [make_span(rid, aid, 0, name=f"s{i}", attributes={"big": big}) for i in range(4)]
        spans.append(spans[1])  # a duplicate within the batch: numbered, not stored
        last = [make_span(rid, aid, 0, name=f"last{i}", attributes={"big": big}) for i in range(2)]
        calls = {
            b"in-order": lambda: store.add_spans_in_order(spans),
            b"finish": lambda: store.finish_attempt(rid, aid, [spans[0], *last], status="succeeded"),
        }
        for key, op in calls.items():
            first, log = await _Request(store, "run-1").call(key, op)
            assert log.entries and all(len(text) < 500 for _, text in log.entries), log.entries
            again, _ = await _Request(store, "run-2").call(key, op)
            assert again == first
            if key == b"finish":
                assert [s.name for s in first.spans] == ["last0", "last1"]  # (spans[0] was stored before)

    _on_a_fresh_store("sqlite", tmp_path, main)


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_a_version_2_database_gains_the_log_columns(backend: str, tmp_path: Path) -> None:
    """Schema version 3 adds ``request_hash`` and ``writes`` to the replays of a version-2 database."""

    async def main(store: SqlLightningStore) -> None:
        old = sa.MetaData()
        columns = [
            sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
            for c in schema.replays.columns
            if c.name not in ("request_hash", "writes")
        ]
        index = sa.Index("agl_replays_key", "key", unique=True)
        replays_v2 = sa.Table(schema.replays.name, old, *columns, index)

        def make_v2(conn: sa.Connection) -> None:
            schema.MIGRATIONS[0](conn)
            schema.leases.create(conn)
            replays_v2.create(conn)
            conn.execute(sa.insert(schema.schema_meta).values(key="schema_version", value="2"))

        await store._db._run(make_v2, (), write=True)
        await store.ensure_schema()  # migrates
        first, _ = await _Request(store, "run-1").call(b"k", lambda: store.enqueue_rollout("kept"))
        again, _ = await _Request(store, "run-2").call(b"k", lambda: store.enqueue_rollout("kept"))
        assert again == first and (await store.query_rollouts(limit=0)).total == 1

        def version(conn: sa.Connection) -> int | None:
            return schema.read_version(conn)

        assert await store._db.read(version) == schema.SCHEMA_VERSION == 3

    _on_a_fresh_store(backend, tmp_path, main)
