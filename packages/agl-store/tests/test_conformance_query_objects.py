"""Contract: query arguments are validated once, the same way on every backend, and span queries batch.

Bad arguments raise :class:`InvalidRequestError` on every backend (over HTTP the client checks them before
sending, and the server checks them again: its 4xx becomes an ``InvalidRequestError`` too).
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from agl.store import LightningStore, LightningStoreClient
from agl.store._reference import DEPRECATED_QUERY_ALIASES
from agl.testing.spans import claim, make_span, span_for
from agl.types import (
    AttemptQuery,
    InvalidRequestError,
    ResourcesQuery,
    RolloutQuery,
    SpanQuery,
    StoreQuery,
    WorkerQuery,
)

_BAD_PAGES: list[dict[str, Any]] = [
    {"sort_by": "not_a_field"},
    {"sort_by": "metadata"},  # a field, but not one with scalar values
    {"sort_order": "sideways"},
    {"limit": -5},
    {"limit": "10"},
    {"limit": 2.5},
    {"limit": True},
    {"offset": -1},
    {"offset": "0"},
]

BAD_QUERIES: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    *(("query_rollouts", (), page) for page in _BAD_PAGES),
    ("query_rollouts", (), {"status_in": ["bogus"]}),
    ("query_rollouts", (), {"status_in": "queuing"}),  # a string, not a list of statuses
    ("query_rollouts", (), {"rollout_id_in": [1, 2]}),
    ("query_rollouts", (), {"rollout_id_contains": 3}),
    ("query_rollouts", (), {"filter_logic": "xor"}),
    ("query_attempts", ("ro-x",), {"sort_by": "bogus"}),
    ("query_attempts", ("ro-x",), {"limit": "all"}),
    ("query_attempts", (7,), {}),
    ("query_resources", (), {"sort_by": "resources"}),
    ("query_resources", (), {"resources_id": 5}),
    ("query_resources", (), {"offset": -3}),
    ("query_spans", ("ro-x",), {"sort_by": "attributes"}),
    ("query_spans", ("ro-x",), {"sort_order": "up"}),
    ("query_spans", ("ro-x",), {"limit": -2}),
    ("query_spans", ("ro-x",), {"name": ["a"]}),
    ("query_spans", ("ro-x",), {"filter_logic": "xor"}),
    ("query_spans", (None,), {}),
    ("query_spans", ("ro-x", 5), {}),
    ("query_workers", (), {"status_in": ["lazy"]}),
    ("query_workers", (), {"worker_id_contains": 1}),
    ("query_workers", (), {"limit": "3"}),
]


@pytest.mark.parametrize(
    ("method", "args", "kwargs"), BAD_QUERIES, ids=[f"{m}-{k or a}" for m, a, k in BAD_QUERIES]
)
async def test_bad_query_arguments_are_invalid_requests(
    store: LightningStore, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    await claim(store, worker_id="w-1")  # something to find, should a bad argument be let through
    with pytest.raises(InvalidRequestError) as caught:
        await getattr(store, method)(*args, **kwargs)
    name = next(iter(kwargs), None)
    if name is not None:
        assert name in str(caught.value)  # the message names the bad argument


@pytest.mark.filterwarnings("ignore::UserWarning")  # pydantic warns when it serialises the bad values
async def test_bad_queries_are_rejected_by_the_server_too(store: LightningStore) -> None:
    """A query object that skipped the client's checks is refused by the server with a 4xx."""
    if not isinstance(store, LightningStoreClient):
        pytest.skip("the HTTP backends only")
    unchecked: list[tuple[str, StoreQuery]] = [
        ("_query_rollouts", RolloutQuery.model_construct(status_in=["bogus"])),
        ("_query_spans", SpanQuery.model_construct(rollout_id="ro-x", limit="10")),
        ("_query_workers", WorkerQuery.model_construct(sort_by="colour")),
        ("_query_resources", ResourcesQuery.model_construct(offset=-1)),
        ("_query_attempts", AttemptQuery.model_construct(rollout_id="ro-x", sort_order="up")),
    ]
    for method, query in unchecked:
        with pytest.raises(InvalidRequestError):
            await getattr(store, method)(query)


