"""A runner process that dies for any reason is a lost runner: its attempt is retried, a replacement starts
(issue 12, defect 7). Real processes, real store server, real agents that ``os._exit``."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from agl.algorithms import Baseline
from agl.runner import ClientServerExecutionStrategy, StrategyError, Trainer
from agl.store import InMemoryLightningStore, LightningStore
from agl.store.client import LightningStoreClient
from agl.testing.e2e.dashboard_run import agl_command, close_pipes, read_store_endpoint
from agl.testing.e2e.fault_agents import always_exits, exits_on_first_attempt
from agl.types import LLM, EnqueueRolloutRequest, NamedResources, RolloutConfig

ROOT = Path(__file__).resolve().parents[1]
INITIAL: NamedResources = {"main_llm": LLM(endpoint="http://127.0.0.1:9/v1", model="stand-in")}
RETRY_LOST = RolloutConfig(max_attempts=2, retry_condition=["unresponsive"])


def _rollouts(store: LightningStore) -> list[Any]:
    return list(asyncio.run(store.query_rollouts()))


@pytest.mark.timeout(180)
def test_an_agent_calling_os_exit_is_a_lost_runner_retried_and_replaced(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before the fix: StrategyError ("runner-0 crashed (exited with code 1)") and the run aborted."""
    store = InMemoryLightningStore()
    strategy = ClientServerExecutionStrategy(n_runners=2, server_port=0, restart_backoff=0.05)
    # Each task takes 0.1 s, so work is left for a replacement when a runner dies: without it the other runner
    # could finish the whole run before the replacement is due, and none would (rightly) be started.
    tasks = [{"x": i, "exit": i in (3, 11), "pause": 0.1} for i in range(20)]
    trainer = Trainer(
        algorithm=Baseline(rollout_config=RETRY_LOST, polling_interval=0.2),
        strategy=strategy,
        store=store,
        initial_resources=INITIAL,
        progress=False,
    )
    with caplog.at_level(logging.WARNING, logger="agl.runner.strategies"):
        trainer.fit(exits_on_first_attempt, tasks)

    rollouts = _rollouts(store)
    assert len(rollouts) == 20 and {r.status for r in rollouts} == {"succeeded"}
    assert len(strategy.lost_runners) == 2
    assert {lost.exitcode for lost in strategy.lost_runners} == {1}
    assert all(lost.replaced_by for lost in strategy.lost_runners)
    assert all(len(lost.released) == 1 for lost in strategy.lost_runners)
    assert "in place of" in caplog.text

    async def attempts_of_exiting_tasks() -> list[list[str]]:
        out = []
        for r in rollouts:
            if r.input["exit"]:
                out.append([a.status for a in await store.query_attempts(r.rollout_id)])
        return out

    # No unresponsive_seconds configured: the strategy itself handed the dead runner's attempt back.
    assert asyncio.run(attempts_of_exiting_tasks()) == [["unresponsive", "succeeded"]] * 2


@pytest.mark.timeout(180)
def test_replacements_are_bounded_and_the_run_fails_when_no_runner_is_left(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemoryLightningStore()
    strategy = ClientServerExecutionStrategy(n_runners=1, server_port=0, max_restarts=2, restart_backoff=0.05)
    trainer = Trainer(
        algorithm=Baseline(rollout_config=RolloutConfig(max_attempts=10, retry_condition=["unresponsive"])),
        strategy=strategy,
        store=store,
        initial_resources=INITIAL,
        progress=False,
    )
    started = time.monotonic()
    with caplog.at_level(logging.WARNING), pytest.raises(StrategyError, match="at most 2 in a row"):
        trainer.fit(always_exits, [{"x": 0}])
    assert time.monotonic() - started < 60
    assert len(strategy.lost_runners) == 3  # the first process and its two replacements
    assert [lost.exitcode for lost in strategy.lost_runners] == [3, 3, 3]
    assert strategy.lost_runners[-1].replaced_by is None
    assert "replacing runner-0 in 0.1s" in caplog.text and "replacing runner-1 in 0.1s" in caplog.text
    (only,) = _rollouts(store)
    assert [a.status for a in asyncio.run(store.query_attempts(only.rollout_id))] == ["unresponsive"] * 3


def _runner_children(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return []
    alive = []
    for kid in kids:
        try:
            if kid.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(kid.cmdline()):
                alive.append(kid)
        except psutil.Error:
            continue
    return alive


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("n_runners", "linger"), [(1, 0.0), (2, 0.0), (1, 0.3)])
def test_agl_runner_replaces_runner_processes_that_die(n_runners: int, linger: float) -> None:
    """Before the fix: the dead runners were gone for good (with one runner, ``agl runner`` itself died) and
    their rollouts never ended. ``linger``: the dying process closes its files that long before it can be
    reaped; before the second fix ``agl runner`` then saw no runner running and none handled as lost, and
    returned (exit code 0) with the rollouts unfinished (once in a while in CI, without ``linger``)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGL_STORE_TOKEN", None)
    store = subprocess.Popen(
        [*agl_command(), "store", "--port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    procs = [store]
    try:
        endpoint = read_store_endpoint(store, time.monotonic() + 60)
        runner = subprocess.Popen(
            [
                *agl_command(),
                "runner",
                "agl.testing.e2e.fault_agents:exits_on_first_attempt",
                "--store",
                endpoint,
                "--n-runners",
                str(n_runners),
                "--log-level",
                "WARNING",
            ],
            env=env,
            cwd=ROOT,
            text=True,
        )
        procs.append(runner)

        async def run_tasks() -> list[Any]:
            client = LightningStoreClient(endpoint)
            try:
                resources = await client.add_resources(INITIAL)
                queued = await client.enqueue_many_rollouts(
                    [
                        EnqueueRolloutRequest(
                            input={"x": i, "exit": i % 4 == 1, "linger": linger},
                            resources_id=resources.resources_id,
                            config=RETRY_LOST,
                        )
                        for i in range(12)
                    ]
                )
                ids = [r.rollout_id for r in queued]
                deadline = time.monotonic() + 90
                done = await client.wait_for_rollouts(rollout_ids=ids, timeout=30)
                while len(done) < len(ids) and time.monotonic() < deadline:  # one wait may end early
                    done = await client.wait_for_rollouts(rollout_ids=ids, timeout=30)
                attempts = [list(await client.query_attempts(r.rollout_id)) for r in queued]
                return [done, attempts]
            finally:
                await client.close()

        done, attempts = asyncio.run(run_tasks())
        assert len(done) == 12 and {r.status for r in done} == {"succeeded"}
        assert sorted(len(a) for a in attempts) == [1] * 9 + [2] * 3
        assert runner.poll() is None, "agl runner keeps serving"
        deadline = time.monotonic() + 30
        while len(_runner_children(runner.pid)) != n_runners and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(_runner_children(runner.pid)) == n_runners, "every dead runner process was replaced"
        runner.terminate()
        assert runner.wait(30) == 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            close_pipes(proc)
