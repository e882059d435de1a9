"""What a strategy does about a runner process that died: give its attempts back and start a replacement.

A runner process that dies without reporting an exception (a signal, the OOM killer, ``os._exit`` in an
agent or a native library) is a *lost runner*. Its attempts are handed back to the store's retry policy at
once (marked ``unresponsive``, as the watchdog would mark them later), and a replacement is started after
a backoff, a bounded number of times per runner slot (:class:`RestartPolicy`). :class:`RunnerSupervisor`
does this for the client-server strategy, on the algorithm side (:meth:`RunnerSupervisor.watch`, in the
event loop) and under role ``runner`` (:meth:`RunnerSupervisor.supervise`, blocking).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing.connection
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agl.types.timeouts import wait_within

from .._bounds import check_at_least
from ._processes import RunnerProcess, describe_exit
from .base import StrategyError

if TYPE_CHECKING:
    from agl.store import LightningStore

    from ..events import ExecutionEvent

__all__ = ["LostRunner", "RestartPolicy", "RunnerSupervisor", "release_attempts_of", "runner_worker_name"]

logger = logging.getLogger(__name__)


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
    released: list[str] = field(default_factory=list[str])
    """Rollouts whose attempt it held, handed back to the store's retry policy."""
    replaced_by: str | None = None

    def __str__(self) -> str:
        return f"{self.name} (pid {self.pid}) {describe_exit(self.exitcode)}"


def runner_worker_name(worker_id: Any) -> str:
    """The worker id a runner started with ``worker_id`` uses with the store (``LitAgentRunner`` convention)."""
    return f"Worker-{worker_id}"


class RestartPolicy:
    """How often and how soon a runner slot whose process died gets a replacement.

    Each slot may be replaced ``max_restarts`` times in a row; a process that lived ``healthy_after``
    seconds resets its slot's count. The n-th replacement in a row waits ``backoff * 2**(n-1)`` seconds
    (at most ``max_backoff``).
    """

    def __init__(
        self, max_restarts: int, backoff: float, *, max_backoff: float = 30.0, healthy_after: float = 60.0
    ) -> None:
        check_at_least("max_restarts", max_restarts, 0)
        check_at_least("restart_backoff", backoff, 0)
        self.max_restarts = max_restarts
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.healthy_after = healthy_after
        self._in_a_row: dict[int, int] = {}

    def delay_for(self, slot: int, lived: float) -> float | None:
        """Seconds to wait before replacing the process of ``slot`` that lived ``lived`` seconds; ``None``:
        the slot used up its restarts."""
        if lived >= self.healthy_after:
            self._in_a_row[slot] = 0
        done = self._in_a_row.get(slot, 0)
        if done >= self.max_restarts:
            return None
        self._in_a_row[slot] = done + 1
        return min(self.max_backoff, self.backoff * 2**done)

    def restarts(self, slot: int) -> int:
        """Replacements of ``slot`` in a row so far."""
        return self._in_a_row.get(slot, 0)


async def release_attempts_of(store: LightningStore, worker: str, reason: str) -> list[str]:
    """Mark the live attempts of ``worker`` (a dead runner) ``unresponsive``; the store then retries or fails
    their rollouts by their config. Returns the rollout ids whose attempt was released."""
    released: list[str] = []
    live = await store.query_rollouts(status_in=["preparing", "running"])
    for rollout in live:
        attempt = getattr(rollout, "attempt", None)
        if attempt is None or attempt.worker_id != worker or attempt.status not in ("preparing", "running"):
            continue
        metadata = dict(attempt.metadata or {})
        metadata["error"] = {"type": "LostRunner", "message": reason, "traceback": ""}
        await store.update_attempt(
            rollout.rollout_id, attempt.attempt_id, status="unresponsive", metadata=metadata
        )
        released.append(rollout.rollout_id)
    if released:
        logger.warning(
            "released %d attempt(s) of %s to the retry policy: %s", len(released), worker, released
        )
    return released


def _on_exit(
    loop: asyncio.AbstractEventLoop, child: RunnerProcess, exited: asyncio.Queue[RunnerProcess | None]
) -> None:
    with contextlib.suppress(ValueError, OSError):
        loop.remove_reader(child.proc.sentinel)
    exited.put_nowait(child)


