"""Random sequences of store operations, checked step by step against a small pure-Python model.

The model below is written from behaviour.md §1.5 and the README's decisions, independently of
``agl.store._rules``, so a wrong rule there shows up here as a disagreement. It runs against every backend of
the ``backend`` fixture, with a manual clock that starts at a round number so time arithmetic is exact.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import make_span
from agl.testing.store.backends import open_store
from agl.types import (
    LLM,
    AttemptedRollout,
    AttemptStatus,
    EnqueueRolloutRequest,
    RolloutConfig,
    RolloutStatus,
)
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
    run_state_machine_as_test,
)

T = TypeVar("T")

CONFIGS = [
    RolloutConfig(),
    RolloutConfig(max_attempts=3, retry_condition=["failed", "timeout", "unresponsive"]),
    RolloutConfig(timeout_seconds=20),
    RolloutConfig(unresponsive_seconds=10, max_attempts=2, retry_condition=["unresponsive"]),
    RolloutConfig(timeout_seconds=30, unresponsive_seconds=10, max_attempts=2, retry_condition=["timeout"]),
]
WORKERS = [None, "w-1", "w-2"]
ATTEMPT_STATUSES: list[AttemptStatus] = [
    "preparing",
    "running",
    "failed",
    "succeeded",
    "unresponsive",
    "timeout",
]
ROLLOUT_STATUSES: list[RolloutStatus] = [
    "queuing",
    "preparing",
    "running",
    "failed",
    "succeeded",
    "cancelled",
    "requeuing",
]
# manual requeues of rollouts with live attempts reach the subtle span-promotion rules: draw them more often
MANUAL_STATUSES: list[RolloutStatus] = [*ROLLOUT_STATUSES, "queuing", "queuing", "requeuing"]
FINISHED = {"failed", "succeeded", "cancelled"}
QUEUED = {"queuing", "requeuing"}
EXAMPLES = {
    "memory": 80,
    "sqlite": 12,
    "postgres": 6,
    "http-memory": 10,
    "http-sqlite": 5,
    "http-postgres": 3,
}


# -- the reference model ----------------------------------------------------------------------------


@dataclass
class MAttempt:
    attempt_id: str
    sequence_id: int
    start_time: float
    worker_id: str | None
    status: str = "preparing"
    end_time: float | None = None
    heartbeat: float | None = None
    spans: int = 0


@dataclass
class MRollout:
    rollout_id: str
    config: RolloutConfig
    status: str
    end_time: float | None = None
    resources_id: str | None = None
    attempts: list[MAttempt] = field(default_factory=list)


@dataclass
class MWorker:
    status: str = "unknown"
    rollout_id: str | None = None
    attempt_id: str | None = None
    heartbeat: float | None = None
    stats: dict[str, Any] | None = None


class Model:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.rollouts: dict[str, MRollout] = {}
        self.queue: list[str] = []
        self.counters: dict[str, int] = {}
        self.resources: dict[str, int] = {}  # id -> version
        self.latest_resources: str | None = None
        self.workers: dict[str, MWorker] = {}

    @property
    def now(self) -> float:
        return self.clock.now

    def set_rollout_status(self, r: MRollout, status: str) -> None:
        if status in FINISHED:
            if not (status == r.status and r.end_time is not None):
                r.end_time = self.now
        else:
            r.end_time = None
        r.status = status
        if status in QUEUED and r.rollout_id not in self.queue:
            self.queue.append(r.rollout_id)

    def set_attempt_status(self, r: MRollout, a: MAttempt, status: str) -> None:
        a.status = status
        if status in ("succeeded", "failed", "timeout") and a.end_time is None:
            a.end_time = self.now
        if a is r.attempts[-1] and r.status != "cancelled":  # a cancelled rollout stays cancelled
            if status in ("failed", "timeout", "unresponsive"):
                retry = status in r.config.retry_condition and a.sequence_id < r.config.max_attempts
                new = "requeuing" if retry else "failed"
            else:
                new = status
            if new != r.status:
                self.set_rollout_status(r, new)
        if a.worker_id:
            self.sync_worker(r, a)

    def sync_worker(self, r: MRollout, a: MAttempt) -> None:
        assert a.worker_id
        w = self.workers.setdefault(a.worker_id, MWorker())
        if a.status in ("succeeded", "failed"):
            w.status, w.rollout_id, w.attempt_id = "idle", None, None
        elif a.status in ("timeout", "unresponsive"):
            w.status, w.rollout_id, w.attempt_id = "unknown", None, None
        else:
            w.status, w.rollout_id, w.attempt_id = "busy", r.rollout_id, a.attempt_id

    def watchdog(self) -> None:
        for r in list(self.rollouts.values()):  # creation order
            if r.status not in ("preparing", "running") or not r.attempts:
                continue
            a = r.attempts[-1]
            if a.status not in ("preparing", "running"):
                continue
            cfg = r.config
            if cfg.timeout_seconds is not None and self.now - a.start_time > cfg.timeout_seconds:
                self.set_attempt_status(r, a, "timeout")
            elif cfg.unresponsive_seconds is not None:
                last = a.heartbeat if a.heartbeat is not None else a.start_time
                if self.now - last > cfg.unresponsive_seconds:
                    self.set_attempt_status(r, a, "unresponsive")

    def new_attempt(self, r: MRollout, attempt_id: str, worker_id: str | None) -> MAttempt:
        a = MAttempt(attempt_id, len(r.attempts) + 1, self.now, worker_id)
        r.attempts.append(a)
        self.set_rollout_status(r, "preparing")
        return a

    def next_claims(self, limit: int) -> list[str]:
        """Ids a dequeue of ``limit`` must hand out, consuming the queue like the store does."""
        claimed: list[str] = []
        while self.queue and len(claimed) < limit:
            rid = self.queue.pop(0)
            if self.rollouts[rid].status in QUEUED:
                claimed.append(rid)
        return claimed

    def heartbeat(self, r: MRollout, a: MAttempt) -> None:
        before = a.status
        a.heartbeat = self.now
        if before in ("preparing", "unresponsive"):
            a.status = "running"
            if a.worker_id:
                self.sync_worker(r, a)
        live = before in ("preparing", "running", "unresponsive")
        if a is r.attempts[-1] and live and r.status in ("queuing", "preparing", "requeuing"):
            self.set_rollout_status(r, "running")


# -- the machine --------------------------------------------------------------------------------------


class StoreMachine(RuleBasedStateMachine):
    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.tmp = tempfile.mkdtemp(prefix="agl-stateful-")
        self.clock = ManualClock(start=1_000_000.0)
        self.model = Model(self.clock)
        self.context = open_store(self.backend, self.clock, Path(self.tmp))
        self.store: LightningStore = self.run(self.context.__aenter__())
        self.span_counter = 0

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        try:
            self.run(self.context.__aexit__(None, None, None))
        finally:
            self.loop.close()
            shutil.rmtree(self.tmp, ignore_errors=True)

    def pick(self, index: int, *, with_attempts: bool = False) -> MRollout:
        """One of the most recent rollouts: acting on few rollouts reaches deep histories (retries)."""
        candidates = [r for r in self.model.rollouts.values() if r.attempts or not with_attempts]
        return candidates[-1 - index % len(candidates)]

    def has_attempts(self) -> bool:
        return any(r.attempts for r in self.model.rollouts.values())

    def check_claimed(self, got: list[AttemptedRollout], expected: list[str], worker_id: str | None) -> None:
        assert [r.rollout_id for r in got] == expected
        for claimed in got:
            r = self.model.rollouts[claimed.rollout_id]
            a = self.model.new_attempt(r, claimed.attempt.attempt_id, worker_id)
            assert claimed.status == "preparing"
            assert claimed.attempt.sequence_id == a.sequence_id
            assert claimed.attempt.worker_id == worker_id
        if worker_id:
            if got:
                last = self.model.rollouts[got[-1].rollout_id]
                self.model.sync_worker(last, last.attempts[-1])
            else:
                w = self.model.workers.setdefault(worker_id, MWorker())
                w.status = "idle"

    # -- rules ------------------------------------------------------------------------------------

    @initialize()
    def start_empty(self) -> None:
        assert self.run(self.store.query_rollouts()).total == 0

    @rule(config=st.sampled_from(CONFIGS), many=st.integers(0, 3))
    def enqueue(self, config: RolloutConfig, many: int) -> None:
        self.model.watchdog()
        if many == 0:
            made = [self.run(self.store.enqueue_rollout("task", config=config))]
        else:
            requests = [EnqueueRolloutRequest(input=i, config=config) for i in range(many)]
            made = self.run(self.store.enqueue_many_rollouts(requests))
        for rollout in made:
            assert rollout.status == "queuing"
            assert rollout.resources_id == self.model.latest_resources
            m = MRollout(rollout.rollout_id, config, "queuing", resources_id=rollout.resources_id)
            self.model.rollouts[rollout.rollout_id] = m
            self.model.queue.append(rollout.rollout_id)

    @rule(config=st.sampled_from(CONFIGS), worker_id=st.sampled_from(WORKERS))
    def start_rollout(self, config: RolloutConfig, worker_id: str | None) -> None:
        self.model.watchdog()
        got = self.run(self.store.start_rollout("task", config=config, worker_id=worker_id))
        assert got.resources_id == self.model.latest_resources
        m = MRollout(got.rollout_id, config, "preparing", resources_id=got.resources_id)
        self.model.rollouts[got.rollout_id] = m
        a = self.model.new_attempt(m, got.attempt.attempt_id, worker_id)
        assert got.status == "preparing" and got.attempt.sequence_id == 1
        if worker_id:
            self.model.sync_worker(m, a)

    @rule(worker_id=st.sampled_from(WORKERS), limit=st.integers(0, 3))
    def dequeue(self, worker_id: str | None, limit: int) -> None:
        self.model.watchdog()
        if limit == 0:
            got = self.run(self.store.dequeue_rollout(worker_id=worker_id))
            self.check_claimed([] if got is None else [got], self.model.next_claims(1), worker_id)
        else:
            got_many = self.run(self.store.dequeue_many_rollouts(limit=limit, worker_id=worker_id))
            self.check_claimed(got_many, self.model.next_claims(limit), worker_id)

    @precondition(lambda self: self.model.rollouts)
    @rule(index=st.integers(0, 2), worker_id=st.sampled_from(WORKERS))
    def start_attempt(self, index: int, worker_id: str | None) -> None:
        self.model.watchdog()
        r = self.pick(index)
        got = self.run(self.store.start_attempt(r.rollout_id, worker_id=worker_id))
        a = self.model.new_attempt(r, got.attempt.attempt_id, worker_id)
        assert got.attempt.sequence_id == a.sequence_id
        assert got.status == "preparing"
        if worker_id:
            self.model.sync_worker(r, a)

    @precondition(lambda self: self.has_attempts())
    @rule(index=st.integers(0, 2), older=st.integers(0, 4), count=st.integers(1, 3))
    def add_spans(self, index: int, older: int, count: int) -> None:
        r = self.pick(index, with_attempts=True)
        a = r.attempts[-1 - older % len(r.attempts)] if older < 2 else r.attempts[-1]
        ids = self.run(self.store.get_many_span_sequence_ids([(r.rollout_id, a.attempt_id)] * count))
        start = self.model.counters.get(r.rollout_id, 0)
        assert ids == list(range(start + 1, start + count + 1))
        self.model.counters[r.rollout_id] = start + count
        spans = []
        for seq in ids:
            self.span_counter += 1
            spans.append(make_span(r.rollout_id, a.attempt_id, seq, span_id=f"{self.span_counter:016x}"))
        if count == 1:
            stored = self.run(self.store.add_span(spans[0]))
            assert stored is not None and stored.span_id == spans[0].span_id
        else:
            assert [s.span_id for s in self.run(self.store.add_many_spans(spans))] == [
                s.span_id for s in spans
            ]
        a.spans += count
        self.model.heartbeat(r, a)
        self.model.watchdog()
        after = self.run(self.store.get_rollout_by_id(r.rollout_id))
        assert after is not None and after.status == r.status

    @precondition(lambda self: self.has_attempts())
    @rule(index=st.integers(0, 2), which=st.integers(0, 3), status=st.sampled_from(ATTEMPT_STATUSES))
    def update_attempt(self, index: int, which: int, status: AttemptStatus) -> None:
        self.model.watchdog()
        r = self.pick(index, with_attempts=True)
        a = r.attempts[-1] if which else r.attempts[0]
        target = "latest" if which == 1 else a.attempt_id
        got = self.run(self.store.update_attempt(r.rollout_id, target, status=status))
        self.model.set_attempt_status(r, a, status)
        assert got.attempt_id == a.attempt_id
        assert got.status == status
        assert got.end_time == a.end_time

    @precondition(lambda self: self.has_attempts())
    @rule(
        index=st.integers(0, 2),
        which=st.integers(0, 1),
        count=st.integers(0, 2),
        status=st.sampled_from(ATTEMPT_STATUSES),
    )
    def finish_attempt(self, index: int, which: int, count: int, status: AttemptStatus) -> None:
        self.model.watchdog()
        r = self.pick(index, with_attempts=True)
        a = r.attempts[-1] if which else r.attempts[0]
        spans = []
        for _ in range(count):
            self.span_counter += 1
            spans.append(make_span(r.rollout_id, a.attempt_id, 0, span_id=f"{self.span_counter:016x}"))
        stored, got, _ = self.run(self.store.finish_attempt(r.rollout_id, a.attempt_id, spans, status=status))
        start = self.model.counters.get(r.rollout_id, 0)
        assert [s.sequence_id for s in stored] == list(range(start + 1, start + count + 1))
        self.model.counters[r.rollout_id] = start + count
        if count:
            a.spans += count
            self.model.heartbeat(r, a)
        if status == "succeeded" and (a is not r.attempts[-1] or r.status == "cancelled"):
            status = "failed"  # a late success of an attempt that lost its rollout is dropped
        self.model.set_attempt_status(r, a, status)
        assert got.attempt_id == a.attempt_id
        assert got.status == status
        assert got.end_time == a.end_time

    @precondition(lambda self: self.model.rollouts)
    @rule(index=st.integers(0, 2), status=st.sampled_from(MANUAL_STATUSES))
    def update_rollout(self, index: int, status: RolloutStatus) -> None:
        self.model.watchdog()
        r = self.pick(index)
        got = self.run(self.store.update_rollout(r.rollout_id, status=status))
        self.model.set_rollout_status(r, status)
        assert got.status == status
        assert got.end_time == r.end_time

    @rule(seconds=st.sampled_from([1, 4, 9, 11, 25, 40]))
    def advance_clock(self, seconds: int) -> None:
        self.clock.advance(seconds)

    @rule(port=st.integers(1, 3))
    def add_resources(self, port: int) -> None:
        got = self.run(
            self.store.add_resources({"llm": LLM(endpoint=f"http://127.0.0.1:{port}/v1", model="m")})
        )
        assert got.version == 1
        self.model.resources[got.resources_id] = 1
        self.model.latest_resources = got.resources_id

    @rule(name=st.sampled_from(["v0", "v1"]))
    def update_resources(self, name: str) -> None:
        self.model.watchdog()
        got = self.run(
            self.store.update_resources(name, {"llm": LLM(endpoint="http://127.0.0.1:1/v1", model=name)})
        )
        self.model.resources[name] = self.model.resources.get(name, 0) + 1
        self.model.latest_resources = name
        assert got.version == self.model.resources[name]
        latest = self.run(self.store.get_latest_resources())
        assert latest is not None and latest.resources_id == name

    @rule(worker_id=st.sampled_from(["w-1", "w-2", "w-3"]), stats=st.none() | st.just({"load": 1}))
    def worker_heartbeat(self, worker_id: str, stats: dict[str, Any] | None) -> None:
        got = self.run(self.store.update_worker(worker_id, heartbeat_stats={} if stats is None else stats))
        w = self.model.workers.setdefault(worker_id, MWorker())
        w.heartbeat = self.clock.now
        w.stats = {} if stats is None else stats
        assert got.status == w.status
        assert got.last_heartbeat_time == w.heartbeat

    @rule()
    def wait_for_finished(self) -> None:
        self.model.watchdog()
        ids = list(self.model.rollouts)
        got = self.run(self.store.wait_for_rollouts(rollout_ids=[*ids, "ro-unknown"], timeout=0))
        assert sorted(r.rollout_id for r in got) == sorted(
            i for i in ids if self.model.rollouts[i].status in FINISHED
        )

    @rule()
    def check_everything(self) -> None:
        self.model.watchdog()
        result = self.run(self.store.query_rollouts())
        assert [r.rollout_id for r in result] == list(self.model.rollouts)
        for got in result:
            m = self.model.rollouts[got.rollout_id]
            assert (got.rollout_id, got.status, got.end_time) == (m.rollout_id, m.status, m.end_time)
            assert got.resources_id == m.resources_id
            if not m.attempts:
                assert not isinstance(got, AttemptedRollout)
                continue
            assert isinstance(got, AttemptedRollout)
            a = m.attempts[-1]
            seen = got.attempt
            assert (seen.attempt_id, seen.sequence_id, seen.status) == (a.attempt_id, a.sequence_id, a.status)
            assert (seen.start_time, seen.end_time, seen.last_heartbeat_time) == (
                a.start_time,
                a.end_time,
                a.heartbeat,
            )
            assert seen.worker_id == a.worker_id
        for m in self.model.rollouts.values():
            if not m.attempts:
                continue
            self.model.watchdog()
            attempts = self.run(self.store.query_attempts(m.rollout_id))
            assert [(x.attempt_id, x.status) for x in attempts] == [
                (a.attempt_id, a.status) for a in m.attempts
            ]
            self.model.watchdog()
            spans = self.run(self.store.query_spans(m.rollout_id))
            assert spans.total == sum(a.spans for a in m.attempts)
            break  # one rollout per check keeps steps cheap; which one varies with the history
        self.model.watchdog()
        workers = {w.worker_id: w for w in self.run(self.store.query_workers())}
        assert set(workers) == set(self.model.workers)
        for worker_id, mw in self.model.workers.items():
            w = workers[worker_id]
            assert (w.status, w.current_rollout_id, w.current_attempt_id) == (
                mw.status,
                mw.rollout_id,
                mw.attempt_id,
            )
            assert w.last_heartbeat_time == mw.heartbeat
            assert w.heartbeat_stats == mw.stats
        stats = self.run(self.store.statistics())
        assert "total_rollouts" in stats and "total_attempts" in stats
        assert stats["total_rollouts"] == len(self.model.rollouts)
        assert stats["total_attempts"] == sum(len(r.attempts) for r in self.model.rollouts.values())


def test_store_matches_the_model(backend: str) -> None:
    machine = type(f"StoreMachine_{backend}", (StoreMachine,), {"backend": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=EXAMPLES.get(backend, 6),
            stateful_step_count=50,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )


def test_store_matches_the_model_on_fresh_examples(backend: str) -> None:
    """The same machine on new random examples every run (the test above replays the same ones each time), so CI
    keeps exploring; a failure prints the ``@reproduce_failure`` blob that replays it exactly."""
    machine = type(f"FreshStoreMachine_{backend}", (StoreMachine,), {"backend": backend})
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=max(2, EXAMPLES.get(backend, 6) // 2),
            stateful_step_count=50,
            deadline=None,
            derandomize=False,
            print_blob=True,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
