"""The hot routes, declared once (what a runner calls for every rollout), matched and answered.

Each :class:`HotRoute` names its method, path template, the :class:`~._ops.HotOps` operation that answers
it, and the body it reads. Everything that serves a hot route reads this table: the HTTP protocol
(:class:`~._hot.HotCycle`), the ASGI layer (:class:`~._hot.HotPathMiddleware`) and the FastAPI app, which
documents the routes in the OpenAPI schema and answers them for callers of the bare app. A new hot route is
one entry here and one :class:`~._ops.HotOps` method.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from agl.types import Attempt, AttemptedRollout, Rollout, Span, Worker
from pydantic import BaseModel, TypeAdapter, ValidationError

from .._models import (
    API_PREFIX,
    AddSpansInOrderResponse,
    AddSpansRequest,
    AddSpansResponse,
    ClaimRequest,
    ClaimResponse,
    DequeueRequest,
    EnqueueRequest,
    FinishAttemptRequest,
    FinishAttemptResponse,
    HealthBody,
    NextSequenceIdRequest,
    NextSequenceIdResponse,
    NextSequenceIdsRequest,
    NextSequenceIdsResponse,
    RolloutOrAttempted,
    StartRolloutRequest,
    UpdateAttemptRequest,
    UpdateWorkerRequest,
)
from ._ops import Reply, error_reply, validation_reply
from .metrics import LITERAL_SEGMENTS, route_template

if TYPE_CHECKING:
    from ._ops import HotOps

__all__ = ["HOT_ROUTES", "RESERVED_IDS", "HotRoute", "RouteMatch", "RouteTable", "answer"]

_PARAM = re.compile(r"\{(\w+)(:path)?\}")

RESERVED_IDS = frozenset({"search"})
"""Path segments that belong to another route where a hot route has an id (``POST .../attempts/search``
is the attempt search, not an update of attempt ``search``): such a request is left to the FastAPI app."""


@dataclass(frozen=True, slots=True)
class HotRoute:
    """One hot route: ``method template``, answered by ``HotOps.<operation>``."""

    method: str
    template: str
    """The path, with ids as ``{name}`` (one segment) or ``{name:path}`` (the rest of the path)."""
    operation: str
    """The :class:`~._ops.HotOps` method that answers; called with the path's ids, then the body."""
    body: Any = None
    """What the JSON body is validated as (a pydantic model or another type); ``None``: no body is read."""
    body_required: bool = True
    """Whether a body must be sent (else an empty or ``null`` body passes ``None``)."""
    status_code: int = 200
    response_model: Any = None
    tag: str = "rollouts"
    summary: str | None = None
    """The route's description in the OpenAPI schema."""
    params: tuple[str, ...] = field(init=False)
    """The ids of the path, in order."""
    label: str = field(init=False)
    """The path with ids as ``{id}``: the ``route`` label of the request metrics."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(m.group(1) for m in _PARAM.finditer(self.template)))
        object.__setattr__(self, "label", _PARAM.sub("{id}", self.template))


_P = API_PREFIX

HOT_ROUTES: tuple[HotRoute, ...] = (
    HotRoute("GET", _P + "/health", "health", response_model=HealthBody, tag="health"),
    HotRoute(
        "POST", _P + "/queues/rollouts/enqueue", "enqueue", EnqueueRequest, status_code=201,
        response_model=list[Rollout],
    ),
    HotRoute(
        "POST", _P + "/queues/rollouts/dequeue", "dequeue", DequeueRequest, body_required=False,
        response_model=list[AttemptedRollout],
    ),
    HotRoute(
        "POST", _P + "/queues/rollouts/claim", "claim", ClaimRequest, body_required=False,
        response_model=ClaimResponse,
        summary="Claim one rollout with the resources it runs with (one request per rollout for a runner); "
        "``known_resources`` lists the snapshots the client holds, which are not sent again.",
    ),
    HotRoute(
        "POST", _P + "/rollouts", "start_rollout", StartRolloutRequest, status_code=201,
        response_model=AttemptedRollout,
    ),
    HotRoute("GET", _P + "/rollouts/{rollout_id}", "get_rollout", response_model=RolloutOrAttempted | None),
    HotRoute(
        "POST", _P + "/rollouts/{rollout_id}/attempts/{attempt_id}", "update_attempt", UpdateAttemptRequest,
        response_model=Attempt, tag="attempts",
    ),
    HotRoute(
        "POST", _P + "/rollouts/{rollout_id}/attempts/{attempt_id}/finish", "finish_attempt",
        FinishAttemptRequest, response_model=FinishAttemptResponse, tag="attempts",
        summary="Store the attempt's last spans (numbered in order), then write its fields: how a runner ends "
        "an attempt, in one request. Answers as ``/spans/in-order`` does, with the attempt as written.",
    ),
    HotRoute("POST", _P + "/spans", "add_span", Span, status_code=201, response_model=Span | None, tag="spans"),
    HotRoute(
        "POST", _P + "/spans/batch", "add_many_spans", AddSpansRequest, status_code=201,
        response_model=AddSpansResponse, tag="spans",
        summary="Store many spans; answers with the positions of those stored (not the spans again).",
    ),
    HotRoute(
        "POST", _P + "/spans/in-order", "add_spans_in_order", AddSpansRequest, status_code=201,
        response_model=AddSpansInOrderResponse, tag="spans",
        summary="Store spans, each taking the next sequence id of its rollout in request order; answers with "
        "the positions of those stored and the sequence id each got.",
    ),
    HotRoute(
        "POST", _P + "/spans/next", "next_sequence_id", NextSequenceIdRequest,
        response_model=NextSequenceIdResponse, tag="spans",
    ),
    HotRoute(
        "POST", _P + "/spans/next/batch", "next_sequence_ids", NextSequenceIdsRequest,
        response_model=NextSequenceIdsResponse, tag="spans",
    ),
    HotRoute(
        "POST", _P + "/workers/{worker_id:path}", "update_worker", UpdateWorkerRequest, body_required=False,
        response_model=Worker, tag="workers",
    ),
)  # fmt: skip
"""Every hot route. The FastAPI app declares them after its other routes, so that a literal path of another
route (``.../search``) wins over an id there, as :data:`RESERVED_IDS` makes it here."""


@dataclass(frozen=True, slots=True)
class RouteMatch:
    """A request matched to a hot route: the operation to call, how to read the body, the ids of the path."""

    route: HotRoute
    handler: Callable[..., Awaitable[Reply]]
    validate: Callable[[Any], Any] | None
    """Validates the parsed JSON body (strictly); ``None`` for a route without a body."""
    args: tuple[str, ...]
    label: str
    """The metrics label of this request's path."""


