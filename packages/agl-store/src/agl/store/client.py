"""``LightningStoreClient``: a :class:`~agl.store.LightningStore` that talks HTTP to a ``LightningStoreServer``.

- One ``aiohttp`` session per event loop, so one client can be shared by threads that each run a loop.
- Retries only what is safe: network errors, 5xx and 408, with back-off and a health probe before each
  retry; never 4xx. Every write carries a fresh ``Idempotency-Key`` (the same on its retries), so a retry
  of a write whose answer was lost returns the first answer instead of writing twice.
- Errors keep their in-process types: 404 → :class:`StoreNotFoundError` (a ``NotFoundError``),
  409 → :class:`StoreConflictError`, 400/413/422 → :class:`StoreInvalidRequestError`; each says which call
  failed, the HTTP status and the server's message.
- Long polls (``dequeue_*`` with a timeout, ``wait_for_rollouts``) are split into server-bounded chunks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Annotated, Any, Literal, Union
from urllib.parse import quote

from agl.types import (
    UNSET,
    AglError,
    Attempt,
    AttemptedRollout,
    AttemptStatus,
    ConflictError,
    EnqueueRolloutRequest,
    FilterLogic,
    InvalidRequestError,
    NamedResources,
    NotFoundError,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    RolloutConfig,
    RolloutMode,
    RolloutStatus,
    SortOrder,
    Span,
    TaskInput,
    Unset,
    Worker,
    WorkerStatus,
)
from pydantic import Discriminator, Tag, TypeAdapter

from ._http_models import API_PREFIX, IDEMPOTENCY_HEADER, WAIT_COMPLETE_HEADER, AddSpansResponse
from .base import LightningStore, LightningStoreCapabilities, LightningStoreStatistics

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "LightningStoreClient",
    "StoreAuthenticationError",
    "StoreClientError",
    "StoreConflictError",
    "StoreConnectionError",
    "StoreInvalidRequestError",
    "StoreNotFoundError",
    "StoreServerError",
]

logger = logging.getLogger("agl.store.client")


class StoreClientError(AglError):
    """A store call over HTTP failed. ``method`` is the store method, ``status`` the HTTP status (if any)."""

    def __init__(
        self,
        message: str,
        *,
        method: str,
        status: int | None = None,
        server_message: str | None = None,
        error_type: str | None = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.status = status
        self.server_message = server_message
        self.error_type = error_type


class StoreNotFoundError(StoreClientError, NotFoundError):
    """HTTP 404: an unknown id."""


class StoreConflictError(StoreClientError, ConflictError):
    """HTTP 409: the request conflicts with the store's state."""


class StoreInvalidRequestError(StoreClientError, InvalidRequestError):
    """HTTP 400, 413 or 422: the request is malformed, too large or does not match the schema."""


class StoreAuthenticationError(StoreClientError):
    """HTTP 401/403: missing or wrong bearer token."""


class StoreServerError(StoreClientError):
    """HTTP 5xx (or 408) that persisted through every retry."""


class StoreConnectionError(StoreClientError, ConnectionError):
    """The server could not be reached (or timed out) through every retry."""


_STATUS_ERRORS: dict[int, type[StoreClientError]] = {
    400: StoreInvalidRequestError,
    401: StoreAuthenticationError,
    403: StoreAuthenticationError,
    404: StoreNotFoundError,
    409: StoreConflictError,
    413: StoreInvalidRequestError,
    422: StoreInvalidRequestError,
}


def _rollout_kind(value: Any) -> str:
    if isinstance(value, dict):
        return "attempted" if value.get("attempt") is not None else "plain"
    return "attempted" if isinstance(value, AttemptedRollout) else "plain"


