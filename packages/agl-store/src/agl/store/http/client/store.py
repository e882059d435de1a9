"""``LightningStoreClient``: a :class:`~agl.store.LightningStore` that talks HTTP to a ``LightningStoreServer``.

- Keep-alive connections pooled per event loop (a lean HTTP/1.1 client, :mod:`._conn`), so one client
  can be shared by threads that each run a loop.
- Retries only what is safe: network errors, 5xx and 408, with back-off and a health probe before each
  retry; never 4xx. Every write carries a fresh ``Idempotency-Key`` (the same on its retries), so a retry
  of a write whose answer was lost returns the first answer instead of writing twice.
- Errors keep their in-process types: 404 → :class:`StoreNotFoundError` (a ``NotFoundError``),
  409 → :class:`StoreConflictError`, 400/413/422 → :class:`StoreInvalidRequestError`; each says which call
  failed, the HTTP status and the server's message.
- Long polls (``dequeue_*`` with a timeout, ``wait_for_rollouts``) are split into server-bounded chunks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Annotated, Any, cast
from urllib.parse import quote

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
from agl.types.query import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, StoreQuery, WorkerQuery
from pydantic import Discriminator, Tag, TypeAdapter

from ..._results import AttemptFinish
from ...base import FinishedAttempt, LightningStore, LightningStoreCapabilities, LightningStoreStatistics
from .._models import (
    WAIT_COMPLETE_HEADER,
    AddSpansInOrderResponse,
    AddSpansResponse,
    ClaimResponse,
    FinishAttemptResponse,
)
from ._transport import HttpTransport

__all__ = ["LightningStoreClient"]

logger = logging.getLogger("agl.store.client")


def _rollout_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "attempted" if cast("dict[str, Any]", value).get("attempt") is not None else "plain"
    return "attempted" if isinstance(value, AttemptedRollout) else "plain"


_AnyRollout = Annotated[
    Annotated[AttemptedRollout, Tag("attempted")] | Annotated[Rollout, Tag("plain")],
    Discriminator(_rollout_kind),
]

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_ROLLOUT = TypeAdapter(Rollout)
_ROLLOUTS = TypeAdapter(list[Rollout])
_ATTEMPTED = TypeAdapter(AttemptedRollout)
_ATTEMPTED_LIST = TypeAdapter(list[AttemptedRollout])
_ANY_ROLLOUTS: TypeAdapter[list[Rollout | AttemptedRollout]] = TypeAdapter(list[_AnyRollout])
_ANY_ROLLOUT_OR_NONE: TypeAdapter[Rollout | AttemptedRollout | None] = TypeAdapter(_AnyRollout | None)
_ROLLOUT_PAGE: TypeAdapter[PaginatedResult[Rollout | AttemptedRollout]] = TypeAdapter(
    PaginatedResult[_AnyRollout]
)
_ATTEMPT = TypeAdapter(Attempt)
_ATTEMPT_OR_NONE: TypeAdapter[Attempt | None] = TypeAdapter(Attempt | None)
_ATTEMPT_PAGE = TypeAdapter(PaginatedResult[Attempt])
_RESOURCES = TypeAdapter(ResourcesUpdate)
_RESOURCES_OR_NONE: TypeAdapter[ResourcesUpdate | None] = TypeAdapter(ResourcesUpdate | None)
_RESOURCES_PAGE = TypeAdapter(PaginatedResult[ResourcesUpdate])
_CLAIM = TypeAdapter(ClaimResponse)
_STORED = TypeAdapter(AddSpansResponse)
_STORED_IN_ORDER = TypeAdapter(AddSpansInOrderResponse)
_FINISHED = TypeAdapter(FinishAttemptResponse)
_SPAN_PAGE = TypeAdapter(PaginatedResult[Span])
_WORKER = TypeAdapter(Worker)
_WORKER_OR_NONE: TypeAdapter[Worker | None] = TypeAdapter(Worker | None)
_WORKER_PAGE = TypeAdapter(PaginatedResult[Worker])

_KNOWN_RESOURCES = 16
"""Resource snapshots a client keeps (and names in each claim, so the server does not resend them)."""

_SPAN_BATCH = 2000
"""Spans per request in ``add_many_spans`` (keeps bodies well under the server's size cap)."""


def _q(value: str) -> str:
    return quote(value, safe="")


def _body(query: StoreQuery, exclude: set[str] | None = None) -> dict[str, Any]:
    """A query as the body of its ``/search`` route: the fields that differ from their defaults (an explicit
    ``null``, e.g. an unsorted span query, is sent)."""
    return query.model_dump(exclude_defaults=True, exclude=exclude)


class LightningStoreClient(HttpTransport, LightningStore):
    """A store on the other end of ``address`` (e.g. ``http://127.0.0.1:4747``).

    Args:
        address: Root URL of a :class:`~agl.store.LightningStoreServer`.
        token: Bearer token; ``None`` reads ``AGL_STORE_TOKEN``.
        retry_delays: Seconds to wait before each retry of a failed call (network error, 5xx, 408).
            Empty: no retries.
        health_retry_delays: Back-off of the health probe run before each retry; the retry proceeds
            only once the server answers its health check.
        request_timeout: Seconds for one request (long polls add their wait to it).
        connection_timeout: Seconds to establish a connection.
        long_poll_seconds: Longest single long poll asked of the server; longer waits loop.
        transport: Send the requests through this instead of HTTP connections to ``address`` (as httpx's
            ``transport=``): e.g. :class:`~agl.store.http.client.ASGITransport` over a server's
            :attr:`~agl.store.LightningStoreServer.asgi_app`, in-process and without sockets. Not pickled:
            a copy in another process connects to ``address``.
    """

    def _init_runtime(self) -> None:
        super()._init_runtime()
        self._known_resources: dict[str, tuple[int, bytes]] = {}
        """Resource snapshots this client holds: ``resources_id → (version, JSON)``."""

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return self.address + "/v1/traces"

    # -- the LightningStore contract ---------------------------------------------------------

    async def statistics(self) -> LightningStoreStatistics:
        return await self._call("statistics", "GET", "/statistics", _ANY)

    async def _start_rollout(self, request: EnqueueRolloutRequest, worker_id: str | None) -> AttemptedRollout:
        body = {**dict(request), "worker_id": worker_id}
        return await self._call("start_rollout", "POST", "/rollouts", _ATTEMPTED, body)

    async def _enqueue_rollouts(self, requests: list[EnqueueRolloutRequest]) -> list[Rollout]:
        op = "enqueue_rollout" if len(requests) == 1 else "enqueue_many_rollouts"  # named in errors
        return await self._call(op, "POST", "/queues/rollouts/enqueue", _ROLLOUTS, {"rollouts": requests})

    async def _dequeue_rollouts(
        self, limit: int, worker_id: str | None, timeout: float
    ) -> list[AttemptedRollout]:
        op = "dequeue_rollout" if limit == 1 else "dequeue_many_rollouts"  # named in errors
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            chunk = max(0.0, min(deadline - time.monotonic(), self.long_poll_seconds))
            body = {"limit": limit, "worker_id": worker_id, "timeout": chunk}
            claimed = await self._call(
                op, "POST", "/queues/rollouts/dequeue", _ATTEMPTED_LIST, body, wait=chunk
            )
            if claimed or time.monotonic() >= deadline - 0.001:
                return claimed

    async def dequeue_many_rollouts_with_resources(
        self, *, limit: int = 1, worker_id: str | None = None, timeout: float = 0.0
    ) -> list[tuple[AttemptedRollout, ResourcesUpdate | None]]:
        """A claim of one rollout is one request (the server's claim route); of more, one to dequeue them and
        one per snapshot this client lacks."""
        if limit != 1:
            return await super().dequeue_many_rollouts_with_resources(
                limit=limit, worker_id=worker_id, timeout=timeout
            )
        one = await self._claim_one(worker_id, timeout)
        return [] if one is None else [one]

    async def _claim_one(
        self, worker_id: str | None, timeout: float
    ) -> tuple[AttemptedRollout, ResourcesUpdate | None] | None:
        """One request per claim: the rollout and its resources, which the server sends only when this client
        does not hold them at their current version."""
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            chunk = max(0.0, min(deadline - time.monotonic(), self.long_poll_seconds))
            body = {"worker_id": worker_id, "timeout": chunk, "known_resources": self._known_versions()}
            answer = await self._call(
                "dequeue_rollout", "POST", "/queues/rollouts/claim", _CLAIM, body, wait=chunk
            )
            if answer.rollout is not None:
                return answer.rollout, await self._resources_of(answer)
            if time.monotonic() >= deadline - 0.001:
                return None

    def _known_versions(self) -> dict[str, int]:
        """``resources_id → version`` of the snapshots this client holds (the server does not resend them)."""
        with self._lock:
            return {rid: version for rid, (version, _) in self._known_resources.items()}

    async def _resources_of(self, answer: ClaimResponse) -> ResourcesUpdate | None:
        cache = self._known_resources
        update = answer.resources
        if update is None and answer.resources_id is not None:
            held = cache.get(answer.resources_id)
            if held is not None and held[0] == answer.resources_version:
                # A fresh copy each time (an agent may change its resources; the cache must not change).
                return _RESOURCES.validate_json(held[1])
            update = await self.get_resources_by_id(answer.resources_id)  # evicted meanwhile
        if update is not None:
            raw = _RESOURCES.dump_json(update)
            with self._lock:  # threads with their own loops share the client
                cache.pop(update.resources_id, None)
                cache[update.resources_id] = (update.version, raw)
                while len(cache) > _KNOWN_RESOURCES:
                    cache.pop(next(iter(cache)), None)
        return update

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        return await self._call(
            "start_attempt",
            "POST",
            f"/rollouts/{_q(rollout_id)}/attempts",
            _ATTEMPTED,
            {"worker_id": worker_id},
        )

    async def _query_rollouts(self, query: RolloutQuery) -> PaginatedResult[Rollout | AttemptedRollout]:
        return await self._call("query_rollouts", "POST", "/rollouts/search", _ROLLOUT_PAGE, _body(query))

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        return await self._call(
            "get_rollout_by_id", "GET", f"/rollouts/{_q(rollout_id)}", _ANY_ROLLOUT_OR_NONE
        )

    async def _query_attempts(self, query: AttemptQuery) -> PaginatedResult[Attempt]:
        path = f"/rollouts/{_q(query.rollout_id)}/attempts/search"
        body = _body(query, exclude={"rollout_id"})  # in the path
        return await self._call("query_attempts", "POST", path, _ATTEMPT_PAGE, body)

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        return await self._call(
            "get_latest_attempt", "GET", f"/rollouts/{_q(rollout_id)}/attempts/latest", _ATTEMPT_OR_NONE
        )

    async def _update_rollout(self, rollout_id: str, changes: RolloutUpdate) -> Rollout:
        return await self._call("update_rollout", "POST", f"/rollouts/{_q(rollout_id)}", _ROLLOUT, changes)

    async def _update_attempt(self, rollout_id: str, attempt_id: str, changes: AttemptUpdate) -> Attempt:
        path = f"/rollouts/{_q(rollout_id)}/attempts/{_q(attempt_id)}"
        return await self._call("update_attempt", "POST", path, _ATTEMPT, changes)

    async def _finish_attempt(self, finish: AttemptFinish) -> FinishedAttempt:
        rollout_id, attempt_id, spans, changes, claim_next_for = finish
        last = len(spans) - (len(spans) - 1) % _SPAN_BATCH - 1 if spans else 0
        stored = await self.add_spans_in_order(spans[:last]) if last else []  # all but the last batch
        batch = spans[last:]
        body: dict[str, Any] = {**changes, "spans": batch}
        if claim_next_for is not None:
            body["claim"] = {"worker_id": claim_next_for, "known_resources": self._known_versions()}
        path = f"/rollouts/{_q(rollout_id)}/attempts/{_q(attempt_id)}/finish"
        answer = await self._call("finish_attempt", "POST", path, _FINISHED, body)
        stored.extend(_numbered(batch, answer))
        claimed = answer.next
        if claimed is None or claimed.rollout is None:
            return FinishedAttempt(stored, answer.attempt)
        return FinishedAttempt(stored, answer.attempt, (claimed.rollout, await self._resources_of(claimed)))

    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout | AttemptedRollout]:
        ids = list(rollout_ids)
        if not ids:
            return []
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        while True:
            remaining = self.long_poll_seconds if deadline is None else max(0.0, deadline - time.monotonic())
            chunk = min(remaining, self.long_poll_seconds)
            payload, headers = await self._request(
                "wait_for_rollouts",
                "POST",
                "/waits/rollouts",
                {"rollout_ids": ids, "timeout": chunk},
                wait=chunk,
            )
            done = _ANY_ROLLOUTS.validate_json(payload)
            complete = headers.get(WAIT_COMPLETE_HEADER, "true") == "true"
            if complete or (deadline is not None and time.monotonic() >= deadline - 0.001):
                return done

    async def add_resources(self, resources: NamedResources) -> ResourcesUpdate:
        return await self._call("add_resources", "POST", "/resources", _RESOURCES, resources)

    async def update_resources(self, resources_id: str, resources: NamedResources) -> ResourcesUpdate:
        return await self._call(
            "update_resources", "POST", f"/resources/{_q(resources_id)}", _RESOURCES, resources
        )

    async def get_resources_by_id(self, resources_id: str) -> ResourcesUpdate | None:
        return await self._call(
            "get_resources_by_id", "GET", f"/resources/{_q(resources_id)}", _RESOURCES_OR_NONE
        )

    async def get_latest_resources(self) -> ResourcesUpdate | None:
        return await self._call("get_latest_resources", "GET", "/resources/latest", _RESOURCES_OR_NONE)

    async def _query_resources(self, query: ResourcesQuery) -> PaginatedResult[ResourcesUpdate]:
        return await self._call("query_resources", "POST", "/resources/search", _RESOURCES_PAGE, _body(query))

    async def add_span(self, span: Span) -> Span | None:
        payload, _ = await self._request("add_span", "POST", "/spans", span)
        # Like the in-process stores: the very span given, or None for a duplicate.
        return None if payload.strip() == b"null" else span

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        stored: list[Span] = []
        for start in range(0, len(spans), _SPAN_BATCH):
            batch = list(spans[start : start + _SPAN_BATCH])
            answer = await self._call("add_many_spans", "POST", "/spans/batch", _STORED, {"spans": batch})
            stored.extend(batch[i] for i in answer.stored)
        return stored

    async def add_spans_in_order(self, spans: Sequence[Span]) -> list[Span]:
        stored: list[Span] = []
        for start in range(0, len(spans), _SPAN_BATCH):
            batch = list(spans[start : start + _SPAN_BATCH])
            answer = await self._call(
                "add_spans_in_order", "POST", "/spans/in-order", _STORED_IN_ORDER, {"spans": batch}
            )
            stored.extend(_numbered(batch, answer))
        return stored

    async def get_next_span_sequence_id(self, rollout_id: str, attempt_id: str) -> int:
        body = {"rollout_id": rollout_id, "attempt_id": attempt_id}
        answer = await self._call("get_next_span_sequence_id", "POST", "/spans/next", _ANY, body)
        return int(answer["sequence_id"])

    async def get_many_span_sequence_ids(self, rollout_attempt_ids: Sequence[tuple[str, str]]) -> list[int]:
        if not rollout_attempt_ids:
            return []
        body = {"pairs": [list(pair) for pair in rollout_attempt_ids]}
        answer = await self._call("get_many_span_sequence_ids", "POST", "/spans/next/batch", _ANY, body)
        return [int(v) for v in answer["sequence_ids"]]

    async def _query_spans(self, query: SpanQuery) -> PaginatedResult[Span]:
        return await self._call("query_spans", "POST", "/spans/search", _SPAN_PAGE, _body(query))

    async def _query_workers(self, query: WorkerQuery) -> PaginatedResult[Worker]:
        return await self._call("query_workers", "POST", "/workers/search", _WORKER_PAGE, _body(query))

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        return await self._call("get_worker_by_id", "GET", f"/workers/{_q(worker_id)}", _WORKER_OR_NONE)

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        body = {} if heartbeat_stats is UNSET else {"heartbeat_stats": heartbeat_stats}
        return await self._call("update_worker", "POST", f"/workers/{_q(worker_id)}", _WORKER, body)


def _numbered(batch: list[Span], answer: AddSpansInOrderResponse) -> list[Span]:
    """The spans of ``batch`` the server stored, with the sequence ids it gave them."""
    return [batch[i].with_sequence_id(seq) for i, seq in zip(answer.stored, answer.sequence_ids, strict=True)]
