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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from agl.types.env import DEFAULT_STORE_PORT

from ..env import LightningEnvVar, resolve_bool_env_var, resolve_int_env_var, resolve_str_env_var
from ._signals import ChildStopEvent, ParentStopEvent
from ._supervise import RestartPolicy, release_attempts_of, runner_worker_name
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
    """A runner process that died without reporting an exception (a signal such as SIGKILL or the OOM
    killer's, ``os._exit`` in an agent, a crash in native code) while the run went on.

    ``replaced_by`` names the process started in its place (``None``: its slot used up its restarts).
    """

    name: str
    pid: int | None
    exitcode: int
    worker_id: str | None = None
    released: list[str] = field(default_factory=list)
    """Rollouts whose attempt it held, handed back to the store's retry policy."""
    replaced_by: str | None = None

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
        max_restarts: How many times in a row a runner slot whose process died is given a replacement
            (a process that lived a minute resets its count). ``0``: never replace.
        restart_backoff: Wait before the first replacement of a slot; doubled for each one in a row (at
            most 30 s).
        in_process_runner: Role ``runner`` with one runner: run it in this process (default; handy under a
            debugger). ``False``: in a child process, supervised and replaced like the others.

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
        main_process: Literal["algorithm"] = "algorithm",
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
        self.restart_policy = RestartPolicy(max_restarts, restart_backoff)
        self.max_restarts = max_restarts
        self.restart_backoff = restart_backoff
        self.in_process_runner = in_process_runner
        self.lost_runners: list[LostRunner] = []
        self.endpoint: str | None = None
        """URL of the store server while :meth:`execute` runs (managed store)."""

    # -- entry point ---------------------------------------------------------------------------

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        self.lost_runners = []
        self.restart_policy = RestartPolicy(self.max_restarts, self.restart_backoff)
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

            def spawn(worker_id: Any, slot: int) -> _Child:
                child = self._start_child(ctx, runner, worker_id, stop_reader, stop_writer, store, slot=slot)
                child.send_endpoint(endpoint)
                return child

            asyncio.run(self._algorithm_with_watch(algorithm, algorithm_store, event, children, spawn))
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
        *,
        slot: int,
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
        return _Child(proc, ready_writer, error_reader, slot=slot, worker_id=worker_id)

    async def _algorithm_with_watch(
        self,
        algorithm: AlgorithmBundle,
        store: LightningStore,
        event: ExecutionEvent,
        children: list[_Child],
        spawn: Callable[[Any, int], _Child],
    ) -> None:
        algorithm_task = asyncio.create_task(algorithm(store, event))
        watch_task = asyncio.create_task(self._watch_runners(children, event, store, spawn))
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

    async def _watch_runners(
        self,
        children: list[_Child],
        event: ExecutionEvent,
        store: LightningStore,
        spawn: Callable[[Any, int], _Child],
    ) -> None:
        """Return never; replace lost runners; raise :class:`StrategyError` when a runner crashes with an
        exception or no runner is left (and none will be started)."""
        if not children:
            await asyncio.Event().wait()
        loop = asyncio.get_running_loop()
        exited: asyncio.Queue[_Child | None] = asyncio.Queue()  # None: a replacement failed to start
        watched: list[_Child] = []
        pending: set[asyncio.Task[None]] = set()
        next_id = len(children)

        def watch(child: _Child) -> None:
            watched.append(child)
            loop.add_reader(child.proc.sentinel, _on_exit, loop, child, exited)

        async def replace_later(lost: LostRunner, slot: int, delay: float, worker_id: int) -> None:
            await asyncio.sleep(delay)
            if event.is_set():
                return
            try:
                child = spawn(worker_id, slot)
            except Exception:
                logger.exception("could not start a replacement for %s", lost.name)
                exited.put_nowait(None)  # counts as one more runner gone
                return
            children.append(child)
            lost.replaced_by = child.proc.name
            logger.warning("started %s (pid %s) in place of %s", child.proc.name, child.proc.pid, lost.name)
            watch(child)

        for child in children:
            watch(child)
        try:
            alive = len(children)
            while True:
                gone = await exited.get()
                alive -= 1
                if gone is None:
                    if alive == 0 and not event.is_set():
                        raise StrategyError("no runner process is left: the last replacement failed to start")
                    continue
                child = gone
                proc = child.proc
                proc.join(1.0)
                code = proc.exitcode
                if event.is_set():
                    continue
                if code == 0:
                    logger.info("%s finished", proc.name)
                elif code is not None and code > 0 and child.has_report():
                    raise StrategyError(
                        f"{proc.name} crashed ({_describe_exit(code)}):\n{child.error_report()}"
                    )
                else:
                    lost = await self._on_lost(child, store)
                    delay = self.restart_policy.delay_for(child.slot, time.monotonic() - child.started)
                    if delay is None:
                        logger.error(
                            "runner slot %d lost %d processes in a row; not replacing %s",
                            child.slot,
                            self.restart_policy.restarts(child.slot) + 1,
                            proc.name,
                        )
                    else:
                        logger.warning("replacing %s in %.1fs", proc.name, delay)
                        task = asyncio.create_task(replace_later(lost, child.slot, delay, next_id))
                        next_id += 1
                        pending.add(task)
                        task.add_done_callback(pending.discard)
                        alive += 1  # counted from now: its replacement is on its way
                if alive == 0:
                    raise StrategyError(
                        "every runner process has exited while the algorithm is still running "
                        f"(restarts per slot: at most {self.max_restarts} in a row): "
                        + "; ".join(f"{c.proc.name} {_describe_exit(c.proc.exitcode)}" for c in children)
                    )
        finally:
            for task in pending:
                task.cancel()
            for child in watched:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(child.proc.sentinel)

    async def _on_lost(self, child: _Child, store: LightningStore | None) -> LostRunner:
        """Record a lost runner and hand its attempts back to the store's retry policy."""
        proc = child.proc
        worker = runner_worker_name(child.worker_id)
        lost = LostRunner(proc.name or "runner", proc.pid, proc.exitcode or 0, worker_id=worker)
        self.lost_runners.append(lost)
        logger.error("Runner %s; its attempts go back to the store's retry policy", lost)
        if store is not None:
            try:
                lost.released = await release_attempts_of(store, worker, f"runner process {lost}")
            except Exception as exc:
                logger.warning(
                    "could not release the attempts of %s (%s); the store's watchdog will find them",
                    worker,
                    exc,
                )
        return lost

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
        reports: dict[str, str] = {}
        try:
            if self.n_runners == 1 and self.in_process_runner:
                _run_runner_here(runner, f"{prefix}:0", event, endpoint, self.token, store)
                return
            if self._preload_in_parent():
                _preload_for_children()

            def spawn(index: int, slot: int) -> _Child:
                child = self._start_child(
                    ctx, runner, f"{prefix}:{index}", stop_reader, stop_writer, store, slot=slot
                )
                child.send_endpoint(endpoint)
                return child

            for i in range(self.n_runners):
                children.append(spawn(i, i))
            self._supervise_runners(children, event, spawn, endpoint, store, crashed)
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
            self._shutdown(children)
            stop_reader.close()
        if crashed:
            raise StrategyError(
                "runner processes failed: " + "; ".join(f"{name}: {text}" for name, text in reports.items())
            )

    def _supervise_runners(
        self,
        children: list[_Child],
        event: ParentStopEvent,
        spawn: Callable[[int, int], _Child],
        endpoint: str,
        store: LightningStore,
        crashed: list[_Child],
    ) -> None:
        """Role runner: wait until stopped, replacing lost runner processes; return when none is left."""
        handled: set[int] = set()
        due: list[tuple[float, int, LostRunner]] = []  # (when, slot, the runner it replaces)
        next_index = len(children)
        while not event.is_set():
            now = time.monotonic()
            for entry in [d for d in due if d[0] <= now]:
                due.remove(entry)
                child = spawn(next_index, entry[1])
                next_index += 1
                entry[2].replaced_by = child.proc.name
                children.append(child)
                logger.warning(
                    "started %s (pid %s) in place of %s", child.proc.name, child.proc.pid, entry[2].name
                )
            running = [c.proc.sentinel for c in children if c.proc.exitcode is None]
            if not running and not due:
                break
            wait = 0.5 if not due else max(0.0, min(0.5, min(d[0] for d in due) - time.monotonic()))
            if running:
                multiprocessing.connection.wait(running, timeout=wait)
            else:
                time.sleep(wait)
            for child in children:
                code = child.proc.exitcode
                if code is None or id(child) in handled or event.is_set():
                    continue
                handled.add(id(child))
                if code == 0:
                    logger.info("%s finished", child.proc.name)
                elif code > 0 and child.has_report():
                    logger.error("%s crashed:\n%s", child.proc.name, child.error_report())
                    crashed.append(child)
                else:
                    lost = self._on_lost_sync(child, endpoint, store)
                    delay = self.restart_policy.delay_for(child.slot, time.monotonic() - child.started)
                    if delay is None:
                        logger.error(
                            "runner slot %d used up its restarts; not replacing %s", child.slot, lost.name
                        )
                    else:
                        logger.warning("replacing %s in %.1fs", lost.name, delay)
                        due.append((time.monotonic() + delay, child.slot, lost))

    def _on_lost_sync(self, child: _Child, endpoint: str, store: LightningStore) -> LostRunner:
        """:meth:`_on_lost` from the role-runner supervisor (no event loop of its own)."""

        async def release() -> LostRunner:
            if not endpoint:
                return await self._on_lost(child, store)
            from agl.store.client import LightningStoreClient

            client = LightningStoreClient(endpoint, token=self.token)
            try:
                return await asyncio.wait_for(self._on_lost(child, client), timeout=30.0)
            finally:
                await client.close()

        try:
            return asyncio.run(release())
        except Exception as exc:  # e.g. the store unreachable: its watchdog will find the attempts
            logger.warning("could not release the attempts of %s: %s", child.proc.name, exc)
            if self.lost_runners and self.lost_runners[-1].pid == child.proc.pid:
                return self.lost_runners[-1]
            lost = LostRunner(str(child.proc.name), child.proc.pid, child.proc.exitcode or 0)
            self.lost_runners.append(lost)
            return lost


class _Child:
    """A runner process and the pipes to it."""

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
        self.worker_id = worker_id
        self.started = time.monotonic()
        self._ready = ready
        self._errors = errors
        self._report: str | None = None
        self._reported = False

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
            self._reported = bool(texts)
            self._report = "\n".join(texts) or "no traceback was reported"
        return self._report

    def has_report(self) -> bool:
        """Whether the process reported an exception before it exited (a crash, not a lost runner)."""
        self.error_report()
        return self._reported

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


def _on_exit(loop: asyncio.AbstractEventLoop, child: _Child, exited: asyncio.Queue[_Child | None]) -> None:
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
        else:
            await store.release_loop_resources()  # the store outlives this loop, its connections do not


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