class RunnerSupervisor:
    """Watches the runner processes of one run: a crash (an exception reported) fails the run; a lost
    runner is recorded in ``lost_runners``, its attempts are released and its slot gets a replacement
    (by ``policy``).

    Args:
        policy: When a slot gets a replacement.
        lost_runners: Where lost runners are recorded (the strategy's public list).
        token: Bearer token of the store server (to release attempts from the role-runner side).
    """

    def __init__(self, policy: RestartPolicy, lost_runners: list[LostRunner], token: str | None) -> None:
        self.policy = policy
        self.lost_runners = lost_runners
        self.token = token

    async def watch(
        self,
        children: list[RunnerProcess],
        event: ExecutionEvent,
        store: LightningStore,
        spawn: Callable[[Any, int], RunnerProcess],
    ) -> None:
        """The algorithm side: never return; replace lost runners; raise :class:`StrategyError` when a
        runner crashes with an exception or no runner is left (and none will be started)."""
        if not children:
            await asyncio.Event().wait()
        loop = asyncio.get_running_loop()
        exited: asyncio.Queue[RunnerProcess | None] = asyncio.Queue()  # None: a replacement failed to start
        watched: list[RunnerProcess] = []
        pending: set[asyncio.Task[None]] = set()
        next_id = len(children)

        def watch(child: RunnerProcess) -> None:
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
                child.proc.join(1.0)
                if event.is_set():
                    continue
                replacement = await self._after_exit(child, store)
                if replacement is not None:
                    lost, delay = replacement
                    task = asyncio.create_task(replace_later(lost, child.slot, delay, next_id))
                    next_id += 1
                    pending.add(task)
                    task.add_done_callback(pending.discard)
                    alive += 1  # counted from now: its replacement is on its way
                if alive == 0:
                    raise StrategyError(
                        "every runner process has exited while the algorithm is still running "
                        f"(restarts per slot: at most {self.policy.max_restarts} in a row): "
                        + "; ".join(f"{c.proc.name} {describe_exit(c.proc.exitcode)}" for c in children)
                    )
        finally:
            for task in pending:
                task.cancel()
            for child in watched:
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_reader(child.proc.sentinel)

    async def _after_exit(
        self, child: RunnerProcess, store: LightningStore
    ) -> tuple[LostRunner, float] | None:
        """What an exited runner leaves to do: ``(lost, delay)`` when a replacement is due after ``delay``
        seconds; ``None`` when it finished, or its slot restarted too often. A crash with a report raises."""
        proc = child.proc
        code = proc.exitcode
        if code == 0:
            logger.info("%s finished", proc.name)
            return None
        if code is not None and code > 0 and child.has_report():
            raise StrategyError(f"{proc.name} crashed ({describe_exit(code)}):\n{child.error_report()}")
        lost = await self.on_lost(child, store)
        delay = self.policy.delay_for(child.slot, time.monotonic() - child.started)
        if delay is None:
            logger.error(
                "runner slot %d lost %d processes in a row; not replacing %s",
                child.slot,
                self.policy.restarts(child.slot) + 1,
                proc.name,
            )
            return None
        logger.warning("replacing %s in %.1fs", proc.name, delay)
        return lost, delay

    async def on_lost(self, child: RunnerProcess, store: LightningStore | None) -> LostRunner:
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

    def supervise(
        self,
        children: list[RunnerProcess],
        event: ExecutionEvent,
        spawn: Callable[[int, int], RunnerProcess],
        endpoint: str,
        store: LightningStore,
        crashed: list[RunnerProcess],
    ) -> None:
        """Role runner: wait until stopped, replacing lost runner processes; return when none is left.
        Processes that crashed with an exception are appended to ``crashed``."""
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
            # One look at each process decides both what to handle and whether any is left: a process that
            # exits between two looks is then handled before the supervisor can conclude none is running.
            running = [c for c in children if c.proc.exitcode is None]
            if event.is_set():  # the processes exit because they were asked to
                break
            alive = {id(c) for c in running}
            for child in children:
                if id(child) not in alive and id(child) not in handled:
                    handled.add(id(child))
                    self._handle_exit_sync(child, endpoint, store, crashed, due)
            if not running and not due:
                break
            wait = 0.5 if not due else max(0.0, min(0.5, min(d[0] for d in due) - time.monotonic()))
            if running:
                ready = multiprocessing.connection.wait([c.proc.sentinel for c in running], timeout=wait)
                for child in running:
                    if child.proc.sentinel in ready:
                        child.proc.join(1.0)  # its sentinel closes a moment before it can be reaped
            else:
                time.sleep(wait)

    def _handle_exit_sync(
        self,
        child: RunnerProcess,
        endpoint: str,
        store: LightningStore,
        crashed: list[RunnerProcess],
        due: list[tuple[float, int, LostRunner]],
    ) -> None:
        """Role runner: a process that finished, crashed (appended to ``crashed``) or was lost (its
        replacement goes into ``due``, unless its slot used up its restarts)."""
        code = child.proc.exitcode
        if code == 0:
            logger.info("%s finished", child.proc.name)
        elif code is not None and code > 0 and child.has_report():
            logger.error("%s crashed:\n%s", child.proc.name, child.error_report())
            crashed.append(child)
        else:
            lost = self._on_lost_sync(child, endpoint, store)
            delay = self.policy.delay_for(child.slot, time.monotonic() - child.started)
            if delay is None:
                logger.error("runner slot %d used up its restarts; not replacing %s", child.slot, lost.name)
            else:
                logger.warning("replacing %s in %.1fs", lost.name, delay)
                due.append((time.monotonic() + delay, child.slot, lost))

    def _on_lost_sync(self, child: RunnerProcess, endpoint: str, store: LightningStore) -> LostRunner:
        """:meth:`on_lost` from the role-runner supervisor (no event loop of its own)."""

        async def release() -> LostRunner:
            if not endpoint:
                return await self.on_lost(child, store)
            from agl.store.client import LightningStoreClient

            client = LightningStoreClient(endpoint, token=self.token)
            try:
                return await wait_within(self.on_lost(child, client), 30.0)
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
