"""``shared_memory`` (alias ``shm``): the algorithm and the runners as threads of one process, sharing one store
object."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import TYPE_CHECKING, Any, Literal

from agl.store import as_thread_safe
from agl.types.env import resolve_bool_env_var

from .._bounds import check_at_least
from .base import (
    AlgorithmBundle,
    ExecutionStrategy,
    RunnerBundle,
    StrategyError,
    join_threads,
    run_until_stopped,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine

    from agl.store import LightningStore

__all__ = ["SharedMemoryExecutionStrategy"]

logger = logging.getLogger(__name__)


class SharedMemoryExecutionStrategy(ExecutionStrategy):
    """Run the algorithm and ``n_runners`` runners as threads (each with its own event loop) in this process.

    Args:
        n_runners: Runner threads.
        main_thread: What runs on the calling thread: the ``algorithm`` (default) or, with one runner, the
            ``runner`` (handy under a debugger).
        join_timeout: Longest wait for the threads at the end, after which stragglers are logged.
        graceful_delay: After the stop request, a runner gets this long to return before it is cancelled.
        managed_store: Wrap a store that is not thread-safe so every call runs on one private loop.
            ``None`` reads ``AGL_MANAGED_STORE`` (default true).

    The algorithm finishing stops the runners. A runner raising stops everything; the error is raised
    from :meth:`execute` after the threads were joined. Ctrl+C stops everything and returns.
    """

    alias = "shm"

    def __init__(
        self,
        n_runners: int = 1,
        main_thread: Literal["algorithm", "runner"] = "algorithm",
        join_timeout: float = 15.0,
        graceful_delay: float = 5.0,
        managed_store: bool | None = None,
    ) -> None:
        check_at_least("n_runners", n_runners, 1)
        if main_thread not in ("algorithm", "runner"):
            raise ValueError(f"main_thread must be 'algorithm' or 'runner', got {main_thread!r}")
        if main_thread == "runner" and n_runners != 1:
            raise ValueError(
                "main_thread='runner' needs n_runners=1 (only one runner can own the main thread)"
            )
        self.n_runners = n_runners
        self.main_thread = main_thread
        self.join_timeout = join_timeout
        self.graceful_delay = graceful_delay
        self.managed_store = resolve_bool_env_var("AGL_MANAGED_STORE", managed_store, fallback=True)

    def execute(self, algorithm: AlgorithmBundle, runner: RunnerBundle, store: LightningStore) -> None:
        shared = as_thread_safe(store) if self.managed_store else store
        event = threading.Event()
        errors: list[tuple[str, BaseException]] = []

        async def releasing(work: Coroutine[Any, Any, object]) -> None:
            try:
                await work
            finally:
                if shared is store:  # used from every thread's loop: each loop closes its own connections
                    await store.release_loop_resources()

        def run_runner(worker_id: int) -> None:
            try:
                asyncio.run(
                    releasing(
                        run_until_stopped(
                            lambda: runner(shared, worker_id, event), event, grace=self.graceful_delay
                        )
                    )
                )
            except KeyboardInterrupt:
                logger.warning("Interrupted: stopping the algorithm and the runners")
                event.set()
            except BaseException as exc:
                logger.error("runner-%d failed: %r", worker_id, exc)
                errors.append((f"runner-{worker_id}", exc))
                event.set()

        def run_algorithm() -> None:
            try:
                # The algorithm does not watch the event: when a runner fails it is cancelled at once.
                asyncio.run(releasing(run_until_stopped(lambda: algorithm(shared, event), event, grace=0.0)))
            except KeyboardInterrupt:
                logger.warning("Interrupted: stopping the algorithm and the runners")
            except BaseException as exc:
                logger.error("the algorithm failed: %r", exc)
                errors.insert(0, ("algorithm", exc))
            finally:
                event.set()

        threads: list[threading.Thread] = []
        try:
            self._run(threads, run_algorithm, run_runner, errors)
        except KeyboardInterrupt:
            logger.warning("Interrupted: stopping the algorithm and the runners")
        finally:
            event.set()
            stragglers = join_threads(threads, self.join_timeout)
            for thread in stragglers:
                logger.error(
                    "thread %s did not stop within %.1fs; abandoning it", thread.name, self.join_timeout
                )
            if shared is not store:
                asyncio.run(shared.close())
        _raise_first(errors)

    def _run(
        self,
        threads: list[threading.Thread],
        run_algorithm: Callable[[], None],
        run_runner: Callable[[int], None],
        errors: list[tuple[str, BaseException]],
    ) -> None:
        """Run the algorithm and the runners, the one ``main_thread`` names in this thread; the threads started
        are appended to ``threads`` as they start (the caller joins them, whatever happens)."""
        if self.main_thread == "algorithm":
            threads.extend(
                threading.Thread(target=run_runner, args=(i,), name=f"runner-{i}", daemon=True)
                for i in range(self.n_runners)
            )
            for thread in threads:
                thread.start()
            run_algorithm()
            return
        algorithm_thread = threading.Thread(target=run_algorithm, name="algorithm", daemon=True)
        threads.append(algorithm_thread)
        algorithm_thread.start()
        run_runner(0)
        # The runner returned (stopped or out of rollouts): let the algorithm finish on its own.
        while algorithm_thread.is_alive() and not errors:
            algorithm_thread.join(0.1)


def _raise_first(errors: list[tuple[str, BaseException]]) -> None:
    """Raise the first failure: the algorithm's own exception as it is, a runner's as a StrategyError."""
    if errors:
        where, exc = errors[0]
        if where == "algorithm":
            raise exc
        raise StrategyError(f"{where} failed: {type(exc).__name__}: {exc}") from exc
