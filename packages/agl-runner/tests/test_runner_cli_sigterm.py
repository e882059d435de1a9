"""Issue 27, defect 9: SIGTERM to ``agl runner`` and its runner processes (as ``kill -TERM -PGID``, a
container stop or a Ctrl+C-like group signal sends it) ends them cleanly, without libuv's
``uv__io_poll: Assertion `errno == EINTR' failed`` abort. A real ``agl store`` and ``agl runner``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from agl.testing.e2e.dashboard_run import agl_command, close_pipes, read_store_endpoint
from agl.testing.processes import wait_until

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="process groups and /proc as on Linux")


def _runners_connected(pid: int, port: int, n: int) -> bool:
    """``n`` runner processes of ``pid`` hold a connection to the store (they are in their event loop)."""
    try:
        kids = psutil.Process(pid).children()
    except psutil.NoSuchProcess:
        return False
    connected = 0
    for kid in kids:
        try:
            if any(c.raddr and c.raddr.port == port for c in kid.net_connections(kind="tcp")):
                connected += 1
        except psutil.Error:
            continue
    return connected >= n


@pytest.mark.timeout(180)
def test_sigterm_to_the_process_group_ends_agl_runner_and_its_runners_cleanly() -> None:
    """Old code: each runner process ran the parent's SIGTERM handler (inherited through fork), which closed
    a descriptor number the runner had reused for its event loop: libuv aborted (exit code -6)."""
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
                "2",
                "--heartbeat-interval",
                "0.2",
                "--log-level",
                "WARNING",
            ],
            env=env,
            cwd=ROOT,
            text=True,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        procs.append(runner)
        port = int(endpoint.rsplit(":", 1)[1])
        assert wait_until(lambda: _runners_connected(runner.pid, port, 2), 90), "the runners never connected"
        children = psutil.Process(runner.pid).children()
        os.killpg(runner.pid, signal.SIGTERM)
        _, stderr = runner.communicate(timeout=60)
        assert "Assertion" not in stderr, stderr
        assert runner.returncode in (0, -signal.SIGTERM, 128 + signal.SIGTERM), stderr
        gone, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, f"runner processes left: {alive}"
        # psutil.wait_procs sets returncode on the processes it returns (not in its type stubs)
        codes = [p.returncode for p in gone]  # pyright: ignore[reportAttributeAccessIssue]
        assert all(c in (0, -signal.SIGTERM, None) for c in codes), codes
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
            close_pipes(proc)
