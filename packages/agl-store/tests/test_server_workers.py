"""``agl store --workers N`` on SQLite and PostgreSQL: real worker processes on 127.0.0.1.

Each answer names its worker (``agl-server-worker``), so a test can hold one keep-alive connection per
worker and send a request to the worker it means.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from agl.testing.processes import alive, children, wait_until

BACKENDS = ["sqlite", "postgres"]
_servers = itertools.count()
API = "/v1/agl"


ServerDatabase = Callable[[str], AbstractContextManager[str]]
"""The type of the ``server_database`` fixture (conftest.py)."""


class Server:
    """``agl store --workers N`` in a child process, started and stopped by the test."""

    def __init__(self, url: str, workers: int, tmp_path: Path, *extra: str) -> None:
        self.url, self.workers, self.extra = url, workers, extra
        self.port = 0  # the server picks a free one (a port picked here could be taken before it binds)
        self.log = tmp_path / f"server-{next(_servers)}.log"
        self.proc: subprocess.Popen[str] | None = None
        self.reader: threading.Thread | None = None
        self.connections: list[http.client.HTTPConnection] = []  # handed out by connection_to, closed by stop

    def start(self, timeout: float = 90.0) -> None:
        args = [sys.executable, "-m", "agl.store.cli", "store", "--workers", str(self.workers)]
        args += ["--port", str(self.port), "--backend", self.url, "--log-level", "INFO", *self.extra]
        env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
        stdout = self.proc.stdout
        assert stdout is not None
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(iter(stdout.readline, "")))
        reader.daemon = True
        reader.start()
        self.reader = reader
        deadline = time.monotonic() + timeout
        while not (banner := [line for line in lines if "agl store: serving" in line]):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"server did not start: {lines} {self.log.read_text()}")
            time.sleep(0.02)
        served = re.search(r" at http://127\.0\.0\.1:(\d+) ", banner[0])
        assert served is not None, banner
        self.port = int(served.group(1))  # kept: a restart serves the same port

    def stop(self) -> None:
        for conn in self.connections:
            conn.close()
        self.connections.clear()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if self.reader is not None:
            self.reader.join(10)  # it reads to the end first: closing under it would fail its next read
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None

    def connection_to(self, worker: int, attempts: int = 400) -> http.client.HTTPConnection:
        """A keep-alive connection that worker ``worker`` answers."""
        for _ in range(attempts):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            status, headers, _ = request(conn, "GET", API + "/health")
            if status == 200 and headers.get("agl-server-worker") == str(worker):
                self.connections.append(conn)
                return conn
            conn.close()
        raise AssertionError(f"no connection reached worker {worker} in {attempts} tries")


def request(
    conn: http.client.HTTPConnection, method: str, path: str, body: Any = None, key: str | None = None
) -> tuple[int, dict[str, str], Any]:
    headers = {"content-type": "application/json"}
    if key is not None:
        headers["Idempotency-Key"] = key
    conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
    response = conn.getresponse()
    data = response.read()
    answer = {k.lower(): v for k, v in response.getheaders()}
    return (
        response.status,
        answer,
        json.loads(data) if data and "json" in answer.get("content-type", "") else data,
    )


@contextlib.contextmanager
def serving(url: str, workers: int, tmp_path: Path, *extra: str) -> Iterator[Server]:
    server = Server(url, workers, tmp_path, *extra)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _enqueue(
    conn: http.client.HTTPConnection, value: Any, key: str | None = None
) -> tuple[int, dict[str, str], Any]:
    return request(conn, "POST", API + "/queues/rollouts/enqueue", {"rollouts": [{"input": value}]}, key)


def _count(conn: http.client.HTTPConnection) -> int:
    status, _, page = request(conn, "GET", API + "/rollouts?limit=0")
    assert status == 200, page
    return page["total"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_waiter_on_one_worker_wakes_when_another_worker_finishes_the_rollout(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url, serving(url, 2, tmp_path) as server:
        waiter, writer = server.connection_to(0), server.connection_to(1)
        status, _, (rollout,) = _enqueue(writer, "task")
        assert status == 201
        rollout_id = rollout["rollout_id"]
        result: dict[str, Any] = {}

        def wait() -> None:
            started = time.monotonic()
            result["answer"] = request(
                waiter, "POST", API + "/waits/rollouts", {"rollout_ids": [rollout_id], "timeout": 25}
            )
            result["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=wait)
        thread.start()
        time.sleep(0.3)  # the waiter is inside its long poll on worker 0 (if not, it returns at once anyway)
        status, headers, _ = request(writer, "POST", f"{API}/rollouts/{rollout_id}", {"status": "succeeded"})
        assert status == 200 and headers["agl-server-worker"] == "1"
        thread.join(30)
        status, headers, done = result["answer"]
        assert status == 200 and headers["agl-server-worker"] == "0"
        assert [r["rollout_id"] for r in done] == [rollout_id]
        assert result["seconds"] < 5, f"woken after {result['seconds']:.2f} s (its timeout was 25 s)"


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_watchdog_among_the_workers_still_times_attempts_out(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url, serving(url, 2, tmp_path, "--watchdog-interval", "0") as server:
        conns = [server.connection_to(0), server.connection_to(1)]
        status, _, started = request(
            conns[0], "POST", API + "/rollouts", {"input": "slow", "config": {"timeout_seconds": 0.5}}
        )
        assert status == 201, started
        rollout_id = started["rollout_id"]
        deadline = time.monotonic() + 30
        status_now = started["status"]
        i = 0
        while status_now in ("preparing", "running") and time.monotonic() < deadline:
            i += 1
            _, _, rollout = request(conns[i % 2], "GET", f"{API}/rollouts/{rollout_id}")  # watched on both
            status_now = rollout["status"]
            time.sleep(0.05)
        assert status_now not in ("preparing", "running"), "the watchdog never timed the attempt out"
        _, _, attempt = request(conns[1], "GET", f"{API}/rollouts/{rollout_id}/attempts/latest")
        assert attempt["status"] == "timeout"
        for _ in range(20):  # both workers keep answering watched calls
            for conn in conns:
                request(conn, "GET", API + "/rollouts?limit=1")
        server.stop()
        taken = re.findall(r"\[worker (\d)\]: watchdog: \S+ now runs the watchdog", server.log.read_text())
        assert len(taken) == 1, f"watchdog taken {taken} (log: {server.log.read_text()})"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_retried_write_is_applied_once_across_workers_and_restarts(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url:
        server = Server(url, 2, tmp_path)
        server.start()
        try:
            a, b = server.connection_to(0), server.connection_to(1)
            first = _enqueue(a, "once", key="key-1")
            assert first[0] == 201 and first[1]["agl-server-worker"] == "0"
            again = _enqueue(b, "once", key="key-1")
            assert again[0] == 201 and again[1]["agl-server-worker"] == "1"
            assert again[1].get("agl-replayed") == "true"
            assert again[2] == first[2]
            assert _count(a) == 1
            other = _enqueue(b, "twice", key="key-2")  # a new key is a new write
            assert other[0] == 201 and other[1].get("agl-replayed") is None
            assert _count(b) == 2
        finally:
            server.stop()
        server.start()  # a restart (a new run of the server)
        try:
            conn = server.connection_to(1)
            after = _enqueue(conn, "once", key="key-1")
            assert after[0] == 201 and after[1].get("agl-replayed") == "true"
            assert after[2] == first[2]
            assert _count(conn) == 2
        finally:
            server.stop()


@pytest.mark.parametrize("backend", BACKENDS)
def test_metrics_add_up_the_requests_of_every_worker(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    with server_database(backend) as url, serving(url, 2, tmp_path) as server:
        conns = [server.connection_to(0), server.connection_to(1)]
        for conn, n in zip(conns, (3, 5), strict=True):
            for i in range(n):
                assert _enqueue(conn, i)[0] == 201
        for conn in conns:
            status, _, body = request(conn, "GET", "/metrics")
            assert status == 200
            text = body.decode()
            found = re.search(
                r'agl_store_http_requests_total\{method="POST",route="/v1/agl/queues/rollouts/enqueue",status="201"\} (\S+)',
                text,
            )
            assert found is not None, text
            assert float(found.group(1)) == 8.0
            assert re.search(r"^agl_store_rollouts_created(_total)? 8\.0$", text, re.M), text


def test_the_memory_backend_refuses_several_workers(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "agl.store.cli", "store", "--workers", "2", "--backend", "memory"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "--workers 2 needs a SQL backend" in done.stderr
    assert "in-memory store lives inside one process" in done.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_workers_a_retried_write_is_applied_once_at_once_and_across_restarts(
    backend: str, tmp_path: Path, server_database: ServerDatabase
) -> None:
    """One server process keeps the holds of keys being answered in its memory (a claim is a read, not a
    write): retries sent at the same time still wait for the first and replay its answer, and a
    restarted server replays answers recorded by the one before."""
    with server_database(backend) as url:
        server = Server(url, 1, tmp_path)
        server.start()
        try:
            answers: list[tuple[int, dict[str, str], Any]] = []

            def send() -> None:
                conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                try:
                    answers.append(_enqueue(conn, "once", key="same-key"))
                finally:
                    conn.close()

            threads = [threading.Thread(target=send) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
            assert [a[0] for a in answers] == [201] * 8
            assert sum(a[1].get("agl-replayed") == "true" for a in answers) == 7
            assert all(a[2] == answers[0][2] for a in answers)
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            server.connections.append(conn)
            assert _count(conn) == 1
        finally:
            server.stop()
        server.start()
        try:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            server.connections.append(conn)
            after = _enqueue(conn, "once", key="same-key")
            assert after[0] == 201 and after[1].get("agl-replayed") == "true"
            assert after[2] == answers[0][2]
            assert _count(conn) == 1
        finally:
            server.stop()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_die_with_their_parent_and_the_port_is_free_again(
    tmp_path: Path, server_database: ServerDatabase
) -> None:
    """A kill -9 of ``agl store --workers 2`` must not leave workers serving the old database."""
    with server_database("sqlite") as url:
        server = Server(url, 2, tmp_path)
        server.start()
        try:
            assert server.proc is not None
            workers = {pid for pid in children(server.proc.pid) if "multiprocessing" in _cmdline(pid)}
            assert len(workers) >= 2, workers
            server.proc.kill()
            server.proc.wait(10)
            assert wait_until(lambda: not any(alive(pid) for pid in workers), 30), (
                "workers outlived their parent"
            )
            with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=5):
                pass
        finally:
            server.stop()


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_text()
    return ""


def test_a_second_server_refuses_a_port_that_is_served(
    tmp_path: Path, server_database: ServerDatabase
) -> None:
    """Another ``agl store --workers 2`` on the same port exits with an error; the first keeps serving."""
    with server_database("sqlite") as url, serving(url, 2, tmp_path) as first:
        second = subprocess.run(
            [
                *(
                    sys.executable,
                    "-m",
                    "agl.store.cli",
                    "store",
                    "--workers",
                    "2",
                    "--port",
                    str(first.port),
                ),
                *("--backend", f"sqlite:///{tmp_path / 'other.db'}"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert second.returncode != 0, second.stdout
        assert f"cannot listen on 127.0.0.1:{first.port}" in second.stderr, second.stderr
        conn = http.client.HTTPConnection("127.0.0.1", first.port, timeout=30)
        try:
            assert _enqueue(conn, "still the first")[0] == 201
            assert _count(conn) == 1
        finally:
            conn.close()
