"""Run ``agl store`` as a subprocess for a test: start it, read its address from its banner, stop it."""

from __future__ import annotations

import asyncio
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from agl.store import LightningStoreClient, StoreAuthenticationError

__all__ = ["AGL", "check_token_guard", "launch", "stop"]

AGL = Path(sys.executable).parent / "agl"
"""The ``agl`` command of the running environment."""


def launch(
    *args: str, env: dict[str, str] | None = None, command: list[str] | None = None
) -> tuple[subprocess.Popen[str], str, str]:
    """Start ``agl store`` and wait (with a deadline) for its banner; returns the process, address and banner."""
    argv = [*(command or [sys.executable, "-m", "agl.store.cli"]), "store", *args]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if selector.select(timeout=0.5):
            line = proc.stdout.readline()
            match = re.search(r"at (http://127\.0\.0\.1:\d+) ", line)
            if match:
                return proc, match.group(1), line
            if not line and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"agl store did not start: {proc.stderr.read() if proc.stderr else ''}")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[int, str, str]:
    """Send ``sig`` and wait for the process to end; returns its exit code, stdout and stderr."""
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, out, err


def check_token_guard(address: str, token: str, wrong: str) -> None:
    """A client of the store at ``address`` with ``token`` writes and reads back; one with ``wrong`` (``""``:
    no token) is refused with :class:`StoreAuthenticationError`."""

    async def use() -> None:
        client = LightningStoreClient(address, token=token)
        refused = LightningStoreClient(address, token=wrong, retry_delays=())
        try:
            rollout = await client.enqueue_rollout({"q": 1})
            assert (await client.get_rollout_by_id(rollout.rollout_id)) is not None
            with pytest.raises(StoreAuthenticationError):
                await refused.query_rollouts()
        finally:
            await client.close()
            await refused.close()

    asyncio.run(use())
