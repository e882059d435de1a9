"""``ForwardingStore``: a :class:`LightningStore` whose every method forwards to one ``_call`` hook.

Shared by :class:`~agl.store.LoopBoundStore` (hops onto the wrapped store's loop) and
:class:`~agl.store.LightningStoreServer` (calls the wrapped store, or the HTTP client after pickling).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agl.types import (
    UNSET,
    Attempt,
    AttemptedRollout,
    AttemptUpdate,
    EnqueueRolloutRequest,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutUpdate,
    Span,
    Unset,
    Worker,
)
from agl.types.query import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery

from ._results import AttemptFinish
from .base import FinishedAttempt, LightningStore, LightningStoreStatistics

__all__ = ["ForwardingStore"]


class ForwardingStore(LightningStore):
    """Implements the whole contract by calling ``self._call(method_name, *args, **kwargs)``.

    Subclasses decide where a call goes (the wrapped store, another event loop, or HTTP). Queries are
    validated here (``LightningStore.query_*``) and forwarded as query objects to ``_query_*``; the checked
    writes are forwarded to the wrapped store's public methods (so that its overrides see them).
    """

    serialises_spans = True  # the store it forwards to checks them

    async def _call(self, method: str, /, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def statistics(self) -> LightningStoreStatistics:
        return await self._call("statistics")

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        return await self._call("start_rollout", **dict(request), worker_id=worker_id)

    async def _enqueue_rollouts(self, requests: list[EnqueueRolloutRequest]) -> list[Rollout]:
        return await self._call("enqueue_many_rollouts", requests)

    async def _dequeue_rollouts(
        self, limit: int, worker_id: str | None, timeout: float
    ) -> list[AttemptedRollout]:
        return await self._call("dequeue_many_rollouts", limit=limit, worker_id=worker_id, timeout=timeout)

    async def dequeue_many_rollouts_with_resources(
        self, *, limit: int = 1, worker_id: str | None = None, timeout: float = 0.0
    ) -> list[tuple[AttemptedRollout, ResourcesUpdate | None]]:
        return await self._call(
            "dequeue_many_rollouts_with_resources", limit=limit, worker_id=worker_id, timeout=timeout
        )

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        return await self._call("start_attempt", rollout_id, worker_id)

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        return await self._call("_query_rollouts", query)

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        return await self._call("get_rollout_by_id", rollout_id)

    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        return await self._call("_query_attempts", query)

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        return await self._call("get_latest_attempt", rollout_id)

    async def _update_rollout(self, rollout_id: str, changes: RolloutUpdate) -> Rollout:
        return await self._call("update_rollout", rollout_id, **changes)

    async def _update_attempt(self, rollout_id: str, attempt_id: str, changes: AttemptUpdate) -> Attempt:
        return await self._call("update_attempt", rollout_id, attempt_id, **changes)

    async def _finish_attempt(self, finish: AttemptFinish) -> FinishedAttempt:
        rollout_id, attempt_id, spans, changes, claim_next_for = finish
        return await self._call(
            "finish_attempt", rollout_id, attempt_id, spans, claim_next_for=claim_next_for, **changes
        )

    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout | AttemptedRollout]:
        return await self._call("wait_for_rollouts", rollout_ids=rollout_ids, timeout=timeout)

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._call("add_resources", resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        return await self._call("update_resources", resources_id, resources)

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        return await self._call("get_resources_by_id", resources_id)

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        return await self._call("get_latest_resources")

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        return await self._call("_query_resources", query)

    async def add_span(self, span: Span) -> Span | None:
        return await self._call("add_span", span)

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        return await self._call("add_many_spans", spans)

    async def add_spans_in_order(self, spans: Sequence[Span]) -> list[Span]:
        return await self._call("add_spans_in_order", spans)

    async def release_loop_resources(self) -> None:
        await self._call("release_loop_resources")

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        return await self._call("get_next_span_sequence_id", rollout_id, attempt_id)

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        return await self._call("get_many_span_sequence_ids", rollout_attempt_ids)

    async def _query_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        return await self._call("_query_spans", query)

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        return await self._call("_query_workers", query)

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        return await self._call("get_worker_by_id", worker_id)

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        return await self._call("update_worker", worker_id, heartbeat_stats=heartbeat_stats)
