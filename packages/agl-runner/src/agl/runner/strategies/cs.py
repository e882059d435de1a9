"""``cs``: the algorithm's process serves the store over HTTP; runners are processes with store clients."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from agl.types.env import DEFAULT_STORE_PORT

from ..env import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from ._signals import ChildStopEvent, ParentStopEvent
from .base import AlgorithmBundle, ExecutionStrategy, RunnerBundle, StrategyError, run_until_stopped

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from agl.store import LightningStore

    from ..events import ExecutionEvent

__all__ = ["ClientServerExecutionStrategy", "LostRunner"]

logger = logging.getLogger(__name__)

Role = Literal["algorithm", "runner", "both"]
DEFAULT_PORT = DEFAULT_STORE_PORT


@dataclass
class LostRunner:
    """A runner process that died from a signal (e.g. SIGKILL, the OOM killer) while the algorithm ran."""

    name: str
    pid: int | None
    exitcode: int

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid}) {_describe_exit(self.exitcode)}"


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "is still running"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


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

    Failures: an exception in a runner stops everything and is raised from :meth:`execute` with the runner's
    traceback; an exception in the algorithm stops the runners and is re-raised. A runner process killed by
    a signal is logged and recorded in :attr:`lost_runners`; the store's retry policy takes care of its
    rollout, and the run goes on while at least one runner is alive.
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
        main_process: Literal["algorithm"] = "algorithm",
        managed_store: bool | None = None,
        start_method: Literal["fork", "forkserver", "spawn"] | None = None,
        token: str | None = None,
    ) -> None:
        resolved_role = resolve_str_env_var(LightningEnvVar.AGL_CURRENT_ROLE, role, fallback="both")
        if resolved_role not in ("algorithm", "runner", "both"):
            raise ValueError(f"role must be 'algorithm', 'runner' or 'both', got {resolved_role!r}")
        if n_runners < 1:
            raise ValueError(f"n_runners must be >= 1, got {n_runners}")
        if main_process != "algorithm":
            raise ValueError(f"main_process must be 'algorithm', got {main_process!r}")
        if start_method is None:
            # fork is safe and fast on Linux; elsewhere (macOS system frameworks) spawn is the safe default.
            start_method = "fork" if sys.platform.startswith("linux") else "spawn"
        if start_method not in multiprocessing.get_all_start_methods():
            raise ValueError(f"start_method {start_method!r} is not available on this platform")
        self.role: Role = resolved_role  # type: ignore[assignment]
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
        self.lost_runners: list[LostRunner] = []
        self.endpoint: str | None = None
        """URL of the store server while :meth:`execute` runs (managed store)."""

    # -- entry point ---------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        self.lost_runners = []
        if self.role == "runner":
            self._execute_runners_only(runner, store)
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
        children: list[_Child] = []
        server = None
        if with_runners and self._preload_in_parent():
            _preload_for_children()  # once here rather than once per runner: forks inherit it
        try:
            if with_runners:
                for i in range(self.n_runners):
                    children.append(self._start_child(ctx, runner, i, stop_reader, stop_writer, store))
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
            asyncio.run(self._algorithm_with_watch(algorithm, algorithm_store, event, children))
        except KeyboardInterrupt:  # Ctrl+C stops everything and returns, as the reference does
            logger.warning("Interrupted: stopping the algorithm and the runners")
        finally:
            event.set()
            stop_reader.close()
            self._shutdown(children)
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
    ) -> _Child:
        ready_reader, ready_writer = ctx.Pipe(duplex=False)
        error_reader, error_writer = ctx.Pipe(duplex=False)
        inherited = stop_writer.fileno() if self.start_method == "fork" else -1
        proc = ctx.Process(
            target=_runner_process,
            args=(
                runner,
                worker_id,
                stop_reader,
                inherited,
                ready_reader,
                error_writer,
                self.token,
                None if self.managed_store else store,
            ),
            name=f"runner-{worker_id}",
        )
        proc.start()
        ready_reader.close()
        error_writer.close()
        return _Child(proc, ready_writer, error_reader)

    async def _algorithm_with_watch(
        self,
        algorithm: AlgorithmBundle,
        store: LightningStore,
        event: ExecutionEvent,
        children: list[_Child],
    ) -> None:
        algorithm_task = asyncio.create_task(algorithm(store, event))
        watch_task = asyncio.create_task(self._watch_runners(children, event))
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

    async def _watch_runners(self, children: list[_Child], event: ExecutionEvent) -> None:
        """Return never; raise :class:`StrategyError` when a runner crashes or no runner is left."""
        if not children:
            await asyncio.Event().wait()
        loop = asyncio.get_running_loop()
        exited: asyncio.Queue[_Child] = asyncio.Queue()
        for child in children:
            loop.add_reader(child.proc.sentinel, _on_exit, loop, child, exited)
        try:
            alive = len(children)
            while True:
                child = await exited.get()
                alive -= 1
                proc = child.proc
                proc.join(1.0)
                code = proc.exitcode
                if event.is_set():
                    continue
                if code == 0:
                    logger.info("%s finished", proc.name)
                elif code is not None and code < 0:
                    lost = LostRunner(proc.name or "runner", proc.pid, code)
                    self.lost_runners.append(lost)
                    logger.error("Runner %s; its rollout will be retried if its policy allows", lost)
                else:
                    raise StrategyError(
                        f"{proc.name} crashed ({_describe_exit(code)}):\n{child.error_report()}"
                    )
                if alive == 0:
                    raise StrategyError(
                        "every runner process has exited while the algorithm is still running: "
                        + "; ".join(f"{c.proc.name} {_describe_exit(c.proc.exitcode)}" for c in children)
                    )
        finally:
            for child in children:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(child.proc.sentinel)

    def _shutdown(self, children: list[_Child]) -> None:
        """Wait for the runners to stop; escalate with SIGINT, SIGTERM and SIGKILL, each with a bounded wait."""
        procs = [c.proc for c in children]
        if not procs:
            return
        _join_all(procs, self.graceful_timeout)
        steps: list[tuple[str, Any]] = [
            ("SIGINT", lambda p: os.kill(p.pid, signal.SIGINT)),
            ("SIGTERM", lambda p: p.terminate()),
            ("SIGKILL", lambda p: p.kill()),
        ]
        for name, action in steps:
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
            _join_all(alive, self.terminate_timeout)
        for child in children:
            child.close()

    # -- runner side (role runner) -----------------------------------------------------------------

    def _execute_runners_only(self, runner: RunnerBundle, store: LightningStore) -> None:
        ctx = multiprocessing.get_context(self.start_method)
        endpoint = self._connect_address() if self.managed_store else ""
        prefix = f"{socket.gethostname()}:{os.getpid()}"
        stop_reader, stop_writer = ctx.Pipe(duplex=False)
        event = ParentStopEvent(stop_writer)
        previous = signal.signal(signal.SIGTERM, lambda *_: event.set())
        children: list[_Child] = []
        crashed: list[_Child] = []
        try:
            if self.n_runners == 1:
                _run_runner_here(runner, f"{prefix}:0", event, endpoint, self.token, store)
                return
            if self._preload_in_parent():
                _preload_for_children()
            for i in range(self.n_runners):
                child = self._start_child(ctx, runner, f"{prefix}:{i}", stop_reader, stop_writer, store)
                child.send_endpoint(endpoint)
                children.append(child)
            while not event.is_set():
                running = [c.proc.sentinel for c in children if c.proc.exitcode is None]
                if not running:
                    break
                multiprocessing.connection.wait(running, timeout=0.5)
        except KeyboardInterrupt:
            logger.warning("Interrupted: stopping the runners")
        finally:
            event.set()
            signal.signal(signal.SIGTERM, previous)
            crashed = [c for c in children if c.proc.exitcode not in (None, 0) and c.proc.exitcode > 0]
            reports = {c.proc.name: c.error_report() for c in crashed}
            self._shutdown(children)
            stop_reader.close()
        if crashed:
            raise StrategyError(
                "runner processes failed: " + "; ".join(f"{name}: {text}" for name, text in reports.items())
            )


class _Child:
    """A runner process and the pipes to it."""

    def __init__(
        self,
        proc: BaseProcess,
        ready: multiprocessing.connection.Connection,
        errors: multiprocessing.connection.Connection,
    ) -> None:
        self.proc = proc
        self._ready = ready
        self._errors = errors
        self._report: str | None = None

    def send_endpoint(self, endpoint: str) -> None:
        with contextlib.suppress(OSError):
            self._ready.send(endpoint)
            self._ready.close()

    def error_report(self) -> str:
        if self._report is None:
            texts: list[str] = []
            with contextlib.suppress(OSError, EOFError):
                while self._errors.poll():
                    texts.append(str(self._errors.recv()))
            self._report = "\n".join(texts) or "no traceback was reported"
        return self._report

    def close(self) -> None:
        self.error_report()
        for conn in (self._ready, self._errors):
            with contextlib.suppress(OSError):
                conn.close()
        if self.proc.exitcode is None:
            logger.error("%s (pid %s) could not be stopped", self.proc.name, self.proc.pid)
        else:
            self.proc.close()


def _preload_for_children() -> None:
    """Import what a runner process needs before it has work: the HTTP client stack and the heartbeat probe."""
    import psutil  # noqa: F401  # heartbeats
    from agl.store.client import LightningStoreClient  # noqa: F401


def _on_exit(loop: asyncio.AbstractEventLoop, child: _Child, exited: asyncio.Queue[_Child]) -> None:
    with contextlib.suppress(ValueError, OSError):
        loop.remove_reader(child.proc.sentinel)
    exited.put_nowait(child)


def _join_all(procs: list[BaseProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))


# -- inside a runner process --------------------------------------------------------------------------


def _hard_exit_after_stop(event: ChildStopEvent, grace: float) -> None:
    """If the runner has not exited ``grace`` seconds after the stop signal, exit hard."""
    while not event.is_set():
        time.sleep(0.2)
    time.sleep(grace)
    logger.error("runner did not stop within %.0fs of the stop signal; exiting", grace)
    os._exit(1)


async def _run_bundle(
    runner: RunnerBundle, store: LightningStore, worker_id: Any, event: ExecutionEvent, owns_store: bool
) -> None:
    try:
        await run_until_stopped(lambda: runner(store, worker_id, event), event, grace=30.0)
    finally:
        if owns_store:
            await store.close()


def _make_store(
    endpoint: str, token: str | None, store: LightningStore | None
) -> tuple[LightningStore, bool]:
    if endpoint:
        from agl.store.client import LightningStoreClient

        return LightningStoreClient(endpoint, token=token), True
    if store is None:
        raise RuntimeError("no store to run against: the strategy passed neither an endpoint nor a store")
    return store, False


def _run_runner_here(
    runner: RunnerBundle,
    worker_id: Any,
    event: ExecutionEvent,
    endpoint: str,
    token: str | None,
    store: LightningStore,
) -> None:
    client, owns = _make_store(endpoint, token, store)
    asyncio.run(_run_bundle(runner, client, worker_id, event, owns))


def _runner_process(
    runner: RunnerBundle,
    worker_id: Any,
    stop_reader: multiprocessing.connection.Connection,
    inherited_stop_writer: int,
    ready_reader: multiprocessing.connection.Connection,
    error_writer: multiprocessing.connection.Connection,
    token: str | None,
    store: LightningStore | None,
) -> None:
    """Body of a runner process: wait for the server's address, then run the runner until stopped."""
    if inherited_stop_writer >= 0:
        # A forked child holds a copy of the parent's end; only the parent may close the stop pipe.
        with contextlib.suppress(OSError):
            os.close(inherited_stop_writer)
    event = ChildStopEvent(stop_reader)
    name = multiprocessing.current_process().name
    try:
        _preload_for_children()  # a no-op when forked from a parent that preloaded
        ready = multiprocessing.connection.wait([ready_reader, stop_reader])
        if ready_reader not in ready or event.is_set():
            return  # stopped (or the parent died) before the server was up
        try:
            endpoint = ready_reader.recv()
        except EOFError:
            return
        finally:
            ready_reader.close()
        threading.Thread(target=_hard_exit_after_stop, args=(event, 60.0), daemon=True).start()
        client, owns = _make_store(endpoint, token, store)
        asyncio.run(_run_bundle(runner, client, worker_id, event, owns))
    except KeyboardInterrupt:
        return
    except BaseException as exc:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        with contextlib.suppress(Exception):
            error_writer.send(text)
        sys.stderr.write(f"{name} crashed:\n{text}")
        sys.stderr.flush()
        os._exit(1)
