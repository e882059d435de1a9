"""Readers for what emitters recorded: rewards, messages and objects in spans.

They accept stored ``Span`` objects and OpenTelemetry ``ReadableSpan`` alike (anything with ``name`` and
``attributes``).
"""

from __future__ import annotations

import base64
import json
import logging
import math
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

from agl.types import UNSET, Attempt, AttemptedRollout, LightningSpanAttributes, RewardPydanticModel, Unset
from agl.types.narrow import as_mapping
from agl.types.semconv import AGL_ANNOTATION, AGL_REWARD, FINAL_REWARD_METADATA_KEY

from .attributes import filter_and_unflatten_attributes, filter_attributes

__all__ = [
    "final_reward_of",
    "find_final_reward",
    "find_reward_spans",
    "get_message_value",
    "get_object_value",
    "get_reward_value",
    "get_rewards_from_span",
    "is_reward_span",
    "recorded_final_reward",
]

logger = logging.getLogger(__name__)

_REWARD = LightningSpanAttributes.REWARD.value
_AGENTOPS_OUTPUT_KEYS = ("agentops.task.output", "agentops.entity.output")


def _attributes(span: Any) -> Mapping[str, Any]:
    return getattr(span, "attributes", None) or {}


def get_rewards_from_span(span: Any) -> list[RewardPydanticModel]:
    """The reward dimensions written by ``emit_reward`` (primary first); ``[]`` when there are none."""
    attributes = _attributes(span)
    flat = filter_attributes(attributes, _REWARD)
    if not flat or _REWARD in flat:
        return []
    try:
        dims = filter_and_unflatten_attributes(flat, _REWARD)
    except ValueError:
        return []
    by_index = as_mapping(dims)
    if by_index is not None:  # indices not exactly 0..n-1: keep numeric order
        numeric = sorted((k for k in by_index if k.isdigit()), key=int)
        dims = [by_index[k] for k in numeric]
    rewards: list[RewardPydanticModel] = []
    for item in cast("list[Any]", dims) if isinstance(dims, list) else []:  # unflattened attribute values
        dim = as_mapping(item)
        if dim is None or "value" not in dim:
            continue
        try:
            rewards.append(
                RewardPydanticModel(name=str(dim.get("name", "primary")), value=float(dim["value"]))
            )
        except (TypeError, ValueError):
            continue
    return rewards


def _agentops_reward(attributes: Mapping[str, Any]) -> float | None:
    for key in _AGENTOPS_OUTPUT_KEYS:
        payload = attributes.get(key)
        if payload is None:
            continue
        if isinstance(payload, str):
            try:
                payload = json.loads(payload)
            except json.JSONDecodeError:
                continue
        output = as_mapping(payload)
        if output is not None and output.get("type") == "reward":
            value = output.get("value")
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                warnings.warn(
                    "a reward in an AgentOps operation output is a legacy format; use emit_reward()",
                    DeprecationWarning,
                    stacklevel=3,
                )
                return float(value)
            if value is None:
                return None
    return None


def get_reward_value(span: Any) -> float | None:
    """The reward a span carries, or ``None``.

    Recognised, in order: ``emit_reward``'s attributes (the primary dimension); an AgentOps operation output
    ``{"type": "reward", "value": x}`` (legacy, warns); a ``reward`` attribute on a span named
    ``agentlightning.annotation`` or ``agentlightning.reward`` (v0.2 format, warns).
    """
    rewards = get_rewards_from_span(span)
    if rewards:
        return rewards[0].value
    attributes = _attributes(span)
    value = _agentops_reward(attributes)
    if value is not None:
        return value
    if getattr(span, "name", None) in (AGL_ANNOTATION, AGL_REWARD) and "reward" in attributes:
        raw = attributes["reward"]
        if isinstance(raw, (int, float)) and not isinstance(raw, bool) and math.isfinite(raw):
            warnings.warn(
                "a plain `reward` attribute is the v0.2 reward format; use emit_reward()",
                DeprecationWarning,
                stacklevel=2,
            )
            return float(raw)
    return None


def is_reward_span(span: Any) -> bool:
    """Whether the span carries a reward."""
    return get_reward_value(span) is not None


def find_reward_spans(spans: Iterable[Any]) -> list[Any]:
    """The spans that carry a reward, in order."""
    return [span for span in spans if is_reward_span(span)]


def find_final_reward(spans: Sequence[Any]) -> float | None:
    """The reward of the last span that carries one, or ``None``."""
    for span in reversed(list(spans)):
        value = get_reward_value(span)
        if value is not None:
            return value
    return None


def recorded_final_reward(source: Any) -> float | Unset | None:
    """The final reward the runner recorded for an attempt (``metadata[FINAL_REWARD_METADATA_KEY]``).

    ``source`` is an ``AttemptedRollout`` (its latest attempt is read), an ``Attempt`` or a metadata mapping.
    Returns the reward, ``None`` when the runner found no reward, or ``UNSET`` when nothing usable is recorded
    (a rollout without its attempt, an attempt that did not succeed, or one written before runners recorded it).
    """
    if isinstance(source, AttemptedRollout):
        source = source.attempt
    if isinstance(source, Attempt):
        source = source.metadata
    metadata = as_mapping(source)
    if metadata is None or FINAL_REWARD_METADATA_KEY not in metadata:
        return UNSET
    value = metadata[FINAL_REWARD_METADATA_KEY]
    if value is None:
        return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return UNSET


def final_reward_of(source: Any, spans: Sequence[Any] | None = None) -> float | None:
    """The final reward of a rollout: the one in its attempt's metadata, else ``find_final_reward(spans)``.

    The runner that ran the attempt is the one owner of the final reward: it computes it once over the
    attempt's spans and records it (:data:`~agl.types.semconv.FINAL_REWARD_METADATA_KEY`). Readers (algorithms,
    progress displays) take it from there; ``spans`` (the attempt's) are the fallback for rollouts written
    without it, and ``None`` is returned when neither is available.
    """
    recorded = recorded_final_reward(source)
    if not isinstance(recorded, Unset):
        return recorded
    return find_final_reward(spans) if spans is not None else None


def get_message_value(span: Any) -> str | None:
    """The body written by ``emit_message``; ``None`` if absent, ``TypeError`` if it is not a string."""
    value = _attributes(span).get(LightningSpanAttributes.MESSAGE_BODY.value)
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"message body must be a str, found {type(value).__name__}")
    return value


_LITERAL_DECODERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": lambda text: text.strip().lower() == "true",
    "bytes": lambda text: base64.b64decode(text.encode("ascii")),
}


def get_object_value(span: Any) -> Any:
    """The value written by ``emit_object``; ``None`` when the span has none.

    A literal of an unknown type or undecodable JSON raises ``RuntimeError``.
    """
    attributes = _attributes(span)
    encoded = attributes.get(LightningSpanAttributes.OBJECT_JSON.value)
    if encoded is not None:
        try:
            return json.loads(encoded)
        except (TypeError, json.JSONDecodeError) as exc:
            raise RuntimeError(f"the object's JSON cannot be decoded: {exc}") from exc
    literal = attributes.get(LightningSpanAttributes.OBJECT_LITERAL.value)
    if literal is None:
        return None
    kind = attributes.get(LightningSpanAttributes.OBJECT_TYPE.value)
    decoder = _LITERAL_DECODERS.get(str(kind))
    if decoder is None:
        raise RuntimeError(f"unknown object literal type {kind!r}")
    try:
        return decoder(str(literal))
    except ValueError as exc:
        raise RuntimeError(f"the {kind} literal {literal!r} cannot be decoded: {exc}") from exc
