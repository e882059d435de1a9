"""``agl store --workers N``: several server processes on one listening socket, over one SQL database.

The parent process prepares the database (schema, once), binds the socket, starts ``N`` worker processes
(``spawn``: each a fresh interpreter) that all accept on it, and supervises them: a worker that dies is
replaced (with a growing pause, and the parent gives up after too many deaths in a row); SIGINT/SIGTERM
stop them all gracefully. What the workers share goes through the database:

- a write on one worker wakes the long polls (``wait_for_rollouts``, dequeue with a timeout) of the others
  (:mod:`agl.store.sql._waiting`: PostgreSQL ``NOTIFY``, SQLite's ``data_version``);
- the watchdog runs in one worker at a time (an OS or database lock, see :mod:`agl.store.sql._coordination`);
- idempotent replays are kept in it (:class:`agl.store.sql.SqlReplayCache`), so a retried write is applied
  once whichever worker it reaches, and after a restart too;
- Prometheus metrics are written to ``PROMETHEUS_MULTIPROC_DIR`` (a temporary directory unless set) and
  ``/metrics`` on any worker answers with the sum over all of them.

Every answer carries ``agl-server-worker: <index>`` (the worker's number, 0-based).

Workers die with their parent, however it ends (a kill -9 included): each holds the read end of a pipe whose
only writer is the parent, and stops when it reads end-of-file. A server refuses a port that is already
served (by another ``agl store`` or by workers that outlived theirs) instead of sharing it through
``SO_REUSEPORT``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agl.types.env import PROMETHEUS_MULTIPROC_DIR

from ._settings import ServerSettings
from ._worker_tag import WORKER_HEADER, tag_worker

__all__ = ["WORKER_HEADER", "check_backend", "serve_workers", "tag_worker"]

logger = logging.getLogger("agl.store.workers")

_STARTUP_SECONDS = 120.0
_STOP_SECONDS = 10.0
_MAX_QUICK_DEATHS = 5
"""Worker deaths in a row, each within a minute of its start, after which the parent gives up."""


def check_backend(backend: str, workers: int) -> None:
    """Refuse ``workers`` server processes for a backend they cannot share (ValueError says why)."""
    if workers < 1:
        raise ValueError(f"--workers must be at least 1, got {workers}")
    if workers == 1:
        return
    text = backend.strip()
    if text in ("", "memory"):
        raise ValueError(
            f"--workers {workers} needs a SQL backend (--backend sqlite:///path/to/file.db or "
            "postgresql://user:pw@host/db): the in-memory store lives inside one process, so several "
            "workers would each have their own; use --workers 1 for the memory backend"
        )
    if text.startswith(("http://", "https://")):
        raise ValueError(
            f"--workers {workers} cannot serve another store server ({text}); point the workers at its "
            "database instead"
        )


# -- a worker ------------------------------------------------------------------------------------


def _worker_main(
    settings: ServerSettings,
    index: int,
    ready: Any,
    sock: socket.socket | None,
    parent_alive: multiprocessing.connection.Connection,
) -> None:
    """Entry point of a worker process: serve on the inherited socket (``None``: on its own
    ``SO_REUSEPORT`` socket on the same port) until SIGINT/SIGTERM or the parent's end."""
    logging.basicConfig(
        level=settings.log_level.upper(),
        format=f"%(asctime)s %(levelname)s %(name)s[worker {index}]: %(message)s",
    )
    threading.Thread(
        target=_stop_with_parent, args=(parent_alive,), name="agl-parent-watch", daemon=True
    ).start()
    from ..._open import open_store

    store = open_store(settings.backend, scan_debounce_seconds=settings.watchdog_interval)
    server = settings.server(store)
    if sock is None:
        sock = _bind(settings.host, settings.port, reuse_port=True)
    server.serve_as_worker(index, settings.run_id, sock)
    try:
        server.run_forever(on_started=lambda: ready.put((index, os.getpid())))
    finally:
        asyncio.run(store.close())


def _stop_with_parent(parent_alive: multiprocessing.connection.Connection) -> None:
    """Wait for end-of-file on the parent's pipe (it never writes), then stop this worker: gracefully
    (SIGTERM, as ``agl store`` stops its workers), and for good if that has not ended it in time."""
    with contextlib.suppress(EOFError, OSError):
        while True:
            parent_alive.recv_bytes()
    logger.warning("agl store: the parent process is gone; this worker stops")
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(_STOP_SECONDS)  # (a daemon thread: it ends with the process, if the SIGTERM did end it)
    os._exit(1)


# -- the parent ----------------------------------------------------------------------------------


_REUSE_PORT = sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")
"""Each worker listens on its own socket (``SO_REUSEPORT``) and the kernel spreads connections evenly
over them; with one shared socket, the worker that happens to wake first takes most connections."""


