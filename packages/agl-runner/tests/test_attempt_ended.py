"""A runner whose agent hangs gets its slot back when the store ends the attempt (issue 12, defect 8).

Real stores (in memory, and the same store behind a real HTTP server with the real client), the real
OpenTelemetry tracer, real agents that hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import pytest
from agl.runner import LitAgentRunner, rollout
from agl.store import InMemoryLightningStore, LightningStore, LightningStoreClient, LightningStoreServer
from agl.tracer import OtelTracer, emit_reward
from agl.types import LLM, NamedResources, Rollout, RolloutConfig
from agl.types.timeouts import wait_within

RESOURCES: NamedResources = {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="m")}
RELEASE = threading.Event()  # set at teardown so blocked agent threads end
python_loop_stopped = threading.Event()
entered: dict[str, float] = {}


@rollout
async def async_hang(task: str, llm: LLM, rollout: Rollout) -> None:
    if task == "hang":
        entered[rollout.rollout_id] = time.monotonic()
        await asyncio.sleep(3600)
    emit_reward(1.0)


@rollout
def sync_blocked_in_c(task: str, llm: LLM, rollout: Rollout) -> None:
    if task == "hang":
        entered[rollout.rollout_id] = time.monotonic()
        RELEASE.wait()  # blocked in C: the thread stays until this returns
    emit_reward(1.0)


@rollout
def sync_python_loop(task: str, llm: LLM, rollout: Rollout) -> None:
    if task == "hang":
        entered[rollout.rollout_id] = time.monotonic()
        try:
            while not RELEASE.is_set():
                time.sleep(0.01)  # short C calls: the cancellation lands between two of them
        finally:
            python_loop_stopped.set()
    emit_reward(1.0)


@contextlib.asynccontextmanager
async def a_store(kind: str) -> AsyncIterator[tuple[LightningStore, LightningStore]]:
    """``(store the runner uses, store the test inspects)``."""
    inner = InMemoryLightningStore(scan_debounce_seconds=0)
    if kind == "memory":
        yield inner, inner
        return
    server = LightningStoreServer(inner, port=0)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(server.endpoint)
    try:
        yield client, inner
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)


async def _until_entered(rollout_id: str, seconds: float = 10) -> None:
    """Wait until the agent is inside rollout ``rollout_id`` (it may run in another thread)."""
    deadline = time.monotonic() + seconds
    while rollout_id not in entered and time.monotonic() < deadline:  # noqa: ASYNC110  # set from any thread
        await asyncio.sleep(0.02)


async def _run_until(runner: LitAgentRunner[Any], seconds: float) -> None:
    """``runner.iter()`` must return by itself (its rollout limit reached) within ``seconds``. ``wait_within``,
    not ``asyncio.wait_for``: a runner ends quietly when cancelled, so ``wait_for`` would let a timeout pass
    unseen (it hid a runner that never returned), while ``wait_within`` raises ``TimeoutError`` either way."""
    await wait_within(runner.iter(), seconds)


@pytest.fixture(autouse=True)
def _release_blocked_threads() -> Any:
    RELEASE.clear()
    python_loop_stopped.clear()
    yield
    RELEASE.set()


def make_runner(**kwargs: Any) -> LitAgentRunner[Any]:
    kwargs.setdefault("heartbeat_interval", 0.1)
    kwargs.setdefault("interval_jitter", 0.02)
    kwargs.setdefault("poll_interval", 0.2)
    return LitAgentRunner(OtelTracer(), **kwargs)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["memory", "http"])
@pytest.mark.parametrize(
    "agent",
    [async_hang, sync_blocked_in_c, sync_python_loop],
    ids=["async_sleep", "sync_blocked_in_c", "sync_python_loop"],
)
async def test_a_timed_out_attempt_cancels_its_hung_agent_and_frees_the_runner(kind: str, agent: Any) -> None:
    async with a_store(kind) as (store, inner):
        await inner.add_resources(RESOURCES)
        hung = await inner.enqueue_rollout("hang", config=RolloutConfig(timeout_seconds=0.5))
        after = await inner.enqueue_rollout("ok")
        runner = make_runner(max_rollouts=2)
        with runner.run_context(agent=agent, store=store):
            await _run_until(runner, 20)  # before the fix: never returns, the agent holds the only slot

        ended = await inner.get_rollout_by_id(hung.rollout_id)
        assert ended is not None and ended.status == "failed"
        attempts = list(await inner.query_attempts(hung.rollout_id))
        assert [a.status for a in attempts] == ["timeout"]
        metadata = attempts[0].metadata
        assert metadata is not None
        error = metadata["error"]
        assert error["type"] == "AttemptEnded" and "timeout" in error["message"]
        finished = await inner.get_rollout_by_id(after.rollout_id)
        assert finished is not None and finished.status == "succeeded"
        if agent is sync_python_loop:
            assert python_loop_stopped.wait(5), (
                "the abandoned agent thread should stop at its next instruction"
            )


R = TypeVar("R")


async def _interrupt_a_hung_agent(
    store: LightningStore, inner: LightningStore, interrupt: Callable[[str], Awaitable[R]]
) -> tuple[str, R]:
    """One runner on one rollout whose agent hangs; once the agent is in, ``interrupt(rollout_id)``.
    Returns the rollout id and what ``interrupt`` returned, once the runner has stopped."""
    await inner.add_resources(RESOURCES)
    hung = await inner.enqueue_rollout("hang")
    runner = make_runner(max_rollouts=1)
    with runner.run_context(agent=async_hang, store=store):
        task = asyncio.create_task(_run_until(runner, 20))
        await _until_entered(hung.rollout_id)
        assert hung.rollout_id in entered, "the agent never started"
        result = await interrupt(hung.rollout_id)
        await task
    return hung.rollout_id, result


@pytest.mark.timeout(60)
async def test_a_cancelled_rollout_cancels_its_agent_and_stays_cancelled() -> None:
    async with a_store("http") as (store, inner):
        rollout_id, _ = await _interrupt_a_hung_agent(
            store, inner, lambda rollout_id: inner.update_rollout(rollout_id, status="cancelled")
        )
        ended = await inner.get_rollout_by_id(rollout_id)
        assert ended is not None and ended.status == "cancelled"
        attempts = list(await inner.query_attempts(rollout_id))
        assert [a.status for a in attempts] == ["failed"]
        metadata = attempts[0].metadata
        assert metadata is not None and "the rollout was cancelled" in metadata["error"]["message"]


@pytest.mark.timeout(60)
async def test_an_attempt_another_attempt_took_over_is_dropped() -> None:
    """The store retried the rollout elsewhere (here: a manual retry); the old agent stops, and only the new
    attempt can succeed."""
    async with a_store("memory") as (store, inner):
        rollout_id, retry = await _interrupt_a_hung_agent(
            store, inner, lambda rollout_id: inner.start_attempt(rollout_id, worker_id="someone-else")
        )
        attempts = list(await inner.query_attempts(rollout_id))
        assert [a.attempt_id for a in attempts][-1] == retry.attempt.attempt_id
        assert attempts[0].status == "failed"
        metadata = attempts[0].metadata
        assert metadata is not None and "took over" in metadata["error"]["message"]
        assert attempts[1].status == "preparing"  # untouched by the old runner


@rollout
async def waits_for_release(task: str, llm: LLM, rollout: Rollout) -> None:
    entered[rollout.rollout_id] = time.monotonic()
    while not RELEASE.is_set():  # noqa: ASYNC110  # set from the test, possibly another thread
        await asyncio.sleep(0.01)
    emit_reward(1.0)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["memory", "http"])
async def test_a_success_reported_after_another_attempt_took_over_is_dropped_by_the_store(kind: str) -> None:
    """The heartbeat cannot tell this runner in time (here: none runs) that its rollout was retried elsewhere;
    its agent then returns a success. The store, deciding in the write, drops it: one success per rollout.
    Before the fix the runner asked the store first, only when it thought the attempt at risk, and wrote it."""
    async with a_store(kind) as (store, inner):
        await inner.add_resources(RESOURCES)
        queued = await inner.enqueue_rollout("task")
        runner = make_runner(max_rollouts=1, heartbeat_interval=3600)
        with runner.run_context(agent=waits_for_release, store=store):
            task = asyncio.create_task(_run_until(runner, 20))
            await _until_entered(queued.rollout_id)
            retry = await inner.start_attempt(queued.rollout_id, worker_id="someone-else")
            RELEASE.set()
            await task
        attempts = list(await inner.query_attempts(queued.rollout_id))
        assert [a.status for a in attempts] == ["failed", "preparing"]
        metadata = attempts[0].metadata
        assert metadata is not None and metadata["error"]["type"] == "ResultDropped"
        await inner.finish_attempt(queued.rollout_id, retry.attempt.attempt_id, status="succeeded")
        statuses = [a.status for a in await inner.query_attempts(queued.rollout_id)]
        assert statuses.count("succeeded") == 1
