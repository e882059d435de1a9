"""Property: the in-memory and the SQL store answer every query identically.

Both stores get the same history (same clock, same ids through a deterministic id generator), then
Hypothesis draws random queries of every kind (filters, pooling, sorts, pages, several rollouts) and each
answer must match item for item, order and total included.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
from agl.store import InMemoryLightningStore, LightningStore, SqlLightningStore
from agl.testing.clock import ManualClock
from agl.testing.spans import make_span
from agl.types import (
    AttemptQuery,
    ResourcesQuery,
    RolloutConfig,
    RolloutQuery,
    SpanQuery,
    StoreQuery,
    WorkerQuery,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

N_ROLLOUTS = 7
NAMES = ["llm", "tool", "llm.call", "reward", None]


def _id(prefix: str, n: int) -> str:
    return f"{prefix}-{n:04d}{'ab'[n % 2]}"


def _ids(prefix: str) -> Callable[[], str]:
    counter = itertools.count(1)
    return lambda: _id(prefix, next(counter))


@pytest.fixture
def deterministic_ids(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Reset the id generators of both stores to the same sequence."""
    import agl.store.memory._core as core
    import agl.store.memory.store as memory
    import agl.store.sql._writes as writes

    def reset() -> None:
        rollout, attempt, resources = _ids("ro"), _ids("at"), _ids("rs")
        for module in (core, writes):
            monkeypatch.setattr(module, "new_rollout_id", rollout, raising=False)
            monkeypatch.setattr(module, "new_attempt_id", attempt, raising=False)
        for module in (memory, writes):
            monkeypatch.setattr(module, "new_resources_id", resources, raising=False)

    return reset


async def _history(store: LightningStore, clock: ManualClock) -> None:
    """Rollouts in every state, retries, spans with ties and gaps, workers and resources."""
    retry = RolloutConfig(max_attempts=3, retry_condition=["failed"])
    await store.add_resources({})
    await store.add_resources({})
    for i in range(N_ROLLOUTS):
        clock.advance(1 if i % 3 else 0)  # some rollouts start at the same time
        await store.enqueue_rollout({"i": i}, mode="train" if i % 2 else None, config=retry)
    for i in range(N_ROLLOUTS - 2):
        claimed = await store.dequeue_rollout(worker_id=f"w-{i % 3}")
        assert claimed is not None
        rid, aid = claimed.rollout_id, claimed.attempt.attempt_id
        spans = [
            make_span(
                rid,
                aid,
                seq,
                name=NAMES[(i + seq) % 4],
                span_id=f"{i:02d}{seq:02d}" * 4,
                trace_id=f"{i % 2}" * 32,
                parent_id=None if seq == 1 else f"{i:02d}01" * 4,
                start_time=None if (i + seq) % 5 == 0 else float((seq * 7 + i) % 4),
            )
            for seq in (1, 3, 2, 4)[: 1 + i % 4]
        ]
        await store.add_many_spans(spans)
        clock.advance(1)
        if i % 3 == 1:
            await store.update_attempt(rid, aid, status="failed")  # requeued for a retry
            again = await store.start_attempt(rid, worker_id="w-9")
            await store.add_span(
                make_span(rid, again.attempt.attempt_id, 9, name="llm", span_id=f"{i:02d}99" * 4)
            )
        elif i % 3 == 2:
            await store.update_attempt(rid, aid, status="succeeded")
    await store.update_rollout(
        (await store.query_rollouts(status_in=["queuing"])).items[0].rollout_id, status="cancelled"
    )
    await store.update_resources("rs-custom", {})
    await store.update_worker("w-idle", heartbeat_stats={"load": 0})


