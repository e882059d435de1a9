"""Execution strategies: failures on either side stop the other, and shutdown always ends."""

from __future__ import annotations

import asyncio
import io
import os
import threading
import time
from typing import Any

import psutil
import pytest
from agl.algorithms import algo
from agl.runner import (
    ClientServerExecutionStrategy,
    LitAgentRunner,
    ProgressMonitor,
    SharedMemoryExecutionStrategy,
    StrategyError,
    Trainer,
    rollout,
)
from agl.store import InMemoryLightningStore
from agl.tracer import OtelTracer
from agl.types import LLM, AttemptStatus, NamedResources

RESOURCES: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}


@rollout
def hang_or_succeed(task: str, llm: LLM) -> float:
    if task == "hang":
        threading.Event().wait()  # never returns: only escalation can stop this runner
    return 1.0


class CrashingRunner(LitAgentRunner[Any]):
    async def iter(self, *, event: Any = None) -> None:
        raise RuntimeError("runner exploded on purpose")


@algo
async def wait_forever(store: Any) -> None:
    await asyncio.Event().wait()


@algo
async def explode(store: Any) -> None:
    await store.enqueue_rollout(input="ok")
    raise ValueError("algorithm exploded on purpose")


def _is_runner(child: psutil.Process) -> bool:
    """A live child that is not multiprocessing's own helper (resource tracker, fork server)."""
    try:
        if not child.is_running() or child.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = " ".join(child.cmdline())
    except psutil.Error:
        return False
    return "resource_tracker" not in cmdline and "forkserver" not in cmdline


def _children() -> set[int]:
    return {c.pid for c in psutil.Process().children() if _is_runner(c)}


@pytest.fixture
def children_before() -> set[int]:
    """The test process's children before the test: a child an earlier test left running (a server still
    stopping, say) is not one of this test's runners."""
    return _children()


def _no_children_left(before: set[int], deadline: float = 10.0) -> bool:
    """Every child started since ``before`` was taken has ended within ``deadline`` seconds."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if not _children() - before:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_a_crashing_runner_stops_the_algorithm_and_is_reported(
    strategy: str, children_before: set[int]
) -> None:
    trainer = Trainer(
        algorithm=wait_forever,
        n_runners=2,
        strategy=strategy,
        port=0,
        runner=CrashingRunner(OtelTracer(), heartbeat_interval=0),
        progress=False,
    )
    started = time.monotonic()
    with pytest.raises(StrategyError, match="runner exploded on purpose"):
        trainer.fit(hang_or_succeed)
    assert time.monotonic() - started < 60
    assert _no_children_left(children_before)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_a_crashing_algorithm_stops_the_runners_and_is_reraised(
    strategy: str, children_before: set[int]
) -> None:
    store = InMemoryLightningStore()
    trainer = Trainer(
        algorithm=explode,
        n_runners=2,
        strategy=strategy,
        store=store,
        port=0,
        initial_resources=RESOURCES,
        progress=False,
    )
    with pytest.raises(ValueError, match="algorithm exploded on purpose"):
        trainer.fit(hang_or_succeed)
    assert _no_children_left(children_before)


@pytest.mark.timeout(120)
def test_shutdown_escalates_until_a_stuck_runner_is_gone(children_before: set[int]) -> None:
    store = InMemoryLightningStore()

    @algo
    async def start_a_hang(store: Any) -> None:
        await store.add_resources(RESOURCES)
        queued = await store.enqueue_rollout(input="hang")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # wait until a runner is inside the agent
            current = await store.get_rollout_by_id(queued.rollout_id)
            if current is not None and current.status in ("preparing", "running"):
                return
            await asyncio.sleep(0.02)
        raise AssertionError("no runner picked the rollout up")

    strategy = ClientServerExecutionStrategy(
        n_runners=1, server_port=0, graceful_timeout=0.5, terminate_timeout=1.0
    )
    trainer = Trainer(algorithm=start_a_hang, strategy=strategy, store=store, progress=False)
    started = time.monotonic()
    trainer.fit(hang_or_succeed)
    assert time.monotonic() - started < 30
    assert _no_children_left(children_before)


def test_shm_runner_on_the_main_thread() -> None:
    store = InMemoryLightningStore()
    done: list[str] = []

    @algo
    async def one(store: Any) -> None:
        await store.add_resources(RESOURCES)
        queued = await store.enqueue_rollout(input="ok")
        finished = await store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=30)
        done.extend(r.status for r in finished)

    strategy = SharedMemoryExecutionStrategy(main_thread="runner", graceful_delay=1.0)
    Trainer(algorithm=one, strategy=strategy, store=store, progress=False).fit(hang_or_succeed)
    assert done == ["succeeded"]


RAN_IN: list[tuple[str, int]] = []


@rollout
def record_process(task: str, llm: LLM) -> float:
    RAN_IN.append((task, os.getpid()))
    return 1.0


@pytest.mark.timeout(120)
def test_cs_runner_on_the_main_process(children_before: set[int]) -> None:
    """The reference's ``main_process="runner"``: the runner here, the algorithm and the server in a child."""
    RAN_IN.clear()

    @algo
    async def one(store: Any) -> None:
        await store.add_resources(RESOURCES)
        queued = await store.enqueue_rollout(input=str(os.getpid()))  # the algorithm's process
        finished = await store.wait_for_rollouts(rollout_ids=[queued.rollout_id], timeout=30)
        assert [r.status for r in finished] == ["succeeded"]

    strategy = ClientServerExecutionStrategy(main_process="runner", server_port=0, graceful_timeout=2.0)
    Trainer(algorithm=one, strategy=strategy, progress=False).fit(record_process)
    [(algorithm_pid, runner_pid)] = RAN_IN
    assert runner_pid == os.getpid() and int(algorithm_pid) != os.getpid()
    assert _no_children_left(children_before)


