"""Emitters: record rewards, annotations, messages, objects, exceptions and operations as spans.

Every emitter takes ``propagate``: ``True`` (default) records through the active tracer, so the span reaches
the store of the current rollout attempt; there must be one (``RuntimeError`` otherwise: emitters work inside
a tracer's ``trace_context``, e.g. inside a runner's rollout). ``False`` only builds the span and returns it.
Invalid input raises (``TypeError`` for a wrong type, ``ValueError`` for a wrong value).
"""

from __future__ import annotations

import base64
import functools
import inspect
import json
import logging
import math
import warnings
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import Any, TypeVar, overload

from agl.types import LightningSpanAttributes, SpanCoreFields, SpanRecordingContext, TraceStatus
from agl.types.narrow import as_list
from agl.types.semconv import AGL_ANNOTATION, AGL_EXCEPTION, AGL_MESSAGE, AGL_OBJECT, AGL_OPERATION

from .attributes import (
    check_attributes_sanity,
    flatten_attributes,
    format_exception_attributes,
    full_qualified_name,
    sanitize_attribute_value,
    sanitize_attributes,
)
from .base import Tracer, get_active_tracer
from .dummy import DummyTracer

__all__ = [
    "OperationContext",
    "emit_annotation",
    "emit_exception",
    "emit_message",
    "emit_object",
    "emit_reward",
    "operation",
    "reward",
]

F = TypeVar("F", bound=Callable[..., Any])

logger = logging.getLogger(__name__)

_DETACHED = DummyTracer()  # never inside a trace context: what it records goes nowhere

_REWARD = LightningSpanAttributes.REWARD.value
_OP_NAME = LightningSpanAttributes.OPERATION_NAME.value
_OP_INPUT = LightningSpanAttributes.OPERATION_INPUT.value
_OP_OUTPUT = LightningSpanAttributes.OPERATION_OUTPUT.value


def _tracer(propagate: bool, kind: str) -> Tracer:
    """The tracer an emitter of a ``kind`` span records into (the message starts as the reference's does)."""
    if not propagate:
        return _DETACHED
    tracer = get_active_tracer()
    if tracer is None:
        raise RuntimeError(
            f"No active tracer found. Cannot emit {kind} span. Emitters record into the active tracer, which "
            "exists inside a tracer's trace_context (e.g. inside a runner's rollout); pass propagate=False to "
            "only build the span."
        )
    return tracer


