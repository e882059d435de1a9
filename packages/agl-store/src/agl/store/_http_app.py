"""The FastAPI application that serves a :class:`~agl.store.LightningStore` under ``/v1/agl``.

Routes return pre-serialised JSON (pydantic's Rust serializer) instead of letting FastAPI validate and
copy each response model again; the ``response_model`` declarations still drive the OpenAPI schema.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from agl.types import (
    UNSET,
    Attempt,
    AttemptedRollout,
    ConflictError,
    InvalidRequestError,
    NamedResources,
    NotFoundError,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)
from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import TypeAdapter
from starlette.exceptions import HTTPException as StarletteHTTPException

from ._http_middleware import (
    BearerTokenMiddleware,
    BodySizeLimitMiddleware,
    IdempotencyMiddleware,
    Message,
    Receive,
    Scope,
    Send,
    json_error,
)
from ._http_models import (
    API_PREFIX,
    WAIT_COMPLETE_HEADER,
    AddSpansRequest,
    AddSpansResponse,
    AttemptQuery,
    DequeueRequest,
    EnqueueRequest,
    ErrorBody,
    HealthBody,
    NextSequenceIdRequest,
    NextSequenceIdResponse,
    NextSequenceIdsRequest,
    NextSequenceIdsResponse,
    ResourcesQuery,
    RolloutOrAttempted,
    RolloutQuery,
    SpanQuery,
    StartAttemptRequest,
    StartRolloutRequest,
    UpdateAttemptRequest,
    UpdateRolloutRequest,
    UpdateWorkerRequest,
    WaitRequest,
    WorkerQuery,
)
from .base import LightningStore

__all__ = ["AppOptions", "create_app"]

logger = logging.getLogger("agl.store.server")

T = TypeVar("T")

_ANY: TypeAdapter[Any] = TypeAdapter(Any)
_JSON = "application/json"


@dataclass
class AppOptions:
    token: str | None = None
    cors_allow_origins: Sequence[str] = ()
    max_body_bytes: int = 64 * 1024 * 1024
    max_wait_seconds: float = 30.0
    debug: bool = False
    shutdown: asyncio.Event | None = field(default=None, repr=False)
    """Set when the server stops: long polls end early with what they have."""


def _json(value: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(
        _ANY.dump_json(value, serialize_as_any=True),
        status_code=status_code,
        media_type=_JSON,
        headers=headers,
    )


def _error(status: int, detail: str, error_type: str, **extra: Any) -> Response:
    body = ErrorBody(detail=detail, error_type=error_type, **extra)
    return Response(body.model_dump_json(exclude_none=True), status_code=status, media_type=_JSON)


def _validation_message(errors: Sequence[Any]) -> str:
    parts = []
    for err in errors:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)


def _jsonable_errors(errors: Sequence[Any]) -> list[dict[str, Any]]:
    return [
        {
            "loc": [str(p) for p in err.get("loc", ())],
            "msg": str(err.get("msg", "")),
            "type": str(err.get("type", "")),
        }
        for err in errors
    ]


class _FaultMiddleware:
    """Turn an unexpected exception into a 500 without a traceback (unless debug) and log it here."""

    def __init__(self, app: Any, debug: bool) -> None:
        self.app = app
        self.debug = debug

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            logger.exception("store server fault on %s %s", scope.get("method"), scope.get("path"))
            if started:
                raise
            detail = f"internal server error ({type(exc).__name__}); see the server log"
            start, body = json_error(500, detail, type(exc).__name__)
            if self.debug:
                import json as _json_mod

                payload = {"detail": f"{type(exc).__name__}: {exc}", "error_type": type(exc).__name__}
                payload["traceback"] = traceback.format_exc()
                data = _json_mod.dumps(payload).encode()
                start["headers"] = [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                ]
                body = {"type": "http.response.body", "body": data}
            await send(start)
            await send(body)


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": desc}
    for code, desc in [
        (400, "Invalid request (bad filter, sort field, null where a value is needed...)"),
        (401, "Missing or wrong bearer token"),
        (404, "Unknown id"),
        (409, "Conflict with the current state"),
        (413, "Request body too large"),
        (422, "Body or parameters do not match the schema; the message names the field"),
        (500, "Server fault"),
    ]
}


def create_app(store: LightningStore, options: AppOptions) -> FastAPI:
    """Build the REST API over ``store``."""
    from . import __version__

    app = FastAPI(
        title="agl LightningStore",
        version=__version__,
        description="Rollouts, attempts, spans, resources and workers of an agl training run.",
        responses=_ERROR_RESPONSES,
        redoc_url=None,
    )
    _install_error_handlers(app)

    async def until_shutdown(coro: Awaitable[T], default: T) -> T:
        """Await ``coro``, or give up with ``default`` when the server is stopping."""
        shutdown = options.shutdown
        if shutdown is None:
            return await coro
        task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(shutdown.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        if task.done():
            return task.result()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        return default

    def bounded(timeout: float | None) -> float:
        return options.max_wait_seconds if timeout is None else min(timeout, options.max_wait_seconds)

    prefix = API_PREFIX

    @app.get(prefix + "/health", response_model=HealthBody, tags=["health"])
    async def health() -> Response:
        return Response(b'{"status":"ok"}', media_type=_JSON)

    @app.get(prefix + "/statistics", response_model=dict[str, Any], tags=["statistics"])
    async def statistics() -> Response:
        return _json(dict(await store.statistics()))

    # -- queue and rollouts ---------------------------------------------------------------------

    @app.post(
        prefix + "/queues/rollouts/enqueue", status_code=201, response_model=list[Rollout], tags=["rollouts"]
    )
    async def enqueue(body: EnqueueRequest) -> Response:
        if not body.rollouts:
            return _json([], 201)
        return _json(await store.enqueue_many_rollouts(body.rollouts), 201)

    @app.post(prefix + "/queues/rollouts/dequeue", response_model=list[AttemptedRollout], tags=["rollouts"])
    async def dequeue(body: DequeueRequest | None = None) -> Response:
        body = body or DequeueRequest()
        if body.limit <= 0:
            return _json([])
        claimed = await until_shutdown(
            store.dequeue_many_rollouts(
                limit=body.limit, worker_id=body.worker_id, timeout=bounded(body.timeout)
            ),
            [],
        )
        return _json(claimed)

    @app.post(prefix + "/rollouts", status_code=201, response_model=AttemptedRollout, tags=["rollouts"])
    async def start_rollout(body: StartRolloutRequest) -> Response:
        rollout = await store.start_rollout(
            input=body.input,
            mode=body.mode,
            resources_id=body.resources_id,
            config=body.config,
            metadata=body.metadata,
            worker_id=body.worker_id,
        )
        return _json(rollout, 201)

    async def _query_rollouts(q: RolloutQuery) -> Response:
        return _json(
            await store.query_rollouts(
                status_in=q.status_in,
                rollout_id_in=q.rollout_id_in,
                rollout_id_contains=q.rollout_id_contains,
                filter_logic=q.filter_logic,
                sort_by=q.sort_by,
                sort_order=q.sort_order,
                limit=q.limit,
                offset=q.offset,
            )
        )

    @app.get(prefix + "/rollouts", response_model=PaginatedResult[RolloutOrAttempted], tags=["rollouts"])
    async def query_rollouts(q: Annotated[RolloutQuery, Query()]) -> Response:
        return await _query_rollouts(q)

    @app.post(
        prefix + "/rollouts/search", response_model=PaginatedResult[RolloutOrAttempted], tags=["rollouts"]
    )
    async def search_rollouts(q: RolloutQuery) -> Response:
        return await _query_rollouts(q)

    @app.get(prefix + "/rollouts/{rollout_id}", response_model=RolloutOrAttempted | None, tags=["rollouts"])
    async def get_rollout(rollout_id: str) -> Response:
        return _json(await store.get_rollout_by_id(rollout_id))

    @app.post(prefix + "/rollouts/{rollout_id}", response_model=Rollout, tags=["rollouts"])
    async def update_rollout(rollout_id: str, body: UpdateRolloutRequest) -> Response:
        present = body.model_fields_set
        for name in ("status", "config"):
            if name in present and getattr(body, name) is None:
                raise InvalidRequestError(f"{name} may not be null in an update; leave it out to keep it")
        values = {
            name: getattr(body, name) if name in present else UNSET
            for name in UpdateRolloutRequest.model_fields
        }
        return _json(await store.update_rollout(rollout_id, **values))

    @app.post(
        prefix + "/rollouts/{rollout_id}/attempts",
        status_code=201,
        response_model=AttemptedRollout,
        tags=["attempts"],
    )
    async def start_attempt(rollout_id: str, body: StartAttemptRequest | None = None) -> Response:
        worker_id = body.worker_id if body is not None else None
        return _json(await store.start_attempt(rollout_id, worker_id=worker_id), 201)

    async def _query_attempts(rollout_id: str, q: AttemptQuery) -> Response:
        return _json(
            await store.query_attempts(
                rollout_id, sort_by=q.sort_by, sort_order=q.sort_order, limit=q.limit, offset=q.offset
            )
        )

    @app.get(
        prefix + "/rollouts/{rollout_id}/attempts", response_model=PaginatedResult[Attempt], tags=["attempts"]
    )
    async def query_attempts(rollout_id: str, q: Annotated[AttemptQuery, Query()]) -> Response:
        return await _query_attempts(rollout_id, q)

    @app.post(
        prefix + "/rollouts/{rollout_id}/attempts/search",
        response_model=PaginatedResult[Attempt],
        tags=["attempts"],
    )
    async def search_attempts(rollout_id: str, q: AttemptQuery) -> Response:
        return await _query_attempts(rollout_id, q)

    @app.get(
        prefix + "/rollouts/{rollout_id}/attempts/latest", response_model=Attempt | None, tags=["attempts"]
    )
    async def latest_attempt(rollout_id: str) -> Response:
        return _json(await store.get_latest_attempt(rollout_id))

    @app.post(
        prefix + "/rollouts/{rollout_id}/attempts/{attempt_id}", response_model=Attempt, tags=["attempts"]
    )
    async def update_attempt(rollout_id: str, attempt_id: str, body: UpdateAttemptRequest) -> Response:
        present = body.model_fields_set
        values: dict[str, Any] = {}
        for name in UpdateAttemptRequest.model_fields:
            if name in present:
                value = getattr(body, name)
                if value is None:
                    raise InvalidRequestError(
                        f"{name} may not be null in an attempt update; leave it out to keep it"
                    )
                values[name] = value
        return _json(await store.update_attempt(rollout_id, attempt_id, **values))

    @app.post(prefix + "/waits/rollouts", response_model=list[Rollout], tags=["rollouts"])
    async def wait_for_rollouts(body: WaitRequest) -> Response:
        ids = body.rollout_ids
        wait = bounded(body.timeout)
        done = await until_shutdown(store.wait_for_rollouts(rollout_ids=ids, timeout=wait), None)
        if done is None:  # stopping: answer with a plain check
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        complete = (body.timeout is not None and body.timeout <= options.max_wait_seconds) or len(
            {r.rollout_id for r in done}
        ) >= len(set(ids))
        if not complete:
            known = await store.query_rollouts(rollout_id_in=list(set(ids)))
            complete = {r.rollout_id for r in known} <= {r.rollout_id for r in done}
        return _json(done, headers={WAIT_COMPLETE_HEADER: "true" if complete else "false"})

    # -- resources ------------------------------------------------------------------------------

    async def _query_resources(q: ResourcesQuery) -> Response:
        return _json(
            await store.query_resources(
                resources_id=q.resources_id,
                resources_id_contains=q.resources_id_contains,
                sort_by=q.sort_by,
                sort_order=q.sort_order,
                limit=q.limit,
                offset=q.offset,
            )
        )

    @app.get(prefix + "/resources", response_model=PaginatedResult[ResourcesUpdate], tags=["resources"])
    async def query_resources(q: Annotated[ResourcesQuery, Query()]) -> Response:
        return await _query_resources(q)

    @app.post(
        prefix + "/resources/search", response_model=PaginatedResult[ResourcesUpdate], tags=["resources"]
    )
    async def search_resources(q: ResourcesQuery) -> Response:
        return await _query_resources(q)

    @app.post(prefix + "/resources", status_code=201, response_model=ResourcesUpdate, tags=["resources"])
    async def add_resources(resources: Annotated[NamedResources, Body()]) -> Response:
        return _json(await store.add_resources(resources), 201)

    @app.get(prefix + "/resources/latest", response_model=ResourcesUpdate | None, tags=["resources"])
    async def latest_resources() -> Response:
        return _json(await store.get_latest_resources())

    @app.get(
        prefix + "/resources/{resources_id:path}", response_model=ResourcesUpdate | None, tags=["resources"]
    )
    async def get_resources(resources_id: str) -> Response:
        return _json(await store.get_resources_by_id(resources_id))

    @app.post(prefix + "/resources/{resources_id:path}", response_model=ResourcesUpdate, tags=["resources"])
    async def update_resources(resources_id: str, resources: Annotated[NamedResources, Body()]) -> Response:
        return _json(await store.update_resources(resources_id, resources))

    # -- spans ----------------------------------------------------------------------------------

    @app.post(prefix + "/spans", status_code=201, response_model=Span | None, tags=["spans"])
    async def add_span(span: Span) -> Response:
        return _json(await store.add_span(span), 201)

    @app.post(prefix + "/spans/batch", status_code=201, response_model=AddSpansResponse, tags=["spans"])
    async def add_many_spans(body: AddSpansRequest) -> Response:
        """Store many spans; answers with the positions of those stored (not the spans again)."""
        if not body.spans:
            return _json({"stored": []}, 201)
        stored = await store.add_many_spans(body.spans)
        return _json({"stored": _positions(body.spans, stored)}, 201)

    async def _query_spans(q: SpanQuery) -> Response:
        return _json(
            await store.query_spans(
                q.rollout_id,
                q.attempt_id,
                trace_id=q.trace_id,
                trace_id_contains=q.trace_id_contains,
                span_id=q.span_id,
                span_id_contains=q.span_id_contains,
                parent_id=q.parent_id,
                parent_id_contains=q.parent_id_contains,
                name=q.name,
                name_contains=q.name_contains,
                filter_logic=q.filter_logic,
                limit=q.limit,
                offset=q.offset,
                sort_by=q.sort_by,
                sort_order=q.sort_order,
            )
        )

    @app.get(prefix + "/spans", response_model=PaginatedResult[Span], tags=["spans"])
    async def query_spans(q: Annotated[SpanQuery, Query()]) -> Response:
        return await _query_spans(q)

    @app.post(prefix + "/spans/search", response_model=PaginatedResult[Span], tags=["spans"])
    async def search_spans(q: SpanQuery) -> Response:
        return await _query_spans(q)

    @app.post(prefix + "/spans/next", response_model=NextSequenceIdResponse, tags=["spans"])
    async def next_sequence_id(body: NextSequenceIdRequest) -> Response:
        value = await store.get_next_span_sequence_id(body.rollout_id, body.attempt_id)
        return _json({"sequence_id": value})

    @app.post(prefix + "/spans/next/batch", response_model=NextSequenceIdsResponse, tags=["spans"])
    async def next_sequence_ids(body: NextSequenceIdsRequest) -> Response:
        values = await store.get_many_span_sequence_ids(body.pairs) if body.pairs else []
        return _json({"sequence_ids": values})

    # -- workers --------------------------------------------------------------------------------

    async def _query_workers(q: WorkerQuery) -> Response:
        return _json(
            await store.query_workers(
                status_in=q.status_in,
                worker_id_contains=q.worker_id_contains,
                filter_logic=q.filter_logic,
                sort_by=q.sort_by,
                sort_order=q.sort_order,
                limit=q.limit,
                offset=q.offset,
            )
        )

    @app.get(prefix + "/workers", response_model=PaginatedResult[Worker], tags=["workers"])
    async def query_workers(q: Annotated[WorkerQuery, Query()]) -> Response:
        return await _query_workers(q)

    @app.post(prefix + "/workers/search", response_model=PaginatedResult[Worker], tags=["workers"])
    async def search_workers(q: WorkerQuery) -> Response:
        return await _query_workers(q)

    @app.get(prefix + "/workers/{worker_id:path}", response_model=Worker | None, tags=["workers"])
    async def get_worker(worker_id: str) -> Response:
        return _json(await store.get_worker_by_id(worker_id))

    @app.post(prefix + "/workers/{worker_id:path}", response_model=Worker, tags=["workers"])
    async def update_worker(worker_id: str, body: UpdateWorkerRequest | None = None) -> Response:
        stats: Any = UNSET
        if body is not None and "heartbeat_stats" in body.model_fields_set:
            if body.heartbeat_stats is None:
                raise InvalidRequestError(
                    "heartbeat_stats may not be null; leave it out to keep the current stats"
                )
            stats = body.heartbeat_stats
        return _json(await store.update_worker(worker_id, heartbeat_stats=stats))

    # -- OTLP -----------------------------------------------------------------------------------

    from .otlp import install_otlp_routes

    install_otlp_routes(app, store, max_decompressed_bytes=options.max_body_bytes)

    # Outermost last: CORS → token → size cap → idempotent replay → fault barrier → routes.
    app.add_middleware(_FaultMiddleware, debug=options.debug)
    app.add_middleware(IdempotencyMiddleware)
    app.add_middleware(BodySizeLimitMiddleware, max_body_bytes=options.max_body_bytes)
    if options.token:
        app.add_middleware(BearerTokenMiddleware, token=options.token)
    origins = [o.strip() for o in options.cors_allow_origins if o and o.strip()]
    if origins:
        from starlette.middleware.cors import CORSMiddleware

        app.add_middleware(
            CORSMiddleware,
            allow_origins=origins,
            allow_methods=["*"],
            allow_headers=["*"],
            allow_credentials="*" not in origins,
            expose_headers=["*"],
        )
    return app


def _positions(sent: Sequence[Span], stored: Sequence[Span]) -> list[int]:
    """Where each stored span sits in the request (by identity, else by its key, first unused match)."""
    index = {id(span): i for i, span in enumerate(sent)}
    by_key: dict[tuple[str, str, str], list[int]] = {}
    positions: list[int] = []
    for span in stored:
        i = index.get(id(span))
        if i is None:
            if not by_key:
                for j, s in enumerate(sent):
                    by_key.setdefault((s.rollout_id, s.attempt_id, s.span_id), []).append(j)
            candidates = by_key.get((span.rollout_id, span.attempt_id, span.span_id))
            if not candidates:
                continue
            i = candidates.pop(0)
        positions.append(i)
    return positions


def _install_error_handlers(app: FastAPI) -> None:
    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(404, str(exc), type(exc).__name__)

    async def conflict(request: Request, exc: Exception) -> Response:
        return _error(409, str(exc), type(exc).__name__)

    async def invalid(request: Request, exc: Exception) -> Response:
        return _error(400, str(exc) or type(exc).__name__, type(exc).__name__)

    async def validation(request: Request, exc: Exception) -> Response:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        return _error(
            422, _validation_message(errors), "RequestValidationError", errors=_jsonable_errors(errors)
        )

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        response = _error(exc.status_code, str(exc.detail), "HTTPException")
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    app.add_exception_handler(NotFoundError, not_found)
    app.add_exception_handler(ConflictError, conflict)
    app.add_exception_handler(ValueError, invalid)  # InvalidRequestError and other bad input
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
