"""LitAgentRunner against a real in-memory store and the real OpenTelemetry tracer."""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest
from agl.runner import Hook, LitAgent, LitAgentRunner, rollout
from agl.store import InMemoryLightningStore
from agl.tracer import OtelTracer, emit_reward, find_final_reward, get_reward_value
from agl.types import (
    LLM,
    EnqueueRolloutRequest,
    NamedResources,
    Rollout,
    RolloutConfig,
    Span,
    SpanCoreFields,
    TraceStatus,
)
from agl.types.timeouts import wait_within

LLM_RESOURCES: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}


def make_runner(**kwargs: Any) -> LitAgentRunner[Any]:
    kwargs.setdefault("heartbeat_interval", 0)
    return LitAgentRunner(OtelTracer(), **kwargs)


class Recorder(Hook):
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.spans: list[Span] = []
        self.fail = fail

    async def on_rollout_start(self, *, agent: Any, runner: Any, rollout: Rollout) -> None:
        self.calls.append("rollout_start")
        if self.fail:
            raise RuntimeError("hook fails")

    async def on_trace_start(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        self.calls.append("trace_start")

    async def on_trace_end(self, *, agent: Any, runner: Any, tracer: Any, rollout: Rollout) -> None:
        self.calls.append("trace_end")

    async def on_rollout_end(
        self, *, agent: Any, runner: Any, rollout: Rollout, spans: Sequence[Span]
    ) -> None:
        self.calls.append("rollout_end")
        self.spans = list(spans)


@rollout
async def rewarding(task: float, llm: LLM) -> None:
    emit_reward(task)


async def test_step_runs_hooks_in_order_and_stores_the_reward_span() -> None:
    store = InMemoryLightningStore()
    hooks = [Recorder(), Recorder(fail=True)]
    runner = make_runner()
    with runner.run_context(agent=rewarding, store=store, hooks=hooks):
        done = await runner.step(0.5, resources=LLM_RESOURCES, mode="train")
    assert done.status == "succeeded"
    for hook in hooks:  # a failing hook does not stop the rollout nor the other hooks
        assert hook.calls == ["rollout_start", "trace_start", "trace_end", "rollout_end"]
    spans = list(await store.query_spans(done.rollout_id))
    assert find_final_reward(spans) == 0.5
    assert [s.span_id for s in hooks[0].spans] == [s.span_id for s in spans]
    attempt = await store.get_latest_attempt(done.rollout_id)
    assert attempt is not None and attempt.metadata == {"final_reward": 0.5}


class Returns(LitAgent[Any]):
    """Returns whatever the task says."""

    def rollout(self, task: Any, resources: NamedResources, rollout: Rollout) -> Any:
        if isinstance(task, str) and task in _MAKERS:  # inputs are JSON: a name stands for a function
            return _MAKERS[task](rollout)
        return task(rollout) if callable(task) else task


_MAKERS: dict[str, Any] = {
    "one span named s": lambda r: [
        Span.from_attributes(
            attributes={}, name="s", rollout_id=r.rollout_id, attempt_id=r.attempt.attempt_id, sequence_id=1
        )
    ]
}


def core(name: str) -> SpanCoreFields:
    return SpanCoreFields(
        name=name, status=TraceStatus(status_code="OK"), attributes={"k": name}, start_time=1.0, end_time=2.0
    )


@pytest.mark.parametrize(
    ("result", "names"),
    [
        (None, []),
        (0.25, ["agentlightning.annotation"]),
        (1, ["agentlightning.annotation"]),
        ([core("a"), core("b")], ["a", "b"]),
        ("one span named s", ["s"]),
        ([], []),
    ],
)
async def test_return_values_become_the_attempt_spans(result: Any, names: list[str]) -> None:
    store = InMemoryLightningStore()
    runner = make_runner()
    with runner.run_context(agent=Returns(), store=store):
        done = await runner.step(result)
    assert done.status == "succeeded"
    spans = list(await store.query_spans(done.rollout_id))
    assert [s.name for s in spans] == names
    if isinstance(result, (int, float)):
        assert get_reward_value(spans[0]) == float(result)


@pytest.mark.parametrize(
    ("result", "error"), [("text", TypeError), ({"a": 1}, TypeError), ([core("a"), 3], ValueError)]
)
async def test_bad_return_values_fail_the_attempt(result: Any, error: type[Exception]) -> None:
    store = InMemoryLightningStore()
    runner = make_runner()
    with runner.run_context(agent=Returns(), store=store), pytest.raises(error):
        await runner.step(result)
    rollouts = list(await store.query_rollouts())
    attempt = await store.get_latest_attempt(rollouts[0].rollout_id)
    assert rollouts[0].status == "failed"
    assert attempt is not None and attempt.status == "failed"
    assert attempt.metadata is not None and attempt.metadata["error"]["type"] == error.__name__


async def test_unknown_resources_id_fails_the_attempt_with_a_clear_error() -> None:
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input=1.0, resources_id="rs-missing")
    runner = make_runner(max_rollouts=1)
    with runner.run_context(agent=rewarding, store=store):
        await runner.iter()
    rollout_ = next(iter(await store.query_rollouts()))
    attempt = await store.get_latest_attempt(rollout_.rollout_id)
    assert rollout_.status == "failed"
    assert attempt is not None and attempt.metadata is not None
    assert "rs-missing" in attempt.metadata["error"]["message"]


