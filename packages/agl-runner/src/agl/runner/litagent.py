"""``LitAgent``: the base class of user agents."""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeAlias, TypeVar

from agl.types import NamedResources, Rollout, Span, SpanCoreFields
from agl.types.weak import deref

if TYPE_CHECKING:
    from agl.tracer import Tracer
    from opentelemetry.sdk.trace import ReadableSpan

    from .runner import Runner
    from .trainer import Trainer

__all__ = ["LitAgent", "RolloutRawResult"]

T = TypeVar("T")

RolloutRawResult: TypeAlias = (
    "float | int | bool | Sequence[ReadableSpan] | Sequence[Span] | Sequence[SpanCoreFields] | None"
)
"""What a rollout method may return: ``None`` (the tracer's spans count), a final reward, or the spans."""


def _deref(ref: weakref.ReferenceType[Any] | None, what: str) -> Any:
    return deref(
        ref,
        unset=f"The {what} of this agent is not set",
        gone=f"The {what} of this agent was garbage-collected",
    )


class LitAgent(Generic[T]):
    """An agent that a runner executes on tasks of type ``T``.

    Implement :meth:`rollout` (sync) or :meth:`rollout_async` (async); override ``training_*`` or
    ``validation_*`` to behave differently per mode. Each receives the task, the named resources (LLM
    endpoints, prompt templates) and the rollout being executed (an ``AttemptedRollout`` at run time).
    """

    def __init__(self, *, trained_agents: str | None = None) -> None:
        if trained_agents is not None:
            warnings.warn(
                "LitAgent(trained_agents=...) is deprecated; select agents with the adapter's agent_match",
                DeprecationWarning,
                stacklevel=2,
            )
        self.trained_agents = trained_agents
        self._trainer_ref: weakref.ReferenceType[Any] | None = None
        self._runner_ref: weakref.ReferenceType[Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Weak references do not pickle; a runner process re-binds them.
        state = self.__dict__.copy()
        state["_trainer_ref"] = None
        state["_runner_ref"] = None
        return state

    # -- references ----------------------------------------------------------------------------

    def set_trainer(self, trainer: Trainer) -> None:
        """Called by the trainer before the run (held weakly: the agent does not keep the trainer alive)."""
        self._trainer_ref = weakref.ref(trainer)

    def get_trainer(self) -> Trainer:
        """The trainer running this agent; ``ValueError`` when there is none (or it is gone)."""
        return _deref(self._trainer_ref, "trainer")

    @property
    def trainer(self) -> Trainer:
        """:meth:`get_trainer` as a property."""
        return self.get_trainer()

    def set_runner(self, runner: Runner[T]) -> None:
        """Called by the runner in its ``init`` (held weakly)."""
        self._runner_ref = weakref.ref(runner)

    def get_runner(self) -> Runner[T]:
        """The runner executing this agent; ``ValueError`` when there is none (or it is gone)."""
        return _deref(self._runner_ref, "runner")

    @property
    def runner(self) -> Runner[T]:
        """:meth:`get_runner` as a property."""
        return self.get_runner()

    @property
    def tracer(self) -> Tracer:
        """The runner's tracer if the runner has one, else the trainer's."""
        if self._runner_ref is not None and (runner := self._runner_ref()) is not None:
            tracer = getattr(runner, "tracer", None)
            if tracer is not None:
                return tracer
        return self.get_trainer().tracer

    # -- rollouts ------------------------------------------------------------------------------

    def is_async(self) -> bool:
        """True when the subclass implements any of the ``*_async`` rollout methods."""
        cls = type(self)
        return any(
            getattr(cls, name) is not getattr(LitAgent, name)
            for name in ("rollout_async", "training_rollout_async", "validation_rollout_async")
        )

    def rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task (sync agents implement this)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither rollout() nor rollout_async()")

    async def rollout_async(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """Run the agent on one task (async agents implement this)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither rollout() nor rollout_async()")

    def training_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """A rollout in ``train`` mode; defaults to :meth:`rollout` (override to train differently)."""
        return self.rollout(task, resources, rollout)

    def validation_rollout(self, task: T, resources: NamedResources, rollout: Rollout) -> RolloutRawResult:
        """A rollout in ``val``/``test`` mode; defaults to :meth:`rollout`."""
        return self.rollout(task, resources, rollout)

    async def training_rollout_async(
        self, task: T, resources: NamedResources, rollout: Rollout
    ) -> RolloutRawResult:
        """Async :meth:`training_rollout`; defaults to :meth:`rollout_async`."""
        return await self.rollout_async(task, resources, rollout)

    async def validation_rollout_async(
        self, task: T, resources: NamedResources, rollout: Rollout
    ) -> RolloutRawResult:
        """Async :meth:`validation_rollout`; defaults to :meth:`rollout_async`."""
        return await self.rollout_async(task, resources, rollout)
