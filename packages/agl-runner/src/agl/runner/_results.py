"""Turn what an agent's rollout returned into the spans of its attempt (stored where needed)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from agl.types import Span, SpanCoreFields

if TYPE_CHECKING:
    from agl.store import LightningStore
    from agl.tracer import Tracer

__all__ = ["rollout_result_to_spans"]

logger = logging.getLogger(__name__)


def _is_readable_span(item: Any) -> bool:
    try:
        from opentelemetry.sdk.trace import ReadableSpan
    except ImportError:  # pragma: no cover - opentelemetry-sdk comes with agl-tracer
        return False
    return isinstance(item, ReadableSpan)


def _is_reward(result: Any) -> bool:
    return isinstance(result, (bool, int, float))


def record_returned_reward(result: Any, rollout_id: str) -> bool:
    """Inside the trace context: turn a returned number into a reward span of the trace; whether it did (a
    tracer whose ``trace_context`` makes no tracer active, as a user's own may, leaves it to
    :func:`rollout_result_to_spans`)."""
    if not _is_reward(result):
        return False
    if not isinstance(result, float):
        logger.warning(
            "Rollout %s returned %s %r as its reward; converting it to float",
            rollout_id,
            type(result).__name__,
            result,
        )
    from agl.tracer import emit_reward, get_active_tracer

    if get_active_tracer() is None:
        return False
    emit_reward(float(result))
    return True


async def rollout_result_to_spans(
    result: Any,
    *,
    store: LightningStore,
    tracer: Tracer,
    rollout_id: str,
    attempt_id: str,
    reward_in_trace: bool = True,
) -> list[Span]:
    """The spans of the attempt after its rollout returned ``result``.

    - ``None``: the spans the tracer recorded.
    - a number (``bool``/``int`` are accepted with a warning): the final reward, already added to the trace
      by :func:`record_returned_reward` (else, ``reward_in_trace=False``, stored here after the trace's
      spans); the tracer's spans.
    - a list of ``Span``, ``SpanCoreFields`` or OpenTelemetry ``ReadableSpan``: these are the spans; they are
      stored in one batch (spans the tracer already stored are not duplicated).

    An empty list is accepted with a warning; a list mixing kinds is a ``ValueError``; anything else a
    ``TypeError``.
    """
    if result is None or _is_reward(result):
        spans = list(tracer.get_last_trace())
        if result is not None and not reward_in_trace:
            from agl.tracer import emit_reward

            reward = emit_reward(float(result), propagate=False)
            numbered = Span.from_item(reward, rollout_id=rollout_id, attempt_id=attempt_id)
            spans += await store.add_spans_in_order([numbered])
        return spans
    if isinstance(result, (str, bytes)) or not isinstance(result, Sequence):
        raise TypeError(
            f"Rollout {rollout_id} returned {type(result).__name__}; a rollout returns None, a float reward "
            "or a list of spans"
        )
    items = cast("Sequence[Any]", result)  # isinstance leaves the item type unknown
    if not items:
        logger.warning("Rollout %s returned an empty list of spans", rollout_id)
        return []
    if all(isinstance(i, Span) for i in items):
        spans = list(items)
        await store.add_many_spans(spans)
        return spans
    if all(isinstance(i, SpanCoreFields) for i in items) or all(_is_readable_span(i) for i in items):
        converted = [Span.from_item(i, rollout_id=rollout_id, attempt_id=attempt_id) for i in items]
        return await store.add_spans_in_order(converted)
    kinds = ", ".join(sorted({type(i).__name__ for i in items}))
    raise ValueError(
        f"Rollout {rollout_id} returned a list mixing {kinds}; return only Span, SpanCoreFields or "
        "ReadableSpan objects"
    )
