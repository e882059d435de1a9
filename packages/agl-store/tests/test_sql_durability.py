"""SQL store: what was acknowledged is still there after closing, reopening, or killing the process."""

from __future__ import annotations

import asyncio
import collections
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from agl.store import SqlLightningStore
from agl.testing.spans import make_span
from agl.testing.store.cli import launch, stop
from agl.testing.store.sql import SQL_BACKENDS, fresh_database
from agl.testing.store.sql_workers import kill_writer_after, stored_rollouts
from agl.types import LLM, PromptTemplate, RolloutConfig


async def _write_everything(store: SqlLightningStore) -> dict[str, object]:
    resources = await store.add_resources({"llm": LLM(endpoint="http://127.0.0.1:1/v1", model="m")})
    await store.update_resources("prompt", {"p": PromptTemplate(template="Hi {name}")})
    config = RolloutConfig(max_attempts=2, retry_condition=["failed"], timeout_seconds=60)
    done = await store.enqueue_rollout({"q": "done"}, mode="train", config=config, metadata={"k": [1, 2]})
    queued = await store.enqueue_rollout({"q": "queued"}, resources_id="override")
    claimed = await store.dequeue_rollout(worker_id="w1")
    assert claimed is not None and claimed.rollout_id == done.rollout_id
    aid = claimed.attempt.attempt_id
    spans = [make_span(done.rollout_id, aid, i, attributes={"i": i, "text": "é" * 10}) for i in (1, 2, 3)]
    await store.add_many_spans(spans)
    await store.update_attempt(done.rollout_id, aid, status="succeeded", metadata={"score": 1.5})
    await store.update_worker("w1", heartbeat_stats={"gpu": 0.5})
    assert await store.get_next_span_sequence_id(done.rollout_id, aid) == 4
    return {
        "rollouts": (await store.query_rollouts()).items,
        "attempts": (await store.query_attempts(done.rollout_id)).items,
        "spans": (await store.query_spans(done.rollout_id)).items,
        "resources": (await store.query_resources()).items,
        "latest": await store.get_latest_resources(),
        "workers": (await store.query_workers()).items,
        "first_resources": resources,
        "queued": queued.rollout_id,
    }


async def _read_everything(store: SqlLightningStore, done_id: str) -> dict[str, object]:
    return {
        "rollouts": (await store.query_rollouts()).items,
        "attempts": (await store.query_attempts(done_id)).items,
        "spans": (await store.query_spans(done_id)).items,
        "resources": (await store.query_resources()).items,
        "latest": await store.get_latest_resources(),
        "workers": (await store.query_workers()).items,
    }


@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_close_and_reopen_keeps_everything(backend: str, tmp_path: Path) -> None:
    async def main(url: str, kwargs: dict) -> None:
        store = SqlLightningStore(url, **kwargs)
        before = await _write_everything(store)
        await store.close()
        with pytest.raises(RuntimeError, match="closed"):
            await store.get_latest_resources()

        reopened = SqlLightningStore(url, **kwargs)
        try:
            rollouts = before["rollouts"]
            assert isinstance(rollouts, list)
            done_id = rollouts[0].rollout_id
            after = await _read_everything(reopened, done_id)
            for key, value in after.items():
                assert value == before[key], key
            # the queue and the counters survived too
            assert await reopened.get_next_span_sequence_id(done_id, "any") == 5
            again = await reopened.dequeue_rollout()
            assert again is not None and again.rollout_id == before["queued"]
        finally:
            await reopened.close()

    with fresh_database(backend, tmp_path) as (url, kwargs):
        asyncio.run(main(url, kwargs))


@pytest.mark.parametrize(
    ("rollouts", "tasks", "wanted"),
    [(100000, None, 200), (160000, 16, 400)],
    ids=["one-writer", "16-writers"],
)
def test_acknowledged_writes_survive_sigkill(
    tmp_path: Path, rollouts: int, tasks: int | None, wanted: int
) -> None:
    """WAL + synchronous=NORMAL: a commit is in the operating system's hands before it is acknowledged; with
    16 writers at once in one process, committed in groups, too."""
    url = f"sqlite:///{tmp_path / 'killed.db'}"
    acknowledged = kill_writer_after(url, rollouts, tasks=tasks, acknowledged=wanted)
    found, everything = stored_rollouts(url, acknowledged)
    assert found == len(acknowledged)
    assert everything >= len(acknowledged)  # maybe a few more: committed, not yet printed


