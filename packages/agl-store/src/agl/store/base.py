"""The ``LightningStore`` contract: the one source of truth shared by algorithms and runners.

Every data method is a coroutine that appears atomic to concurrent callers. Unknown ids raise
:class:`agl.types.NotFoundError` (a ``ValueError``) where the method documents it; queries on
unknown ids return empty results. Timeouts, heartbeats, retries and worker status are decided by
the store, identically in every backend.

The backend contract. A backend (memory, SQL, the HTTP client, a forwarding wrapper) implements every
abstract method: the public ones whose arguments need no more than the checks of ``_checks.CHECKS``
(``start_attempt``, ``get_*``, ``wait_for_rollouts``, ``add_*``/``update_resources``, the span and worker
writes) and ten hooks. A hook is named ``_<verb>_<noun>``, after the public method(s) it serves with the
plural noun where it serves one-or-many forms, and takes arguments already checked here:

- ``_start_rollout(request, worker_id)``: ``start_rollout``;
- ``_enqueue_rollouts(requests)``: ``enqueue_rollout``, ``enqueue_many_rollouts``;
- ``_dequeue_rollouts(limit, worker_id, timeout)``: every claim (``dequeue_*``);
- ``_update_rollout(rollout_id, changes)``, ``_update_attempt(rollout_id, attempt_id, changes)``;
- ``_query_rollouts``, ``_query_attempts``, ``_query_resources``, ``_query_spans``, ``_query_workers``
  ``(query)``: the ``query_*`` method of the same noun, and :meth:`LightningStore.run_query`.

Optional overrides, for speed, keep their defaults' answers: ``_finish_attempt`` (one transaction or request
for ``finish_attempt``) and ``dequeue_many_rollouts_with_resources``, the one claim with resources that
``dequeue_rollout_with_resources`` and ``finish_attempt``'s next claim are forms of. Callers outside the
store use only public methods: :meth:`LightningStore.run_query` takes an already-validated query object.

Queries: each ``query_*`` method keeps its keyword signature and validates its arguments once into a query
object of :mod:`agl.types.query` (bad input raises :class:`agl.types.InvalidRequestError` in every backend).
The arguments are read with ``locals()``, so the keyword list is written once here and once in the query
model. The wide writes follow the same pattern with a request object (``EnqueueRolloutRequest``) or the
fields to write (``RolloutUpdate``, ``AttemptUpdate``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from agl.types import (
    ROLLOUT_STATUSES,
    UNSET,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    AttemptUpdate,
    EnqueueRolloutRequest,
    InvalidRequestError,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    RolloutUpdate,
    Span,
    TaskInput,
    Unset,
    Worker,
    WorkerStatus,
)
from agl.types.query import (
    AttemptQuery,
    FilterLogic,
    ResourcesQuery,
    RolloutQuery,
    SortOrder,
    SpanQuery,
    WorkerQuery,
)
from agl.types.validation import check_id, check_optional_id, json_bytes

from ._checks import (
    CHECKS,
    attempt_changes,
    check_documents,
    check_limit,
    check_mode,
    check_status,
    check_wait,
    checked,
    checked_request,
    new_config,
    request_of,
    spans_of,
)
from ._reference import DEPRECATED_QUERY_ALIASES, rollout_query_aliases
from ._results import AttemptFinish, FinishedAttempt, LightningStoreCapabilities, LightningStoreStatistics

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan

_AnyQuery = RolloutQuery | AttemptQuery | ResourcesQuery | SpanQuery | WorkerQuery

__all__ = ["FinishedAttempt", "LightningStore", "LightningStoreCapabilities", "LightningStoreStatistics"]


class LightningStore(ABC):
    """Rollouts, attempts, spans, resources and workers, with the status machine that links them.

    Every backend refuses the same bad arguments with :class:`~agl.types.InvalidRequestError` before any
    state changes: the methods implemented here check them, and each data method a subclass defines is
    wrapped with the check of ``agl.store._checks`` (ids, timeouts, JSON documents; see
    :mod:`agl.types.validation`).
    """

    serialises_spans: bool = False
    """True for a backend that turns each span it stores into JSON with
    :func:`agl.types.validation.span_json` (whose checks then cover the spans); the others get spans checked
    before the call."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, check in CHECKS.items():
            method = cls.__dict__.get(name)
            if method is not None:
                setattr(cls, name, checked(method, check))

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities()

    async def statistics(self) -> LightningStoreStatistics:
        """Counts of each collection and the uptime in seconds."""
        return LightningStoreStatistics(name=type(self).__name__)

    def otlp_traces_endpoint(self) -> str:
        """URL ending in ``/v1/traces`` where OTLP/HTTP exporters can send spans."""
        raise NotImplementedError(f"{type(self).__name__} does not accept OTLP traces")

    async def close(self) -> None:
        """Release connections and background resources. The store is unusable afterwards."""

    @overload
    async def run_query(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]: ...
    @overload
    async def run_query(self, query: AttemptQuery) -> PaginatedResult[Attempt]: ...
    @overload
    async def run_query(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]: ...
    @overload
    async def run_query(self, query: SpanQuery) -> PaginatedResult[Span]: ...
    @overload
    async def run_query(self, query: WorkerQuery) -> PaginatedResult[Worker]: ...
    async def run_query(self, query: _AnyQuery) -> PaginatedResult[Any]:
        """The page a query object of :mod:`agl.types.query` selects: what the ``query_*`` method of its kind
        answers, for a caller that already holds the validated query (the HTTP server's query routes)."""
        if isinstance(query, RolloutQuery):
            return await self._query_rollouts(query)
        if isinstance(query, AttemptQuery):
            return await self._query_attempts(query)
        if isinstance(query, ResourcesQuery):
            return await self._query_resources(query)
        if isinstance(query, SpanQuery):
            return await self._query_spans(query)
        return await self._query_workers(query)

    # -- rollouts and the queue ---------------------------------------------------------------

    async def start_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> AttemptedRollout:
        """Create a rollout that starts at once (status ``preparing``) with attempt #1; it is never queued.

        ``resources_id=None`` means the latest resources at this moment.
        """
        request = request_of(input, mode, resources_id, config, metadata)
        return await self._start_rollout(request, check_optional_id(worker_id, "worker_id"))

    @abstractmethod
    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        """Backend of :meth:`start_rollout`, given a validated request."""

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Rollout:
        """Append a new ``queuing`` rollout to the tail of the queue."""
        request = request_of(input, mode, resources_id, config, metadata)
        (rollout,) = await self._enqueue_rollouts([request])
        return rollout

    async def enqueue_many_rollouts(self, rollouts: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        """Enqueue several rollouts in one batch, in order; returns them in the same order."""
        if not rollouts:
            return []
        if isinstance(rollouts, (str, bytes, dict)):
            raise InvalidRequestError(f"rollouts must be a list of rollouts, not {type(rollouts).__name__}")
        return await self._enqueue_rollouts([checked_request(r) for r in rollouts])

    @abstractmethod
    async def _enqueue_rollouts(self, requests: list[EnqueueRolloutRequest]) -> list[Rollout]:
        """Backend of :meth:`enqueue_rollout` and :meth:`enqueue_many_rollouts`: validated, never empty."""

    async def dequeue_rollout(
        self, worker_id: str | None = None, *, timeout: float = 0.0
    ) -> AttemptedRollout | None:
        """Claim the oldest queued rollout: a new ``preparing`` attempt is created for ``worker_id``.

        With ``timeout > 0``, wait up to that many seconds for work to arrive; ``None`` if none came.
        """
        claimed = await self._dequeue_rollouts(1, worker_id, check_wait(worker_id, timeout))
        return claimed[0] if claimed else None

    async def dequeue_rollout_with_resources(
        self, worker_id: str | None = None, *, timeout: float = 0.0
    ) -> tuple[AttemptedRollout, ResourcesUpdate | None] | None:
        """:meth:`dequeue_rollout` plus the resources the rollout runs with: the snapshot named by its
        ``resources_id``, else the latest (``None``: that id is unknown, or there are no resources).

        What a runner does per claim; a store client answers it in one request and does not resend
        resources it already holds at the current version.
        """
        claimed = await self.dequeue_many_rollouts_with_resources(
            limit=1, worker_id=worker_id, timeout=timeout
        )
        return claimed[0] if claimed else None

    async def dequeue_many_rollouts_with_resources(
        self, *, limit: int = 1, worker_id: str | None = None, timeout: float = 0.0
    ) -> list[tuple[AttemptedRollout, ResourcesUpdate | None]]:
        """:meth:`dequeue_many_rollouts`, each rollout with the resources it runs with (as
        :meth:`dequeue_rollout_with_resources`; each distinct snapshot read once): the one claim every other
        claim method is a form of."""
        timeout = check_wait(worker_id, timeout)
        if check_limit(limit) <= 0:
            return []
        rollouts = await self._dequeue_rollouts(limit, worker_id, timeout)
        resources: dict[str | None, ResourcesUpdate | None] = {}
        claimed: list[tuple[AttemptedRollout, ResourcesUpdate | None]] = []
        for rollout in rollouts:
            key = rollout.resources_id or None
            if key not in resources:
                resources[key] = await (
                    self.get_resources_by_id(key) if key is not None else self.get_latest_resources()
                )
            claimed.append((rollout, resources[key]))
        return claimed

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: str | None = None, timeout: float = 0.0
    ) -> list[AttemptedRollout]:
        """Claim up to ``limit`` queued rollouts (FIFO). ``limit <= 0`` → ``[]``.

        With ``timeout > 0``, wait up to that many seconds for the first one.
        """
        timeout = check_wait(worker_id, timeout)
        if check_limit(limit) <= 0:
            return []
        return await self._dequeue_rollouts(limit, worker_id, timeout)

    @abstractmethod
    async def _dequeue_rollouts(
        self, limit: int, worker_id: str | None, timeout: float
    ) -> list[AttemptedRollout]:
        """Backend of :meth:`dequeue_rollout` and :meth:`dequeue_many_rollouts` (``limit >= 1``)."""

    @abstractmethod
    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        """Manual retry: a new attempt for ``rollout_id`` regardless of ``max_attempts``. Unknown id → NotFoundError."""

    async def query_rollouts(
        self,
        *,
        status_in: Sequence[RolloutStatus] | None = None,
        rollout_id_in: Sequence[str] | None = None,
        rollout_id_contains: str | None = None,
        mode_in: Sequence[RolloutMode] | None = None,
        filter_logic: FilterLogic = "and",
        sort_by: str | None = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
        status: Sequence[RolloutStatus] | None = None,
        rollout_ids: Sequence[str] | None = None,
    ) -> PaginatedResult[Rollout | AttemptedRollout]:
        """Rollouts matching the filters (pooled with ``filter_logic``), each with its latest attempt if any.

        ``mode_in`` (ours, not the reference's) keeps rollouts of those modes. Without ``sort_by``, in
        creation order. ``status`` and ``rollout_ids`` are the reference's deprecated spellings of ``status_in``
        and ``rollout_id_in`` (those win when both are given). Bad arguments raise
        :class:`~agl.types.InvalidRequestError`.
        """
        status_in, rollout_id_in = rollout_query_aliases(status_in, rollout_id_in, status, rollout_ids)
        arguments = {k: v for k, v in locals().items() if k not in DEPRECATED_QUERY_ALIASES["query_rollouts"]}
        return await self._query_rollouts(RolloutQuery.of(arguments))

    @abstractmethod
    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        """Backend of :meth:`query_rollouts`, given a validated query."""

    @abstractmethod
    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        """The rollout with its latest attempt attached (if any), or ``None``."""

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str | None = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        """Attempts of one rollout; empty for an unknown rollout."""
        return await self._query_attempts(AttemptQuery.of(locals()))

    @abstractmethod
    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        """Backend of :meth:`query_attempts`, given a validated query."""

    @abstractmethod
    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        """The attempt with the highest sequence id, or ``None``."""

    async def update_rollout(
        self,
        rollout_id: str,
        input: TaskInput | Unset = UNSET,
        mode: RolloutMode | Unset | None = UNSET,
        resources_id: str | Unset | None = UNSET,
        status: RolloutStatus | Unset = UNSET,
        config: RolloutConfig | Unset = UNSET,
        metadata: dict[str, Any] | Unset | None = UNSET,
    ) -> Rollout:
        """Write the given fields only. A terminal status sets ``end_time``; a queued one requeues once."""
        given = {"input": input, "mode": mode, "resources_id": resources_id, "status": status}
        changes: Any = {name: value for name, value in given.items() if value is not UNSET}
        if input is not UNSET:
            json_bytes(input, "rollout input")
        if resources_id is not UNSET:
            check_optional_id(resources_id, "resources_id")
        if mode is not UNSET:
            check_mode(mode)
        if status is not UNSET:
            check_status(status, ROLLOUT_STATUSES, "rollout status")
        if config is not UNSET:
            changes["config"] = new_config(config)
        if metadata is not UNSET:
            check_documents(None, metadata)
            changes["metadata"] = metadata
        return await self._update_rollout(check_id(rollout_id, "rollout_id"), changes)

    @abstractmethod
    async def _update_rollout(self, rollout_id: str, changes: RolloutUpdate) -> Rollout:
        """Backend of :meth:`update_rollout`, given the checked fields to write (a copied config)."""

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"],
        status: AttemptStatus | Unset = UNSET,
        worker_id: str | Unset = UNSET,
        last_heartbeat_time: float | Unset = UNSET,
        metadata: dict[str, Any] | Unset = UNSET,
    ) -> Attempt:
        """Write the given fields; a status change of the latest attempt propagates to the rollout (retries included)."""
        changes = attempt_changes(status, worker_id, last_heartbeat_time, metadata)
        check_id(rollout_id, "rollout_id")
        return await self._update_attempt(rollout_id, check_id(attempt_id, "attempt_id"), changes)

    @abstractmethod
    async def _update_attempt(self, rollout_id: str, attempt_id: str, changes: AttemptUpdate) -> Attempt:
        """Backend of :meth:`update_attempt`, given the checked fields to write."""

    async def finish_attempt(
        self,
        rollout_id: str,
        attempt_id: str,
        spans: Sequence[Span] = (),
        *,
        status: AttemptStatus | Unset = UNSET,
        worker_id: str | Unset = UNSET,
        last_heartbeat_time: float | Unset = UNSET,
        metadata: dict[str, Any] | Unset = UNSET,
        claim_next_for: str | None = None,
    ) -> FinishedAttempt:
        """Store an attempt's last spans, then write its outcome: :meth:`add_spans_in_order` followed by
        :meth:`update_attempt`, in one call (one round trip over HTTP). A runner ends each attempt with it.

        ``spans`` are normally the attempt's own (they are stored as :meth:`add_spans_in_order` stores any).
        Spans are stored before the outcome is written: spans refused (an unknown attempt, say) leave the
        attempt unchanged. ``claim_next_for``: a worker id; the worker's next rollout is claimed in the same
        call, as :meth:`dequeue_rollout_with_resources` without waiting (``next`` is ``None`` when none is
        queued), so a busy runner spends one round trip per rollout.
        """
        changes = attempt_changes(status, worker_id, last_heartbeat_time, metadata)
        check_id(rollout_id, "rollout_id")
        check_id(attempt_id, "attempt_id")
        CHECKS["add_spans_in_order"](self, spans)
        if claim_next_for is not None:
            check_id(claim_next_for, "claim_next_for")
        return await self._finish_attempt(
            AttemptFinish(rollout_id, attempt_id, spans_of(spans), changes, claim_next_for)
        )

    @abstractmethod
    async def _finish_attempt(self, finish: AttemptFinish) -> FinishedAttempt:
        """Backend of :meth:`finish_attempt`, given its checked arguments: the spans, then the outcome as
        :func:`~agl.store._rules.outcome_changes` decides it under the backend's lock (a check made before the
        write would race the watchdog), then :meth:`_claim_next`."""

    async def _claim_next(
        self, worker_id: str | None
    ) -> tuple[AttemptedRollout, ResourcesUpdate | None] | None:
        """The claim of :meth:`finish_attempt` (``None`` without a worker id, or with nothing queued)."""
        if worker_id is None:
            return None
        claimed = await self.dequeue_many_rollouts_with_resources(limit=1, worker_id=worker_id)
        return claimed[0] if claimed else None

    @abstractmethod
    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout | AttemptedRollout]:
        """The requested rollouts that are finished by the deadline, in request order (unknown ids omitted).
        ``timeout<=0``: check once. Each is an :class:`AttemptedRollout` with its latest attempt (as
        :meth:`get_rollout_by_id` answers it; a plain ``Rollout`` only if it never ran), so a trainer needs no
        second read to learn how it ended."""

    # -- resources ----------------------------------------------------------------------------

    @abstractmethod
    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        """Store a new snapshot (version 1); it becomes the latest."""

    @abstractmethod
    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        """Replace a snapshot's resources (version + 1), or create it with version 1; it becomes the latest."""

    @abstractmethod
    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None: ...

    @abstractmethod
    async def get_latest_resources(self) -> ResourcesUpdate | None:
        """The snapshot most recently added or updated."""

    async def query_resources(
        self,
        *,
        resources_id: str | None = None,
        resources_id_contains: str | None = None,
        sort_by: str | None = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[ResourcesUpdate]:
        """Snapshots matching both filters (they always hold together)."""
        return await self._query_resources(ResourcesQuery.of(locals()))

    @abstractmethod
    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        """Backend of :meth:`query_resources`, given a validated query."""

    # -- spans --------------------------------------------------------------------------------

    @abstractmethod
    async def add_span(self, span: Span) -> Span | None:
        """Store one span (a heartbeat for its attempt). A duplicate (same rollout, attempt, span id) → ``None``."""

    @abstractmethod
    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        """Store many spans in one batch; returns those stored (duplicates skipped)."""

    async def add_spans_in_order(self, spans: Sequence[Span]) -> list[Span]:
        """Store spans, giving each the next sequence id of its rollout in list order (their own
        ``sequence_id`` is ignored): allocation and write in one call, one round trip over HTTP.

        Returns the stored spans with their sequence ids; a duplicate (same rollout, attempt and span id as a
        stored span) is skipped but still uses up an id. Backends override this to do it atomically; this
        default allocates, then writes.
        """
        if not spans:
            return []
        ids = await self.get_many_span_sequence_ids([(s.rollout_id, s.attempt_id) for s in spans])
        numbered = [s.with_sequence_id(seq) for s, seq in zip(spans, ids, strict=True)]
        return await self.add_many_spans(numbered)

    async def add_otel_span(
        self, rollout_id: str, attempt_id: str, readable_span: ReadableSpan, sequence_id: int | None = None
    ) -> Span | None:
        """Convert an OpenTelemetry span and store it, allocating a sequence id when none is given."""
        span = Span.from_item(
            readable_span, rollout_id=rollout_id, attempt_id=attempt_id, sequence_id=sequence_id or 0
        )
        if sequence_id is not None:
            return await self.add_span(span)
        stored = await self.add_spans_in_order([span])
        return stored[0] if stored else None

    async def release_loop_resources(self) -> None:
        """Release what this store holds for the running event loop only (an HTTP session, say), before that
        loop closes; the store stays usable from other loops. Default: nothing to release."""

    @abstractmethod
    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        """Next value of the rollout's span counter (per rollout, starts at 1, never reissued)."""

    @abstractmethod
    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        """One sequence id per (rollout, attempt) pair, consecutive per rollout in request order."""

    async def query_spans(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"] | None = None,
        *,
        trace_id: str | None = None,
        trace_id_contains: str | None = None,
        span_id: str | None = None,
        span_id_contains: str | None = None,
        parent_id: str | None = None,
        parent_id_contains: str | None = None,
        name: str | None = None,
        name_contains: str | None = None,
        filter_logic: FilterLogic = "and",
        limit: int = -1,
        offset: int = 0,
        sort_by: str | None = "sequence_id",
        sort_order: SortOrder = "asc",
    ) -> PaginatedResult[Span]:
        """Spans of one rollout (one attempt, ``"latest"``, or all); optional filters pooled with ``filter_logic``."""
        return await self._query_spans(SpanQuery.of(locals()))

    async def query_spans_many(
        self, rollout_ids: Sequence[str], attempt_id: str | Literal["latest"] | None = "latest"
    ) -> dict[str, list[Span]]:
        """The spans of several rollouts in one query (one HTTP request): rollout id → its spans.

        Every requested id is a key (in request order; an unknown rollout or one without spans maps to
        ``[]``). ``attempt_id="latest"`` takes each rollout's latest attempt, ``None`` every attempt.
        Each list is in ``sequence_id`` order, as :meth:`query_spans` returns it.
        """
        if isinstance(rollout_ids, str):
            raise InvalidRequestError(
                f"rollout_ids must be a list of rollout ids, not one string ({rollout_ids!r}); "
                "use query_spans for a single rollout"
            )
        # validated even when there is nothing to query (a placeholder id stands in for none)
        query = SpanQuery.of({"rollout_id": list(rollout_ids) or ["-"], "attempt_id": attempt_id})
        if not rollout_ids:
            return {}
        grouped: dict[str, list[Span]] = {rollout_id: [] for rollout_id in query.rollout_ids}
        for span in await self._query_spans(query):
            grouped[span.rollout_id].append(span)
        return grouped

    @abstractmethod
    async def _query_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        """Backend of :meth:`query_spans` and :meth:`query_spans_many`, given a validated query
        (``query.rollout_id`` is one id or a list of them)."""

    # -- workers ------------------------------------------------------------------------------

    async def query_workers(
        self,
        *,
        status_in: Sequence[WorkerStatus] | None = None,
        worker_id_contains: str | None = None,
        filter_logic: FilterLogic = "and",
        sort_by: str | None = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Worker]:
        """Workers matching the filters (pooled with ``filter_logic``)."""
        return await self._query_workers(WorkerQuery.of(locals()))

    @abstractmethod
    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        """Backend of :meth:`query_workers`, given a validated query."""

    @abstractmethod
    async def get_worker_by_id(self, worker_id: str) -> Worker | None: ...

    @abstractmethod
    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        """Heartbeat of a worker: upserts it and sets ``last_heartbeat_time``; never changes its status."""
