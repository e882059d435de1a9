"""Live progress of a training run: a progress bar in a terminal, periodic log lines otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

from agl.tracer import recorded_final_reward
from agl.types import FINISHED_STATUSES, QUEUED_STATUSES, StatusCounts, Unset

if TYPE_CHECKING:
    from agl.store import LightningStore

__all__ = ["ProgressMonitor", "ProgressSnapshot"]

logger = logging.getLogger(__name__)

_PAGE = 1000


@dataclass
class ProgressSnapshot(StatusCounts):
    """Counts of the rollouts seen in the store so far."""

    total: int = 0
    queued: int = 0
    running: int = 0
    by_status: dict[str, int] = field(default_factory=dict[str, int])
    reward_sum: float = 0.0
    reward_count: int = 0

    @property
    def done(self) -> int:
        """Rollouts that have finished, whatever their final status."""
        return sum(self.by_status.values())

    @property
    def mean_reward(self) -> float | None:
        """Mean final reward of the rollouts that recorded one (``None``: none did yet)."""
        return self.reward_sum / self.reward_count if self.reward_count else None

    def describe(self) -> str:
        """One line for a log: ``12/40 rollouts done: 11 succeeded, 1 failed, …; mean reward 0.5000``."""
        mean = "n/a" if self.mean_reward is None else f"{self.mean_reward:.4f}"
        return (
            f"{self.done}/{self.total} rollouts done: {self.succeeded} succeeded, {self.failed} failed, "
            f"{self.queued} queued, {self.running} running; mean reward {mean}"
        )


class ProgressMonitor:
    """Follows the rollouts in ``store`` and shows how many are done, succeeded, failed, and the mean reward.

    The reward of a rollout is what its runner recorded in the attempt's metadata (``final_reward``).
    Rollouts are scanned in creation order from the oldest unfinished one, so a tick costs little once the
    early rollouts are done.

    Args:
        tty: Force the bar on (``True``) or off (``False``); ``None`` shows it when ``stream`` is a terminal.
        refresh_interval: Seconds between scans while the bar is shown.
        log_interval: Seconds between log lines when there is no bar.
    """

    def __init__(
        self,
        store: LightningStore,
        *,
        tty: bool | None = None,
        refresh_interval: float = 0.5,
        log_interval: float = 10.0,
        stream: TextIO | None = None,
        description: str = "rollouts",
    ) -> None:
        self.store = store
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.refresh_interval = refresh_interval
        self.log_interval = log_interval
        self.description = description
        self.snapshot = ProgressSnapshot()
        self._low = 0
        self._seen: set[str] = set()

    async def scan(self) -> ProgressSnapshot:
        """Read the store once and update :attr:`snapshot`."""
        snap = self.snapshot
        queued = running = 0
        offset = self._low
        prefix_done = True
        total = snap.total
        while True:
            page = await self.store.query_rollouts(limit=_PAGE, offset=offset)
            total = page.total
            for rollout in page:
                status = rollout.status
                if status in FINISHED_STATUSES:
                    if prefix_done:
                        self._low += 1
                    if rollout.rollout_id in self._seen:
                        continue
                    self._seen.add(rollout.rollout_id)
                    snap.by_status[status] = snap.by_status.get(status, 0) + 1
                    reward = _reward_of(rollout)
                    if reward is not None:
                        snap.reward_sum += reward
                        snap.reward_count += 1
                else:
                    prefix_done = False
                    if status in QUEUED_STATUSES:
                        queued += 1
                    else:
                        running += 1
            offset += len(page)
            if len(page) < _PAGE or offset >= page.total:
                break
        # Ids below the watermark will not be looked at again.
        snap.total, snap.queued, snap.running = total, queued, running
        return snap

    async def run(self) -> None:
        """Scan and display until cancelled; the final state is shown (and logged) on the way out."""
        if self.tty:
            await self._run_bar()
        else:
            await self._run_logs()

    async def _safe_scan(self) -> None:
        try:
            await self.scan()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.debug("progress scan failed: %s", exc)

    def _line(self, text: str) -> None:
        """Log the line; when logging is not set up for it, write it to the stream so it is seen anyway."""
        if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(text)
        else:
            print(f"[agl] {text}", file=self.stream, flush=True)

    async def _run_logs(self) -> None:
        started = time.monotonic()
        try:
            while True:
                await asyncio.sleep(self.log_interval)
                await self._safe_scan()
                self._line(f"[{time.monotonic() - started:.0f}s] {self.snapshot.describe()}")
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.scan())
            self._line(f"{self.description} finished: {self.snapshot.describe()}")

    async def _run_bar(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            console=Console(file=self.stream, force_terminal=True),
            refresh_per_second=4,
        )
        task = progress.add_task(self.description, total=None, stats="")

        def show() -> None:
            s = self.snapshot
            mean = "n/a" if s.mean_reward is None else f"{s.mean_reward:.3f}"
            progress.update(
                task,
                completed=s.done,
                total=max(s.total, 1),
                stats=f"ok {s.succeeded}  failed {s.failed}  running {s.running}  queued {s.queued}  reward {mean}",
            )

        progress.start()
        try:
            while True:
                await self._safe_scan()
                show()
                await asyncio.sleep(self.refresh_interval)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.shield(self.scan())
            show()
            progress.stop()
            logger.info("Final: %s", self.snapshot.describe())


def _reward_of(rollout: Any) -> float | None:
    reward = recorded_final_reward(rollout)
    return None if isinstance(reward, Unset) else reward
