"""The whole loop, end to end: Trainer + Baseline + runners + tracer + store, in threads and processes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from agl.algorithms import Baseline
from agl.runner import LitAgentRunner, Trainer
from agl.store import InMemoryLightningStore, LightningStore
from agl.testing.e2e.agents import flaky_agent, reward_agent, victim_agent
from agl.tracer import OtelTracer, find_final_reward, find_reward_spans, get_reward_value
from agl.types import LLM, AttemptedRollout, NamedResources, RolloutConfig

INITIAL: NamedResources = {"main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model="stand-in")}


def _rollouts(store: LightningStore) -> list[Any]:
    return list(asyncio.run(store.query_rollouts()))


def _trainer(algorithm: Any, strategy: str, store: LightningStore, n_runners: int, **kwargs: Any) -> Trainer:
    """A Trainer on ``store`` with the stand-in resources, a free port and no progress bar."""
    return Trainer(
        algorithm=algorithm,
        n_runners=n_runners,
        strategy=strategy,
        store=store,
        port=0,
        initial_resources=INITIAL,
        progress=False,
        **kwargs,
    )


async def _spans_and_attempts(store: LightningStore, rollout_id: str) -> tuple[list[Any], list[Any]]:
    return list(await store.query_spans(rollout_id)), list(await store.query_attempts(rollout_id))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_baseline_over_200_tasks_every_rollout_succeeds_with_its_reward_span(strategy: str) -> None:
    store = InMemoryLightningStore()
    algorithm = Baseline()
    _trainer(algorithm, strategy, store, n_runners=4).fit(reward_agent, [{"x": i} for i in range(200)])

    rollouts = _rollouts(store)
    assert len(rollouts) == 200
    assert {r.status for r in rollouts} == {"succeeded"}
    assert algorithm.summary.succeeded == 200 and len(algorithm.summary.rewards) == 200
    workers = set()

    async def check() -> None:
        for r in rollouts:
            spans, attempts = await _spans_and_attempts(store, r.rollout_id)
            assert [a.status for a in attempts] == ["succeeded"], r
            workers.add(attempts[0].worker_id)
            rewards = find_reward_spans(spans)
            assert len(rewards) == 1, (r.rollout_id, [s.name for s in spans])
            assert get_reward_value(rewards[0]) == pytest.approx(r.input["x"] / 10)
            assert find_final_reward(spans) == pytest.approx(r.input["x"] / 10)
            assert all(s.attempt_id == attempts[0].attempt_id for s in spans)

    asyncio.run(check())
    assert len(workers) >= 2, f"work should be spread over the runners, got {workers}"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_failed_first_attempts_are_retried_and_succeed_on_attempt_two(strategy: str) -> None:
    store = InMemoryLightningStore()
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"])
    _trainer(Baseline(rollout_config=config), strategy, store, n_runners=2).fit(
        flaky_agent, [{"x": i} for i in range(30)]
    )

    rollouts = _rollouts(store)
    assert len(rollouts) == 30

    async def check() -> None:
        for r in rollouts:
            assert r.status == "succeeded"
            assert isinstance(r, AttemptedRollout) and r.attempt.sequence_id == 2
            spans, attempts = await _spans_and_attempts(store, r.rollout_id)
            assert [a.status for a in attempts] == ["failed", "succeeded"]
            error = attempts[0].metadata["error"]
            assert error["type"] == "RuntimeError" and "fails on purpose" in error["message"]
            assert "Traceback" in error["traceback"]
            assert find_final_reward([s for s in spans if s.attempt_id == attempts[1].attempt_id]) == 1.0

    asyncio.run(check())


def _kill_when_pid_appears(pid_file: Path, deadline: float, killed: list[int]) -> None:
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text():
            pid = int(pid_file.read_text())
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
            return
        time.sleep(0.02)


@pytest.mark.timeout(180)
def test_runner_killed_mid_rollout_its_attempt_turns_unresponsive_and_another_runner_retries(
    tmp_path: Path,
) -> None:
    store = InMemoryLightningStore(scan_debounce_seconds=0.1)
    pid_file = tmp_path / "victim.pid"
    config = RolloutConfig(unresponsive_seconds=2.5, max_attempts=2, retry_condition=["unresponsive"])
    trainer = _trainer(
        Baseline(rollout_config=config, polling_interval=0.2),
        "cs",
        store,
        n_runners=2,
        runner=LitAgentRunner(tracer=OtelTracer(), heartbeat_interval=0.3, interval_jitter=0.05),
    )
    tasks = [{"x": 0, "victim": True, "pid_file": str(pid_file)}] + [{"x": i} for i in range(1, 10)]
    killed: list[int] = []
    killer = threading.Thread(
        target=_kill_when_pid_appears, args=(pid_file, time.monotonic() + 60, killed), daemon=True
    )
    killer.start()
    trainer.fit(victim_agent, tasks)
    killer.join(5)

    assert killed, "the victim never started"
    strategy: Any = trainer.strategy
    assert [lost.pid for lost in strategy.lost_runners] == killed
    assert strategy.lost_runners[0].exitcode == -signal.SIGKILL
    rollouts = _rollouts(store)
    assert {r.status for r in rollouts} == {"succeeded"}
    victim = next(r for r in rollouts if r.input.get("victim"))

    async def check() -> None:
        _, attempts = await _spans_and_attempts(store, victim.rollout_id)
        assert [a.status for a in attempts] == ["unresponsive", "succeeded"]
        assert attempts[0].worker_id != attempts[1].worker_id

    asyncio.run(check())


@pytest.mark.timeout(180)
def test_spawned_runner_processes_work_too() -> None:
    """With ``start_method="spawn"`` the runner, tracer and agent travel to fresh interpreters by pickling."""
    from agl.runner import ClientServerExecutionStrategy

    store = InMemoryLightningStore()
    strategy = ClientServerExecutionStrategy(n_runners=2, server_port=0, start_method="spawn")
    Trainer(
        algorithm=Baseline(), strategy=strategy, store=store, initial_resources=INITIAL, progress=False
    ).fit(reward_agent, [{"x": i} for i in range(10)])
    rollouts = _rollouts(store)
    assert len(rollouts) == 10 and {r.status for r in rollouts} == {"succeeded"}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("strategy", ["cs", "shm"])
def test_sqlite_store_end_to_end(strategy: str, tmp_path: Path) -> None:
    from agl.store import SqlLightningStore

    store = SqlLightningStore(f"sqlite:///{tmp_path / 'run.db'}")
    _trainer(Baseline(), strategy, store, n_runners=2).fit(reward_agent, [{"x": i} for i in range(40)])

    async def check() -> None:
        rollouts = list(await store.query_rollouts())
        assert len(rollouts) == 40 and {r.status for r in rollouts} == {"succeeded"}
        for r in rollouts:
            assert find_final_reward(list(await store.query_spans(r.rollout_id))) == pytest.approx(
                r.input["x"] / 10
            )
        await store.close()

    asyncio.run(check())
