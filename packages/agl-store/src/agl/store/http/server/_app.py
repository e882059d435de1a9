"""The FastAPI application that serves a :class:`~agl.store.LightningStore` under ``/v1/agl``.

Routes return pre-serialised JSON (pydantic's Rust serializer) instead of letting FastAPI validate and
copy each response model again; the ``response_model`` declarations still drive the OpenAPI schema. The
hot routes are declared from the route table (:mod:`._routes`) and answered by the same
:class:`~._ops.HotOps` methods as the hot path (which answers them before they reach this app).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from agl.types import (
    UNSET,
    Attempt,
    AttemptedRollout,
    InvalidRequestError,
    NamedResources,
    PaginatedResult,
    ResourcesUpdate,
    Rollout,
    Span,
    Worker,
)
from agl.types.query import AttemptQuery, ResourcesQuery, RolloutQuery, SpanQuery, WorkerQuery
from fastapi import Body, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from ...base import LightningStore
from .._models import (
    API_PREFIX,
    WAIT_COMPLETE_HEADER,
    AttemptQueryBody,
    AttemptQueryParams,
    ErrorBody,
    ResourcesQueryParams,
    RolloutOrAttempted,
    RolloutQueryParams,
    SpanQueryParams,
    StartAttemptRequest,
    UpdateRolloutRequest,
    WaitRequest,
    WorkerQueryParams,
)
from ._ops import (
    HotOps,
    Reply,
    encode,
    error_body,
    error_reply,
    fault_reply,
    validation_reply,
)
from ._options import AppOptions
from ._routes import HOT_ROUTES, HotRoute

__all__ = ["create_app"]

logger = logging.getLogger("agl.store.server")

_JSON = "application/json"


def _json(value: Any, status_code: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(encode(value), status_code=status_code, media_type=_JSON, headers=headers)


def _reply(reply: Reply) -> Response:
    status, body, headers = reply
    return Response(body, status_code=status, media_type=_JSON, headers=headers)


_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": desc}
    for code, desc in [
        (400, "Invalid request (bad filter, sort field, null where a value is needed...)"),
        (401, "Missing or wrong bearer token"),
        (404, "Unknown id"),
        (409, "Conflict with the current state"),
        (413, "Request body too large"),
        (
            422,
            "Body or parameters do not match the schema (the message names the field), or an Idempotency-Key "
            "is reused with another request (IdempotencyKeyReused)",
        ),
        (500, "Server fault"),
    ]
}


def create_app(store: LightningStore, options: AppOptions) -> FastAPI:
    """The FastAPI application: every route, validation and the OpenAPI schema (no middleware)."""
    from ... import __version__
    from .otlp import install_otlp_routes

    app = FastAPI(
        title="agl LightningStore",
        version=__version__,
        description="Rollouts, attempts, spans, resources and workers of an agl training run.",
        responses=_ERROR_RESPONSES,
        redoc_url=None,
    )
    _install_error_handlers(app, options.debug)
    _install_schema_fixups(app)
    ops = HotOps(store, options)
    _declare_rollout_routes(app, store, ops)
    _declare_attempt_routes(app, store)
    _declare_resource_routes(app, store)
    _declare_span_and_worker_routes(app, store)
    install_otlp_routes(app, store, max_decompressed_bytes=options.max_body_bytes)
    _declare_hot_routes(app, ops)  # last: a literal path of another route wins over a hot route's id
    return app


# The query routes validate their query object themselves and hand it to the store's run_query.


def _declare_rollout_routes(app: FastAPI, store: LightningStore, ops: HotOps) -> None:
    prefix = API_PREFIX
    query_rollouts_hook = store.run_query
    options = ops.options

    @app.get(prefix + "/statistics", response_model=dict[str, Any], tags=["statistics"])
    async def statistics() -> Response:
        return _json(dict(await store.statistics()))

    @app.get(prefix + "/rollouts", response_model=PaginatedResult[RolloutOrAttempted], tags=["rollouts"])
    async def query_rollouts(q: Annotated[RolloutQueryParams, Query()]) -> Response:
        return _json(await query_rollouts_hook(q))

    @app.post(
        prefix + "/rollouts/search", response_model=PaginatedResult[RolloutOrAttempted], tags=["rollouts"]
    )
    async def search_rollouts(q: RolloutQuery) -> Response:
        return _json(await query_rollouts_hook(q))

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

    @app.post(prefix + "/waits/rollouts", response_model=list[RolloutOrAttempted], tags=["rollouts"])
    async def wait_for_rollouts(body: WaitRequest) -> Response:
        ids = body.rollout_ids
        wait = ops.bounded(body.timeout)
        done = await ops.until_shutdown(store.wait_for_rollouts(rollout_ids=ids, timeout=wait), None)
        if done is None:  # stopping: answer with a plain check
            done = await store.wait_for_rollouts(rollout_ids=ids, timeout=0)
        complete = (body.timeout is not None and body.timeout <= options.max_wait_seconds) or len(
            {r.rollout_id for r in done}
        ) >= len(set(ids))
        if not complete:
            known = await store.query_rollouts(rollout_id_in=list(set(ids)))
            complete = {r.rollout_id for r in known} <= {r.rollout_id for r in done}
        return _json(done, headers={WAIT_COMPLETE_HEADER: "true" if complete else "false"})


def _declare_attempt_routes(app: FastAPI, store: LightningStore) -> None:
    prefix = API_PREFIX
    query_attempts_hook = store.run_query

    @app.post(
        prefix + "/rollouts/{rollout_id}/attempts",
        status_code=201,
        response_model=AttemptedRollout,
        tags=["attempts"],
    )
    async def start_attempt(rollout_id: str, body: StartAttemptRequest | None = None) -> Response:
        worker_id = body.worker_id if body is not None else None
        return _json(await store.start_attempt(rollout_id, worker_id=worker_id), 201)

    async def _query_attempts(
        rollout_id: str, page: Any
    ) -> Response:  # AttemptQueryParams/Body (made at run time)
        query = AttemptQuery.model_construct(rollout_id=rollout_id, **dict(page))
        return _json(await query_attempts_hook(query))

    @app.get(
        prefix + "/rollouts/{rollout_id}/attempts", response_model=PaginatedResult[Attempt], tags=["attempts"]
    )
    async def query_attempts(
        rollout_id: str,
        q: Annotated[AttemptQueryParams, Query()],  # pyright: ignore[reportInvalidTypeForm, reportUnknownParameterType]  (a model made by create_model)
    ) -> Response:
        return await _query_attempts(rollout_id, q)

    @app.post(
        prefix + "/rollouts/{rollout_id}/attempts/search",
        response_model=PaginatedResult[Attempt],
        tags=["attempts"],
    )
    async def search_attempts(
        rollout_id: str,
        q: AttemptQueryBody,  # pyright: ignore[reportInvalidTypeForm, reportUnknownParameterType]  (made by create_model)
    ) -> Response:
        return await _query_attempts(rollout_id, q)

    @app.get(
        prefix + "/rollouts/{rollout_id}/attempts/latest", response_model=Attempt | None, tags=["attempts"]
    )
    async def latest_attempt(rollout_id: str) -> Response:
        return _json(await store.get_latest_attempt(rollout_id))


def _declare_resource_routes(app: FastAPI, store: LightningStore) -> None:
    prefix = API_PREFIX
    query_resources_hook = store.run_query

    @app.get(prefix + "/resources", response_model=PaginatedResult[ResourcesUpdate], tags=["resources"])
    async def query_resources(q: Annotated[ResourcesQueryParams, Query()]) -> Response:
        return _json(await query_resources_hook(q))

    @app.post(
        prefix + "/resources/search", response_model=PaginatedResult[ResourcesUpdate], tags=["resources"]
    )
    async def search_resources(q: ResourcesQuery) -> Response:
        return _json(await query_resources_hook(q))

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


def _declare_span_and_worker_routes(app: FastAPI, store: LightningStore) -> None:
    prefix = API_PREFIX
    query_spans_hook = store.run_query
    query_workers_hook = store.run_query

    @app.get(prefix + "/spans", response_model=PaginatedResult[Span], tags=["spans"])
    async def query_spans(q: Annotated[SpanQueryParams, Query()]) -> Response:
        """Spans of one rollout, or of several (``rollout_id`` repeated)."""
        return _json(await query_spans_hook(q))

    @app.post(prefix + "/spans/search", response_model=PaginatedResult[Span], tags=["spans"])
    async def search_spans(q: SpanQuery) -> Response:
        """Spans of one rollout, or of several (``rollout_id`` a list): one request for a training step."""
        return _json(await query_spans_hook(q))

    @app.get(prefix + "/workers", response_model=PaginatedResult[Worker], tags=["workers"])
    async def query_workers(q: Annotated[WorkerQueryParams, Query()]) -> Response:
        return _json(await query_workers_hook(q))

    @app.post(prefix + "/workers/search", response_model=PaginatedResult[Worker], tags=["workers"])
    async def search_workers(q: WorkerQuery) -> Response:
        return _json(await query_workers_hook(q))

    @app.get(prefix + "/workers/{worker_id:path}", response_model=Worker | None, tags=["workers"])
    async def get_worker(worker_id: str) -> Response:
        return _json(await store.get_worker_by_id(worker_id))


def _declare_hot_routes(app: FastAPI, ops: HotOps) -> None:
    """The hot routes of the route table, answered by the same :class:`HotOps` methods as the hot path."""
    for route in HOT_ROUTES:
        app.add_api_route(
            route.template,
            _hot_endpoint(route, getattr(ops, route.operation)),
            methods=[route.method],
            status_code=route.status_code,
            response_model=route.response_model,
            tags=[route.tag],
            name=route.operation,
            description=route.summary,
        )


def _hot_endpoint(
    route: HotRoute, handler: Callable[..., Awaitable[Reply]]
) -> Callable[..., Awaitable[Response]]:
    """An endpoint whose signature declares the route's ids and body, for FastAPI to validate and document."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter(name, keyword, annotation=str) for name in route.params]
    if route.body is not None:
        if route.body_required:
            params.append(inspect.Parameter("body", keyword, annotation=route.body))
        else:
            params.append(inspect.Parameter("body", keyword, annotation=route.body | None, default=None))
    names = [p.name for p in params]

    async def endpoint(**values: Any) -> Response:
        return _reply(await handler(*(values[name] for name in names)))

    endpoint.__signature__ = inspect.Signature(params, return_annotation=Response)
    endpoint.__name__ = route.operation
    return endpoint