ROLLOUT_IDS = st.integers(1, 9).map(lambda n: _id("ro", n))
NEEDLES = st.sampled_from(["ro-", "RO-", "0003", "a", "b", "9", "", "zz"])


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly no filter, so that pooled filters still find something."""
    return st.one_of(st.none(), st.none(), st.none(), strategy)


def _page(sort_fields: list[str | None]) -> dict[str, st.SearchStrategy[Any]]:
    return {
        "sort_by": st.sampled_from(sort_fields),
        "sort_order": st.sampled_from(["asc", "desc"]),
        "limit": st.sampled_from([-1, 0, 1, 2, 5]),
        "offset": st.sampled_from([0, 0, 1, 3]),
    }


ROLLOUT_QUERIES = st.builds(
    RolloutQuery,
    status_in=_maybe(
        st.lists(
            st.sampled_from(
                ["queuing", "preparing", "running", "failed", "succeeded", "cancelled", "requeuing"]
            ),
            max_size=3,
        )
    ),
    rollout_id_in=_maybe(st.lists(ROLLOUT_IDS, max_size=4)),
    rollout_id_contains=_maybe(NEEDLES),
    filter_logic=st.sampled_from(["and", "or"]),
    **_page([None, "rollout_id", "start_time", "end_time", "status", "mode", "resources_id"]),
)
SPAN_QUERIES = st.builds(
    SpanQuery,
    rollout_id=ROLLOUT_IDS | st.lists(ROLLOUT_IDS, min_size=1, max_size=5),
    attempt_id=st.sampled_from([None, "latest", "at-0001b", "at-0005b", "at-0006a", "at-nope"]),
    name=_maybe(st.sampled_from(["llm", "tool", "reward"])),
    name_contains=_maybe(st.sampled_from(["llm", "l", "."])),
    parent_id=_maybe(st.sampled_from(["0001" * 4, "0101" * 4])),
    parent_id_contains=_maybe(st.sampled_from(["01", "0201"])),
    span_id_contains=_maybe(st.sampled_from(["02", "99"])),
    trace_id=_maybe(st.sampled_from(["0" * 32, "1" * 32])),
    filter_logic=st.sampled_from(["and", "or"]),
    **_page([None, "sequence_id", "start_time", "end_time", "name", "parent_id", "span_id", "attempt_id"]),
)
ATTEMPT_QUERIES = st.builds(
    AttemptQuery,
    rollout_id=ROLLOUT_IDS,
    **_page([None, "sequence_id", "start_time", "end_time", "status", "worker_id", "last_heartbeat_time"]),
)
RESOURCES_QUERIES = st.builds(
    ResourcesQuery,
    resources_id=_maybe(st.sampled_from(["rs-0001b", "rs-0002a", "rs-custom", "rs-nope"])),
    resources_id_contains=_maybe(st.sampled_from(["rs-", "custom", "0003"])),
    **_page([None, "resources_id", "create_time", "update_time", "version"]),
)
WORKER_QUERIES = st.builds(
    WorkerQuery,
    status_in=_maybe(st.lists(st.sampled_from(["idle", "busy", "unknown"]), max_size=2)),
    worker_id_contains=_maybe(st.sampled_from(["w-", "1", "idle", "x"])),
    filter_logic=st.sampled_from(["and", "or"]),
    **_page([None, "worker_id", "status", "last_heartbeat_time", "last_busy_time", "current_rollout_id"]),
)
METHODS = {
    RolloutQuery: "_query_rollouts",
    SpanQuery: "_query_spans",
    AttemptQuery: "_query_attempts",
    ResourcesQuery: "_query_resources",
    WorkerQuery: "_query_workers",
}


@pytest.fixture
def stores(
    deterministic_ids: Callable[[], None], tmp_path: Path
) -> Iterator[tuple[Any, list[LightningStore]]]:
    loop = asyncio.new_event_loop()
    start = 1_700_000_000.0
    memory_clock, sql_clock = ManualClock(start), ManualClock(start)
    memory = InMemoryLightningStore(clock=memory_clock)
    sql = SqlLightningStore(f"sqlite:///{tmp_path / 'store.db'}", clock=sql_clock)
    for store, clock in ((memory, memory_clock), (sql, sql_clock)):
        deterministic_ids()
        loop.run_until_complete(_history(store, clock))
    try:
        yield loop, [memory, sql]
    finally:
        loop.run_until_complete(sql.close())
        loop.close()


def test_the_history_is_the_same_in_both_stores(stores: tuple[Any, list[LightningStore]]) -> None:
    loop, (memory, sql) = stores
    for store in (memory, sql):
        rollouts = loop.run_until_complete(store.query_rollouts())
        assert len({r.status for r in rollouts}) >= 4
    assert [r.model_dump() for r in loop.run_until_complete(memory.query_rollouts())] == [
        r.model_dump() for r in loop.run_until_complete(sql.query_rollouts())
    ]


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=cast("list[HealthCheck]", list(HealthCheck)),
    derandomize=True,
)
@given(data=st.data())
def test_memory_and_sql_agree_on_random_queries(
    stores: tuple[Any, list[LightningStore]], data: st.DataObject
) -> None:
    loop, (memory, sql) = stores
    query: StoreQuery = data.draw(
        st.one_of(
            ROLLOUT_QUERIES, SPAN_QUERIES, SPAN_QUERIES, ATTEMPT_QUERIES, RESOURCES_QUERIES, WORKER_QUERIES
        )
    )
    method = METHODS[type(query)]
    answers = [loop.run_until_complete(getattr(store, method)(query)) for store in (memory, sql)]
    dumped = [([item.model_dump() for item in page], page.total, page.limit, page.offset) for page in answers]
    assert dumped[0] == dumped[1], query
