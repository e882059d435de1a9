"""Contract: spans, heartbeats, sequence ids and span queries (every backend)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from agl.store import LightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import claim, make_span, span_for
from agl.types import EnqueueRolloutRequest, InvalidRequestError, NamedResources, NotFoundError, Span
from agl.types.semconv import LightningResourceAttributes

SEQUENCE = LightningResourceAttributes.SPAN_SEQUENCE_ID.value


async def test_add_span_stores_it_and_is_a_heartbeat(store: LightningStore, clock: ManualClock) -> None:
    rollout = await claim(store)
    clock.advance(2)
    span = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1, attributes={"x": [1, 2], "y": "z"})
    stored = await store.add_span(span)
    assert stored == span
    assert list(await store.query_spans(rollout.rollout_id)) == [span]
    attempt = await store.get_latest_attempt(rollout.rollout_id)
    assert attempt is not None
    assert attempt.status == "running"
    assert attempt.last_heartbeat_time == clock.now
    fetched = await store.get_rollout_by_id(rollout.rollout_id)
    assert fetched is not None and fetched.status == "running"


async def test_add_span_for_unknown_ids_is_not_found(store: LightningStore) -> None:
    with pytest.raises(NotFoundError, match="Rollout ro-missing not found"):
        await store.add_span(make_span("ro-missing", "at-missing", 1))
    rollout = await claim(store)
    with pytest.raises(NotFoundError, match=f"Attempt at-missing not found for rollout {rollout.rollout_id}"):
        await store.add_span(make_span(rollout.rollout_id, "at-missing", 1))
    assert (await store.query_spans(rollout.rollout_id)).total == 0


async def test_duplicate_spans_are_skipped(store: LightningStore) -> None:
    rollout = await claim(store)
    aid = rollout.attempt.attempt_id
    span = make_span(rollout.rollout_id, aid, 1, span_id="1" * 16)
    assert await store.add_span(span) is not None
    assert await store.add_span(span) is None
    other = make_span(rollout.rollout_id, aid, 2, span_id="2" * 16)
    stored = await store.add_many_spans([span, other, other])
    assert [s.span_id for s in stored] == ["2" * 16]
    assert (await store.query_spans(rollout.rollout_id)).total == 2
    # the same span id under another attempt is a different span
    second = await store.start_attempt(rollout.rollout_id)
    assert await store.add_span(make_span(rollout.rollout_id, second.attempt.attempt_id, 3, span_id="1" * 16))


async def test_add_many_spans_validates_the_whole_batch_first(store: LightningStore) -> None:
    rollout = await claim(store)
    good = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 1)
    bad = make_span(rollout.rollout_id, "at-missing", 2)
    with pytest.raises(NotFoundError):
        await store.add_many_spans([good, bad])
    assert (await store.query_spans(rollout.rollout_id)).total == 0
    assert await store.add_many_spans([]) == []


async def test_add_spans_in_order_numbers_and_stores_in_one_call(store: LightningStore) -> None:
    first, second = await claim(store), await claim(store)
    r1, a1 = first.rollout_id, first.attempt.attempt_id
    r2, a2 = second.rollout_id, second.attempt.attempt_id
    assert await store.get_next_span_sequence_id(r1, a1) == 1  # ids already given out are not reused
    spans = [make_span(r1, a1, 0), make_span(r2, a2, 99), make_span(r1, a1, 0)]
    stored = await store.add_spans_in_order(spans)
    assert [(s.rollout_id, s.sequence_id) for s in stored] == [(r1, 2), (r2, 1), (r1, 3)]
    assert [s.span_id for s in stored] == [s.span_id for s in spans]
    queried = list(await store.query_spans(r1))
    assert [(s.span_id, s.sequence_id) for s in queried] == [(spans[0].span_id, 2), (spans[2].span_id, 3)]
    assert await store.get_next_span_sequence_id(r1, a1) == 4
    # a duplicate is skipped but uses up an id; an empty call stores nothing
    again = await store.add_spans_in_order([spans[0], make_span(r1, a1, 0)])
    assert [s.sequence_id for s in again] == [6]
    assert await store.add_spans_in_order([]) == []


async def test_spans_the_store_numbers_carry_their_number_in_the_resource(store: LightningStore) -> None:
    """As the reference's exported spans: ``agentlightning.span_sequence_id`` beside the rollout and attempt."""
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    attributed = Span.from_item(make_span(rid, aid, 0), rollout_id=rid, attempt_id=aid)
    assert SEQUENCE not in attributed.resource.attributes  # numbered by the store, below
    bare = make_span(rid, aid, 0)  # not attributed through its resource: left as it is
    stored = await store.add_spans_in_order([attributed, bare])
    queried = {s.span_id: s for s in await store.query_spans(rid)}
    for span in (stored[0], queried[attributed.span_id]):
        assert span.resource.attributes[SEQUENCE] == span.sequence_id == 1
        assert span.resource.attributes[LightningResourceAttributes.ROLLOUT_ID.value] == rid
    assert SEQUENCE not in queried[bare.span_id].resource.attributes


