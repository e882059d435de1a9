"""The hot operations of the REST API (:class:`HotOps`), their answers, and the API's error answers.

Runners call a handful of routes for every rollout (enqueue, dequeue, spans, attempt update, read back).
For those, FastAPI's routing, dependency solving and double JSON parsing cost more than the store call
itself, so :func:`._routes.answer` serves them from the route table: one dict or split lookup,
one strict validation of the parsed body, one Rust serialisation of the answer. The FastAPI app calls the
same :class:`HotOps` methods for them, so both behave identically.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

from agl.types import (
    UNSET,
    AttemptedRollout,
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    ResourcesUpdate,
    Span,
)
from pydantic import TypeAdapter

from ...base import LightningStore
from ...errors import StoreFullError
from .._models import (
    AddSpansRequest,
    ClaimRequest,
    DequeueRequest,
    EnqueueRequest,
    ErrorBody,
    FinishAttemptRequest,
    NextSequenceIdRequest,
    NextSequenceIdsRequest,
    StartRolloutRequest,
    UpdateAttemptRequest,
    UpdateWorkerRequest,
)
from ._eager import eager_safe, run_eagerly

if TYPE_CHECKING:
    from sqlalchemy import exc as sa_exc

    from ._options import AppOptions

__all__ = [
    "HotOps",
    "Reply",
    "encode",
    "error_body",
    "error_reply",
    "fault_reply",
    "positions",
    "reply_headers",
    "validation_reply",
]

T = TypeVar("T")

_ANY: TypeAdapter[Any] = TypeAdapter(Any)

Reply = tuple[int, bytes, "dict[str, str] | None"]
"""Status, JSON body, extra headers."""

_HEALTH = b'{"status":"ok"}'


def encode(value: Any) -> bytes:
    return _ANY.dump_json(value, serialize_as_any=True)


def error_body(status: int, detail: str, error_type: str, **extra: Any) -> Reply:
    return (
        status,
        ErrorBody(detail=detail, error_type=error_type, **extra).model_dump_json(exclude_none=True).encode(),
        None,
    )


def validation_reply(errors: Sequence[Any]) -> Reply:
    """422 naming each offending field (same shape for FastAPI's and the fast path's validation)."""
    parts: list[str] = []
    listed: list[dict[str, Any]] = []
    for err in errors:
        loc = [str(p) for p in err.get("loc", ())]
        msg = str(err.get("msg", "invalid"))
        parts.append(f"{'.'.join(loc)}: {msg}")
        listed.append({"loc": loc, "msg": msg, "type": str(err.get("type", ""))})
    return error_body(422, "invalid request: " + "; ".join(parts), "RequestValidationError", errors=listed)


def fault_reply(exc: BaseException, debug: bool) -> Reply:
    """500 for a server fault: the exception class only, or everything when debugging."""
    if not debug:
        return error_body(
            500, f"internal server error ({type(exc).__name__}); see the server log", type(exc).__name__
        )
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return error_body(500, f"{type(exc).__name__}: {exc}", type(exc).__name__, traceback=text)


def error_reply(exc: Exception) -> Reply | None:
    """The answer for an exception the API maps to a 4xx or a 503, or ``None`` for a server fault."""
    if isinstance(exc, NotFoundError):
        return error_body(404, str(exc), type(exc).__name__)
    if isinstance(exc, StoreFullError):
        return error_body(507, str(exc), type(exc).__name__)
    if isinstance(exc, ConflictError):
        return error_body(409, str(exc), type(exc).__name__)
    if isinstance(exc, ValueError):  # InvalidRequestError and other bad input
        return error_body(400, str(exc) or type(exc).__name__, type(exc).__name__)
    if isinstance(exc, RecursionError):
        return error_body(400, "the request is nested too deeply to process", "InvalidRequestError")
    if isinstance(exc, OverflowError):
        return error_body(400, f"a number in the request is out of range: {exc}", "InvalidRequestError")
    sa = sys.modules.get("sqlalchemy.exc")  # not imported: no SQL store here (and no import cost)
    if sa is not None and isinstance(exc, sa.SQLAlchemyError):
        return database_error_reply(cast("sa_exc.SQLAlchemyError", exc))
    return None


def database_error_reply(exc: sa_exc.SQLAlchemyError) -> Reply:
    """A database error: the request's data refused (400), a constraint (409), or the database unavailable
    or failing (503, retry later). The database's own message is left out (it may quote other data)."""
    from sqlalchemy import exc as sa_exc

    kind = type(exc).__name__
    sqlstate = _sqlstate(exc)
    if isinstance(exc, sa_exc.DataError) or sqlstate.startswith("22") or _refused_value(exc):
        return error_body(
            400, f"the database refused a value of the request ({kind}); check ids and texts", kind
        )
    if isinstance(exc, sa_exc.IntegrityError) or sqlstate.startswith("23"):
        return error_body(409, f"the request conflicts with stored data ({kind})", kind)
    status, body, _ = error_body(
        503, f"the store's database failed or is unavailable ({kind}); retry later", kind
    )
    return status, body, {"Retry-After": "1"}


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < 8:
        chain.append(current)
        current = getattr(current, "orig", None) or current.__cause__
    return chain


