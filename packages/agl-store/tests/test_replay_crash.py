"""Issue 27, defect 3: a write whose answer a crash lost is applied once, and a lost dequeue answer does not
strand its rollout.

A real ``agl store`` (one process, SQLite or PostgreSQL) is killed with SIGKILL at the one moment that
matters: its write has committed and it is recording the answer for replays. A trigger in the database holds
that statement (the recording of a ``done`` answer) until the kill: the only way to land a ``kill -9`` there
every time without patching the server. The client's retry (same ``Idempotency-Key``) then reaches a
restarted server, which must answer it with the first try's outcome instead of writing again.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from agl.store import LightningStoreClient
from agl.testing.store.cli import launch, stop

BACKENDS = ["sqlite", "postgres"]

_SQLITE_HANG = """
CREATE TABLE agl_test_spin (x INTEGER);
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 3000)
INSERT INTO agl_test_spin SELECT x FROM n;
CREATE TRIGGER agl_test_hang_insert BEFORE INSERT ON agl_replays WHEN NEW.state = 'done'
BEGIN SELECT sum(a.x + b.x + c.x) FROM agl_test_spin a, agl_test_spin b, agl_test_spin c; END;
CREATE TRIGGER agl_test_hang_update BEFORE UPDATE ON agl_replays WHEN NEW.state = 'done'
BEGIN SELECT sum(a.x + b.x + c.x) FROM agl_test_spin a, agl_test_spin b, agl_test_spin c; END;
"""
_SQLITE_UNHANG = """
DROP TRIGGER agl_test_hang_insert;
DROP TRIGGER agl_test_hang_update;
DROP TABLE agl_test_spin;
"""
_PG_HANG = """
CREATE FUNCTION agl_test_hang() RETURNS trigger LANGUAGE plpgsql AS
$$ BEGIN PERFORM pg_sleep(600); RETURN NEW; END $$;
CREATE TRIGGER agl_test_hang BEFORE INSERT OR UPDATE ON agl_replays
FOR EACH ROW WHEN (NEW.state = 'done') EXECUTE FUNCTION agl_test_hang();
"""
_PG_UNHANG = """
SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid();
DROP TRIGGER agl_test_hang ON agl_replays;
DROP FUNCTION agl_test_hang();
"""


ServerDatabase = Callable[[str], AbstractContextManager[str]]
"""The type of the ``server_database`` fixture (conftest.py)."""


class _Db:
    """The test's own connection to the server's database: SQL to run, counts to read."""

    def __init__(self, backend: str, url: str) -> None:
        self.backend, self.url = backend, url

    def script(self, sql: str) -> None:
        if self.backend == "sqlite":
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
            try:
                conn.executescript(sql)
            finally:
                conn.close()
        else:
            asyncio.run(self._pg(lambda conn: conn.execute(sql)))

    def value(self, sql: str) -> Any:
        if self.backend == "sqlite":
            conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=30, isolation_level=None)
            try:
                return conn.execute(sql).fetchone()[0]
            finally:
                conn.close()
        return asyncio.run(self._pg(lambda conn: conn.fetchval(sql)))

    async def _pg(self, use: Callable[[Any], Any]) -> Any:
        import asyncpg

        conn = await asyncpg.connect(self.url)
        try:
            return await use(conn)
        finally:
            await conn.close()

    def hung(self) -> bool:
        """Whether the server sits in the trigger: SQLite, its write lock held; PostgreSQL, a session asleep."""
        if self.backend == "postgres":
            return bool(
                self.value(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event = 'PgSleep'"
                )
            )
        conn = sqlite3.connect(self.url.removeprefix("sqlite:///"), timeout=0, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return False
        except sqlite3.OperationalError:
            return True
        finally:
            conn.close()

    def wait_hung_after(self, committed: str) -> None:
        """Wait until ``committed`` (a count) is positive and the server is held in the trigger."""
        deadline = time.monotonic() + 30
        streak = 0
        while streak < 3:  # (SQLite: the lock held three looks in a row, not a passing write)
            assert time.monotonic() < deadline, "the server never reached the recording of its answer"
            streak = streak + 1 if self.value(committed) and self.hung() else 0
            time.sleep(0.05)


class _Killable:
    """``agl store`` on ``url``, one process: killed with SIGKILL, restarted on the same port."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.proc, self.address, _ = launch("--port", "0", "--backend", url, "--watchdog-interval", "0")

    def kill_and_restart(self, between: Callable[[], None]) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.communicate(timeout=30)
        assert self.proc.returncode == -signal.SIGKILL
        between()
        port = self.address.rsplit(":", 1)[1]
        self.proc, self.address, _ = launch("--port", port, "--backend", self.url, "--watchdog-interval", "0")

    def stop(self) -> None:
        if self.proc.poll() is None:
            code, _, err = stop(self.proc)
            assert code == 0, err

    def __enter__(self) -> _Killable:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _client(address: str) -> LightningStoreClient:
    """Retries (same key) for up to a minute: long enough for the store to come back."""
    return LightningStoreClient(address, retry_delays=(0.25,) * 240, health_retry_delays=())


def _crash_during_recording(backend: str, url: str, server: _Killable, call: Any, committed: str) -> Any:
    """Run ``call`` (a coroutine function of a client); kill the server while it records the answer, restart
    it; the call's result (answered by its retry)."""
    db = _Db(backend, url)
    db.script(_SQLITE_HANG if backend == "sqlite" else _PG_HANG)

    async def main() -> Any:
        client = _client(server.address)
        try:
            pending = asyncio.ensure_future(call(client))
            await asyncio.to_thread(db.wait_hung_after, committed)
            assert not pending.done()
            unhang = _SQLITE_UNHANG if backend == "sqlite" else _PG_UNHANG
            await asyncio.to_thread(server.kill_and_restart, lambda: db.script(unhang))
            return await asyncio.wait_for(pending, 60)
        finally:
            await client.close()

    return asyncio.run(main())


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_enqueue_whose_answer_a_kill_9_lost_is_applied_once(
    backend: str, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url, _Killable(url) as server:

        async def enqueue(client: LightningStoreClient) -> Any:
            return await client.enqueue_rollout({"once": True})

        rollout = _crash_during_recording(backend, url, server, enqueue, "SELECT count(*) FROM agl_rollouts")
        db = _Db(backend, url)
        assert db.value("SELECT count(*) FROM agl_rollouts") == 1, "the retry enqueued it again"
        assert db.value("SELECT rollout_id FROM agl_rollouts") == rollout.rollout_id


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_dequeue_whose_answer_a_kill_9_lost_returns_the_same_claim(
    backend: str, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url, _Killable(url) as server:

        async def enqueue_two() -> list[str]:
            client = _client(server.address)
            try:
                return [(await client.enqueue_rollout({"n": n})).rollout_id for n in (1, 2)]
            finally:
                await client.close()

        queued = asyncio.run(enqueue_two())

        async def dequeue(client: LightningStoreClient) -> Any:
            return await client.dequeue_rollout(worker_id="w1")

        claimed = _crash_during_recording(backend, url, server, dequeue, "SELECT count(*) FROM agl_attempts")
        assert claimed is not None and claimed.rollout_id == queued[0], claimed
        db = _Db(backend, url)
        assert db.value("SELECT count(*) FROM agl_attempts") == 1, "the retry claimed another rollout"
        assert db.value("SELECT attempt_id FROM agl_attempts") == claimed.attempt.attempt_id
        statuses = {queued[0]: "preparing", queued[1]: "queuing"}
        for rid, status in statuses.items():
            assert db.value(f"SELECT status FROM agl_rollouts WHERE rollout_id = '{rid}'") == status
