"""``ClientServerExecutionStrategy(main_process="runner")``: the algorithm and the store server in a child process,
the one runner in the calling process (handy under a debugger), as the reference's option means.

The child serves the store, sends its address up a pipe, runs the algorithm, then reports ``done`` (or its
exception) on the same pipe and keeps serving until the parent closes the stop pipe: the runner is never cut
off from the store in the middle of a rollout. Store updates happen in the child, so the store object passed to
``execute`` is not updated (the reference's caveat too); runners and the algorithm see the served one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing.connection
import pickle
import time
import traceback
from typing import TYPE_CHECKING, Any

from ._processes import describe_exit
from ._runner_process import run_runner_here
from ._signals import ChildStopEvent, ParentStopEvent, child_stop_event, stop_pipe
from .base import StrategyError, run_until_stopped

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from agl.store import LightningStore

    from .base import AlgorithmBundle, RunnerBundle

__all__ = ["AlgorithmProcessOptions", "run_with_runner_on_main"]

logger = logging.getLogger(__name__)

Conn = multiprocessing.connection.Connection


class AlgorithmProcessOptions:
    """What the algorithm's process needs from the strategy (picklable, for ``spawn``)."""

    def __init__(
        self,
        *,
        host: str,
        port: int,
        token: str | None,
        managed_store: bool,
        start_method: str,
        graceful_timeout: float,
        terminate_timeout: float,
    ) -> None:
        self.host = host
        self.port = port
        self.token = token
        self.managed_store = managed_store
        self.start_method = start_method
        self.graceful_timeout = graceful_timeout
        self.terminate_timeout = terminate_timeout


class _AlgorithmEnded:
    """The runner's stop event in the calling process: set by :meth:`set`, or once the algorithm process
    reported its end (or died). Polled at most every ``POLL_SECONDS``, as :class:`ChildStopEvent` is."""

    POLL_SECONDS = 0.01

    def __init__(self, stop: ParentStopEvent, report: Conn, proc: BaseProcess) -> None:
        self._stop = stop
        self._watch: list[Any] = [report, proc.sentinel]
        self._ended = False
        self._next_poll = 0.0

    def set(self) -> None:
        self._stop.set()

    def is_set(self) -> bool:
        if self._stop.is_set() or self._ended:
            return True
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self.POLL_SECONDS
            self._ended = bool(multiprocessing.connection.wait(self._watch, 0))
        return self._ended


# -- in the child ------------------------------------------------------------------------------------------


async def _run_algorithm(algorithm: AlgorithmBundle, store: LightningStore, event: ChildStopEvent) -> None:
    try:
        await run_until_stopped(lambda: algorithm(store, event), event, grace=0.0)
    finally:
        await store.release_loop_resources()


def _report_exception(report: Conn, exc: BaseException) -> None:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        payload: bytes | None = pickle.dumps(exc)
    except Exception:
        payload = None
    with contextlib.suppress(OSError):
        report.send(("error", text, payload))


def algorithm_process_main(
    algorithm: AlgorithmBundle,
    store: LightningStore,
    options: AlgorithmProcessOptions,
    stop_reader: Conn,
    inherited_stop_writer: int,
    report: Conn,
) -> None:
    """Body of the algorithm's process: serve the store, run the algorithm, serve on until told to stop."""
    event = child_stop_event(stop_reader, inherited_stop_writer)
    server = None
    try:
        algorithm_store, endpoint = store, ""
        if options.managed_store:
            from agl.store.server import LightningStoreServer

            server = LightningStoreServer(store, host=options.host, port=options.port, token=options.token)
            server.start()
            algorithm_store, endpoint = server, server.endpoint
        report.send(("endpoint", endpoint))
        from agl.store.serving import serving_gc

        with serving_gc():
            asyncio.run(_run_algorithm(algorithm, algorithm_store, event))
        report.send(("done", None))
        # Serve on until the runner stopped (the parent closes the stop pipe), or it is given up on.
        multiprocessing.connection.wait(
            [stop_reader], options.graceful_timeout + 3 * options.terminate_timeout
        )
    except KeyboardInterrupt:
        pass
    except BaseException as exc:
        _report_exception(report, exc)
    finally:
        if server is not None:
            server.stop()


# -- in the calling process ----------------------------------------------------------------------------------


def _start(
    algorithm: AlgorithmBundle, store: LightningStore, options: AlgorithmProcessOptions
) -> tuple[BaseProcess, ParentStopEvent, Conn]:
    ctx: Any = multiprocessing.get_context(options.start_method)  # (its Process type depends on the method)
    stop_reader, stop_writer = stop_pipe(ctx)
    report_reader, report_writer = ctx.Pipe(duplex=False)
    inherited = stop_writer.fileno() if options.start_method == "fork" else -1
    proc: BaseProcess = ctx.Process(
        target=algorithm_process_main,
        args=(algorithm, store, options, stop_reader, inherited, report_writer),
        name="algorithm",
    )
    proc.start()
    stop_reader.close()
    report_writer.close()
    return proc, ParentStopEvent(stop_writer), report_reader


def _receive(report: Conn, proc: BaseProcess) -> tuple[Any, ...] | None:
    """The algorithm process's next message; ``None`` once it exited without one."""
    multiprocessing.connection.wait([report, proc.sentinel])
    with contextlib.suppress(OSError, EOFError):
        if report.poll():
            return tuple(report.recv())
    return None


def _stop(proc: BaseProcess, options: AlgorithmProcessOptions) -> None:
    proc.join(options.graceful_timeout)
    for action in (proc.terminate, proc.kill):
        if proc.exitcode is not None:
            return
        logger.warning("the algorithm process did not stop within the grace period; stopping it")
        with contextlib.suppress(OSError):
            action()
        proc.join(options.terminate_timeout)


def _raise_reported(message: tuple[Any, ...] | None, proc: BaseProcess) -> None:
    """Raise what the algorithm process reported: its own exception when it could be pickled."""
    if message is not None and message[0] == "error":
        _, text, payload = message
        logger.error("the algorithm process failed:\n%s", text)
        exc: object = None
        with contextlib.suppress(Exception):
            exc = pickle.loads(payload) if payload is not None else None
        if isinstance(exc, BaseException):
            raise exc
        raise StrategyError(f"the algorithm process failed:\n{text}")
    if message is None and proc.exitcode not in (0, None):
        raise StrategyError(
            f"the algorithm process {describe_exit(proc.exitcode)} without reporting an error"
        )


def run_with_runner_on_main(
    algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore, options: AlgorithmProcessOptions
) -> None:
    """Run the algorithm (and the store server) in a child process and the one runner here."""
    proc, stop, report = _start(algorithm, store, options)
    message: tuple[Any, ...] | None = None
    try:
        message = _receive(report, proc)
        if message is not None and message[0] == "endpoint":
            endpoint, message = str(message[1]), None
            run_runner_here(runner, 0, _AlgorithmEnded(stop, report, proc), endpoint, options.token, store)
            message = _receive(report, proc)  # the runner stopped: let the algorithm finish on its own
    except KeyboardInterrupt:  # Ctrl+C stops everything and returns, as the reference does
        logger.warning("Interrupted: stopping the algorithm and the runner")
    finally:
        stop.set()
        _stop(proc, options)
        if message is None:
            with contextlib.suppress(OSError, EOFError):
                message = tuple(report.recv()) if report.poll() else None
        report.close()
    _raise_reported(message, proc)