def _sqlstate(exc: BaseException) -> str:
    """The SQLSTATE of a PostgreSQL error (class 22: data exception, 23: integrity), or ``""``."""
    for cause in _causes(exc):
        state = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        if isinstance(state, str):
            return state
    return ""


def _refused_value(exc: BaseException) -> bool:
    """A value the driver could not send (asyncpg's client-side DataError: a lone surrogate, say)."""
    return any(
        isinstance(cause, (UnicodeError, OverflowError)) or type(cause).__name__ == "DataError"
        for cause in _causes(exc)[1:]
    )


def positions(sent: Sequence[Span], stored: Sequence[Span]) -> list[int]:
    """Where each stored span sits in the request (by identity, else by its key, first unused match)."""
    index = {id(span): i for i, span in enumerate(sent)}
    by_key: dict[tuple[str, str, str], list[int]] = {}
    found: list[int] = []
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
        found.append(i)
    return found


class HotOps:
    """The operations behind the hot routes; each returns ``(status, json_bytes, headers)``."""

    def __init__(self, store: LightningStore, options: AppOptions) -> None:
        self.store = store
        self.options = options
        self.eager = eager_safe(store)
        """Whether a call's first step may run outside a task (see :func:`._eager.eager_safe`)."""

    def bounded(self, timeout: float | None) -> float:
        limit = self.options.max_wait_seconds
        return limit if timeout is None else min(timeout, limit)

    async def until_shutdown(self, coro: Coroutine[Any, Any, T], default: T) -> T:
        """Await ``coro``, or give up with ``default`` when the server is stopping."""
        shutdown = self.options.shutdown
        if shutdown is None:
            return await coro
        if self.eager and sys.version_info < (
            3,
            12,
        ):  # (on 3.12 a task's first step would bind timeouts to it)
            done, result, task = run_eagerly(coro, asyncio.get_running_loop())
            if done:  # answered without waiting (work was there): no race with the shutdown needed
                return cast("T", result)
            assert task is not None
        else:
            task = asyncio.ensure_future(coro)
        stopper = asyncio.ensure_future(shutdown.wait())
        try:
            await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            if not task.done():  # stopping, or this request itself was cancelled
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return task.result() if not task.cancelled() else default

    async def health(self) -> Reply:
        return 200, _HEALTH, None

    async def enqueue(self, body: EnqueueRequest) -> Reply:
        if not body.rollouts:
            return 201, b"[]", None
        return 201, encode(await self.store.enqueue_many_rollouts(body.rollouts)), None

    async def dequeue(self, body: DequeueRequest | None) -> Reply:
        body = body or DequeueRequest()
        if body.limit <= 0:
            return 200, b"[]", None
        claim = self.store.dequeue_many_rollouts(
            limit=body.limit, worker_id=body.worker_id, timeout=self.bounded(body.timeout)
        )
        return 200, encode(await self.until_shutdown(claim, [])), None

    async def claim(self, body: ClaimRequest | None) -> Reply:
        """One rollout with its resources; resources the client holds at their current version are not sent."""
        body = body or ClaimRequest()
        claim = self.store.dequeue_rollout_with_resources(body.worker_id, timeout=self.bounded(body.timeout))
        claimed = await self.until_shutdown(claim, None)
        if claimed is None:
            return 200, b'{"rollout":null}', None
        return 200, encode(_claim_answer(claimed, body.known_resources)), None

    async def start_rollout(self, body: StartRolloutRequest) -> Reply:
        rollout = await self.store.start_rollout(
            input=body.input,
            mode=body.mode,
            resources_id=body.resources_id,
            config=body.config,
            metadata=body.metadata,
            worker_id=body.worker_id,
        )
        return 201, encode(rollout), None

    async def get_rollout(self, rollout_id: str) -> Reply:
        return 200, encode(await self.store.get_rollout_by_id(rollout_id)), None

    async def update_attempt(self, rollout_id: str, attempt_id: str, body: UpdateAttemptRequest) -> Reply:
        values = _attempt_fields(body)
        return 200, encode(await self.store.update_attempt(rollout_id, attempt_id, **values)), None

    async def finish_attempt(self, rollout_id: str, attempt_id: str, body: FinishAttemptRequest) -> Reply:
        values = _attempt_fields(body)
        spans = values.pop("spans", [])
        claim = values.pop("claim", None)
        worker_id = claim.worker_id if claim is not None else None
        finished = await self.store.finish_attempt(
            rollout_id, attempt_id, spans, claim_next_for=worker_id, **values
        )
        answer = {**_in_order_answer(spans, finished.spans), "attempt": finished.attempt}
        if claim is not None:
            answer["next"] = _claim_answer(finished.next, claim.known_resources)
        return 200, encode(answer), None

    async def add_span(self, span: Span) -> Reply:
        return 201, encode(await self.store.add_span(span)), None

    async def add_many_spans(self, body: AddSpansRequest) -> Reply:
        if not body.spans:
            return 201, b'{"stored":[]}', None
        stored = await self.store.add_many_spans(body.spans)
        return 201, encode({"stored": positions(body.spans, stored)}), None

    async def add_spans_in_order(self, body: AddSpansRequest) -> Reply:
        if not body.spans:
            return 201, b'{"stored":[],"sequence_ids":[]}', None
        stored = await self.store.add_spans_in_order(body.spans)
        return 201, encode(_in_order_answer(body.spans, stored)), None

    async def update_worker(self, worker_id: str, body: UpdateWorkerRequest | None) -> Reply:
        stats: Any = UNSET
        if body is not None and "heartbeat_stats" in body.model_fields_set:  # (the model refuses a null)
            stats = body.heartbeat_stats
        return 200, encode(await self.store.update_worker(worker_id, heartbeat_stats=stats)), None

    async def next_sequence_id(self, body: NextSequenceIdRequest) -> Reply:
        value = await self.store.get_next_span_sequence_id(body.rollout_id, body.attempt_id)
        return 200, encode({"sequence_id": value}), None

    async def next_sequence_ids(self, body: NextSequenceIdsRequest) -> Reply:
        pairs = [(rollout_id, attempt_id) for rollout_id, attempt_id in body.pairs]
        values = await self.store.get_many_span_sequence_ids(pairs) if pairs else []
        return 200, encode({"sequence_ids": values}), None


