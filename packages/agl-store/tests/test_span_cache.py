"""The in-memory store's cache of decoded spans: bounded, and always the spans the rows hold."""

from __future__ import annotations

from agl.store import InMemoryLightningStore
from agl.store.memory._spans import SpanCache, decode_span, encode_span
from agl.types import Span
from hypothesis import given, settings
from hypothesis import strategies as st


def _row(i: int) -> tuple:
    span = Span.from_attributes(attributes={"i": i}, rollout_id="ro-1", attempt_id="at-1", sequence_id=i)
    return encode_span(span)


ROWS = [_row(i) for i in range(12)]


@settings(max_examples=60, deadline=None)
@given(
    max_spans=st.integers(0, 5),
    reads=st.lists(st.lists(st.integers(0, len(ROWS) - 1), max_size=6), max_size=8),
)
def test_decode_always_gives_the_rows_spans_and_keeps_at_most_max(
    max_spans: int, reads: list[list[int]]
) -> None:
    cache = SpanCache(max_spans=max_spans)
    for read in reads:
        rows = [ROWS[i] for i in read]
        assert cache.decode(rows) == [decode_span(r) for r in rows]
        assert len(cache._items) <= max_spans


async def test_what_was_written_is_read_back_without_decoding_and_equal() -> None:
    store = InMemoryLightningStore()
    await store.enqueue_rollout(input=1)
    claimed = await store.dequeue_rollout()
    assert claimed is not None
    given_spans = [
        Span.from_attributes(
            attributes={"i": i},
            rollout_id=claimed.rollout_id,
            attempt_id=claimed.attempt.attempt_id,
            sequence_id=i,
        )
        for i in range(1, 4)
    ]
    await store.add_many_spans(given_spans)
    given_spans[0].name = "changed by the writer afterwards"  # the store kept its own copy
    first = list(await store.query_spans(claimed.rollout_id))
    again = list(await store.query_spans(claimed.rollout_id))
    assert [s.sequence_id for s in first] == [1, 2, 3]
    assert first[0].name != "changed by the writer afterwards"
    assert all(a is b for a, b in zip(first, again, strict=True))  # served from the cache