async def test_add_spans_in_order_validates_the_whole_batch_first(store: LightningStore) -> None:
    rollout = await claim(store)
    good = make_span(rollout.rollout_id, rollout.attempt.attempt_id, 0)
    with pytest.raises(NotFoundError):
        await store.add_spans_in_order([good, make_span(rollout.rollout_id, "at-missing", 0)])
    assert (await store.query_spans(rollout.rollout_id)).total == 0


async def test_finish_attempt_stores_the_last_spans_then_the_outcome(store: LightningStore) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_spans_in_order([make_span(rid, aid, 0)])
    last = [make_span(rid, aid, 0), make_span(rid, aid, 0)]
    stored, attempt, claimed = await store.finish_attempt(
        rid, aid, last, status="succeeded", metadata={"final_reward": 1.0}
    )
    assert claimed is None  # not asked
    assert [(s.span_id, s.sequence_id) for s in stored] == [(last[0].span_id, 2), (last[1].span_id, 3)]
    assert attempt.status == "succeeded" and attempt.metadata == {"final_reward": 1.0}
    assert [s.sequence_id for s in await store.query_spans(rid)] == [1, 2, 3]
    finished = await store.get_rollout_by_id(rid)
    assert finished is not None and finished.status == "succeeded"
    # no spans: just the update; a duplicate span is skipped (and uses up an id), as in add_spans_in_order
    stored, attempt, _ = await store.finish_attempt(rid, aid, [last[0]], metadata={"again": True})
    assert stored == [] and attempt.metadata == {"again": True} and attempt.status == "succeeded"
    attempt = (await store.finish_attempt(rid, aid)).attempt
    assert attempt.metadata == {"again": True}


async def test_finish_attempt_claims_the_workers_next_rollout_in_the_same_call(store: LightningStore) -> None:
    # resources and rollouts given as dicts of their fields, which the store accepts
    resources = await store.add_resources(
        cast("NamedResources", {"llm": {"resource_type": "llm", "endpoint": "http://h/v1", "model": "m"}})
    )
    await store.enqueue_many_rollouts(cast("list[EnqueueRolloutRequest]", [{"input": 1}, {"input": 2}]))
    claimed = await store.dequeue_rollout_with_resources("w-1")
    assert claimed is not None
    rollout = claimed[0]
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    finished = await store.finish_attempt(
        rid, aid, [make_span(rid, aid, 0)], status="succeeded", claim_next_for="w-1"
    )
    assert finished.attempt.status == "succeeded" and [s.sequence_id for s in finished.spans] == [1]
    assert finished.next is not None
    following, its_resources = finished.next
    assert following.input == 2 and following.attempt.worker_id == "w-1"
    assert its_resources is not None and its_resources.resources_id == resources.resources_id
    # twice over HTTP: the client holds the snapshot now, the server does not send it again
    assert its_resources.resources == resources.resources
    ended = await store.finish_attempt(
        following.rollout_id, following.attempt.attempt_id, status="failed", claim_next_for="w-1"
    )
    assert ended.next is None and ended.attempt.status == "failed"  # nothing queued: no wait either
    with pytest.raises(InvalidRequestError, match="claim_next_for"):
        await store.finish_attempt(rid, aid, claim_next_for=7)  # pyright: ignore[reportArgumentType]