def _in_order_answer(sent: Sequence[Span], stored: Sequence[Span]) -> dict[str, Any]:
    """Which of the spans sent were stored (positions), and the sequence id each got."""
    return {"stored": positions(sent, stored), "sequence_ids": [s.sequence_id for s in stored]}


def _claim_answer(
    claimed: tuple[AttemptedRollout, ResourcesUpdate | None] | None, known_resources: dict[str, int]
) -> dict[str, Any]:
    """A claim's answer: the rollout and its resources, which are left out when the client holds them."""
    if claimed is None:
        return {"rollout": None}
    rollout, resources = claimed
    answer: dict[str, Any] = {"rollout": rollout}
    if resources is not None:
        answer["resources_id"] = resources.resources_id
        answer["resources_version"] = resources.version
        if known_resources.get(resources.resources_id) != resources.version:
            answer["resources"] = resources
    return answer


def _attempt_fields(body: UpdateAttemptRequest) -> dict[str, Any]:
    """The fields an attempt update sent (none of them may be ``null``)."""
    values: dict[str, Any] = {}
    for name in body.model_fields_set:
        value = getattr(body, name)
        if value is None:
            raise InvalidRequestError(f"{name} may not be null in an attempt update; leave it out to keep it")
        values[name] = value
    return values


def reply_headers(reply: Reply) -> list[tuple[bytes, bytes]]:
    """The header pairs ``reply`` is sent with (JSON content type, length, its extra headers)."""
    status, body, headers = reply
    del status
    raw_headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if headers:
        raw_headers.extend((k.lower().encode(), v.encode()) for k, v in headers.items())
    return raw_headers
