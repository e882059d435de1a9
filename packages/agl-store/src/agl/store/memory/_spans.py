"""How the in-memory store keeps spans: one flat tuple per span, its content as JSON bytes.

A pydantic ``Span`` is a dozen garbage-collected objects; a store holding millions of them makes every full
garbage collection of the process walk them all (a quarter of the reference's benchmark time). A tuple of
strings, numbers and bytes is invisible to the collector, and the queried fields sit in the tuple so
filters and the usual sorts never decode. Spans come back decoded from JSON, exactly as the SQL and HTTP
stores return them.

Decoding is most of a read's cost, and a trainer reads the spans of the rollouts that just finished: a bounded
:class:`SpanCache` keeps the decoded spans of the most recently written and read rows (a few tens of thousands
of objects: the collector's work stays bounded). Spans a read returns are the cache's: treat them as
read-only (``model_copy()`` before changing one), as with the reference's in-memory store.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Sequence
from operator import itemgetter
from typing import Any, cast

from agl.types import PaginatedResult, Span, Where
from agl.types.validation import span_json
from pydantic import TypeAdapter

from ._query import filter_where, page_of, paginate, sort_rows

__all__ = ["ATTEMPT_ID", "SpanCache", "StoredSpan", "decode_span", "encode_span", "query_stored_spans"]

StoredSpan = tuple[str, int, str, str, "str | None", str, "float | None", bytes]
"""(attempt_id, sequence_id, span_id, trace_id, parent_id, name, start_time, JSON of the whole span)."""

ATTEMPT_ID, SEQUENCE_ID, SPAN_ID, TRACE_ID, PARENT_ID, NAME, START_TIME = range(7)
_INDEXED = {
    "attempt_id": ATTEMPT_ID,
    "sequence_id": SEQUENCE_ID,
    "span_id": SPAN_ID,
    "trace_id": TRACE_ID,
    "parent_id": PARENT_ID,
    "name": NAME,
    "start_time": START_TIME,
}
_SPAN_LIST: TypeAdapter[list[Span]] = TypeAdapter(list[Span])


def encode_span(span: Span) -> StoredSpan:
    """The stored form of a span; :class:`InvalidRequestError` when it cannot be stored (``span_json``)."""
    payload = span_json(span)
    return (
        span.attempt_id,
        span.sequence_id,
        span.span_id,
        span.trace_id,
        span.parent_id,
        span.name,
        span.start_time,
        payload,
    )


def decode_span(stored: StoredSpan) -> Span:
    return Span.model_validate_json(stored[7])


def _span_reader(attribute: str) -> Callable[[StoredSpan], Any]:
    index = _INDEXED.get(attribute)
    if index is not None:
        return itemgetter(index)
    return lambda stored: getattr(decode_span(stored), attribute)  # not kept in the tuple: decode


def _decode_all(rows: Sequence[StoredSpan]) -> list[Span]:
    if len(rows) <= 1:
        return [decode_span(s) for s in rows]
    return _SPAN_LIST.validate_json(b"[" + b",".join(s[7] for s in rows) + b"]")  # one call: faster


class SpanCache:
    """Decoded spans of stored rows, by the identity of the row's JSON (held here, so never reused); the
    oldest entries go first once ``max_spans`` are kept. Thread-safe."""

    def __init__(self, max_spans: int = 20_000) -> None:
        self.max_spans = max_spans
        self._items: dict[int, tuple[bytes, Span]] = {}
        self._lock = threading.Lock()

    def put(self, rows: Sequence[StoredSpan], spans: Sequence[Span]) -> None:
        if self.max_spans <= 0:
            return
        with self._lock:
            items = self._items
            for row, span in zip(rows, spans, strict=True):
                items[id(row[7])] = (row[7], span)
            excess = len(items) - self.max_spans
            if excess > 0:
                for key in list(itertools.islice(items, excess)):
                    del items[key]

    def decode(self, rows: Sequence[StoredSpan]) -> list[Span]:
        """The spans of ``rows``: cached ones as they are, the others decoded in one call (and kept)."""
        with self._lock:
            found = [self._items.get(id(row[7])) for row in rows]
        spans: list[Span | None] = [
            e[1] if e is not None and e[0] is row[7] else None for e, row in zip(found, rows, strict=True)
        ]
        missing = [i for i, span in enumerate(spans) if span is None]
        if missing:
            fresh_rows = [rows[i] for i in missing]
            fresh = _decode_all(fresh_rows)
            for i, span in zip(missing, fresh, strict=True):
                spans[i] = span
            self.put(fresh_rows, fresh)
        return cast("list[Span]", spans)  # no None left


def query_stored_spans(
    rows: Sequence[StoredSpan],
    where: Where,
    sort_by: str | None,
    sort_order: str,
    limit: int,
    offset: int,
    cache: SpanCache | None = None,
) -> PaginatedResult[Span]:
    """Filter, sort and paginate stored spans; only the returned page is decoded when the sort is indexed."""
    matched = filter_where(rows, where, _span_reader)
    if sort_by is None or sort_by in _INDEXED:
        get = None if sort_by is None else itemgetter(_INDEXED[sort_by])
        ordered = sort_rows(matched, sort_by, sort_order, get)
        page = paginate(ordered, limit, offset)
        items = cache.decode(page.items) if cache is not None else _decode_all(page.items)
        return page_of(items, limit, offset, page.total)
    decoded = sort_rows(
        cache.decode(matched) if cache is not None else _decode_all(matched), sort_by, sort_order
    )
    return paginate(decoded, limit, offset)