async def test_iter_picks_up_work_at_once_and_stops_on_the_event() -> None:
    store = InMemoryLightningStore()
    await store.add_resources(LLM_RESOURCES)
    event = threading.Event()
    # Polls an hour long: the rollout can only finish within the minute below if the enqueue woke the runner.
    runner = make_runner(poll_interval=3600.0, interval_jitter=0.0, max_rollouts=1)
    with runner.run_context(agent=rewarding, store=store):
        task = asyncio.create_task(runner.iter(event=event))
        await asyncio.sleep(0)  # let the runner start its first long poll on the empty queue
        queued = await store.enqueue_rollout(input=0.75, mode="val")
        finished = await store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=60)
        assert [r.status for r in finished] == ["succeeded"]
        await wait_within(task, 10)  # its one rollout done
    assert runner.processed == 1
    runner = make_runner(poll_interval=0.2, interval_jitter=0.0)
    with runner.run_context(agent=rewarding, store=store):
        task = asyncio.create_task(runner.iter(event=event))
        await asyncio.sleep(0)
        event.set()
        await wait_within(task, 10)
    assert runner.processed == 0


async def test_max_rollouts_and_concurrency() -> None:
    store = InMemoryLightningStore()
    both_running = asyncio.Barrier(2) if sys.version_info >= (3, 11) else None
    seen: list[int] = []

    @rollout
    async def together(task: int, llm: LLM) -> float:
        seen.append(task)
        if both_running is not None:
            await asyncio.wait_for(both_running.wait(), 10)  # only passes if two rollouts run at once
        return 1.0

    await store.add_resources(LLM_RESOURCES)
    for i in range(5):
        await store.enqueue_rollout(input=i)
    runner = make_runner(max_rollouts=4, concurrency=2)
    with runner.run_context(agent=together, store=store):
        await wait_within(runner.iter(), 30)
    assert runner.processed == 4 and sorted(seen) == [0, 1, 2, 3]
    statuses = sorted(r.status for r in await store.query_rollouts())
    assert statuses == ["queuing"] + ["succeeded"] * 4


class CountingStore(InMemoryLightningStore):
    """Counts the dequeue calls and how many are in flight at once."""

    def __init__(self) -> None:
        super().__init__()
        self.dequeues = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.limits: list[int] = []
        self.polled = asyncio.Event()

    async def _dequeue_rollouts(self, limit: int, worker_id: str | None, timeout: float | None) -> list[Any]:
        self.dequeues += 1
        if self.dequeues >= 3:
            self.polled.set()
        self.limits.append(limit)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            return await super()._dequeue_rollouts(limit, worker_id, timeout)
        finally:
            self.in_flight -= 1