async def test_finish_attempt_refuses_bad_fields_and_unknown_attempts_before_writing(
    store: LightningStore,
) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    with pytest.raises(InvalidRequestError, match="spans must be a list"):
        await store.finish_attempt(rid, aid, "spans", status="succeeded")  # pyright: ignore[reportArgumentType]
    with pytest.raises(InvalidRequestError, match="attempt status"):
        await store.finish_attempt(rid, aid, [make_span(rid, aid, 0)], status="done")  # pyright: ignore[reportArgumentType]
    with pytest.raises(NotFoundError):
        await store.finish_attempt(rid, "at-missing", [make_span(rid, "at-missing", 0)], status="failed")
    assert (await store.query_spans(rid)).total == 0
    attempt = await store.get_latest_attempt(rid)
    assert attempt is not None and attempt.status == "preparing"  # nothing was written


async def test_add_many_spans_across_rollouts(store: LightningStore) -> None:
    a = await claim(store)
    b = await claim(store)
    spans = [make_span(r.rollout_id, r.attempt.attempt_id, i + 1) for i in range(3) for r in (a, b)]
    stored = await store.add_many_spans(spans)
    assert stored == spans
    for r in (a, b):
        got = await store.query_spans(r.rollout_id)
        assert [s.sequence_id for s in got] == [1, 2, 3]
        fetched = await store.get_rollout_by_id(r.rollout_id)
        assert fetched is not None and fetched.status == "running"


async def test_sequence_ids_are_per_rollout_and_never_reissued(store: LightningStore) -> None:
    rollout = await claim(store)
    aid = rollout.attempt.attempt_id
    assert [await store.get_next_span_sequence_id(rollout.rollout_id, aid) for _ in range(3)] == [1, 2, 3]
    second = await store.start_attempt(rollout.rollout_id)
    # Decision (4): one counter per rollout, shared by its attempts.
    assert await store.get_next_span_sequence_id(rollout.rollout_id, second.attempt.attempt_id) == 4
    # an explicit higher sequence id moves the counter up
    await store.add_span(make_span(rollout.rollout_id, aid, 100))
    assert await store.get_next_span_sequence_id(rollout.rollout_id, aid) == 101
    await store.add_span(make_span(rollout.rollout_id, aid, 50))
    assert await store.get_next_span_sequence_id(rollout.rollout_id, aid) == 102


async def test_sequence_ids_do_not_validate_ids(store: LightningStore) -> None:
    """Decision (3): allocation does not check that the rollout or attempt exists."""
    assert await store.get_next_span_sequence_id("ro-nowhere", "at-nowhere") == 1
    assert await store.get_next_span_sequence_id("ro-nowhere", "at-other") == 2


async def test_many_sequence_ids_are_consecutive_per_rollout(store: LightningStore) -> None:
    ids = await store.get_many_span_sequence_ids(
        [("ro-A", "a1"), ("ro-B", "b1"), ("ro-A", "a2"), ("ro-A", "a1")]
    )
    assert ids == [1, 1, 2, 3]
    assert await store.get_many_span_sequence_ids([]) == []
    assert await store.get_next_span_sequence_id("ro-A", "a1") == 4


async def test_query_spans_by_attempt(store: LightningStore) -> None:
    rollout = await claim(store)
    first = await span_for(store, rollout)
    second_attempt = await store.start_attempt(rollout.rollout_id)
    second = await span_for(store, second_attempt)
    assert [s.span_id for s in await store.query_spans(rollout.rollout_id)] == [first.span_id, second.span_id]
    assert [s.span_id for s in await store.query_spans(rollout.rollout_id, "latest")] == [second.span_id]
    by_first = await store.query_spans(rollout.rollout_id, rollout.attempt.attempt_id)
    assert [s.span_id for s in by_first] == [first.span_id]
    assert (await store.query_spans(rollout.rollout_id, "at-missing")).total == 0


async def test_query_spans_on_unknown_or_unstarted_rollouts_is_empty(store: LightningStore) -> None:
    result = await store.query_spans("ro-missing")
    assert result.total == 0 and list(result) == []
    queued = await store.enqueue_rollout("x")
    assert (await store.query_spans(queued.rollout_id, "latest")).total == 0