@dataclass(frozen=True, slots=True)
class _Pattern:
    """A route's path as segments after its literal prefix (``None`` where an id is)."""

    prefix: str
    segments: tuple[str | None, ...]
    rest_of_path: bool
    """Whether the last id takes the rest of the path (slashes included)."""
    match: RouteMatch


class RouteTable:
    """:data:`HOT_ROUTES` bound to one store's :class:`~._ops.HotOps`, matched by method and path."""

    def __init__(self, ops: HotOps, routes: tuple[HotRoute, ...] = HOT_ROUTES) -> None:
        self._exact: dict[tuple[str, str], RouteMatch] = {}
        self._patterns: dict[str, list[_Pattern]] = {}
        for route in routes:
            handler = getattr(ops, route.operation)
            match = RouteMatch(route, handler, _validator(route.body), (), route.label)
            if not route.params:
                self._exact[(route.method, route.template)] = match
                continue
            prefix, _, tail = route.template.partition("{")
            parts = ("{" + tail).split("/")
            segments = tuple(None if _PARAM.fullmatch(p) else p for p in parts)
            rest = parts[-1].endswith(":path}")
            self._patterns.setdefault(route.method, []).append(_Pattern(prefix, segments, rest, match))

    def match(self, method: str, path: str) -> RouteMatch | None:
        """The hot route of ``method path``, or ``None`` for a request the FastAPI app answers."""
        found = self._exact.get((method, path))
        if found is not None:
            return found
        for pattern in self._patterns.get(method, ()):
            if path.startswith(pattern.prefix):
                args = _ids(pattern, path[len(pattern.prefix) :])
                if args is not None:
                    return _with_ids(pattern.match, args, path)
        return None


