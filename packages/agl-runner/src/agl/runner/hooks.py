"""``Hook``: callbacks around each rollout a runner executes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agl.types import ParallelWorkerBase, Rollout, Span

if TYPE_CHECKING:
    from agl.tracer import Tracer

    from .litagent import LitAgent
    from .runner import Runner

__all__ = ["Hook"]


class Hook(ParallelWorkerBase):
    """Override the callbacks you need; all are ``async``, keyword-only and no-ops by default.

    Order for one rollout: ``on_rollout_start`` → ``on_trace_start`` → (agent runs) → ``on_trace_end`` →
    ``on_rollout_end``. An exception in a hook is logged and never stops the rollout.
    """

    async def on_rollout_start(self, *, agent: LitAgent[Any], runner: Runner[Any], rollout: Rollout) -> None:
        """Before the attempt begins (before tracing)."""

    async def on_trace_start(
        self, *, agent: LitAgent[Any], runner: Runner[Any], tracer: Tracer, rollout: Rollout
    ) -> None:
        """Right after the tracer's context is entered."""

    async def on_trace_end(
        self, *, agent: LitAgent[Any], runner: Runner[Any], tracer: Tracer, rollout: Rollout
    ) -> None:
        """After the agent returned (or raised) and its trace is finished: ``tracer.get_last_trace()`` gives
        this rollout's spans."""

    async def on_rollout_end(
        self, *, agent: LitAgent[Any], runner: Runner[Any], rollout: Rollout, spans: Sequence[Span]
    ) -> None:
        """After the attempt, with the spans recorded for it, before its outcome is reported to the store."""