async def test_query_spans_filters(store: LightningStore) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    spans = [
        make_span(rid, aid, 1, name="llm.call", trace_id="1" * 32, span_id="a" * 16),
        make_span(rid, aid, 2, name="tool.call", trace_id="1" * 32, span_id="b" * 16, parent_id="a" * 16),
        make_span(rid, aid, 3, name="LLM.summary", trace_id="2" * 32, span_id="c" * 16, parent_id="a" * 16),
    ]
    await store.add_many_spans(spans)

    async def seqs(**kwargs: Any) -> list[int]:
        return [s.sequence_id for s in await store.query_spans(rid, **kwargs)]

    assert await seqs(name="tool.call") == [2]
    assert await seqs(name_contains="call") == [1, 2]
    assert await seqs(name_contains="llm") == [1]  # Decision (6): contains is case-sensitive
    assert await seqs(trace_id="1" * 32) == [1, 2]
    assert await seqs(trace_id_contains="2") == [3]
    assert await seqs(span_id="c" * 16) == [3]
    assert await seqs(span_id_contains="b") == [2]
    assert await seqs(parent_id="a" * 16) == [2, 3]
    assert await seqs(parent_id_contains="a") == [2, 3]
    assert await seqs(parent_id="a" * 16, name_contains="tool") == [2]
    assert await seqs(name="llm.call", span_id="c" * 16, filter_logic="or") == [1, 3]
    # Decision (6): "or" with no predicate returns everything
    assert await seqs(filter_logic="or") == [1, 2, 3]


async def test_or_filters_never_leak_other_rollouts(store: LightningStore) -> None:
    a = await claim(store)
    b = await claim(store)
    await span_for(store, a, name="shared")
    await span_for(store, b, name="shared")
    result = await store.query_spans(a.rollout_id, name="shared", name_contains="x", filter_logic="or")
    assert [s.rollout_id for s in result] == [a.rollout_id]


async def test_query_spans_sort_and_paginate(store: LightningStore) -> None:
    rollout = await claim(store)
    rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
    await store.add_many_spans(
        [
            make_span(rid, aid, 1, start_time=30.0),
            make_span(rid, aid, 2, start_time=None),
            make_span(rid, aid, 3, start_time=10.0),
            make_span(rid, aid, 4, start_time=20.0),
        ]
    )

    async def seqs(**kwargs: Any) -> list[int]:
        return [s.sequence_id for s in await store.query_spans(rid, **kwargs)]

    assert await seqs(sort_order="desc") == [4, 3, 2, 1]
    # Decision (6): None sorts last ascending and first descending
    assert await seqs(sort_by="start_time") == [3, 4, 1, 2]
    assert await seqs(sort_by="start_time", sort_order="desc") == [2, 1, 4, 3]
    page = await store.query_spans(rid, limit=2, offset=1)
    assert [s.sequence_id for s in page] == [2, 3]
    assert (page.total, page.limit, page.offset) == (4, 2, 1)
    empty = await store.query_spans(rid, limit=0)
    assert len(empty) == 0 and empty.total == 4
    assert (await store.query_spans(rid, offset=10)).items == []


async def test_query_spans_rejects_bad_parameters(store: LightningStore) -> None:
    rollout = await claim(store)
    for kwargs in (
        {"sort_by": "no_such_field"},
        {"sort_order": "up"},
        {"limit": -2},
        {"offset": -1},
        {"filter_logic": "xor"},
    ):
        with pytest.raises(InvalidRequestError):
            await store.query_spans(rollout.rollout_id, **kwargs)  # pyright: ignore[reportArgumentType]


async def test_add_otel_span_converts_and_allocates(store: LightningStore) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("test").start_as_current_span("otel.op", attributes={"answer": 42}):
        pass
    (readable,) = exporter.get_finished_spans()
    rollout = await claim(store)
    stored = await store.add_otel_span(rollout.rollout_id, rollout.attempt.attempt_id, readable)
    assert stored is not None
    assert stored.name == "otel.op" and stored.attributes == {"answer": 42}
    assert stored.sequence_id == 1
    explicit = await store.add_otel_span(
        rollout.rollout_id, rollout.attempt.attempt_id, readable, sequence_id=7
    )
    assert explicit is None  # the same OpenTelemetry span again: a duplicate
    assert await store.get_next_span_sequence_id(rollout.rollout_id, rollout.attempt.attempt_id) == 8
    provider.shutdown()