async def test_idle_slots_share_one_poll_and_a_burst_is_claimed_at_once() -> None:
    store = CountingStore()
    await store.add_resources(LLM_RESOURCES)
    release = asyncio.Event()
    all_running = asyncio.Event()
    seen: list[tuple[int, str]] = []

    @rollout
    async def waiting(task: int, llm: LLM) -> float:
        seen.append((task, llm.model))
        if len(seen) == 16:
            all_running.set()
        await release.wait()
        return 1.0

    runner = make_runner(max_rollouts=16, concurrency=16, poll_interval=0.05, interval_jitter=0.0)
    with runner.run_context(agent=waiting, store=store):
        task = asyncio.create_task(runner.iter())
        await asyncio.wait_for(store.polled.wait(), 10)  # idle: a few polls go by
        await store.enqueue_many_rollouts([EnqueueRolloutRequest(input=i) for i in range(16)])
        await asyncio.wait_for(all_running.wait(), 10)
        release.set()
        await wait_within(task, 10)
    assert runner.processed == 16 and sorted(t for t, _ in seen) == list(range(16))
    assert {m for _, m in seen} == {"m"}  # every claim came with its resources
    assert store.most_in_flight == 1  # sixteen idle slots, one poll at a time
    assert max(store.limits) == 16  # the burst was claimed for every waiting slot in one call
    assert sorted(r.status for r in await store.query_rollouts()) == ["succeeded"] * 16


async def test_heartbeats_reach_the_worker_and_keep_a_long_attempt_alive() -> None:
    store = InMemoryLightningStore(scan_debounce_seconds=0)
    await store.add_resources(LLM_RESOURCES)
    release = asyncio.Event()

    @rollout
    async def slow(task: int, llm: LLM) -> float:
        await release.wait()
        return 1.0

    queued = await store.enqueue_rollout(input=1, config=RolloutConfig(unresponsive_seconds=0.6))
    runner = make_runner(max_rollouts=1, heartbeat_interval=0.1, interval_jitter=0.02)
    with runner.run_context(agent=slow, store=store, worker_id=7):
        task = asyncio.create_task(runner.iter())
        deadline = time.monotonic() + 10
        beats: set[float] = set()
        while len(beats) < 6 and time.monotonic() < deadline:  # > 0.6 s of heartbeats
            attempt = await store.get_latest_attempt(queued.rollout_id)
            if attempt is not None and attempt.last_heartbeat_time is not None:
                beats.add(attempt.last_heartbeat_time)
                assert attempt.status != "unresponsive"
            await asyncio.sleep(0.05)
        release.set()
        await wait_within(task, 10)
    assert len(beats) >= 6
    worker = await store.get_worker_by_id("Worker-7")
    assert (
        worker is not None
        and worker.heartbeat_stats is not None
        and "cpu_usage_pct" in worker.heartbeat_stats
    )
    finished = await store.get_rollout_by_id(queued.rollout_id)
    assert finished is not None and finished.status == "succeeded"


def test_run_context_tears_down_what_it_set_up(caplog: pytest.LogCaptureFixture) -> None:
    class Tracer(OtelTracer):
        def init_worker(self, worker_id: Any, store: Any = None, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("init_worker fails")

        def teardown(self, *args: Any, **kwargs: Any) -> None:
            self.torn_down = True

    tracer = Tracer()
    runner = LitAgentRunner(tracer)
    with (
        pytest.raises(RuntimeError, match="init_worker fails"),
        runner.run_context(agent=rewarding, store=InMemoryLightningStore()),
    ):
        pass
    assert tracer.torn_down
    with pytest.raises(ValueError, match="agent"):
        runner.get_agent()
    with pytest.raises(RuntimeError, match="iter"):
        runner.run()
    assert runner.get_worker_id() == "Worker-Unknown"


async def test_sync_agents_run_off_the_event_loop(caplog: pytest.LogCaptureFixture) -> None:
    @rollout
    def blocking(task: int, llm: LLM) -> float:
        asyncio.run(asyncio.sleep(0))  # only possible outside the runner's event loop
        emit_reward(2.0)
        return None  # pyright: ignore[reportReturnType]

    store = InMemoryLightningStore()
    runner = make_runner()
    with runner.run_context(agent=blocking, store=store), caplog.at_level(logging.WARNING):
        done = await runner.step(1, resources=LLM_RESOURCES)
    assert done.status == "succeeded"
    assert find_final_reward(list(await store.query_spans(done.rollout_id))) == 2.0


@pytest.mark.parametrize(
    "setting",
    [
        {"heartbeat_interval": "x"},
        {"heartbeat_interval": float("nan")},
        {"poll_interval": "0.5"},
        {"interval_jitter": None},
        {"concurrency": 1.5},
        {"max_rollouts": "3"},
    ],
)
def test_settings_that_are_not_numbers_are_refused(setting: dict[str, Any]) -> None:
    from agl.types import InvalidRequestError

    with pytest.raises(InvalidRequestError, match=next(iter(setting))):
        LitAgentRunner(OtelTracer(), **setting)