_AnyRollout = Annotated[
    Union[Annotated[AttemptedRollout, Tag("attempted")], Annotated[Rollout, Tag("plain")]],  # noqa: UP007
    Discriminator(_rollout_kind),
]

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_ROLLOUT = TypeAdapter(Rollout)
_ROLLOUTS = TypeAdapter(list[Rollout])
_ATTEMPTED = TypeAdapter(AttemptedRollout)
_ATTEMPTED_LIST = TypeAdapter(list[AttemptedRollout])
_ANY_ROLLOUT_OR_NONE: TypeAdapter[Rollout | AttemptedRollout | None] = TypeAdapter(_AnyRollout | None)  # type: ignore[arg-type]
_ROLLOUT_PAGE: TypeAdapter[PaginatedResult[Rollout | AttemptedRollout]] = TypeAdapter(
    PaginatedResult[_AnyRollout]
)  # type: ignore[arg-type]
_ATTEMPT = TypeAdapter(Attempt)
_ATTEMPT_OR_NONE = TypeAdapter(Union[Attempt, None])  # noqa: UP007
_ATTEMPT_PAGE = TypeAdapter(PaginatedResult[Attempt])
_RESOURCES = TypeAdapter(ResourcesUpdate)
_RESOURCES_OR_NONE = TypeAdapter(Union[ResourcesUpdate, None])  # noqa: UP007
_RESOURCES_PAGE = TypeAdapter(PaginatedResult[ResourcesUpdate])
_STORED = TypeAdapter(AddSpansResponse)
_SPAN_PAGE = TypeAdapter(PaginatedResult[Span])
_WORKER = TypeAdapter(Worker)
_WORKER_OR_NONE = TypeAdapter(Union[Worker, None])  # noqa: UP007
_WORKER_PAGE = TypeAdapter(PaginatedResult[Worker])

_SPAN_BATCH = 2000
"""Spans per request in ``add_many_spans`` (keeps bodies well under the server's size cap)."""


def _q(value: str) -> str:
    return quote(value, safe="")