@pytest.mark.timeout(120)
def test_cs_runner_on_the_main_process_reraises_the_algorithms_exception(children_before: set[int]) -> None:
    strategy = ClientServerExecutionStrategy(main_process="runner", server_port=0, graceful_timeout=2.0)
    trainer = Trainer(algorithm=explode, strategy=strategy, initial_resources=RESOURCES, progress=False)
    with pytest.raises(ValueError, match="algorithm exploded on purpose"):
        trainer.fit(hang_or_succeed)
    assert _no_children_left(children_before)


def test_cs_main_process_runner_needs_one_runner_and_both_roles() -> None:
    with pytest.raises(ValueError, match="n_runners=1"):
        ClientServerExecutionStrategy(main_process="runner", n_runners=2)
    with pytest.raises(ValueError, match="role='both'"):
        ClientServerExecutionStrategy(main_process="runner", role="algorithm")
    with pytest.raises(ValueError, match="main_process must be"):
        ClientServerExecutionStrategy(main_process="neither")  # pyright: ignore[reportArgumentType]


async def _run_until_shown(monitor: ProgressMonitor, stream: io.StringIO, text: str) -> None:
    """Runs ``monitor`` until ``text`` is in ``stream`` (10 s at most), then cancels it."""
    task = asyncio.create_task(monitor.run())
    deadline = time.monotonic() + 10
    while text not in stream.getvalue() and time.monotonic() < deadline:  # noqa: ASYNC110  # polls a StringIO
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_progress_monitor_counts_and_renders() -> None:
    store = InMemoryLightningStore()
    await store.add_resources(RESOURCES)
    for i in range(5):
        await store.enqueue_rollout(input=i)
    outcomes: list[tuple[float | None, AttemptStatus]] = [
        (1.0, "succeeded"),
        (0.0, "succeeded"),
        (None, "failed"),
    ]
    for reward, status in outcomes:
        claimed = await store.dequeue_rollout(worker_id="w")
        assert claimed is not None
        await store.update_attempt(
            claimed.rollout_id, claimed.attempt.attempt_id, status=status, metadata={"final_reward": reward}
        )
    stream = io.StringIO()
    monitor = ProgressMonitor(store, tty=True, stream=stream, refresh_interval=0.01)
    snapshot = await monitor.scan()
    assert (snapshot.total, snapshot.done, snapshot.succeeded, snapshot.failed, snapshot.queued) == (
        5,
        3,
        2,
        1,
        2,
    )
    assert snapshot.mean_reward == 0.5
    await _run_until_shown(monitor, stream, "3/5")
    assert "3/5" in stream.getvalue() and "reward 0.500" in stream.getvalue()
    assert "mean reward 0.5000" in snapshot.describe()


async def test_progress_lines_without_a_terminal() -> None:
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input=1)
    stream = io.StringIO()
    monitor = ProgressMonitor(store, tty=False, stream=stream, log_interval=0.01)
    await _run_until_shown(monitor, stream, "0/1 rollouts done")
    assert "0/1 rollouts done" in stream.getvalue() and "1 queued" in stream.getvalue()
    assert "rollouts finished:" in stream.getvalue()


class OneLoopStore(InMemoryLightningStore):
    """An in-memory store that declares itself not thread-safe and records the loops it is called on."""

    def __init__(self) -> None:
        super().__init__()
        self.loops: set[int] = set()

    @property
    def capabilities(self) -> Any:
        return {**super().capabilities, "thread_safe": False}

    async def _dequeue_rollouts(self, limit: int, worker_id: str | None, timeout: float | None) -> Any:
        self.loops.add(id(asyncio.get_running_loop()))  # every claim comes here
        return await super()._dequeue_rollouts(limit, worker_id, timeout)

    async def update_attempt(self, *args: Any, **kwargs: Any) -> Any:
        self.loops.add(id(asyncio.get_running_loop()))
        return await super().update_attempt(*args, **kwargs)


def test_shm_confines_a_store_that_is_not_thread_safe_to_one_loop() -> None:
    from agl.algorithms import Baseline

    store = OneLoopStore()
    trainer = Trainer(
        algorithm=Baseline(),
        n_runners=3,
        strategy="shm",
        store=store,
        initial_resources=RESOURCES,
        progress=False,
    )
    trainer.fit(hang_or_succeed, ["ok"] * 30)
    assert {r.status for r in asyncio.run(store.query_rollouts())} == {"succeeded"}
    assert len(store.loops) == 1, "every call must run on the one private loop"