def _install_schema_fixups(app: FastAPI) -> None:
    """Make the generated schema say what validation enforces: a resource's ``resource_type`` tag is required
    (it picks the model of a discriminated union, so it cannot be left out even though it has a default)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            for component in schema.get("components", {}).get("schemas", {}).values():
                if "resource_type" in component.get("properties", {}):
                    required = component.setdefault("required", [])
                    if "resource_type" not in required:
                        required.insert(0, "resource_type")
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi


def _allowed_methods(request: Request) -> str:
    """Every method served at the request's path (Starlette's 405 lists only the first matching route's)."""
    from starlette.routing import Match

    routes = request.app.router.routes
    # The first route whose path matches decides which documented path this is (routes are tried in order).
    template = next((r.path for r in routes if r.matches(request.scope)[0] != Match.NONE), None)
    methods: set[str] = set()
    for route in routes:
        if getattr(route, "path", None) == template:
            methods |= set(getattr(route, "methods", None) or ())
    methods.discard("HEAD")
    return ", ".join(sorted(methods))


def _install_error_handlers(app: FastAPI, debug: bool) -> None:
    async def mapped(request: Request, exc: Exception) -> Response:
        reply = error_reply(exc)
        return _reply(reply if reply is not None else fault_reply(exc, debug))

    async def validation(request: Request, exc: Exception) -> Response:
        return _reply(validation_reply(exc.errors() if isinstance(exc, RequestValidationError) else []))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        response = _reply(error_body(exc.status_code, str(exc.detail), "HTTPException"))
        if exc.headers:
            response.headers.update(exc.headers)
        if exc.status_code == 405:
            response.headers["Allow"] = _allowed_methods(request)
        return response

    async def fault(request: Request, exc: Exception) -> Response:
        reply = error_reply(exc)  # a database error or a too deep request is not a server fault
        return _reply(reply if reply is not None else fault_reply(exc, debug))

    app.add_exception_handler(
        ValueError, mapped
    )  # NotFoundError, ConflictError, InvalidRequestError, bad input
    app.add_exception_handler(RequestValidationError, validation)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, fault)
