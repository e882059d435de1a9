"""A call's span bounded to what the store accepts: large text bodies are cut, token ids and usage never.

The store server refuses a request over its ``max_body_bytes`` (``DEFAULT_MAX_BODY_BYTES``, 64 MiB, unless
started otherwise), and one span goes in one request at least. A call whose span's attributes would not fit
in ``max_span_bytes`` (less some headroom for the span's other fields and the request around it) has its
longest strings in the request messages, prompt, tools and parameters and in the answer's messages cut, each
ending in ``…[truncated N bytes]`` (N: the UTF-8 bytes removed from it); the JSON payloads stay valid, the
token ids, logprobs, usage and every scalar are kept whole, and the attribute
``agentlightning.llm.truncated_bytes`` says how many bytes were removed in all.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any, cast

from agl.store.http.server import DEFAULT_MAX_BODY_BYTES
from agl.types.semconv import LLMCall, LLMCallFormat
from agl.types.semconv import LLMCallAttributes as L
from pydantic_core import to_json

__all__ = ["DEFAULT_MAX_SPAN_BYTES", "SPAN_HEADROOM", "TRUNCATED_BYTES", "bounded_attributes"]

DEFAULT_MAX_SPAN_BYTES = DEFAULT_MAX_BODY_BYTES
"""The store server's default request cap: a span must fit in one request."""

SPAN_HEADROOM = 64 * 1024
"""Bytes of ``max_span_bytes`` kept for the span's other fields (ids, status, resource) and the request's."""

TRUNCATED_BYTES = "agentlightning.llm.truncated_bytes"
"""Span attribute: UTF-8 bytes cut from the call's text bodies (present only when something was cut)."""

# Number lists: at most ~26 bytes of JSON per item, never cut.
_NUMBER_LISTS = frozenset({L.PROMPT_TOKEN_IDS.value, L.RESPONSE_TOKEN_IDS.value, L.RESPONSE_LOGPROBS.value})
_MARKER = "…[truncated {} bytes]"


def bounded_attributes(call: LLMCall, max_span_bytes: int) -> dict[str, Any]:
    """``call``'s span attributes, its text bodies cut (in place, on ``call``) if they would not fit."""
    attrs = call.to_attributes(LLMCallFormat.PROXY)
    budget = max_span_bytes - SPAN_HEADROOM
    if _upper_bound(attrs) <= budget:  # the common case: no serialization
        return attrs
    size = len(to_json(attrs))
    if size <= budget:
        return attrs
    removed = 0
    for _ in range(4):  # strings escaped unevenly may need another, tighter pass
        removed += _cut(call, size - budget)
        attrs = call.to_attributes(LLMCallFormat.PROXY)
        size = len(to_json(attrs))
        if size <= budget:
            break
    attrs[TRUNCATED_BYTES] = removed
    return attrs


def _upper_bound(attrs: dict[str, Any]) -> int:
    """A cheap bound on the attributes' JSON size (a character escapes to at most 6 bytes)."""
    total = 0
    for key, value in attrs.items():
        total += 6 * len(key) + 8
        if isinstance(value, str):
            total += 6 * len(value)
        elif key in _NUMBER_LISTS and isinstance(value, list):
            total += 26 * len(cast("list[Any]", value))
        else:
            total += len(to_json(value))
    return total


def _roots(call: LLMCall) -> list[Any]:
    return [call.messages, call.prompt, call.tools, call.params, *(c.message for c in call.choices)]


def _set_roots(call: LLMCall, roots: list[Any]) -> None:
    call.messages, call.prompt, call.tools, call.params = roots[0], roots[1], roots[2], roots[3]
    for choice, message in zip(call.choices, roots[4:], strict=True):
        choice.message = message


def _cut(call: LLMCall, excess: int) -> int:
    """Cut the longest strings of ``call``'s bodies so their JSON shrinks by about ``excess`` bytes; returns
    the UTF-8 bytes removed."""
    roots = _roots(call)
    leaves: list[str] = []
    for root in roots:
        _leaves(root, leaves)
    # What a character costs in the span: escaped once in a body's JSON text, again in the span's JSON.
    costs = [len(to_json(json.dumps(s, ensure_ascii=False))) for s in leaves]
    cap = _water_level(costs, excess + 64 * len(leaves))
    keep = iter(
        [(len(s) * cap) // cost if cost > cap and s else None for s, cost in zip(leaves, costs, strict=True)]
    )
    removed: list[int] = []
    _set_roots(call, [_rebuild(root, keep, removed) for root in roots])
    return sum(removed)


def _water_level(costs: list[int], excess: int) -> int:
    """The largest cap such that cutting every cost above it down to it removes at least ``excess``."""
    ordered = sorted(costs, reverse=True)
    above = 0  # sum of the costs above the level, over the first i
    for i, cost in enumerate(ordered):
        above += cost
        nxt = ordered[i + 1] if i + 1 < len(ordered) else 0
        if above - (i + 1) * nxt >= excess:
            return max(0, (above - excess) // (i + 1))
    return 0


def _leaves(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for item in cast("dict[str, Any]", value).values():
            _leaves(item, out)
    elif isinstance(value, list):
        for item in cast("list[Any]", value):
            _leaves(item, out)


def _rebuild(value: Any, keep: Iterator[int | None], removed: list[int]) -> Any:
    """``value`` with its strings cut as ``keep`` says (one entry per string, in :func:`_leaves` order)."""
    if isinstance(value, str):
        length = next(keep)
        if length is None:
            return value
        gone = len(value[length:].encode())
        removed.append(gone)
        return value[:length] + _MARKER.format(gone)
    if isinstance(value, dict):
        return {k: _rebuild(v, keep, removed) for k, v in cast("dict[str, Any]", value).items()}
    if isinstance(value, list):
        return [_rebuild(v, keep, removed) for v in cast("list[Any]", value)]
    return value