def _extra_attributes(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    if attributes is None:
        return {}
    if not isinstance(attributes, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
        raise TypeError(f"attributes must be a mapping of str to values, got {type(attributes).__name__}")
    return sanitize_attributes(flatten_attributes(dict(attributes)))


def emit_annotation(annotation: Mapping[str, Any], propagate: bool = True) -> SpanCoreFields:
    """Record a span ``agentlightning.annotation`` carrying ``annotation`` as attributes.

    Nested dicts are flattened with dotted keys; every leaf must be a str, bool, int, float or a list of one
    of those (``ValueError`` otherwise).
    """
    if not isinstance(annotation, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
        raise TypeError(f"annotation must be a dict, got {type(annotation).__name__}")
    flat = flatten_attributes(dict(annotation))
    if "" in flat:
        raise ValueError("annotation keys must be non-empty strings")
    check_attributes_sanity(flat)
    return _tracer(propagate, "annotation").create_span(
        AGL_ANNOTATION, flat, status=TraceStatus(status_code="OK")
    )


def _reward_number(value: Any, where: str, error: type[Exception]) -> float:
    if isinstance(value, (bool, int, float)):
        number = float(value)
    else:
        raise error(f"{where} must be a number, got {type(value).__name__}: {value!r}")
    if not math.isfinite(number):
        raise ValueError(f"{where} must be a finite number, got {number}")
    return number


def emit_reward(
    reward: float | Mapping[str, float],
    *,
    primary_key: str | None = None,
    attributes: Mapping[str, Any] | None = None,
    propagate: bool = True,
) -> SpanCoreFields:
    """Record a reward: a number, or several named numbers of which ``primary_key`` is the main one.

    A number (ints and bools become floats; other types raise ``TypeError``) is one dimension named
    ``primary``. A dict needs ``primary_key`` naming one of its keys; its values must be numbers
    (``ValueError`` otherwise); the primary dimension comes first. NaN and infinities are rejected
    (``ValueError``). Extra ``attributes`` (e.g. link or tag attributes) are added to the span.
    """
    if isinstance(reward, Mapping):
        if primary_key is None:
            raise ValueError("a reward with several dimensions needs primary_key= naming the main one")
        if primary_key not in reward:
            raise ValueError(f"primary_key {primary_key!r} is not among the reward's keys {list(reward)}")
        dims: list[tuple[str, float]] = []
        for key, value in reward.items():
            if not isinstance(key, str) or not key:  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
                raise ValueError(f"reward dimension names must be non-empty strings, got {key!r}")
            dims.append((key, _reward_number(value, f"reward[{key!r}]", ValueError)))
        dims.sort(key=lambda d: d[0] != primary_key)  # stable: primary first, then dict order
    else:
        if primary_key is not None:
            raise ValueError("primary_key= only applies to a reward given as a dict")
        dims = [("primary", _reward_number(reward, "reward", TypeError))]
    span_attributes: dict[str, Any] = {}
    for index, (name, value) in enumerate(dims):
        span_attributes[f"{_REWARD}.{index}.name"] = name
        span_attributes[f"{_REWARD}.{index}.value"] = value
    extra = _extra_attributes(attributes)
    clash = [k for k in extra if k == _REWARD or k.startswith(_REWARD + ".")]
    if clash:
        raise ValueError(f"attributes must not set reward keys themselves: {clash}")
    span_attributes.update(extra)
    return _tracer(propagate, "annotation").create_span(
        AGL_ANNOTATION, span_attributes, status=TraceStatus(status_code="OK")
    )


def emit_message(
    message: str, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> SpanCoreFields:
    """Record a text message (span ``agentlightning.message``)."""
    if not isinstance(message, str):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
        raise TypeError(f"message must be a str, got {type(message).__name__}")
    span_attributes = {**_extra_attributes(attributes), LightningSpanAttributes.MESSAGE_BODY.value: message}
    return _tracer(propagate, "message").create_span(
        AGL_MESSAGE, span_attributes, status=TraceStatus(status_code="OK")
    )


def emit_object(
    obj: object, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> SpanCoreFields:
    """Record a value (span ``agentlightning.object``): a literal, bytes (base64) or anything JSON can encode.

    A value JSON cannot encode raises ``RuntimeError``.
    """
    span_attributes = _extra_attributes(attributes)
    if isinstance(obj, (str, bool, int, float)):
        span_attributes[LightningSpanAttributes.OBJECT_TYPE.value] = type(obj).__name__
        span_attributes[LightningSpanAttributes.OBJECT_LITERAL.value] = str(obj)
    elif isinstance(obj, (bytes, bytearray)):
        span_attributes[LightningSpanAttributes.OBJECT_TYPE.value] = "bytes"
        span_attributes[LightningSpanAttributes.OBJECT_LITERAL.value] = base64.b64encode(bytes(obj)).decode(
            "ascii"
        )
    else:
        try:
            encoded = json.dumps(obj, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise RuntimeError(
                f"emit_object cannot encode a {type(obj).__name__} as JSON ({exc}); convert it to JSON-able data first"
            ) from exc
        span_attributes[LightningSpanAttributes.OBJECT_TYPE.value] = full_qualified_name(type(obj))
        span_attributes[LightningSpanAttributes.OBJECT_JSON.value] = encoded
    return _tracer(propagate, "object").create_span(
        AGL_OBJECT, span_attributes, status=TraceStatus(status_code="OK")
    )


def emit_exception(
    exception: BaseException, attributes: Mapping[str, Any] | None = None, propagate: bool = True
) -> SpanCoreFields:
    """Record an exception (span ``agentlightning.exception`` with OpenTelemetry ``exception.*`` attributes).

    The span's status is OK: recording succeeded, the exception is its content.
    """
    if not isinstance(exception, BaseException):  # pyright: ignore[reportUnnecessaryIsInstance]  # public API: checks untyped callers
        raise TypeError(f"emit_exception needs an exception, got {type(exception).__name__}")
    span_attributes = {**_extra_attributes(attributes), **format_exception_attributes(exception)}
    return _tracer(propagate, "exception").create_span(
        AGL_EXCEPTION, span_attributes, status=TraceStatus(status_code="OK")
    )


# -- operation ----------------------------------------------------------------------------------


def _flatten_under(prefix: str, value: Any) -> dict[str, Any]:
    """``value`` as attributes under ``prefix``; never raises (what cannot be flattened is JSON-encoded)."""
    try:
        flat = flatten_attributes(value)
    except ValueError:
        return {prefix: sanitize_attribute_value(value)}
    out: dict[str, Any] = {}
    for key, item in flat.items():
        full = f"{prefix}.{key}" if key else prefix
        out[full] = item
    return sanitize_attributes(out)


def _bound_inputs(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError):
        return {
            **_flatten_under(f"{_OP_INPUT}.args", list(args)),
            **_flatten_under(f"{_OP_INPUT}.kwargs", kwargs),
        }
    bound.apply_defaults()  # (the reference records the parameters left at their defaults too)
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        out.update(
            _flatten_under(f"{_OP_INPUT}.{name}", as_list(value) if isinstance(value, tuple) else value)
        )
    return out


class OperationContext:
    """What ``operation(...)`` returns: a context manager and a decorator recording an operation span."""

    def __init__(self, name: str | None, attributes: dict[str, Any], propagate: bool) -> None:
        self._name = name
        self._attributes = attributes
        self._propagate = propagate
        self._recording: SpanRecordingContext | None = None
        self._stack: ExitStack | None = None
        self._span: SpanCoreFields | None = None

    def _resolve_tracer(self) -> Tracer:
        # Decorated code must keep working outside a rollout: without an active tracer nothing is exported.
        if not self._propagate:
            return _DETACHED
        return get_active_tracer() or _DETACHED

    def _base_attributes(self, default_name: str | None) -> dict[str, Any]:
        attributes = dict(self._attributes)
        name = self._name or default_name
        if name is not None:
            attributes[_OP_NAME] = name
        return attributes

    # context manager
    def __enter__(self) -> OperationContext:
        if self._stack is not None:
            raise RuntimeError("this operation context is already in use")
        self._span = None
        stack = ExitStack()
        self._recording = stack.enter_context(
            self._resolve_tracer().operation_context(AGL_OPERATION, self._base_attributes(None))
        )
        self._stack = stack
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool | None:
        stack, self._stack = self._stack, None
        recording, self._recording = self._recording, None
        assert stack is not None and recording is not None
        try:
            return stack.__exit__(exc_type, exc, tb)
        finally:
            self._span = recording.get_recorded_span()

    def _live(self) -> SpanRecordingContext:
        if self._recording is None:
            raise RuntimeError("set_input/set_output only work inside the `with operation(...)` block")
        return self._recording

    def set_input(self, *args: Any, **kwargs: Any) -> None:
        """Record inputs: positional ones under ``input.args.<i>``, keywords under ``input.<name>``."""
        recording = self._live()
        attributes: dict[str, Any] = {}
        if args:
            attributes.update(_flatten_under(f"{_OP_INPUT}.args", list(args)))
        for key, value in kwargs.items():
            attributes.update(_flatten_under(f"{_OP_INPUT}.{key}", value))
        recording.record_attributes(attributes)

    def set_output(self, value: Any) -> None:
        """Record the output under ``agentlightning.operation.output`` (flattened)."""
        self._live().record_attributes(_flatten_under(_OP_OUTPUT, value))

    def span(self) -> SpanCoreFields:
        """The recorded span, once the block has exited."""
        if self._span is None:
            raise RuntimeError("the operation span is available only after the `with` block exits")
        return self._span

    # decorator
    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                with self._open_for(fn, args, kwargs) as recording:
                    result = await fn(*args, **kwargs)
                    recording.record_attributes(_flatten_under(_OP_OUTPUT, result))
                    return result

            return async_wrapper  # pyright: ignore[reportReturnType]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self._open_for(fn, args, kwargs) as recording:
                result = fn(*args, **kwargs)
                recording.record_attributes(_flatten_under(_OP_OUTPUT, result))
                return result

        return wrapper  # pyright: ignore[reportReturnType]

    def _open_for(
        self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:  # a context manager of SpanRecordingContext
        attributes = self._base_attributes(getattr(fn, "__name__", None))
        attributes.update(_bound_inputs(fn, args, kwargs))
        return self._resolve_tracer().operation_context(AGL_OPERATION, attributes)


@overload
def operation(fn: F, *, name: str | None = None, propagate: bool = True, **attributes: Any) -> F: ...


@overload
def operation(
    fn: None = None, *, name: str | None = None, propagate: bool = True, **attributes: Any
) -> OperationContext: ...


def operation(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    propagate: bool = True,
    **attributes: Any,
) -> Any:
    """Record an operation span (``agentlightning.operation``), as a decorator or a context manager.

    ``@operation`` / ``@operation(name=..., **attributes)`` wrap a sync or async function: each call records
    the operation name (the function's unless ``name`` is given), its bound arguments under
    ``agentlightning.operation.input.<param>``, its return value under ``agentlightning.operation.output``,
    and any exception (re-raised). ``with operation(**attributes) as op:`` records a block; use
    ``op.set_input(...)`` / ``op.set_output(...)`` inside and ``op.span()`` after it.

    The span name is always ``agentlightning.operation``; ``name`` is the operation's name attribute.
    Without an active tracer nothing is exported (so decorated code also runs outside a rollout).
    """
    if fn is not None and not callable(fn):
        raise ValueError(
            f"operation() takes no positional span name (got {fn!r}): the span is always named "
            f"{AGL_OPERATION!r}; use operation(name=...) to name the operation"
        )
    explicit = attributes.pop("operation_name", None)
    if _OP_NAME in attributes:
        explicit = explicit if explicit is not None else attributes.pop(_OP_NAME)
    if name is not None and explicit is not None:
        raise ValueError("give the operation's name once: either name= or operation_name=, not both")
    if name is None and explicit is not None:
        if not isinstance(explicit, str):
            raise ValueError(f"operation_name must be a str, got {type(explicit).__name__}")
        name = explicit
    context = OperationContext(name, _extra_attributes(attributes), propagate)
    if fn is not None:
        return context(fn)
    return context


def reward(fn: F) -> F:
    """Deprecated: decorate a reward function so that its numeric result is emitted with :func:`emit_reward`.

    Works for sync and async functions and returns the function's result unchanged; a result that is not a
    number is returned without emitting (with a warning). Call ``emit_reward`` directly instead.
    """
    warnings.warn("@reward is deprecated; call emit_reward(value) instead", DeprecationWarning, stacklevel=2)

    def emit(result: Any) -> None:
        if isinstance(result, (bool, int, float)):
            emit_reward(result)
        else:
            logger.warning(
                "@reward function %s returned %r, not a number: no reward emitted", fn.__name__, result
            )

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            result = await fn(*args, **kwargs)
            emit(result)
            return result

        return async_wrapper  # pyright: ignore[reportReturnType]

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        emit(result)
        return result

    return wrapper  # pyright: ignore[reportReturnType]
