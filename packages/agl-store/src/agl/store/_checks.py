"""The argument checks every backend shares, for the methods each backend implements itself.

``LightningStore.__init_subclass__`` wraps each of these methods that a subclass defines with its check,
so the memory, SQL and HTTP stores (and any other backend) refuse the same bad calls with the same
:class:`~agl.types.InvalidRequestError`, before the backend sees them. The methods that ``LightningStore``
implements itself (``enqueue_*``, ``dequeue_*``, ``query_*``, ``update_rollout``, ``update_attempt``) check
their arguments there. Each check has the signature of its method (without ``self``), so Python binds the
arguments and the cost is one call.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, cast

from agl.types import (
    ATTEMPT_STATUSES,
    UNSET,
    AttemptUpdate,
    EnqueueRolloutRequest,
    InvalidRequestError,
    RolloutConfig,
    Span,
    TaskInput,
)
from agl.types.errors import validated
from agl.types.validation import (
    check_id,
    check_optional_id,
    check_timeout,
    json_bytes,
    span_json,
)

__all__ = [
    "CHECKS",
    "attempt_changes",
    "check_documents",
    "check_limit",
    "check_metadata",
    "check_mode",
    "check_status",
    "check_wait",
    "checked",
    "checked_request",
    "new_config",
    "request_of",
    "spans_of",
]

_MODES = ("train", "val", "test")


def _rollout_id(store: Any, rollout_id: Any) -> None:
    check_id(rollout_id, "rollout_id")


def _start_attempt(store: Any, rollout_id: Any, worker_id: Any = None) -> None:
    check_id(rollout_id, "rollout_id")
    check_optional_id(worker_id, "worker_id")


def _wait_for_rollouts(store: Any, *, rollout_ids: Any, timeout: Any = None) -> None:
    _ids(rollout_ids, "rollout_ids")
    check_timeout(timeout)


def _resources(store: Any, resources: Any) -> None:
    if not isinstance(resources, dict):
        raise InvalidRequestError(
            f"resources must be a dict of name to resource, not {type(resources).__name__}"
        )


def _update_resources(store: Any, resources_id: Any, resources: Any) -> None:
    check_id(resources_id, "resources_id")
    _resources(store, resources)


def _resources_id(store: Any, resources_id: Any) -> None:
    check_id(resources_id, "resources_id")


def _add_span(store: Any, span: Any) -> None:
    _spans(store, [span])


def _spans(store: Any, spans: Any) -> None:
    if isinstance(spans, (str, bytes)) or not isinstance(spans, Sequence):
        raise InvalidRequestError(f"spans must be a list of Span objects, not {type(spans).__name__}")
    for span in cast("Sequence[object]", spans):
        if isinstance(span, Span):
            if not store.serialises_spans:
                span_json(span)  # the backend does not check them itself (the HTTP client)
        elif not isinstance(span, dict):
            raise InvalidRequestError(
                f"each span must be a Span (or a dict of one), not {type(span).__name__}"
            )


def _sequence_id(store: Any, rollout_id: Any, attempt_id: Any) -> None:
    check_id(rollout_id, "rollout_id")
    check_id(attempt_id, "attempt_id")


def _sequence_ids(store: Any, rollout_attempt_ids: Any) -> None:
    if isinstance(rollout_attempt_ids, (str, bytes)) or not isinstance(rollout_attempt_ids, Sequence):
        raise InvalidRequestError("rollout_attempt_ids must be a list of (rollout_id, attempt_id) pairs")
    for pair in cast("Sequence[object]", rollout_attempt_ids):
        items = cast("Sequence[object]", pair) if isinstance(pair, (tuple, list)) else ()
        if len(items) != 2:
            raise InvalidRequestError(f"each item must be a (rollout_id, attempt_id) pair, not {pair!r}")
        _sequence_id(store, *items)


def _worker_id(store: Any, worker_id: Any) -> None:
    check_id(worker_id, "worker_id")


def _update_worker(store: Any, worker_id: Any, heartbeat_stats: Any = UNSET) -> None:
    check_id(worker_id, "worker_id")
    if not worker_id:
        raise InvalidRequestError("worker_id must be a non-empty string")
    if heartbeat_stats is UNSET or heartbeat_stats is None:
        return
    if not isinstance(heartbeat_stats, dict):
        raise InvalidRequestError(
            f"heartbeat_stats must be a dict or None, not {type(heartbeat_stats).__name__}"
        )
    json_bytes(heartbeat_stats, "heartbeat_stats")


def _ids(values: Any, what: str) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence | set | frozenset):
        raise InvalidRequestError(f"{what} must be a list of ids, not {type(values).__name__}")
    for value in cast("Iterable[object]", values):
        check_id(value, what[:-1])


CHECKS: dict[str, Callable[..., None]] = {
    "start_attempt": _start_attempt,
    "get_rollout_by_id": _rollout_id,
    "get_latest_attempt": _rollout_id,
    "wait_for_rollouts": _wait_for_rollouts,
    "add_resources": _resources,
    "update_resources": _update_resources,
    "get_resources_by_id": _resources_id,
    "add_span": _add_span,
    "add_many_spans": _spans,
    "add_spans_in_order": _spans,
    "get_next_span_sequence_id": _sequence_id,
    "get_many_span_sequence_ids": _sequence_ids,
    "get_worker_by_id": _worker_id,
    "update_worker": _update_worker,
}
"""Method name → the check of its arguments."""


def checked(
    method: Callable[..., Coroutine[Any, Any, Any]], check: Callable[..., None]
) -> Callable[..., Coroutine[Any, Any, Any]]:
    """``method`` that first runs ``check`` on its arguments."""
    if getattr(method, "__agl_checked__", False):
        return method

    @functools.wraps(method)
    async def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        check(self, *args, **kwargs)
        return await method(self, *args, **kwargs)

    wrapper.__agl_checked__ = True  # pyright: ignore[reportAttributeAccessIssue]  (a marker, read by checked())
    return wrapper


def spans_of(spans: Sequence[Any]) -> list[Span]:
    """``spans`` as ``Span`` objects (dicts validated into spans)."""
    return [s if isinstance(s, Span) else validated(Span.model_validate, s, "span") for s in spans]


# The checks of arguments that ``LightningStore`` takes itself (enqueue, updates), also used by backends.


def check_status(status: Any, allowed: Sequence[str], what: str) -> None:
    if status not in allowed:
        raise InvalidRequestError(f"{what} {status!r} is invalid; use one of {list(allowed)}")


def check_mode(mode: Any) -> None:
    if mode is not None and mode not in _MODES:
        raise InvalidRequestError(f"mode {mode!r} is invalid; use one of {list(_MODES)} or None")


def check_metadata(metadata: Any) -> None:
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRequestError(f"metadata must be a dict or None, not {type(metadata).__name__}")


def new_config(config: Any) -> RolloutConfig:
    if config is None:
        return RolloutConfig()
    if isinstance(config, RolloutConfig):
        return config.model_copy(deep=True)
    if isinstance(config, dict):
        try:
            return RolloutConfig.model_validate(config)
        except ValueError as exc:
            raise InvalidRequestError(f"invalid rollout config: {exc}") from exc
    raise InvalidRequestError(f"config must be a RolloutConfig, a dict or None, not {type(config).__name__}")


def request_of(
    input: TaskInput, mode: Any = None, resources_id: Any = None, config: Any = None, metadata: Any = None
) -> EnqueueRolloutRequest:
    """A request from checked arguments: the checks of its model's fields without the cost of a pydantic
    validation (``start_rollout`` and ``enqueue_rollout`` are hot paths)."""
    check_mode(mode)
    check_documents(input, metadata)
    if resources_id is not None and not isinstance(resources_id, str):
        raise InvalidRequestError(f"resources_id must be a string or None, not {type(resources_id).__name__}")
    check_optional_id(resources_id, "resources_id")
    if config is not None and not isinstance(config, RolloutConfig):
        config = new_config(config)
    return EnqueueRolloutRequest.model_construct(
        input=input, mode=mode, resources_id=resources_id, config=config, metadata=metadata
    )


def check_documents(input: Any, metadata: Any) -> None:
    """The JSON documents of a rollout: an input and metadata every backend can store and give back."""
    json_bytes(input, "rollout input")
    check_metadata(metadata)
    if metadata:
        json_bytes(metadata, "rollout metadata")


def checked_request(request: Any) -> EnqueueRolloutRequest:
    if isinstance(request, EnqueueRolloutRequest):
        check_documents(request.input, request.metadata)
        check_optional_id(request.resources_id, "resources_id")
        return request
    if not isinstance(request, dict):
        raise InvalidRequestError(
            f"each rollout to enqueue must be an EnqueueRolloutRequest or a dict of its fields, "
            f"not {type(request).__name__}"
        )
    return checked_request(validated(EnqueueRolloutRequest.model_validate, request, "rollout"))


def attempt_changes(status: Any, worker_id: Any, last_heartbeat_time: Any, metadata: Any) -> AttemptUpdate:
    """The checked fields of an attempt update (those given)."""
    changes: Any = {}
    if status is not UNSET:
        check_status(status, ATTEMPT_STATUSES, "attempt status")
        changes["status"] = status
    if worker_id is not UNSET:
        changes["worker_id"] = check_optional_id(worker_id, "worker_id")
    if last_heartbeat_time is not UNSET:
        changes["last_heartbeat_time"] = _check_time(last_heartbeat_time)
    if metadata is not UNSET:
        check_documents(None, metadata)
        changes["metadata"] = metadata
    return changes


def _check_time(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise InvalidRequestError(f"last_heartbeat_time must be a finite number of seconds, not {value!r}")
    return value


def check_limit(limit: Any) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise InvalidRequestError(f"limit must be an integer, not {type(limit).__name__}")
    return limit


def check_wait(worker_id: Any, timeout: Any) -> Any:
    check_optional_id(worker_id, "worker_id")
    return check_timeout(timeout)
