"""Runners: claim rollouts from the store, run the agent inside a tracing context, report the outcome."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import traceback
from abc import abstractmethod
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from agl.types import (
    AttemptedRollout,
    InvalidRequestError,
    NamedResources,
    ParallelWorkerBase,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    Span,
    TaskInput,
)
from agl.types.semconv import FINAL_REWARD_METADATA_KEY

from ._agent_call import run_sync_agent
from ._bounds import check_at_least
from ._claims import ClaimBudget, Claimed, ClaimGate, claim_loop
from ._heartbeat import RunningAttempts, heartbeat_loop
from ._results import record_returned_reward, rollout_result_to_spans
from .build import takes_keyword
from .errors import AttemptEnded
from .events import ExecutionEvent
from .hooks import Hook
from .litagent import LitAgent, RolloutRawResult

if TYPE_CHECKING:
    from agl.store import LightningStore
    from agl.tracer import Tracer

__all__ = ["LitAgentRunner", "Runner"]

logger = logging.getLogger(__name__)

T = TypeVar("T")


class Runner(ParallelWorkerBase, Generic[T]):
    """A worker that executes an agent on rollouts from a store.

    Lifecycle: :meth:`init` once with the agent, :meth:`init_worker` per worker with the store, then
    :meth:`iter` (until stopped) or :meth:`step` (one task), and the teardowns. :meth:`run_context` does the
    set-up and tear-down around a block.
    """

    @abstractmethod
    def init(self, agent: LitAgent[T], *, hooks: Sequence[Hook] | None = None, **kwargs: Any) -> None: ...

    @abstractmethod
    def init_worker(self, worker_id: int | str, store: LightningStore, **kwargs: Any) -> None: ...

    @abstractmethod
    async def iter(self, *, event: ExecutionEvent | None = None) -> None:
        """Claim and execute rollouts until ``event`` is set (or a rollout limit is reached)."""

    @abstractmethod
    async def step(
        self,
        input: TaskInput,
        *,
        resources: NamedResources | None = None,
        mode: RolloutMode | None = None,
        event: ExecutionEvent | None = None,
    ) -> Rollout:
        """Execute the agent once on ``input`` (the rollout is created directly, not queued)."""

    def run(self, *args: Any, **kwargs: Any) -> None:
        """Not how a runner runs (``RuntimeError``): use :meth:`iter` or :meth:`step`."""
        raise RuntimeError(f"{type(self).__name__}.run() is not how a runner runs; use iter() or step()")

    @contextlib.contextmanager
    def run_context(
        self,
        *,
        agent: LitAgent[T],
        store: LightningStore,
        hooks: Sequence[Hook] | None = None,
        worker_id: int | str | None = None,
    ) -> Generator[Runner[T], None, None]:
        """Set the runner up for ``agent`` and ``store``, yield it, and tear down what was set up.

        Teardown errors are logged, not raised; stages that failed to set up are not torn down.
        """
        wid = 0 if worker_id is None else worker_id
        initialised = worker_initialised = False
        try:
            self.init(agent, hooks=hooks)
            initialised = True
            self.init_worker(wid, store)
            worker_initialised = True
            yield self
        finally:
            if worker_initialised:
                try:
                    self.teardown_worker(wid)
                except Exception:
                    logger.exception("Runner teardown_worker failed")
            if initialised:
                try:
                    self.teardown()
                except Exception:
                    logger.exception("Runner teardown failed")


def _check_number(name: str, value: Any, *, integer: bool = False, optional: bool = False) -> None:
    """Refuse a setting that is not a number (or is NaN) with a clear ``InvalidRequestError``."""
    if value is None and optional:
        return
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or value != value:
        what = "an integer" if integer else "a number of seconds"
        raise InvalidRequestError(f"{name} must be {what}{' or None' if optional else ''}, not {value!r}")


class LitAgentRunner(Runner[T]):
    """The runner for :class:`LitAgent` agents.

    Args:
        tracer: Records the agent's spans into the store (an ``agl.tracer.Tracer``).
        max_rollouts: Stop :meth:`iter` after this many rollouts (``None``: until stopped).
        poll_interval: Longest wait of one dequeue (a long poll: new work is picked up at once; this only
            bounds how long a stop request may go unnoticed while idle).
        heartbeat_interval: Seconds between heartbeats (system snapshot to ``update_worker`` and a liveness
            mark on the current attempts). ``<= 0`` disables them. Each heartbeat also reads what the store
            says of the current attempts: when it has ended one (``timeout``, ``unresponsive``, another
            attempt took over, the rollout was cancelled), the agent's task is cancelled, the attempt's
            metadata gets the reason (``error.type == "AttemptEnded"``) and the slot takes the next rollout.
        interval_jitter: Random ± spread applied to the poll and heartbeat intervals.
        heartbeat_launch_mode: The reference's choice of where heartbeats run (``"thread"`` or ``"asyncio"``);
            accepted for its programs. Here they are tasks of the runner's event loop either way, which sync
            agents do not block (they run in threads, see ``sync_agent_in_thread``).
        heartbeat_include_gpu: Add GPU figures to the heartbeat snapshot (needs ``nvidia-smi``).
        concurrency: Rollouts this runner executes at the same time (each in its own task).
        sync_agent_in_thread: Run a sync agent in a daemon thread, so heartbeats continue and the agent
            may use ``asyncio.run`` itself. ``False`` calls it on the runner's event loop. A thread cannot be
            killed: when its attempt ends the runner stops waiting at once and raises
            ``agl.runner.AgentCancelled`` inside the thread, which stops an agent running Python code at
            its next instruction; an agent blocked in a C call keeps its thread until that call returns.
    """

    def __init__(
        self,
        tracer: Tracer,
        max_rollouts: int | None = None,
        poll_interval: float = 0.5,
        heartbeat_interval: float = 10.0,
        interval_jitter: float = 0.5,
        heartbeat_launch_mode: Literal["thread", "asyncio"] = "thread",
        heartbeat_include_gpu: bool = False,
        concurrency: int = 1,
        sync_agent_in_thread: bool = True,
    ) -> None:
        if heartbeat_launch_mode not in ("thread", "asyncio"):
            raise ValueError(
                f"heartbeat_launch_mode must be 'thread' or 'asyncio', got {heartbeat_launch_mode!r}"
            )
        _check_number("max_rollouts", max_rollouts, integer=True, optional=True)
        _check_number("poll_interval", poll_interval)
        _check_number("heartbeat_interval", heartbeat_interval)
        _check_number("interval_jitter", interval_jitter)
        _check_number("concurrency", concurrency, integer=True)
        check_at_least("max_rollouts", max_rollouts, 1, optional=True)
        check_at_least("poll_interval", poll_interval, 0, exclusive=True)
        check_at_least("interval_jitter", interval_jitter, 0)
        check_at_least("concurrency", concurrency, 1)
        self.tracer = tracer
        # a user's own tracer may keep the reference's trace_context (no hand_over_to): it stores its spans itself
        self._tracer_hands_over = takes_keyword(tracer.trace_context, "hand_over_to")
        self.max_rollouts = max_rollouts
        self.poll_interval = poll_interval
        self.heartbeat_interval = heartbeat_interval
        self.interval_jitter = interval_jitter
        self.heartbeat_include_gpu = heartbeat_include_gpu
        self.concurrency = concurrency
        self.sync_agent_in_thread = sync_agent_in_thread
        self._agent: LitAgent[T] | None = None
        self._hooks: tuple[Hook, ...] = ()
        self._store: LightningStore | None = None
        self.worker_id: int | str | None = None
        self._attempts = RunningAttempts()
        self._processed = 0

    def _hand_over(self, unsent: list[Span]) -> dict[str, Any]:
        """``trace_context``'s ``hand_over_to=unsent`` where the tracer takes it."""
        return {"hand_over_to": unsent} if self._tracer_hands_over else {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_store"] = None
        state["_attempts"] = RunningAttempts(self._attempts.worker_id)
        return state

    # -- lifecycle -----------------------------------------------------------------------------

    def init(self, agent: LitAgent[T], *, hooks: Sequence[Hook] | None = None, **kwargs: Any) -> None:
        self._agent = agent
        self._hooks = tuple(hooks or ())
        agent.set_runner(self)
        self.tracer.init()

    def init_worker(self, worker_id: int | str, store: LightningStore, **kwargs: Any) -> None:
        self.tracer.init_worker(worker_id, store=store)
        if self._agent is not None and (self._agent.is_async() or self.sync_agent_in_thread):
            # The agent never blocks this runner's loop: spans drain on it (one event loop per process).
            set_drain = getattr(self.tracer, "set_drain_on_caller_loop", None)
            if set_drain is not None:
                set_drain(True)
        self.worker_id = worker_id
        self._store = store
        self._attempts.worker_id = self.get_worker_id()

    def teardown_worker(self, worker_id: int | str, *args: Any, **kwargs: Any) -> None:
        self.tracer.teardown_worker(worker_id)
        self.worker_id = None
        self._store = None
        self._attempts.worker_id = self.get_worker_id()

    def teardown(self, *args: Any, **kwargs: Any) -> None:
        self._agent = None
        self._hooks = ()
        self.tracer.teardown()

    def get_agent(self) -> LitAgent[T]:
        """The agent given to :meth:`init`; ``ValueError`` before that."""
        if self._agent is None:
            raise ValueError("The runner has no agent; call init(agent) first")
        return self._agent

    def get_store(self) -> LightningStore:
        """The store given to :meth:`init_worker`; ``ValueError`` before that."""
        if self._store is None:
            raise ValueError("The runner has no store; call init_worker(worker_id, store) first")
        return self._store

    def get_worker_id(self) -> str:
        """``Worker-<n>``, the id this runner uses with the store."""
        return "Worker-Unknown" if self.worker_id is None else f"Worker-{self.worker_id}"

    @property
    def processed(self) -> int:
        """Rollouts executed by :meth:`iter` so far."""
        return self._processed

    # -- the loop ------------------------------------------------------------------------------

    def _jittered(self, interval: float) -> float:
        return max(0.01, interval + random.uniform(-self.interval_jitter, self.interval_jitter))

    async def iter(self, *, event: ExecutionEvent | None = None) -> None:
        store = self.get_store()
        self.get_agent()
        heartbeat = None
        if self.heartbeat_interval > 0 and self.worker_id is not None:
            beats = heartbeat_loop(
                self._attempts,
                store,
                interval=self.heartbeat_interval,
                jitter=self.interval_jitter,
                include_gpu=self.heartbeat_include_gpu,
            )
            heartbeat = asyncio.create_task(beats, name=f"{self.get_worker_id()}-heartbeat")
        self._processed = 0
        budget, gate = ClaimBudget(self.max_rollouts), ClaimGate()
        worker_id = self.get_worker_id()

        def poll_timeout() -> float:
            return self._jittered(self.poll_interval)

        try:
            loops = [
                claim_loop(store, worker_id, event, budget, gate, self._run_claimed, poll_timeout)
                for _ in range(self.concurrency)
            ]
            await asyncio.gather(*loops)
        finally:
            if heartbeat is not None:
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat
        logger.info("%s stopped after %d rollouts", self.get_worker_id(), self._processed)

    async def _run_claimed(
        self, rollout: AttemptedRollout, resources: ResourcesUpdate | None, claim_next: bool
    ) -> Claimed | None:
        following = await self._step_impl(
            rollout, resources=_ClaimedResources(resources), claim_next=claim_next
        )
        self._processed += 1
        if self._processed == 1 or self._processed % 100 == 0:
            logger.info("%s: %d rollouts done", self.get_worker_id(), self._processed)
        return following

    async def step(
        self,
        input: TaskInput,
        *,
        resources: NamedResources | None = None,
        mode: RolloutMode | None = None,
        event: ExecutionEvent | None = None,
        config: RolloutConfig | None = None,
    ) -> Rollout:
        """Run the agent once on ``input`` and return the finished rollout; the agent's exception is re-raised.

        ``resources`` are published as a new snapshot for this rollout; without them the latest are used.
        """
        store = self.get_store()
        resources_id = None
        if resources is not None:
            resources_id = (await store.add_resources(resources)).resources_id
        attempted = await store.start_rollout(
            input, mode=mode, resources_id=resources_id, config=config, worker_id=self.get_worker_id()
        )
        await self._step_impl(attempted, raise_on_exception=True)
        finished = await store.get_rollout_by_id(attempted.rollout_id)
        if finished is None:
            raise RuntimeError(f"rollout {attempted.rollout_id} vanished from the store")
        return finished

    # -- one rollout ---------------------------------------------------------------------------

    async def _resources(self, rollout: Rollout, claimed: _ClaimedResources | None = None) -> NamedResources:
        store = self.get_store()
        if rollout.resources_id:
            update = (
                claimed.update
                if claimed is not None
                else await store.get_resources_by_id(rollout.resources_id)
            )
            if update is None:
                raise RuntimeError(
                    f"rollout {rollout.rollout_id} asks for resources {rollout.resources_id!r}, "
                    "which the store does not have"
                )
            return update.resources
        latest = claimed.update if claimed is not None else await store.get_latest_resources()
        return {} if latest is None else latest.resources

    async def _call_agent(self, rollout: AttemptedRollout, resources: NamedResources) -> RolloutRawResult:
        agent = self.get_agent()
        training = rollout.mode == "train"
        if agent.is_async():
            method = agent.training_rollout_async if training else agent.validation_rollout_async
            return await method(rollout.input, resources, rollout)
        method = agent.training_rollout if training else agent.validation_rollout
        if self.sync_agent_in_thread:
            return await run_sync_agent(method, rollout.input, resources, rollout)
        return method(rollout.input, resources, rollout)

    async def _run_hooks(self, name: str, **kwargs: Any) -> None:
        for hook in self._hooks:
            try:
                await getattr(hook, name)(agent=self.get_agent(), runner=self, **kwargs)
            except Exception:
                logger.exception("Hook %s.%s failed; continuing", type(hook).__name__, name)

    async def _step_impl(
        self,
        rollout: AttemptedRollout,
        *,
        raise_on_exception: bool = False,
        resources: _ClaimedResources | None = None,
        claim_next: bool = False,
    ) -> Claimed | None:
        """Execute one attempt and report its outcome to the store. Never raises unless asked to.

        ``claim_next``: claim this worker's next rollout with the outcome; returns it (``None``: none queued,
        or the outcome was not reported that way)."""
        store = self.get_store()
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        self._attempts.current[attempt_id] = rollout
        started = time.monotonic()
        spans: list[Span] = []
        unsent: list[Span] = []  # the trace's last spans: they go with the outcome, in one store call
        error: BaseException | None = None
        try:
            named = await self._resources(rollout, resources)
            await self._run_hooks("on_rollout_start", rollout=rollout)
            try:
                async with self.tracer.trace_context(
                    name=rollout_id, rollout_id=rollout_id, attempt_id=attempt_id, **self._hand_over(unsent)
                ):
                    await self._run_hooks("on_trace_start", tracer=self.tracer, rollout=rollout)
                    result = await self._await_agent(rollout, named)
                    # A returned reward joins the trace, so it ships in the same batch as the agent's spans.
                    in_trace = record_returned_reward(result, rollout_id)
            finally:  # after the trace is finished: the hook's tracer.get_last_trace() is this rollout's
                await self._run_hooks("on_trace_end", tracer=self.tracer, rollout=rollout)
            spans = await rollout_result_to_spans(
                result,
                store=store,
                tracer=self.tracer,
                rollout_id=rollout_id,
                attempt_id=attempt_id,
                reward_in_trace=in_trace,
            )
        except Exception as exc:
            error = exc
            logger.warning(
                "%s: rollout %s attempt %s failed: %s: %s",
                self.get_worker_id(),
                rollout_id,
                attempt_id,
                type(exc).__name__,
                exc,
            )
        finally:
            self._attempts.current.pop(attempt_id, None)
            self._attempts.ended.pop(attempt_id, None)
        try:
            await self._run_hooks("on_rollout_end", rollout=rollout, spans=spans)
            metadata = dict(rollout.attempt.metadata or {})
            if isinstance(error, AttemptEnded):
                await self._report_ended(rollout, error, metadata, unsent)
                if raise_on_exception:
                    raise error
                return None
            if error is None:
                from agl.tracer import find_final_reward

                # The one place the final reward is computed; readers use agl.tracer.final_reward_of.
                reward = find_final_reward(spans)
                metadata[FINAL_REWARD_METADATA_KEY] = reward
                logger.debug(
                    "%s: rollout %s done in %.3fs, %d spans, reward %s",
                    self.get_worker_id(),
                    rollout_id,
                    time.monotonic() - started,
                    len(spans),
                    reward,
                )
            else:
                metadata["error"] = {
                    "type": type(error).__name__,
                    "message": str(error),
                    "traceback": "".join(traceback.format_exception(type(error), error, error.__traceback__)),
                }
            finished = await store.finish_attempt(
                rollout_id,
                attempt_id,
                unsent,
                status="failed" if error is not None else "succeeded",
                metadata=metadata,
                claim_next_for=self.get_worker_id() if claim_next else None,
            )
            _numbered(unsent, finished.spans)
            if error is None and finished.attempt.status != "succeeded":
                # The store dropped the result: the attempt had lost its rollout (see finish_attempt).
                logger.warning(
                    "%s: rollout %s attempt %s finished, but its result is dropped: %s",
                    self.get_worker_id(),
                    rollout_id,
                    attempt_id,
                    (finished.attempt.metadata or {})
                    .get("error", {})
                    .get("message", finished.attempt.status),
                )
            following = finished.next
        except Exception:
            logger.exception(
                "%s: could not report the outcome of rollout %s", self.get_worker_id(), rollout_id
            )
            if raise_on_exception and error is None:
                raise
            following = None
        if error is not None and raise_on_exception:
            raise error
        return following

    async def _await_agent(self, rollout: AttemptedRollout, resources: NamedResources) -> RolloutRawResult:
        """Run the agent as its own task, so that the heartbeat can cancel it when the store ends the attempt."""
        attempt_id = rollout.attempt.attempt_id
        attempts = self._attempts
        if attempt_id in attempts.ended:  # ended while its resources and hooks were being prepared
            raise attempts.ended[attempt_id]
        task = asyncio.ensure_future(self._call_agent(rollout, resources))
        attempts.agent_tasks[attempt_id] = task
        try:
            return await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            ended = attempts.ended.get(attempt_id)
            cancelling = getattr(current, "cancelling", None)  # Python 3.11+
            if ended is None or (cancelling is not None and cancelling()):
                raise  # the runner itself is being cancelled
            raise ended from None
        finally:
            attempts.agent_tasks.pop(attempt_id, None)

    async def _report_ended(
        self, rollout: AttemptedRollout, ended: AttemptEnded, metadata: dict[str, Any], unsent: list[Span]
    ) -> None:
        """Record on the attempt why its agent was cancelled.

        The status the store gave is written again: spans flushed while the agent stopped may have moved
        an ``unresponsive`` attempt back to ``running``. A cancelled rollout's attempt becomes ``failed``
        (the rollout stays cancelled).
        """
        metadata["error"] = {
            "type": "AttemptEnded",
            "message": f"the runner cancelled the agent: {ended.reason}",
            "traceback": "",
        }
        store = self.get_store()
        rollout_id, attempt_id = rollout.rollout_id, rollout.attempt.attempt_id
        if ended.status in ("succeeded", "failed"):  # someone else already reported the outcome
            finished = await store.finish_attempt(rollout_id, attempt_id, unsent, metadata=metadata)
        else:
            status: Any = ended.status if ended.status in ("timeout", "unresponsive") else "failed"
            finished = await store.finish_attempt(
                rollout_id, attempt_id, unsent, status=status, metadata=metadata
            )
        _numbered(unsent, finished.spans)


def _numbered(sent: list[Span], stored: list[Span]) -> None:
    """Give the spans of the trace (``sent``) the sequence ids the store gave them."""
    if stored:
        ids = {span.span_id: span.sequence_id for span in stored}
        for span in sent:
            span.sequence_id = ids.get(span.span_id, span.sequence_id)


@dataclass(frozen=True)
class _ClaimedResources:
    """The resources that came with a claim (``update`` ``None``: unknown id, or no resources at all)."""

    update: ResourcesUpdate | None