def _ids(pattern: _Pattern, tail: str) -> tuple[str, ...] | None:
    """The ids of ``tail`` (the path after the pattern's prefix), or ``None`` when it does not match."""
    segments = pattern.segments
    parts = tail.split("/", len(segments) - 1 if pattern.rest_of_path else -1)
    if len(parts) != len(segments):
        return None
    ids: list[str] = []
    for part, literal in zip(parts, segments, strict=True):
        if literal is None:
            if not part or part in RESERVED_IDS:
                return None
            ids.append(part)
        elif part != literal:
            return None
    return tuple(ids)


def _with_ids(match: RouteMatch, args: tuple[str, ...], path: str) -> RouteMatch:
    # An id that reads like a route's literal gets the label the metrics would give its path.
    label = route_template(path) if any(a in LITERAL_SEGMENTS for a in args) else match.label
    return RouteMatch(match.route, match.handler, match.validate, args, label)


def _validator(body: Any) -> Callable[[Any], Any] | None:
    """Strict validation of parsed JSON as ``body`` (JSON types must match: no ``"3"`` or ``true`` for 3)."""
    if body is None:
        return None
    if isinstance(body, type) and issubclass(body, BaseModel):
        model: type[BaseModel] = body
        return lambda data: model.model_validate(data, strict=True)
    adapter: TypeAdapter[Any] = TypeAdapter(cast(Any, body))
    return lambda data: adapter.validate_python(data, strict=True)


# -- answering a matched request ----------------------------------------------------------------


async def answer(match: RouteMatch, raw: bytes, content_type: str) -> Reply:
    """The answer to a hot route with body ``raw``: validation errors and store errors mapped to 4xx/503.

    A server fault (an exception the API does not map) is raised, for the fault barrier to answer.
    """
    route = match.route
    validate = match.validate
    if validate is None:
        return await _guarded(match.handler(*match.args))
    stripped = raw.strip()
    if not stripped or (not route.body_required and stripped == b"null"):
        if route.body_required:
            return validation_reply([{"loc": ("body",), "msg": "Field required", "type": "missing"}])
        return await _guarded(match.handler(*match.args, None))
    if content_type and "json" not in content_type:
        detail = [
            {
                "loc": ("body",),
                "msg": f"Content-Type must be application/json, got {content_type!r}",
                "type": "content_type",
            }
        ]
        return validation_reply(detail)
    try:
        data = json.loads(raw, parse_float=_json_number, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        msg = f"Invalid JSON: {exc}" if isinstance(exc, ValueError) else "Invalid JSON: nested too deeply"
        return validation_reply([{"loc": ("body",), "msg": msg, "type": "json_invalid"}])
    try:
        body = validate(data)
    except ValidationError as exc:
        errors = [{**e, "loc": ("body", *e.get("loc", ()))} for e in exc.errors(include_url=False)]
        return validation_reply(errors)
    return await _guarded(match.handler(*match.args, body))


async def _guarded(call: Awaitable[Reply]) -> Reply:
    try:
        return await call
    except Exception as exc:
        mapped = error_reply(exc)
        if mapped is None:
            raise  # a server fault: the fault barrier answers 500
        return mapped


def _json_number(text: str) -> float | int:
    """JSON numbers with a fraction: integral ones become ints (JSON Schema counts 3.0 as an integer)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is out of the range of a JSON number this API accepts")
    return int(value) if value.is_integer() and abs(value) < 2**53 else value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")
