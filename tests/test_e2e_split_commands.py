"""A split deployment: `agl store`, the algorithm and the runners as three separate commands complete a run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from agl.store.client import LightningStoreClient
from agl.testing.e2e.dashboard_run import agl_command, close_pipes, read_store_endpoint
from agl.tracer import find_final_reward

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def _killed_on_exit() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts; those still running when the block ends (a failure) are killed."""
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            close_pipes(proc)


def _stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
        raise


_LEAKS = ("ResourceWarning", "Unclosed", "unclosed", "was never awaited", "Task was destroyed")


def _assert_no_leak_warnings(who: str, stderr: str) -> None:
    leaks = [line for line in stderr.splitlines() if any(word in line for word in _LEAKS)]
    assert not leaks, f"the {who} process leaked at exit:\n" + "\n".join(leaks)


@pytest.mark.timeout(240)
def test_store_algorithm_and_runners_as_three_commands(tmp_path: Path) -> None:
    db = tmp_path / "run.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "AGL_MANAGED_STORE": "0", "AGL_SERVER_HOST": "127.0.0.1"}
    env.pop("AGL_STORE_TOKEN", None)
    store = subprocess.Popen(
        [*agl_command(), "store", "--backend", f"sqlite:///{db}", "--port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    with _killed_on_exit() as procs:
        procs.append(store)
        endpoint = read_store_endpoint(store, time.monotonic() + 60)
        env["AGL_SERVER_PORT"] = endpoint.rsplit(":", 1)[1]
        # -W default: a ResourceWarning (an unclosed connection at exit) or an un-awaited coroutine shows
        app = [sys.executable, "-W", "default", "-m", "agl.testing.e2e.split_app", "40"]
        with (tmp_path / "runners.err").open("w") as runners_err:  # the child keeps its own copy
            runners = subprocess.Popen(
                app, env={**env, "AGL_CURRENT_ROLE": "runner"}, cwd=ROOT, text=True, stderr=runners_err
            )
        procs.append(runners)
        algorithm = subprocess.Popen(
            app,
            env={**env, "AGL_CURRENT_ROLE": "algorithm"},
            cwd=ROOT,
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        procs.append(algorithm)
        out, err = algorithm.communicate(timeout=180)
        assert algorithm.returncode == 0, err[-3000:]
        assert "split_app: done" in out
        _assert_no_leak_warnings("algorithm", err)

        async def check() -> None:
            client = LightningStoreClient(endpoint)
            try:
                rollouts = list(await client.query_rollouts())
                assert len(rollouts) == 40
                assert {r.status for r in rollouts} == {"succeeded"}
                for r in rollouts:
                    spans = list(await client.query_spans(r.rollout_id))
                    assert find_final_reward(spans) == pytest.approx(r.input["x"] / 10)
                workers = await client.query_workers()
                assert len(workers) == 2
            finally:
                await client.close()

        asyncio.run(check())
        assert runners.poll() is None, "runners keep serving until told to stop"
        assert _stop(runners) == 0
        _assert_no_leak_warnings("runners", (tmp_path / "runners.err").read_text())
        assert _stop(store) == 0


@pytest.mark.timeout(180)
def test_agl_runner_command_serves_an_agent_against_agl_store(tmp_path: Path) -> None:
    from agl.types import LLM, EnqueueRolloutRequest

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("AGL_STORE_TOKEN", None)
    store = subprocess.Popen(
        [*agl_command(), "store", "--port", "0", "--log-level", "WARNING"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    with _killed_on_exit() as procs:
        procs.append(store)
        endpoint = read_store_endpoint(store, time.monotonic() + 60)
        bad = subprocess.run(
            [*agl_command(), "runner", "agl.testing.e2e.agents:no_such_agent", "--store", endpoint],
            capture_output=True,
            text=True,
            env=env,
            cwd=ROOT,
            timeout=60,
            check=False,
        )
        assert bad.returncode == 2 and "no_such_agent" in bad.stderr
        runner = subprocess.Popen(
            [
                *agl_command(),
                "runner",
                "agl.testing.e2e.agents:reward_agent",
                "--store",
                endpoint,
                "--n-runners",
                "2",
            ],
            env=env,
            cwd=ROOT,
            text=True,
        )
        procs.append(runner)

        async def run_tasks() -> None:
            client = LightningStoreClient(endpoint)
            try:
                resources = await client.add_resources(
                    {"llm": LLM(endpoint="http://127.0.0.1:9/v1", model="stand-in")}
                )
                queued = await client.enqueue_many_rollouts(
                    [
                        EnqueueRolloutRequest(input={"x": i}, resources_id=resources.resources_id)
                        for i in range(12)
                    ]
                )
                done = await client.wait_for_rollouts(rollout_ids=[r.rollout_id for r in queued], timeout=120)
                assert len(done) == 12 and {r.status for r in done} == {"succeeded"}
            finally:
                await client.close()

        asyncio.run(run_tasks())
        assert _stop(runner) == 0
        assert _stop(store) == 0
