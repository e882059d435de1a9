"""Checks on values every store keeps: JSON documents and ids.

Every backend (memory, SQL, the HTTP client) refuses the same values with the same
:class:`~agl.types.InvalidRequestError`, before any state changes:

- JSON values (task inputs, metadata, heartbeat stats, spans) must serialise to standard JSON and parse
  back: no objects of unknown types, no lone surrogates (``"\\ud800"``), no NaN or infinite numbers (JSON
  has none; ``1e400`` parses as infinity), and at most :data:`MAX_JSON_DEPTH` nested lists and dicts.
- Ids (rollout, attempt, resources, worker, span ids) must be strings without NUL characters or lone
  surrogates (no database can keep them in a text column).

The checks cost one serialisation (which the stores need anyway: the JSON bytes are returned) and a
byte scan; only documents that look suspicious (``NaN`` or ``Infinity`` in the text, or more than
:data:`MAX_JSON_DEPTH` brackets) are parsed once more to decide.
"""

from __future__ import annotations

import math
from typing import Any

import pydantic_core

from .errors import InvalidRequestError

__all__ = [
    "MAX_JSON_DEPTH",
    "check_id",
    "check_json_bytes",
    "check_optional_id",
    "check_span_ids",
    "check_timeout",
    "json_bytes",
    "span_json",
]

MAX_JSON_DEPTH = 100
"""Deepest nesting of lists and dicts a stored JSON value may have (answers wrap it a few levels deeper,
and JSON parsers give up around 200)."""

_PARSE_LIMIT = 201
"""Deepest nesting ``pydantic_core.from_json`` parses."""
_PAD = _PARSE_LIMIT - MAX_JSON_DEPTH


def json_bytes(value: Any, what: str) -> bytes:
    """``value`` as JSON bytes, or :class:`InvalidRequestError` naming ``what`` when it cannot be stored."""
    try:
        payload = pydantic_core.to_json(value, inf_nan_mode="constants")
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidRequestError(f"{what} is not JSON-serialisable: {_why(str(exc))}") from exc
    check_json_bytes(payload, what)
    return payload


def check_json_bytes(payload: bytes, what: str) -> None:
    """Refuse serialised JSON (NaN and Infinity written as constants) holding non-finite numbers or nested
    deeper than :data:`MAX_JSON_DEPTH`."""
    # One-byte searches (memchr) first: most documents hold no capital N or I, so no NaN or Infinity.
    suspicious = (b"N" in payload and b"NaN" in payload) or (b"I" in payload and b"Infinity" in payload)
    if not suspicious and len(payload) - len(payload.translate(None, b"[{")) <= MAX_JSON_DEPTH:
        return  # the common case: no constants, too few brackets to nest too deep
    try:
        pydantic_core.from_json(b"[" * _PAD + payload + b"]" * _PAD, allow_inf_nan=False)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise InvalidRequestError(
                f"{what} is nested more than {MAX_JSON_DEPTH} levels deep; flatten it or store it as a string"
            ) from None
        raise InvalidRequestError(
            f"{what} holds NaN or an infinite number, which JSON cannot carry; "
            "use null or a string such as 'nan' instead"
        ) from None


def _why(message: str) -> str:
    if "Maximum serialization depth" in message:
        return f"nested more than {MAX_JSON_DEPTH} levels deep"
    if "surrogate" in message or "UnicodeEncodeError" in message:
        return "it holds a lone surrogate (an unpaired \\ud800-\\udfff), which is not valid Unicode"
    return message.removeprefix("Error serializing to JSON: ")


def check_id(value: Any, what: str) -> str:
    """``value`` when it is a string a database can keep as an id, else :class:`InvalidRequestError`."""
    if not isinstance(value, str):
        raise InvalidRequestError(f"{what} must be a string, not {type(value).__name__}")
    if value.isascii():
        if "\x00" in value:
            raise InvalidRequestError(f"{what} {value!r} contains a NUL character")
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidRequestError(f"{what} {value!r} contains a lone surrogate (not valid Unicode)") from None
    if "\x00" in value:
        raise InvalidRequestError(f"{what} {value!r} contains a NUL character")
    return value


def check_optional_id(value: Any, what: str) -> str | None:
    """:func:`check_id`, with ``None`` allowed."""
    return None if value is None else check_id(value, what)


def check_timeout(value: Any, what: str = "timeout") -> float | None:
    """A timeout in seconds: ``None`` (no limit) or a number that is not NaN."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequestError(f"{what} must be a number of seconds or None, not {type(value).__name__}")
    if math.isnan(value):
        raise InvalidRequestError(f"{what} must be a number of seconds or None, not NaN")
    return value


_SPAN_IDS = ("rollout_id", "attempt_id", "trace_id", "span_id", "name")


def span_json(span: Any) -> bytes:
    """A span's JSON bytes (as its model dumps them), or :class:`InvalidRequestError` when a store cannot
    keep it: the checks of :func:`json_bytes` on the whole span, and of :func:`check_id` on its ids."""
    try:
        payload = span.__pydantic_serializer__.to_json(span)
    except pydantic_core.PydanticSerializationError as exc:
        raise InvalidRequestError(
            f"span {span.span_id!r} of rollout {span.rollout_id!r} is not JSON-serialisable: {_why(str(exc))}; "
            "give attributes as strings, numbers, booleans or lists and dicts of them"
        ) from exc
    check_json_bytes(payload, "span")
    # Lone surrogates failed the serialisation; NUL characters are looked for in the ids themselves.
    try:
        ids = (
            span.rollout_id
            + span.attempt_id
            + span.trace_id
            + span.span_id
            + span.name
            + (span.parent_id or "")
        )
    except TypeError:  # an id that is not a string (a span built with model_construct)
        ids = "\x00"
    if "\x00" in ids:
        check_span_ids(span)
    return payload


def check_span_ids(span: Any) -> None:
    """Refuse a span whose ids or name a database could not keep (see :func:`check_id`)."""
    for field in _SPAN_IDS:
        check_id(getattr(span, field), f"span {field}")
    if span.parent_id is not None:
        check_id(span.parent_id, "span parent_id")
