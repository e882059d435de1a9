"""The store's cost inside the calc training app: store time per training step, calls and commits per step.

Runs ``apps/train_calc_x.py`` with the given arguments in this process, with every call to the store timed,
and prints per step: the step's seconds, the store's seconds (the CPU time of its calls, in the threads
that made them: waits of long polls such as ``wait_for_rollouts`` or a ``dequeue`` with a timeout, and
waits for the GIL, are not counted), its share of the step, the calls per method and (SQL stores) the commits::

    uv run benchmarks/store_in_app.py --steps 4 --store memory
    uv run benchmarks/store_in_app.py --steps 4                      # the app's default: SQLite in its run dir

A call's time is the thread CPU time of the stretches its coroutine ran between suspensions, so it counts
what the store does in the caller's thread, whichever event loop that is (runners, proxy, algorithm). Groups of
writes that the SQL store commits together run in an event-loop callback of their own; their time
(``Database.flush_seconds``, CPU time too) is added, and so is the CPU time of the work the SQL store
hands to its thread pool (snapshot reads; writes that must wait for another thread's lock: the ``pooled``
column counts them).
"""

from __future__ import annotations

import contextvars
import functools
import statistics
import sys
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

_NESTED: contextvars.ContextVar[bool] = contextvars.ContextVar("store_in_app_nested", default=False)


class _Timed:
    """Awaits ``coro`` and reports the seconds it ran between suspensions."""

    def __init__(self, coro: Coroutine[Any, Any, Any], record: Callable[[float], None]) -> None:
        self._coro = coro
        self._record = record

    def __await__(self) -> Generator[Any, Any, Any]:
        inner = self._coro.__await__()
        spent = 0.0
        value: Any = None
        error: BaseException | None = None
        try:
            while True:
                started = time.thread_time()
                try:
                    yielded = inner.throw(error) if error is not None else inner.send(value)
                except StopIteration as stop:
                    return stop.value
                finally:
                    spent += time.thread_time() - started
                try:
                    value, error = (yield yielded), None
                except BaseException as exc:  # thrown into us (cancellation): pass it on
                    value, error = None, exc
        finally:
            self._record(spent)


class StoreTimer:
    """Times the public coroutine methods of one store object (nested calls count once, in the outer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: list[tuple[float, str, float]] = []  # (start, method, seconds)
        self.store: Any = None

    def wrap(self, store: Any) -> Any:
        self.store = store
        for name in dir(type(store)):
            if name.startswith("_") or name in {"close", "release_loop_resources"}:
                continue
            method = getattr(store, name, None)
            if callable(method) and _is_coroutine_function(getattr(type(store), name, None)):
                setattr(store, name, self._timed(name, method))
        return store

    def _timed(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(method)
        async def call(*args: Any, **kwargs: Any) -> Any:
            if _NESTED.get():
                return await method(*args, **kwargs)
            token = _NESTED.set(True)
            start = time.perf_counter()
            try:
                return await _Timed(method(*args, **kwargs), lambda s: self._add(start, name, s))
            finally:
                _NESTED.reset(token)

        return call

    def _add(self, start: float, name: str, seconds: float) -> None:
        with self._lock:
            self.calls.append((start, name, seconds))

    def counters(self) -> dict[str, float]:
        """The SQL store's own counters (zeros for other stores)."""
        db = getattr(self.store, "_db", None)
        names = ("flush_seconds", "pool_seconds", "commits", "pooled")
        return {name: float(getattr(db, name, 0)) for name in names}


def _is_coroutine_function(fn: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(fn)


def main(argv: list[str]) -> int:
    import agl.store
    from agl.algorithms.metrics import AlgorithmMetrics

    timer = StoreTimer()
    opened = agl.store.open_store

    def open_store(*args: Any, **kwargs: Any) -> Any:
        return timer.wrap(opened(*args, **kwargs))

    agl.store.open_store = open_store  # type: ignore[assignment]

    marks: list[tuple[float, str, dict[str, Any], dict[str, float]]] = []  # (time, kind, figures, counters)
    log = AlgorithmMetrics.log

    def logged(self: AlgorithmMetrics, kind: str, figures: Any) -> None:
        marks.append((time.perf_counter(), kind, dict(figures), timer.counters()))
        log(self, kind, figures)

    AlgorithmMetrics.log = logged  # type: ignore[method-assign]

    import train_calc_x

    code = train_calc_x.main(argv)
    report(timer, marks)
    return code


def report(timer: StoreTimer, marks: list[tuple[float, str, dict[str, Any], dict[str, float]]]) -> None:
    print(f"\nstore cost per training step ({type(timer.store).__name__}):")
    print(f"  {'step':>4}{'step s':>9}{'store s':>9}{'share':>8}{'commits':>9}{'pooled':>8}  calls")
    shares: list[float] = []
    per_step: list[float] = []
    previous = marks[0] if marks else None
    for mark in marks[1:]:
        at, kind, figures, after = mark
        assert previous is not None
        begin, _, _, before = previous
        previous = mark
        if kind != "train":
            continue
        window = [(name, s) for start, name, s in timer.calls if begin < start <= at]
        delta = {name: after[name] - before[name] for name in after}
        store_s = sum(s for _, s in window) + delta["flush_seconds"] + delta["pool_seconds"]
        step_s = float(figures.get("step_s", at - begin))
        counts = Counter(name for name, _ in window)
        calls = ", ".join(f"{name} {n}" for name, n in counts.most_common())
        shares.append(store_s / step_s)
        per_step.append(store_s)
        print(
            f"  {figures.get('step', '?'):>4}{step_s:>9.2f}{store_s:>9.3f}{store_s / step_s:>8.1%}"
            f"{delta['commits']:>9.0f}{delta['pooled']:>8.0f}  {calls}"
        )
    if shares:
        print(
            f"  median: store {statistics.median(per_step):.3f} s a step, "
            f"{statistics.median(shares):.1%} of the step"
        )
    totals: dict[str, float] = defaultdict(float)
    for _, name, s in timer.calls:
        totals[name] += s
    print("  whole run, seconds by method: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(totals.items())))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
