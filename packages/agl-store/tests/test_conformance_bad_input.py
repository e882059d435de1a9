"""Contract: bad input gets the same clear InvalidRequestError on every backend, and changes nothing.

Runs on memory, SQLite, PostgreSQL and the HTTP client over each (``store`` fixture).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from agl.store import LightningStore
from agl.testing.spans import claim, make_span
from agl.types import EnqueueRolloutRequest, InvalidRequestError, Span
from agl.types.validation import MAX_JSON_DEPTH
from pydantic import ValidationError


def _nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


UNSTORABLE = {
    "lone surrogate": "\ud800",
    "lone surrogate in a key": {"\udfff": 1},
    "300 nested lists": _nested(300),
    "too deep": _nested(MAX_JSON_DEPTH + 1),
    "NaN": float("nan"),
    "infinity": {"x": [float("inf")]},
    "an object": object(),
}


async def _nothing_stored(store: LightningStore) -> None:
    assert (await store.query_rollouts()).total == 0
    assert await store.dequeue_rollout() is None


@pytest.mark.parametrize("value", list(UNSTORABLE.values()), ids=list(UNSTORABLE))
async def test_an_unstorable_input_is_refused_and_nothing_is_stored(
    store: LightningStore, value: Any
) -> None:
    with pytest.raises(InvalidRequestError, match="rollout input"):
        await store.enqueue_rollout(value)
    with pytest.raises(InvalidRequestError, match="rollout input"):
        await store.start_rollout(value)
    with pytest.raises(InvalidRequestError, match="rollout input"):
        await store.enqueue_many_rollouts(
            [EnqueueRolloutRequest(input="fine"), EnqueueRolloutRequest(input=value)]
        )
    with pytest.raises(InvalidRequestError, match="rollout metadata"):
        await store.enqueue_rollout("x", metadata={"m": value})
    await _nothing_stored(store)


async def test_the_deepest_allowed_input_round_trips(store: LightningStore) -> None:
    deepest = _nested(MAX_JSON_DEPTH)
    rollout = await store.enqueue_rollout(deepest)
    assert rollout.input == deepest
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched is not None and fetched.input == deepest
    assert (await store.query_rollouts()).items[0].input == deepest


async def test_an_update_with_an_unstorable_value_changes_nothing(store: LightningStore) -> None:
    rollout = await store.enqueue_rollout("x", metadata={"a": 1})
    for value in ("\ud800", float("nan"), _nested(300)):
        with pytest.raises(InvalidRequestError):
            await store.update_rollout(rollout.rollout_id, input=value)
        with pytest.raises(InvalidRequestError):
            await store.update_rollout(rollout.rollout_id, metadata={"a": value})
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched is not None and fetched.input == "x" and fetched.metadata == {"a": 1}
    attempted = await claim(store)
    with pytest.raises(InvalidRequestError):
        await store.update_attempt(attempted.rollout_id, "latest", metadata={"m": float("inf")})
    with pytest.raises(InvalidRequestError):
        await store.update_attempt(attempted.rollout_id, "latest", last_heartbeat_time=float("nan"))


@pytest.mark.parametrize("bad_id", ["a\x00b", "\ud800", 7], ids=["NUL", "lone surrogate", "not a string"])
async def test_ids_a_database_cannot_keep_are_refused(store: LightningStore, bad_id: Any) -> None:
    calls: list[Callable[[], Awaitable[Any]]] = [
        lambda: store.get_rollout_by_id(bad_id),
        lambda: store.get_latest_attempt(bad_id),
        lambda: store.start_attempt(bad_id),
        lambda: store.update_rollout(bad_id, status="failed"),
        lambda: store.update_attempt(bad_id, "latest", status="failed"),
        lambda: store.wait_for_rollouts(rollout_ids=[bad_id], timeout=0),
        lambda: store.get_resources_by_id(bad_id),
        lambda: store.update_resources(bad_id, {}),
        lambda: store.get_worker_by_id(bad_id),
        lambda: store.update_worker(bad_id),
        lambda: store.dequeue_rollout(worker_id=bad_id),
        lambda: store.start_rollout("x", worker_id=bad_id),
        lambda: store.enqueue_rollout("x", resources_id=bad_id),
        lambda: store.get_next_span_sequence_id(bad_id, "at"),
        lambda: store.get_many_span_sequence_ids([("ro", bad_id)]),
    ]
    for i, call in enumerate(calls):
        with pytest.raises(InvalidRequestError):
            await call()
            pytest.fail(f"call #{i} accepted {bad_id!r}")
    await _nothing_stored(store)
    assert (await store.query_workers()).total == 0
    assert (await store.query_resources()).total == 0


async def test_wrong_types_and_values_get_clear_errors(store: LightningStore) -> None:
    with pytest.raises(InvalidRequestError, match="status"):
        await store.query_rollouts(status_in=["bogus"])  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="limit"):
        await store.query_rollouts(limit="10")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="limit"):
        await store.dequeue_many_rollouts(limit="10")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="timeout"):
        await asyncio.wait_for(store.wait_for_rollouts(rollout_ids=["ro-x"], timeout=float("nan")), 5)
    with pytest.raises(InvalidRequestError, match="timeout"):
        await store.dequeue_rollout(timeout=float("nan"))
    with pytest.raises(InvalidRequestError, match="rollout_ids"):
        await store.wait_for_rollouts(rollout_ids="ro-x", timeout=0)
    with pytest.raises(InvalidRequestError, match="heartbeat_stats"):
        await store.update_worker("w", heartbeat_stats="hi")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="heartbeat_stats"):
        await store.update_worker("w", heartbeat_stats={"x": float("nan")})
    with pytest.raises(InvalidRequestError, match="rollout"):
        await store.enqueue_many_rollouts([1])  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="resources"):
        await store.add_resources("not a dict")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="span"):
        await store.add_span("not a span")  # pyright: ignore[reportArgumentType]
    await _nothing_stored(store)
    assert (await store.query_workers()).total == 0


UNSTORABLE_SPANS = {
    "NaN attribute": {"attributes": {"reward": float("nan")}},
    "infinite attribute": {"attributes": {"x": [1.0, float("inf")]}},
    "lone surrogate attribute": {"attributes": {"text": "\ud800"}},
    "deep attribute": {"attributes": {"x": _nested(300)}},
    "too deep attribute": {"attributes": {"x": _nested(MAX_JSON_DEPTH)}},
    "NUL in the span id": {"span_id": "s\x00"},
    "NUL in the name": {"name": "n\x00"},
    "an object attribute": {"attributes": {"x": object()}},
}


@pytest.mark.parametrize("change", list(UNSTORABLE_SPANS.values()), ids=list(UNSTORABLE_SPANS))
async def test_an_unstorable_span_is_refused_and_nothing_is_stored(
    store: LightningStore, change: dict[str, Any]
) -> None:
    attempted = await claim(store)
    good = make_span(attempted.rollout_id, attempted.attempt.attempt_id, 1)
    bad = make_span(attempted.rollout_id, attempted.attempt.attempt_id, 2).model_copy(update=change)
    for call in (
        lambda: store.add_span(bad),
        lambda: store.add_many_spans([good, bad]),
        lambda: store.add_spans_in_order([good, bad]),
    ):
        with pytest.raises(InvalidRequestError):
            await call()
    assert (await store.query_spans(attempted.rollout_id)).total == 0


async def test_span_text_content_may_hold_nul(store: LightningStore) -> None:
    attempted = await claim(store)
    span = make_span(attempted.rollout_id, attempted.attempt.attempt_id, 1, attributes={"text": "a\x00b"})
    assert await store.add_span(span) is not None
    (stored,) = (await store.query_spans(attempted.rollout_id)).items
    assert stored.attributes == {"text": "a\x00b"}


def test_span_sequence_ids_are_bounded() -> None:
    span = make_span("ro", "at", 1)
    for bad in (2**63, 2**53, -1):
        with pytest.raises(ValidationError):
            Span.model_validate({**span.model_dump(), "sequence_id": bad})
    assert Span.model_validate({**span.model_dump(), "sequence_id": 2**53 - 1}).sequence_id == 2**53 - 1


def test_a_server_needs_a_store() -> None:
    from agl.store import LightningStoreServer

    for bad in (None, "memory", object()):
        with pytest.raises(InvalidRequestError, match="LightningStore"):
            LightningStoreServer(bad)  # pyright: ignore[reportArgumentType]