def _bind(host: str, port: int, *, listen: bool = True, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    if listen:  # (the parent's SO_REUSEPORT socket only reserves the port: it never accepts)
        sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _prepare_database(settings: ServerSettings) -> None:
    """Create or migrate the schema once, before any worker serves."""
    from ..._open import open_store

    async def prepare() -> None:
        store = open_store(settings.backend)
        try:
            ensure = getattr(store, "ensure_schema", None)
            if ensure is not None:
                await ensure()
        finally:
            await store.close()

    asyncio.run(prepare())


@contextlib.contextmanager
def _metrics_dir() -> Any:
    """``PROMETHEUS_MULTIPROC_DIR`` for the workers: the one set (its old files removed) or a new one."""
    given = PROMETHEUS_MULTIPROC_DIR.get()
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):  # counters of an earlier run would be added to this one's
            stale.unlink(missing_ok=True)
        yield path
        return
    path = Path(tempfile.mkdtemp(prefix="agl-store-metrics-"))
    PROMETHEUS_MULTIPROC_DIR.export(str(path))  # the workers, spawned from now on, inherit it
    try:
        yield path
    finally:
        PROMETHEUS_MULTIPROC_DIR.export(None)
        shutil.rmtree(path, ignore_errors=True)


def _mark_dead(pid: int | None) -> None:
    if pid is None:
        return
    with contextlib.suppress(Exception):
        # prometheus_client leaves this function's parameters unannotated.
        from prometheus_client.multiprocess import mark_process_dead  # pyright: ignore[reportUnknownVariableType]

        mark_process_dead(pid)


def serve_workers(
    settings: ServerSettings, workers: int, on_started: Callable[[str], None] | None = None
) -> int:
    """Serve with ``workers`` processes until SIGINT/SIGTERM; the exit status of ``agl store``.

    ``on_started`` is called with the endpoint once every worker accepts requests.
    """
    check_backend(settings.backend, workers)
    _prepare_database(settings)
    if _REUSE_PORT and settings.port:  # a port served by anyone (each on SO_REUSEPORT) refuses this socket
        _bind(settings.host, settings.port, listen=False).close()
    sock = _bind(settings.host, settings.port, listen=not _REUSE_PORT, reuse_port=_REUSE_PORT)
    settings.port = sock.getsockname()[1]
    shared = None if _REUSE_PORT else sock
    ctx = multiprocessing.get_context("spawn")
    ready = ctx.Queue()
    parent_alive, alive_writer = ctx.Pipe(duplex=False)  # closed (by exit or death): the workers stop
    stopping = False

    def stop(*_: Any) -> None:
        nonlocal stopping
        stopping = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    procs: dict[int, Any] = {}
    started_at: dict[int, float] = {}
    try:
        with _metrics_dir():
            try:
                return _supervise(
                    settings,
                    workers,
                    ctx,
                    ready,
                    (shared, parent_alive),
                    procs,
                    started_at,
                    on_started,
                    lambda: stopping,
                )
            finally:
                _stop_all(procs)
    finally:
        sock.close()
        ready.close()
        parent_alive.close()
        alive_writer.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(
    settings: ServerSettings,
    workers: int,
    ctx: Any,
    ready: Any,
    inherited: tuple[socket.socket | None, multiprocessing.connection.Connection],
    procs: dict[int, Any],
    started_at: dict[int, float],
    on_started: Callable[[str], None] | None,
    stopping: Callable[[], bool],
) -> int:
    def start(index: int) -> None:
        proc = ctx.Process(
            target=_worker_main,
            args=(settings, index, ready, *inherited),
            name=f"agl-store-worker-{index}",
            daemon=False,
        )
        proc.start()
        procs[index], started_at[index] = proc, time.monotonic()

    for index in range(workers):
        start(index)
    up: set[int] = set()
    deadline = time.monotonic() + _STARTUP_SECONDS
    while len(up) < workers and not stopping():
        with contextlib.suppress(Exception):
            up.add(ready.get(timeout=0.2)[0])
        dead = [i for i, p in procs.items() if i not in up and not p.is_alive()]
        if dead or time.monotonic() > deadline:
            why = f"worker {dead[0]} exited with {procs[dead[0]].exitcode}" if dead else "timed out"
            logger.error("agl store: the workers failed to start (%s)", why)
            return 1
    if stopping():
        return 0
    host = f"[{settings.host}]" if ":" in settings.host else settings.host
    if settings.host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    if on_started is not None:
        on_started(f"http://{host}:{settings.port}")
    quick_deaths = 0
    while not stopping():
        multiprocessing.connection.wait([p.sentinel for p in procs.values()], timeout=0.5)
        for index, proc in list(procs.items()):
            if proc.is_alive() or stopping():
                continue
            lived = time.monotonic() - started_at[index]
            quick_deaths = quick_deaths + 1 if lived < 60 else 0
            _mark_dead(proc.pid)
            if quick_deaths > _MAX_QUICK_DEATHS:
                logger.error("agl store: workers keep dying (%d in a row); stopping", quick_deaths)
                return 1
            pause = min(0.5 * 2 ** max(quick_deaths - 1, 0), 10.0)
            logger.warning(
                "agl store: worker %d (pid %s) exited with %s; starting a new one in %.1f s",
                index,
                proc.pid,
                proc.exitcode,
                pause,
            )
            time.sleep(pause)
            start(index)
    return 0


def _stop_all(procs: dict[int, Any]) -> None:
    for proc in procs.values():
        if proc.is_alive() and proc.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_SECONDS
    for proc in procs.values():
        proc.join(max(deadline - time.monotonic(), 0.1))
        if proc.is_alive():
            proc.kill()
            proc.join(5)
        _mark_dead(proc.pid)
