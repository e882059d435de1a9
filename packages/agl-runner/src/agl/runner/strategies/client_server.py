"""``client_server`` (alias ``cs``): the algorithm's process serves the store over HTTP; runners are processes
with store clients.

The runner processes are started and stopped by :mod:`._processes`, run :mod:`._runner_process` inside,
and are watched by :mod:`._supervise` (a lost runner is replaced; a crash fails the run).
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from agl.types.env import (
    DEFAULT_STORE_PORT,
    LightningEnvVar,
    resolve_bool_env_var,
    resolve_int_env_var,
    resolve_str_env_var,
)

from .._bounds import check_at_least
from ._processes import RunnerProcess, shutdown_runner_processes, start_runner_process
from ._runner_process import preload_for_children, run_runner_here
from ._signals import ParentStopEvent
from ._supervise import LostRunner, RestartPolicy, RunnerSupervisor
from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle, StrategyError

if TYPE_CHECKING:
    from types import FrameType

    from agl.store import LightningStore

    from ..events import ExecutionEvent

# LostRunner lives with the supervision that records it; it is public here, where lost_runners is.
__all__ = ["DEFAULT_PORT", "ClientServerExecutionStrategy", "LostRunner"]

logger = logging.getLogger(__name__)

Role = Literal["algorithm", "runner", "both"]
DEFAULT_PORT = DEFAULT_STORE_PORT
"""Port of the store server when none is given (``AGL_SERVER_PORT`` unset)."""


class ClientServerExecutionStrategy(ExecutionStrategy):
    """The algorithm runs in this process and serves the store; each runner is a process talking HTTP to it.

    Args:
        role: ``both`` (default): this process runs the algorithm and starts the runner processes;
            ``algorithm`` or ``runner``: only that side (start the other with another command).
            ``None`` reads ``AGL_CURRENT_ROLE``.
        server_host / server_port: Where the store server listens (and runners connect). ``None`` reads
            ``AGL_SERVER_HOST`` / ``AGL_SERVER_PORT`` (defaults ``127.0.0.1`` / 4747). Port 0 picks a free port
            (role ``both`` only).
        n_runners: Runner processes.
        graceful_timeout: After the stop request, how long runners get to finish their rollout and exit.
        terminate_timeout: Wait after each escalation step (SIGINT, SIGTERM, SIGKILL).
        managed_store: ``True``: serve the given store (algorithm side) and connect runners with
            ``LightningStoreClient``. ``False``: both sides use the store as given (e.g. a client of an
            ``agl store`` started separately). ``None`` reads ``AGL_MANAGED_STORE`` (default true).
        start_method: ``fork`` (default on Linux: runners start in milliseconds), ``forkserver`` or
            ``spawn`` (default elsewhere; the agent, runner and hooks must then be picklable).
        token: Bearer token for the store server (default: ``AGL_STORE_TOKEN``).
        max_restarts: How many times in a row a runner slot whose process died is given a replacement
            (a process that lived a minute resets its count). ``0``: never replace.
        restart_backoff: Wait before the first replacement of a slot; doubled for each one in a row (at
            most 30 s).
        in_process_runner: Role ``runner`` with one runner: run it in this process (default; handy under a
            debugger). ``False``: in a child process, supervised and replaced like the others.
        main_process: Role ``both``: what runs in this process. ``algorithm`` (default): the algorithm and the
            store server, the runners in child processes. ``runner`` (one runner only; handy under a
            debugger): the runner, the algorithm and the store server in a child process, as in the
            reference (whose caveat holds too: the store object given to :meth:`execute` is not updated, the
            child's copy of it is served).

    Failures: an exception raised out of a runner stops everything and is raised from :meth:`execute` with
    the runner's traceback; an exception in the algorithm stops the runners and is re-raised. A runner
    process that dies without an exception (killed by a signal, ``os._exit`` in an agent, a native crash) is
    a lost runner: it is logged and recorded in :attr:`lost_runners`, the attempts it held are marked
    ``unresponsive`` at once (the store's retry policy then requeues or fails their rollouts), and a
    replacement is started (see ``max_restarts``). The run fails only when no runner is left and none will
    be started.
    """

    alias = "cs"

    def __init__(
        self,
        role: Role | None = None,
        server_host: str | None = None,
        server_port: int | None = None,
        n_runners: int = 1,
        graceful_timeout: float = 10.0,
        terminate_timeout: float = 5.0,
        main_process: Literal["algorithm", "runner"] = "algorithm",
        managed_store: bool | None = None,
        start_method: Literal["fork", "forkserver", "spawn"] | None = None,
        token: str | None = None,
        max_restarts: int = 3,
        restart_backoff: float = 0.5,
        in_process_runner: bool = True,
    ) -> None:
        resolved_role = resolve_str_env_var(LightningEnvVar.AGL_CURRENT_ROLE, role, fallback="both")
        if resolved_role not in ("algorithm", "runner", "both"):
            raise ValueError(f"role must be 'algorithm', 'runner' or 'both', got {resolved_role!r}")
        check_at_least("n_runners", n_runners, 1)
        _check_main_process(main_process, resolved_role, n_runners)
        if start_method is None:
            # fork is safe and fast on Linux; elsewhere (macOS system frameworks) spawn is the safe default.
            start_method = "fork" if sys.platform.startswith("linux") else "spawn"
        if start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start_method {start_method!r} is not available on this platform")
        self.role: Role = resolved_role
        self.server_host = resolve_str_env_var(
            LightningEnvVar.AGL_SERVER_HOST, server_host, fallback="127.0.0.1"
        )
        self.server_port = resolve_int_env_var(
            LightningEnvVar.AGL_SERVER_PORT, server_port, fallback=DEFAULT_PORT
        )
        self.n_runners = n_runners
        self.graceful_timeout = graceful_timeout
        self.terminate_timeout = terminate_timeout
        self.main_process = main_process
        self.managed_store = resolve_bool_env_var(
            LightningEnvVar.AGL_MANAGED_STORE, managed_store, fallback=True
        )
        self.start_method = start_method
        self.token = token
        self.restart_policy = RestartPolicy(max_restarts, restart_backoff)
        self.max_restarts = max_restarts
        self.restart_backoff = restart_backoff
        self.in_process_runner = in_process_runner
        self.lost_runners: list[LostRunner] = []
        self._supervisor = RunnerSupervisor(self.restart_policy, self.lost_runners, token)
        self.endpoint: str | None = None
        """URL of the store server while :meth:`execute` runs (managed store)."""

    # -- entry point ---------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        self.lost_runners = []
        self.restart_policy = RestartPolicy(self.max_restarts, self.restart_backoff)
        self._supervisor = RunnerSupervisor(self.restart_policy, self.lost_runners, self.token)
        if self.role == "runner":
            self._execute_runners_only(runner, store)
        elif self.main_process == "runner":
            from ._algorithm_process import AlgorithmProcessOptions, run_with_runner_on_main

            options = AlgorithmProcessOptions(
                host=self.server_host,
                port=self.server_port,
                token=self.token,
                managed_store=self.managed_store,
                start_method=self.start_method,
                graceful_timeout=self.graceful_timeout,
                terminate_timeout=self.terminate_timeout,
            )
            run_with_runner_on_main(algorithm, runner, store, options)
        else:
            self._execute_algorithm(algorithm, runner, store, with_runners=self.role == "both")

    def _connect_address(self) -> str:
        host = self.server_host if self.server_host not in ("0.0.0.0", "::", "") else "127.0.0.1"
        return f"http://{host}:{self.server_port}"

    # -- algorithm side (role algorithm or both) -------------------------------------------------

    def _execute_algorithm(
        self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore, *, with_runners: bool
    ) -> None:
        ctx = multiprocessing.get_context(self.start_method)
        stop_reader, stop_writer = ctx.Pipe(duplex=False)
        event = ParentStopEvent(stop_writer)
        children: list[RunnerProcess] = []
        server = None
        if with_runners and self._preload_in_parent():
            preload_for_children()  # once here rather than once per runner: forks inherit it
        try:
            if with_runners:
                for i in range(self.n_runners):
                    children.append(
                        self._start_child(ctx, runner, i, stop_reader, stop_writer, store, slot=i)
                    )
            algorithm_store = store
            endpoint = ""
            if self.managed_store:
                from agl.store.server import LightningStoreServer

                server = LightningStoreServer(
                    store, host=self.server_host, port=self.server_port, token=self.token
                )
                server.start()
                endpoint = server.endpoint
                self.endpoint = endpoint
                algorithm_store = server
            for child in children:
                child.send_endpoint(endpoint)

            def spawn(worker_id: Any, slot: int) -> RunnerProcess:
                child = self._start_child(ctx, runner, worker_id, stop_reader, stop_writer, store, slot=slot)
                child.send_endpoint(endpoint)
                return child

            from agl.store.serving import serving_gc

            with serving_gc():  # this process serves the store to the runners (the server's thread)
                asyncio.run(self._algorithm_with_watch(algorithm, algorithm_store, event, children, spawn))
        except KeyboardInterrupt:  # Ctrl+C stops everything and returns, as the reference does
            logger.warning("Interrupted: stopping the algorithm and the runners")
        finally:
            event.set()
            stop_reader.close()
            shutdown_runner_processes(children, self.graceful_timeout, self.terminate_timeout)
            if server is not None:
                server.stop()
            self.endpoint = None

    def _preload_in_parent(self) -> bool:
        """Whether forked runners should inherit their imports rather than each import them.

        With a core to spare per runner, runners import while this process starts the server (in parallel);
        on a smaller machine that only multiplies the work, so this process imports once for all.
        """
        return self.start_method == "fork" and (os.cpu_count() or 1) < self.n_runners + 2

    def _start_child(
        self,
        ctx: Any,
        runner: RunnerBundle,
        worker_id: Any,
        stop_reader: multiprocessing.connection.Connection,
        stop_writer: multiprocessing.connection.Connection,
        store: LightningStore,
        *,
        slot: int,
    ) -> RunnerProcess:
        return start_runner_process(
            ctx,
            runner,
            worker_id,
            stop_reader,
            stop_writer,
            slot=slot,
            start_method=self.start_method,
            token=self.token,
            store=None if self.managed_store else store,
        )

    async def _algorithm_with_watch(
        self,
        algorithm: AlgorithmBundle,
        store: LightningStore,
        event: ExecutionEvent,
        children: list[RunnerProcess],
        spawn: Callable[[Any, int], RunnerProcess],
    ) -> None:
        algorithm_task = asyncio.create_task(algorithm(store, event))
        watch_task = asyncio.create_task(self._supervisor.watch(children, event, store, spawn))
        try:
            await asyncio.wait({algorithm_task, watch_task}, return_when=asyncio.FIRST_COMPLETED)
            if algorithm_task.done():
                algorithm_task.result()  # the algorithm's own exception, if any
                return
            # The watcher only returns by raising (a runner crashed): stop the algorithm.
            event.set()
            algorithm_task.cancel()
            await asyncio.wait({algorithm_task}, timeout=self.terminate_timeout)
            watch_task.result()
        finally:
            for task in (algorithm_task, watch_task):
                if not task.done():
                    task.cancel()
            await asyncio.gather(algorithm_task, watch_task, return_exceptions=True)
            await store.release_loop_resources()  # this loop's connections to an unmanaged store

    # -- runner side (role runner) -----------------------------------------------------------------

    def _execute_runners_only(self, runner: RunnerBundle, store: LightningStore) -> None:
        ctx = multiprocessing.get_context(self.start_method)
        endpoint = self._connect_address() if self.managed_store else ""
        prefix = f"{socket.gethostname()}:{os.getpid()}"
        stop_reader, stop_writer = ctx.Pipe(duplex=False)
        event = ParentStopEvent(stop_writer)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            event.set()

        previous = signal.signal(signal.SIGTERM, on_sigterm)
        children: list[RunnerProcess] = []
        crashed: list[RunnerProcess] = []
        reports: dict[str, str] = {}
        try:
            if self.n_runners == 1 and self.in_process_runner:
                run_runner_here(runner, f"{prefix}:0", event, endpoint, self.token, store)
                return
            if self._preload_in_parent():
                preload_for_children()

            def spawn(index: int, slot: int) -> RunnerProcess:
                child = self._start_child(
                    ctx, runner, f"{prefix}:{index}", stop_reader, stop_writer, store, slot=slot
                )
                child.send_endpoint(endpoint)
                return child

            for i in range(self.n_runners):
                children.append(spawn(i, i))
            self._supervisor.supervise(children, event, spawn, endpoint, store, crashed)
        except KeyboardInterrupt:
            logger.warning("Interrupted: stopping the runners")
        finally:
            event.set()
            signal.signal(signal.SIGTERM, previous)
            crashed += [
                c
                for c in children
                if c not in crashed and c.proc.exitcode is not None and c.proc.exitcode > 0 and c.has_report()
            ]
            reports = {str(c.proc.name): c.error_report() for c in crashed}
            shutdown_runner_processes(children, self.graceful_timeout, self.terminate_timeout)
            stop_reader.close()
        if crashed:
            raise StrategyError(
                "runner processes failed: " + "; ".join(f"{name}: {text}" for name, text in reports.items())
            )


def _check_main_process(main_process: str, role: str, n_runners: int) -> None:
    if main_process not in ("algorithm", "runner"):
        raise ValueError(f"main_process must be 'algorithm' or 'runner', got {main_process!r}")
    if main_process == "runner" and role != "both":
        raise ValueError(f"main_process='runner' is only supported with role='both', not {role!r}")
    if main_process == "runner" and n_runners != 1:
        raise ValueError("main_process='runner' needs n_runners=1 (only one runner can own the main process)")
