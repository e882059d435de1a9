"""The client-server strategy's runner processes seen from the parent: start one, read its error report,
stop them all with an escalation that always ends."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing.connection
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._runner_process import runner_process_main

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from agl.store import LightningStore

    from .base import RunnerBundle

__all__ = ["RunnerProcess", "describe_exit", "shutdown_runner_processes", "start_runner_process"]

logger = logging.getLogger(__name__)


def describe_exit(code: int | None) -> str:
    """How a process ended, for messages: ``exited with code 3``, ``was killed by SIGKILL``."""
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class RunnerProcess:
    """A runner process and the pipes to it: one sends it the server's address, the other brings back the
    traceback of an exception that ended it."""

    def __init__(
        self,
        proc: BaseProcess,
        ready: multiprocessing.connection.Connection,
        errors: multiprocessing.connection.Connection,
        *,
        slot: int,
        worker_id: Any,
    ) -> None:
        self.proc = proc
        self.slot = slot
        """The runner slot it fills (a replacement takes the slot of the process it replaces)."""
        self.worker_id = worker_id
        self.started = time.monotonic()
        self._ready = ready
        self._errors = errors
        self._report: str | None = None
        self._reported = False

    def send_endpoint(self, endpoint: str) -> None:
        """Tell the process where the store server is (``""``: use the store it was given); it then starts."""
        with contextlib.suppress(OSError):
            self._ready.send(endpoint)
            self._ready.close()

    def error_report(self) -> str:
        """The traceback the process reported, or ``no traceback was reported``."""
        if self._report is None:
            texts: list[str] = []
            with contextlib.suppress(OSError, EOFError):
                while self._errors.poll():
                    texts.append(str(self._errors.recv()))
            self._reported = bool(texts)
            self._report = "\n".join(texts) or "no traceback was reported"
        return self._report

    def has_report(self) -> bool:
        """Whether the process reported an exception before it exited (a crash, not a lost runner)."""
        self.error_report()
        return self._reported

    def close(self) -> None:
        """Close the pipes and release the process (logged when it is still running)."""
        self.error_report()
        for conn in (self._ready, self._errors):
            with contextlib.suppress(OSError):
                conn.close()
        if self.proc.exitcode is None:
            logger.error("%s (pid %s) could not be stopped", self.proc.name, self.proc.pid)
        else:
            self.proc.close()


def start_runner_process(
    ctx: Any,
    runner: RunnerBundle,
    worker_id: Any,
    stop_reader: multiprocessing.connection.Connection,
    stop_writer: multiprocessing.connection.Connection,
    *,
    slot: int,
    start_method: str,
    token: str | None,
    store: LightningStore | None,
) -> RunnerProcess:
    """Start a runner process from the multiprocessing context ``ctx``; it waits for
    :meth:`RunnerProcess.send_endpoint`. ``store``: the store it uses when no endpoint is sent."""
    ready_reader, ready_writer = ctx.Pipe(duplex=False)
    error_reader, error_writer = ctx.Pipe(duplex=False)
    inherited = stop_writer.fileno() if start_method == "fork" else -1
    proc = ctx.Process(
        target=runner_process_main,
        args=(runner, worker_id, stop_reader, inherited, ready_reader, error_writer, token, store),
        name=f"runner-{worker_id}",
    )
    proc.start()
    ready_reader.close()
    error_writer.close()
    return RunnerProcess(proc, ready_writer, error_reader, slot=slot, worker_id=worker_id)


def _join_all(procs: list[BaseProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))


def _interrupt(proc: BaseProcess) -> None:
    if proc.pid is not None:
        os.kill(proc.pid, signal.SIGINT)


def _terminate(proc: BaseProcess) -> None:
    proc.terminate()


def _kill(proc: BaseProcess) -> None:
    proc.kill()


_ESCALATION: list[tuple[str, Callable[[BaseProcess], None]]] = [
    ("SIGINT", _interrupt),
    ("SIGTERM", _terminate),
    ("SIGKILL", _kill),
]


def shutdown_runner_processes(
    children: list[RunnerProcess], graceful_timeout: float, terminate_timeout: float
) -> None:
    """Wait ``graceful_timeout`` for the runners to stop; escalate with SIGINT, SIGTERM and SIGKILL, each
    followed by a wait of ``terminate_timeout``; then close them."""
    procs = [c.proc for c in children]
    if not procs:
        return
    _join_all(procs, graceful_timeout)
    for name, action in _ESCALATION:
        alive = [p for p in procs if p.exitcode is None]
        if not alive:
            break
        logger.warning(
            "%s did not stop within the grace period; sending %s",
            ", ".join(str(p.name) for p in alive),
            name,
        )
        for proc in alive:
            with contextlib.suppress(ProcessLookupError, OSError):
                action(proc)
        _join_all(alive, terminate_timeout)
    for child in children:
        child.close()