def _drop_none(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


class LightningStoreClient(LightningStore):
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
    """

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        retry_delays: Sequence[float] = (1.0, 2.0, 5.0),
        health_retry_delays: Sequence[float] = (0.1, 0.2, 0.5),
        request_timeout: float = 30.0,
        connection_timeout: float = 5.0,
        long_poll_seconds: float = 25.0,
    ) -> None:
        if not address.startswith(("http://", "https://")):
            raise ValueError(f"store address must start with http:// or https://, got {address!r}")
        self.address = address.rstrip("/")
        self.token = token if token is not None else (os.environ.get("AGL_STORE_TOKEN") or None)
        self.retry_delays = tuple(retry_delays)
        self.health_retry_delays = tuple(health_retry_delays)
        self.request_timeout = request_timeout
        self.connection_timeout = connection_timeout
        self.long_poll_seconds = long_poll_seconds
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._api = self.address + API_PREFIX
        self._lock = threading.Lock()
        self._sessions: dict[int, tuple[weakref.ref[asyncio.AbstractEventLoop], aiohttp.ClientSession]] = {}
        self._headers = {"Content-Type": "application/json"}
        if self.token:
            self._headers["Authorization"] = f"Bearer {self.token}"

    def __repr__(self) -> str:
        return f"LightningStoreClient({self.address!r})"

    # -- pickling: only the configuration travels ----------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "token": self.token,
            "retry_delays": self.retry_delays,
            "health_retry_delays": self.health_retry_delays,
            "request_timeout": self.request_timeout,
            "connection_timeout": self.connection_timeout,
            "long_poll_seconds": self.long_poll_seconds,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)
        self._init_runtime()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=True, async_safe=True, zero_copy=True, otlp_traces=True)

    def otlp_traces_endpoint(self) -> str:
        return self.address + "/v1/traces"

    # -- sessions ------------------------------------------------------------------------------

    def _session(self) -> aiohttp.ClientSession:
        import aiohttp

        loop = asyncio.get_running_loop()
        key = id(loop)
        with self._lock:
            entry = self._sessions.get(key)
            if entry is not None and entry[0]() is loop and not entry[1].closed:
                return entry[1]
            for other in [
                k for k, (ref, _) in self._sessions.items() if (lp := ref()) is None or lp.is_closed()
            ]:
                del self._sessions[other]
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=256, keepalive_timeout=25.0),
                headers=self._headers,
            )
            self._sessions[key] = (weakref.ref(loop), session)
            return session

    async def close(self) -> None:
        """Close the session of the calling event loop (each thread that used the client closes its own).

        The client stays usable: a later call opens a new session.
        """
        try:
            current = asyncio.get_running_loop()
        except RuntimeError:
            return
        with self._lock:
            entry = self._sessions.pop(id(current), None)
            for other in [
                k for k, (ref, _) in self._sessions.items() if (lp := ref()) is None or lp.is_closed()
            ]:
                del self._sessions[other]
        if entry is not None and entry[0]() is current and not entry[1].closed:
            await entry[1].close()

    # -- the request loop ----------------------------------------------------------------------

    async def _healthy(self, session: aiohttp.ClientSession) -> bool:
        import aiohttp

        timeout = aiohttp.ClientTimeout(total=self.connection_timeout)
        for delay in (0.0, *self.health_retry_delays):
            if delay:
                await asyncio.sleep(delay)
            try:
                async with session.get(self._api + "/health", timeout=timeout) as response:
                    if response.status == 200:
                        return True
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
                pass
        return False

    def _http_error(self, op: str, verb: str, path: str, status: int, data: bytes) -> StoreClientError:
        detail: str | None = None
        error_type: str | None = None
        try:
            body = json.loads(data)
            if isinstance(body, dict):
                detail = str(body.get("detail", "")) or None
                error_type = body.get("error_type")
        except ValueError:
            pass
        if detail is None:
            detail = data[:500].decode("utf-8", "replace") or "(empty answer)"
        cls = _STATUS_ERRORS.get(
            status, StoreServerError if status >= 500 or status == 408 else StoreClientError
        )
        return cls(
            f"{op}: {detail} (HTTP {status} from {verb} {path})",
            method=op,
            status=status,
            server_message=detail,
            error_type=error_type,
        )

    async def _request(
        self,
        op: str,
        verb: Literal["GET", "POST"],
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        wait: float = 0.0,
    ) -> tuple[bytes, Mapping[str, str]]:
        """Send one call (with retries); returns the body and headers of the successful answer."""
        import aiohttp

        session = self._session()
        url = self._api + path
        data = _ANY.dump_json(body, serialize_as_any=True) if body is not None else None
        headers = {IDEMPOTENCY_HEADER: uuid.uuid4().hex} if verb == "POST" else None
        timeout = aiohttp.ClientTimeout(
            total=self.request_timeout + wait, sock_connect=self.connection_timeout
        )
        last: StoreClientError | None = None
        for attempt, delay in enumerate((0.0, *self.retry_delays)):
            if attempt:
                await asyncio.sleep(delay)
                if not await self._healthy(session):
                    continue
                logger.info("retrying %s (%s %s), try %d: %s", op, verb, path, attempt + 1, last)
            try:
                async with session.request(
                    verb, url, data=data, params=params, headers=headers, timeout=timeout
                ) as response:
                    payload = await response.read()
                    status = response.status
                    response_headers = response.headers
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                last = StoreConnectionError(
                    f"{op}: cannot reach the store at {self.address} ({reason})", method=op
                )
                continue
            if status < 400:
                return payload, response_headers
            last = self._http_error(op, verb, path, status, payload)
            if status < 500 and status != 408:
                raise last
        assert last is not None
        raise last

    async def _call(
        self,
        op: str,
        verb: Literal["GET", "POST"],
        path: str,
        adapter: TypeAdapter[Any],
        body: Any = None,
        *,
        params: Mapping[str, Any] | None = None,
        wait: float = 0.0,
    ) -> Any:
        payload, _ = await self._request(op, verb, path, body, params=params, wait=wait)
        return adapter.validate_json(payload)

    # -- the LightningStore contract ---------------------------------------------------------

    async def statistics(self) -> LightningStoreStatistics:
        return await self._call("statistics", "GET", "/statistics", _ANY)

    async def start_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
        worker_id: str | None = None,
    ) -> AttemptedRollout:
        body = {
            "input": input,
            "mode": mode,
            "resources_id": resources_id,
            "config": config,
            "metadata": metadata,
            "worker_id": worker_id,
        }
        return await self._call("start_rollout", "POST", "/rollouts", _ATTEMPTED, body)

    async def enqueue_rollout(
        self,
        input: TaskInput,
        mode: RolloutMode | None = None,
        resources_id: str | None = None,
        config: RolloutConfig | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> Rollout:
        request = {
            "input": input,
            "mode": mode,
            "resources_id": resources_id,
            "config": config,
            "metadata": metadata,
        }
        rollouts = await self._call(
            "enqueue_rollout", "POST", "/queues/rollouts/enqueue", _ROLLOUTS, {"rollouts": [request]}
        )
        return rollouts[0]

    async def enqueue_many_rollouts(self, requests: Sequence[EnqueueRolloutRequest]) -> list[Rollout]:
        if not requests:
            return []
        return await self._call(
            "enqueue_many_rollouts",
            "POST",
            "/queues/rollouts/enqueue",
            _ROLLOUTS,
            {"rollouts": list(requests)},
        )

    async def _dequeue(
        self, op: str, limit: int, worker_id: str | None, timeout: float
    ) -> list[AttemptedRollout]:
        deadline = time.monotonic() + max(timeout, 0.0)
        while True:
            chunk = max(0.0, min(deadline - time.monotonic(), self.long_poll_seconds))
            body = {"limit": limit, "worker_id": worker_id, "timeout": chunk}
            claimed = await self._call(
                op, "POST", "/queues/rollouts/dequeue", _ATTEMPTED_LIST, body, wait=chunk
            )
            if claimed or time.monotonic() >= deadline - 0.001:
                return claimed

    async def dequeue_rollout(
        self, worker_id: str | None = None, *, timeout: float = 0.0
    ) -> AttemptedRollout | None:
        claimed = await self._dequeue("dequeue_rollout", 1, worker_id, timeout)
        return claimed[0] if claimed else None

    async def dequeue_many_rollouts(
        self, *, limit: int = 1, worker_id: str | None = None, timeout: float = 0.0
    ) -> list[AttemptedRollout]:
        if limit <= 0:
            return []
        return await self._dequeue("dequeue_many_rollouts", limit, worker_id, timeout)

    async def start_attempt(self, rollout_id: str, worker_id: str | None = None) -> AttemptedRollout:
        return await self._call(
            "start_attempt",
            "POST",
            f"/rollouts/{_q(rollout_id)}/attempts",
            _ATTEMPTED,
            {"worker_id": worker_id},
        )

    async def query_rollouts(
        self,
        *,
        status_in: Sequence[RolloutStatus] | None = None,
        rollout_id_in: Sequence[str] | None = None,
        rollout_id_contains: str | None = None,
        filter_logic: FilterLogic = "and",
        sort_by: str | None = None,
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Rollout | AttemptedRollout]:
        body = _drop_none(
            {
                "status_in": list(status_in) if status_in is not None else None,
                "rollout_id_in": list(rollout_id_in) if rollout_id_in is not None else None,
                "rollout_id_contains": rollout_id_contains,
                "filter_logic": filter_logic,
                "sort_by": sort_by,
                "sort_order": sort_order,
                "limit": limit,
                "offset": offset,
            }
        )
        return await self._call("query_rollouts", "POST", "/rollouts/search", _ROLLOUT_PAGE, body)

    async def get_rollout_by_id(self, rollout_id: str) -> Rollout | AttemptedRollout | None:
        return await self._call(
            "get_rollout_by_id", "GET", f"/rollouts/{_q(rollout_id)}", _ANY_ROLLOUT_OR_NONE
        )

    async def query_attempts(
        self,
        rollout_id: str,
        *,
        sort_by: str | None = "sequence_id",
        sort_order: SortOrder = "asc",
        limit: int = -1,
        offset: int = 0,
    ) -> PaginatedResult[Attempt]:
        body = {"sort_by": sort_by, "sort_order": sort_order, "limit": limit, "offset": offset}
        return await self._call(
            "query_attempts", "POST", f"/rollouts/{_q(rollout_id)}/attempts/search", _ATTEMPT_PAGE, body
        )

    async def get_latest_attempt(self, rollout_id: str) -> Attempt | None:
        return await self._call(
            "get_latest_attempt", "GET", f"/rollouts/{_q(rollout_id)}/attempts/latest", _ATTEMPT_OR_NONE
        )

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
        fields = {
            "input": input,
            "mode": mode,
            "resources_id": resources_id,
            "status": status,
            "config": config,
            "metadata": metadata,
        }
        body = {k: v for k, v in fields.items() if v is not UNSET}
        return await self._call("update_rollout", "POST", f"/rollouts/{_q(rollout_id)}", _ROLLOUT, body)

    async def update_attempt(
        self,
        rollout_id: str,
        attempt_id: str | Literal["latest"],
        status: AttemptStatus | Unset = UNSET,
        worker_id: str | Unset = UNSET,
        last_heartbeat_time: float | Unset = UNSET,
        metadata: dict[str, Any] | Unset = UNSET,
    ) -> Attempt:
        fields = {
            "status": status,
            "worker_id": worker_id,
            "last_heartbeat_time": last_heartbeat_time,
            "metadata": metadata,
        }
        body = {k: v for k, v in fields.items() if v is not UNSET}
        return await self._call(
            "update_attempt", "POST", f"/rollouts/{_q(rollout_id)}/attempts/{_q(attempt_id)}", _ATTEMPT, body
        )

    async def wait_for_rollouts(
        self, *, rollout_ids: Sequence[str], timeout: float | None = None
    ) -> list[Rollout]:
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
            done = _ROLLOUTS.validate_json(payload)
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
        body = _drop_none(
            {
                "resources_id": resources_id,
                "resources_id_contains": resources_id_contains,
                "sort_by": sort_by,
                "sort_order": sort_order,
                "limit": limit,
                "offset": offset,
            }
        )
        return await self._call("query_resources", "POST", "/resources/search", _RESOURCES_PAGE, body)

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
        body = _drop_none(
            {
                "rollout_id": rollout_id,
                "attempt_id": attempt_id,
                "trace_id": trace_id,
                "trace_id_contains": trace_id_contains,
                "span_id": span_id,
                "span_id_contains": span_id_contains,
                "parent_id": parent_id,
                "parent_id_contains": parent_id_contains,
                "name": name,
                "name_contains": name_contains,
                "filter_logic": filter_logic,
                "limit": limit,
                "offset": offset,
                "sort_order": sort_order,
            }
        )
        body["sort_by"] = sort_by  # None (no sort) is meaningful here
        return await self._call("query_spans", "POST", "/spans/search", _SPAN_PAGE, body)

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
        body = _drop_none(
            {
                "status_in": list(status_in) if status_in is not None else None,
                "worker_id_contains": worker_id_contains,
                "filter_logic": filter_logic,
                "sort_by": sort_by,
                "sort_order": sort_order,
                "limit": limit,
                "offset": offset,
            }
        )
        return await self._call("query_workers", "POST", "/workers/search", _WORKER_PAGE, body)

    async def get_worker_by_id(self, worker_id: str) -> Worker | None:
        return await self._call("get_worker_by_id", "GET", f"/workers/{_q(worker_id)}", _WORKER_OR_NONE)

    async def update_worker(self, worker_id: str, heartbeat_stats: dict[str, Any] | Unset = UNSET) -> Worker:
        body = {} if heartbeat_stats is UNSET else {"heartbeat_stats": heartbeat_stats}
        return await self._call("update_worker", "POST", f"/workers/{_q(worker_id)}", _WORKER, body)