async def test_collections_of_values_are_accepted_as_lists(store: LightningStore) -> None:
    rollout = await claim(store)
    for ids in ((rollout.rollout_id,), {rollout.rollout_id}, frozenset({rollout.rollout_id})):
        assert [r.rollout_id for r in await store.query_rollouts(rollout_id_in=ids)] == [rollout.rollout_id]  # pyright: ignore[reportArgumentType]
    assert (await store.query_rollouts(status_in=("preparing",))).total == 1
    assert (await store.query_rollouts(limit=1.0)).limit == 1  # pyright: ignore[reportArgumentType]


async def test_query_spans_many(store: LightningStore) -> None:
    a = await claim(store)
    b = await claim(store)
    idle = await claim(store)
    for name in ("a1", "a2"):
        await span_for(store, a, name=name)
    await span_for(store, b, name="b-first-attempt")
    retry = await store.start_attempt(b.rollout_id)
    await span_for(store, retry, name="b1")
    await span_for(store, retry, name="b2")

    found = await store.query_spans_many([b.rollout_id, a.rollout_id, idle.rollout_id, "ro-missing"])
    assert list(found) == [b.rollout_id, a.rollout_id, idle.rollout_id, "ro-missing"]  # request order
    assert [s.name for s in found[a.rollout_id]] == ["a1", "a2"]
    assert [s.name for s in found[b.rollout_id]] == ["b1", "b2"]  # the latest attempt only
    assert found[idle.rollout_id] == [] and found["ro-missing"] == []
    # the same spans as one query per rollout
    for rollout_id, spans in found.items():
        assert spans == list(await store.query_spans(rollout_id, "latest"))

    every = await store.query_spans_many([a.rollout_id, b.rollout_id, a.rollout_id], attempt_id=None)
    assert list(every) == [a.rollout_id, b.rollout_id]
    assert [s.name for s in every[b.rollout_id]] == ["b-first-attempt", "b1", "b2"]
    assert await store.query_spans_many([]) == {}
    with pytest.raises(InvalidRequestError):
        await store.query_spans_many(a.rollout_id)


async def test_span_queries_over_several_rollouts_order_ties_by_rollout_id(store: LightningStore) -> None:
    """Spans of several rollouts: sorted globally; ties (and an unsorted query) by rollout id, then insertion."""
    first, second = await claim(store), await claim(store)
    low, high = sorted([first, second], key=lambda r: r.rollout_id)
    for rollout in (high, low):  # the higher id writes first
        rid, aid = rollout.rollout_id, rollout.attempt.attempt_id
        await store.add_many_spans([make_span(rid, aid, 2, name="x"), make_span(rid, aid, 1, name="y")])
    ids = [high.rollout_id, low.rollout_id]
    query = SpanQuery.of({"rollout_id": ids})
    spans = list(await store._query_spans(query))
    assert [(s.rollout_id, s.sequence_id) for s in spans] == [
        (low.rollout_id, 1),
        (high.rollout_id, 1),
        (low.rollout_id, 2),
        (high.rollout_id, 2),
    ]
    unsorted = SpanQuery.of({"rollout_id": ids, "sort_by": None, "sort_order": "desc"})
    spans = list(await store._query_spans(unsorted))
    assert [(s.rollout_id, s.name) for s in spans] == [
        (high.rollout_id, "y"),
        (high.rollout_id, "x"),
        (low.rollout_id, "y"),
        (low.rollout_id, "x"),
    ]
    page = await store._query_spans(SpanQuery.of({"rollout_id": ids, "name": "y", "limit": 1, "offset": 1}))
    assert [s.rollout_id for s in page] == [high.rollout_id] and page.total == 2


def test_the_keyword_lists_are_the_query_fields() -> None:
    """Each query method's keywords are exactly its query object's fields (written in these two places only),
    besides the reference's deprecated aliases of some of them."""
    pairs = {
        "query_rollouts": RolloutQuery,
        "query_attempts": AttemptQuery,
        "query_resources": ResourcesQuery,
        "query_spans": SpanQuery,
        "query_workers": WorkerQuery,
    }
    for method, model in pairs.items():
        signature = inspect.signature(getattr(LightningStore, method))
        aliases = DEPRECATED_QUERY_ALIASES.get(method, {})  # the reference's old spellings of some fields
        assert set(aliases.values()) <= set(model.model_fields), method
        params = [p for p in signature.parameters.values() if p.name != "self" and p.name not in aliases]
        assert {p.name for p in params} == set(model.model_fields), method
        for p in params:  # the same defaults
            field = model.model_fields[p.name]
            if p.default is inspect.Parameter.empty:
                assert field.is_required(), (method, p.name)
            else:
                assert field.default == p.default, (method, p.name)
