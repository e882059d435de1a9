"""The ``agl`` command, ``agl store`` as a real process, and durability across ``kill -9``."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from agl.store import LightningStoreClient, StoreConnectionError
from agl.testing.spans import make_span
from agl.testing.store.cli import AGL, check_token_guard
from agl.testing.store.cli import launch as _launch
from agl.testing.store.cli import stop as _stop
from agl.types import PromptTemplate, RolloutConfig


def test_agl_lists_its_commands() -> None:
    result = subprocess.run([str(AGL), "--help"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0
    assert re.search(r"^  store +serve a LightningStore over HTTP", result.stdout, re.MULTILINE), (
        result.stdout
    )
    bare = subprocess.run([str(AGL)], capture_output=True, text=True, timeout=60, check=False)
    assert bare.returncode == 2 and bare.stderr == result.stdout, "no command: the same help, as an error"
    result = subprocess.run([str(AGL), "nonsense"], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2 and "unknown command 'nonsense'" in result.stderr


def test_bad_backend_is_a_clear_error() -> None:
    result = subprocess.run(
        [str(AGL), "store", "--port", "0", "--backend", "mongodb://x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (
        result.returncode == 2
        and "unknown store backend 'mongodb://x'" in result.stderr
        and "sqlite:///" in result.stderr
    )


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_store_command_serves_and_stops_cleanly(sig: int) -> None:
    proc, address, banner = _launch("--port", "0", "--token", "tok", command=[str(AGL)])
    assert "bearer token required" in banner
    try:
        check_token_guard(address, token="tok", wrong="")
    finally:
        code, out, err = _stop(proc, sig)
    assert code == 0, err
    assert out.rstrip().endswith("agl store: stopped")
    assert "Traceback" not in err


def test_backend_passwords_are_not_printed() -> None:
    from agl.store.cli import _redact  # pyright: ignore[reportPrivateImportUsage]  # the name the CLI uses

    assert _redact("postgresql://agl:hunter2@db:5432/agl") == "postgresql://agl:***@db:5432/agl"
    assert _redact("sqlite:///tmp/x.db") == "sqlite:///tmp/x.db"


def _use_then_stop(
    proc: subprocess.Popen[str],
    address: str,
    use: Callable[[LightningStoreClient], Awaitable[object]],
    **client_kwargs: Any,
) -> None:
    """Runs ``use`` with a client of the store ``proc`` serves at ``address``, then stops ``proc``, which must
    exit cleanly."""

    async def main() -> None:
        client = LightningStoreClient(address, **client_kwargs)
        try:
            await use(client)
        finally:
            await client.close()

    try:
        asyncio.run(main())
    finally:
        code, _, err = _stop(proc)
    assert code == 0, err


def test_token_from_the_environment(tmp_path: Path) -> None:
    proc, address, banner = _launch(
        "--port", "0", "--backend", f"sqlite:///{tmp_path / 's.db'}", env={"AGL_STORE_TOKEN": "env-tok"}
    )
    assert "sqlite:///" in banner and "bearer token required" in banner
    _use_then_stop(proc, address, lambda client: client.enqueue_rollout(1), token="env-tok")


async def _workload(client: LightningStoreClient, acked: dict[str, Any], index: int) -> None:
    """One rollout after another, recording each write only once the server acknowledged it."""
    config = RolloutConfig(timeout_seconds=1.0, max_attempts=2, retry_condition=["timeout"])
    for i in range(10_000):
        rollout = await client.enqueue_rollout({"worker": index, "i": i}, config=config)
        acked["rollouts"][rollout.rollout_id] = "queuing"
        claimed = await client.dequeue_rollout(worker_id=f"w-{index}")
        if claimed is None:
            continue
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        acked["rollouts"][rid] = "preparing"
        acked["attempts"][rid] = aid
        spans = [make_span(rid, aid, seq) for seq in (1, 2, 3)]
        stored = await client.add_many_spans(spans)
        acked["spans"].update((rid, s.span_id) for s in stored)
        acked["rollouts"][rid] = "running"
        if i % 3 == 0:
            resources = await client.add_resources({"prompt": PromptTemplate(template=f"v{index}.{i}")})
            acked["resources"].add(resources.resources_id)
        if i % 2 == 0:
            # Sent but not yet acknowledged: a kill -9 may land after the commit and before the answer.
            acked["rollouts"][rid] = "finishing"
            await client.update_attempt(rid, aid, status="succeeded")
            acked["rollouts"][rid] = "succeeded"


@pytest.mark.slow
def test_kill_9_mid_workload_loses_nothing_acknowledged(tmp_path: Path) -> None:
    db = tmp_path / "durable.db"
    backend = f"sqlite:///{db}"
    proc, address, _ = _launch("--port", "0", "--backend", backend, "--watchdog-interval", "0")
    port = address.rsplit(":", 1)[1]
    acked: dict[str, Any] = {"rollouts": {}, "attempts": {}, "spans": set(), "resources": set()}

    async def drive() -> None:
        client = LightningStoreClient(address, retry_delays=())
        workers = [asyncio.ensure_future(_workload(client, acked, n)) for n in range(4)]
        deadline = time.monotonic() + 60
        while len(acked["rollouts"]) < 40 and time.monotonic() < deadline:  # noqa: ASYNC110  # polled with a deadline
            await asyncio.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)  # mid-workload: requests are in flight right now
        results = await asyncio.gather(*workers, return_exceptions=True)
        await client.close()
        assert all(isinstance(r, StoreConnectionError) for r in results), results

    try:
        asyncio.run(drive())
    finally:
        proc.kill()
        proc.communicate(timeout=30)  # reaps it and closes its pipes
    assert proc.returncode == -signal.SIGKILL
    assert len(acked["rollouts"]) >= 40

    proc, address, _ = _launch("--port", port, "--backend", backend, "--watchdog-interval", "0")

    async def verify(client: LightningStoreClient) -> None:
        found = {r.rollout_id: r for r in await client.query_rollouts(rollout_id_in=list(acked["rollouts"]))}
        assert set(found) == set(acked["rollouts"]), "acknowledged rollouts lost"
        for rid, status in acked["rollouts"].items():
            if status == "succeeded":
                assert found[rid].status == "succeeded"
            if status == "finishing":  # either the write landed or the attempt times out
                assert found[rid].status in ("succeeded", "running", "requeuing", "failed"), found[rid]
        for rid, aid in acked["attempts"].items():
            attempts = await client.query_attempts(rid)
            assert aid in {a.attempt_id for a in attempts}
        for rid, span_id in acked["spans"]:
            assert (await client.query_spans(rid, span_id=span_id)).total == 1
        for resources_id in acked["resources"]:
            assert await client.get_resources_by_id(resources_id) is not None

        # Attempts that were running when the server died time out by the normal rules: the rollout is
        # retried (requeuing) unless that was its last allowed attempt (failed).
        running = [rid for rid, status in acked["rollouts"].items() if status == "running"]
        assert running
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # polls the server with a deadline
            rollouts = await client.query_rollouts(rollout_id_in=running)
            if all(r.status in ("requeuing", "failed") for r in rollouts):
                break
            await asyncio.sleep(0.2)
        for rid in running:
            latest = await client.get_latest_attempt(rid)
            assert latest is not None and latest.status == "timeout", (rid, latest)
            rollout = await client.get_rollout_by_id(rid)
            expected = "requeuing" if latest.sequence_id < 2 else "failed"
            assert rollout is not None and rollout.status == expected, (rid, rollout)

    _use_then_stop(proc, address, verify)