# -- kill -9 under load: nothing lost, nothing applied twice, no rollout stranded ----------------------------

_KILLS = 10
_WRITERS = 4
_WRITER = Path(__file__).with_name("kill9_writer.py")


ServerDatabase = Callable[[str], AbstractContextManager[str]]
"""The type of the ``server_database`` fixture (conftest.py)."""


def _acknowledged(logs: list[Path]) -> int:
    return sum(log.read_text().count("\n") for log in logs)


def _wait_for_progress(logs: list[Path], calls: int, deadline: float) -> None:
    """Wait until the writers had ``calls`` more calls acknowledged (they reach the server again)."""
    target = _acknowledged(logs) + calls
    while _acknowledged(logs) < target:
        assert time.monotonic() < deadline, "the writers made no progress"
        time.sleep(0.01)


async def _audit(url: str, logs: list[Path]) -> dict[str, int]:
    """Count what the writers were told against what the database holds."""
    enqueued: dict[tuple[int, int], str] = {}
    for log in logs:
        lines = log.read_text().splitlines()
        assert lines and lines[-1] == "done", f"a writer did not finish: {lines[-3:]}"
        for line in lines:
            if line.startswith("E "):
                _, writer, i, rollout_id = line.split()
                enqueued[(int(writer), int(i))] = rollout_id
    store = SqlLightningStore(url)
    try:
        rollouts = (await store.query_rollouts()).items
    finally:
        await store.close()
    by_input = collections.Counter((r.input["writer"], r.input["i"]) for r in rollouts)  # type: ignore[index]
    ids = {r.rollout_id for r in rollouts}
    statuses = collections.Counter(r.status for r in rollouts)
    return {
        "acknowledged": len(enqueued),
        "lost": sum(1 for rid in enqueued.values() if rid not in ids),
        "duplicated": sum(n - 1 for n in by_input.values()),
        "stuck": statuses["preparing"] + statuses["running"],
        "unclaimed": statuses["queuing"],
    }


@pytest.mark.slow
@pytest.mark.parametrize("backend", SQL_BACKENDS)
def test_kill_9_under_four_writers_loses_duplicates_and_strands_nothing(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    """Issue 27, defect 3: ``agl store`` (one process) killed with SIGKILL ten times while four writer
    processes enqueue, claim and finish rollouts through clients that retry across the restarts. Every
    acknowledged enqueue is there once, and every claim reached its writer (which finished it): a write
    whose answer a kill lost is replayed to the retry, not applied again, and a lost dequeue answer does
    not strand its rollout in ``preparing``."""
    rng = random.Random(27)
    stop_file = tmp_path / "stop"
    logs = [tmp_path / f"writer-{n}.log" for n in range(_WRITERS)]
    with server_database(backend) as url:
        args = ("--backend", url, "--watchdog-interval", "0")
        proc, address, _ = launch("--port", "0", *args)
        port = address.rsplit(":", 1)[1]
        writers: list[subprocess.Popen[bytes]] = []
        try:
            for n, log in enumerate(logs):
                with log.open("w") as out:
                    command = [sys.executable, str(_WRITER), address, str(n), str(stop_file)]
                    writers.append(subprocess.Popen(command, stdout=out))
            deadline = time.monotonic() + 240
            for _ in range(_KILLS):
                _wait_for_progress(logs, 20, deadline)
                time.sleep(rng.uniform(0.0, 0.2))  # mid-workload: requests are in flight right now
                proc.send_signal(signal.SIGKILL)
                proc.communicate(timeout=30)
                assert proc.returncode == -signal.SIGKILL
                proc, _, _ = launch("--port", port, *args)
            _wait_for_progress(logs, 20, deadline)
            stop_file.touch()
            for writer in writers:
                assert writer.wait(timeout=120) == 0
        finally:
            stop_file.touch()
            for writer in writers:
                if writer.poll() is None:
                    writer.kill()
                    writer.wait(timeout=30)
            code, _, err = stop(proc)
        assert code == 0, err
        counts = asyncio.run(_audit(url, logs))
    print(f"{backend}: {_KILLS} kills under {_WRITERS} writers:", counts)  # (shown with pytest -s)
    assert counts["acknowledged"] >= 100, counts
    assert (counts["lost"], counts["duplicated"], counts["stuck"], counts["unclaimed"]) == (0, 0, 0, 0), (
        counts
    )
