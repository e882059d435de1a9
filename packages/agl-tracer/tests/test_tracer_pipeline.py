"""Tracer contract and span pipeline against a real InMemoryLightningStore (and over HTTP)."""

from __future__ import annotations

import asyncio
import logging
import pickle
import threading
import time
from collections.abc import Sequence
from typing import Any, Protocol

import pytest
from agl.store import InMemoryLightningStore, LightningStore, LightningStoreCapabilities
from agl.testing.tracer import names, new_attempt, new_store, poll_until, spans_of, worker_tracer
from agl.tracer import (
    DummyTracer,
    OtelTracer,
    Tracer,
    emit_message,
    emit_reward,
    find_final_reward,
    get_active_tracer,
    get_reward_value,
    operation,
)
from agl.types import Span


class GatedStore(InMemoryLightningStore):
    """An in-memory store whose first ``add_many_spans`` waits until the test opens the gate."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(scan_debounce_seconds=0.0, **kwargs)
        self.gate = threading.Event()
        self.calls: list[int] = []

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        self.calls.append(len(spans))
        if len(self.calls) == 1:
            await asyncio.to_thread(self.gate.wait, 30)
        return await super().add_many_spans(spans)


class LoopBoundStore(InMemoryLightningStore):
    """A store that says it is not thread-safe: the pipeline must use the caller's loop."""

    def __init__(self) -> None:
        super().__init__(scan_debounce_seconds=0.0)
        self.loops: set[int] = set()

    @property
    def capabilities(self) -> LightningStoreCapabilities:
        return LightningStoreCapabilities(thread_safe=False, async_safe=True)

    async def add_many_spans(self, spans: Sequence[Span]) -> list[Span]:
        self.loops.add(id(asyncio.get_running_loop()))
        return await super().add_many_spans(spans)


class StartWorker(Protocol):
    """The type of the ``start_worker`` fixture (conftest.py): the tracer (an ``OtelTracer`` unless given) initialised
    as worker 0 writing to ``store``, torn down when the test ends."""

    def __call__(self, store: LightningStore | None, tracer: Tracer | None = None, /) -> Tracer: ...


@pytest.fixture
def store(request: pytest.FixtureRequest) -> InMemoryLightningStore:
    """A new in-memory store; of the class given by ``@pytest.mark.parametrize("store", [cls], indirect=True)``."""
    make: type[InMemoryLightningStore] | None = getattr(request, "param", None)
    return new_store() if make is None else make()


@pytest.fixture
def tracer(store: InMemoryLightningStore, start_worker: StartWorker) -> Tracer:
    """An ``OtelTracer``: worker 0 writing to ``store``."""
    return start_worker(store)


@pytest.fixture(params=["otel", "dummy"])
def tracer_cls(request: pytest.FixtureRequest) -> type[Tracer]:
    return OtelTracer if request.param == "otel" else DummyTracer


async def test_spans_are_in_the_store_when_the_context_exits(
    tracer_cls: type[Tracer], store: InMemoryLightningStore, start_worker: StartWorker
) -> None:
    tracer = start_worker(store, tracer_cls())
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rid, rollout_id=rid, attempt_id=aid):
        for i in range(250):
            emit_reward(float(i))
        with operation(name="step") as op:
            op.set_output("done")
        emit_message("bye")
    stored = await spans_of(store, rid, aid)  # no waiting: the exit guarantees it
    assert len(stored) == 252
    assert sorted(s.sequence_id for s in stored) == list(range(1, 253))
    assert {s.span_id for s in stored} == {s.span_id for s in tracer.get_last_trace()}
    assert find_final_reward(stored) == 249.0
    assert names(stored)[-2:] == ["agentlightning.operation", "agentlightning.message"]
    rollout = await store.get_rollout_by_id(rid)
    assert rollout is not None and rollout.status == "running"  # spans are the attempt's heartbeat


@pytest.mark.parametrize("store", [GatedStore], indirect=True)
async def test_spans_go_in_batches_not_one_call_each(store: GatedStore, tracer: Tracer) -> None:
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_reward(0.0)
        await poll_until(lambda: len(store.calls) == 1)  # first batch is in flight, held by the gate
        for i in range(1, 300):
            emit_reward(float(i))
        store.gate.set()
    assert store.calls == [1, 299]
    assert tracer.pipeline.stats.batches == 2
    assert len(await spans_of(store, rid, aid)) == 300


async def test_spans_ending_together_share_a_batch(start_worker: StartWorker) -> None:
    store = GatedStore()
    store.gate.set()
    tracer = start_worker(store)
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_reward(0.0)
        await asyncio.sleep(0)  # the drain wakes, and lingers for the spans that follow
        for i in range(1, 5):
            emit_reward(float(i))
        await poll_until(lambda: store.calls)
    assert store.calls == [5]


async def test_a_closing_context_hands_its_unsent_spans_to_the_caller(start_worker: StartWorker) -> None:
    store = GatedStore()
    tracer = start_worker(store, OtelTracer(linger_seconds=0.5))  # nothing is sent before the context closes
    rid, aid = await new_attempt(store)
    handed: list[Span] = []
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid, hand_over_to=handed):
        emit_reward(0.5)
        emit_message("last words")
    assert store.calls == [] and await spans_of(store, rid, aid) == []  # not written: handed over
    assert names(handed) == ["agentlightning.annotation", "agentlightning.message"]
    assert {(s.rollout_id, s.attempt_id, s.sequence_id) for s in handed} == {(rid, aid, 0)}
    assert tracer.get_last_trace() == handed  # the trace has them all the same
    assert tracer.pipeline.pending_spans == 0
    store.gate.set()
    stored, attempt, _ = await store.finish_attempt(rid, aid, handed, status="succeeded")
    assert [s.sequence_id for s in stored] == [1, 2] and attempt.status == "succeeded"


async def test_a_batch_in_flight_at_close_is_still_written_first(start_worker: StartWorker) -> None:
    store = GatedStore()
    tracer = start_worker(store, OtelTracer(linger_seconds=0))
    rid, aid = await new_attempt(store)
    handed: list[Span] = []
    closing: Any = None

    async def body() -> None:
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid, hand_over_to=handed):
            emit_reward(0.0)
            await poll_until(lambda: len(store.calls) == 1)  # in flight, held by the gate
            emit_reward(1.0)

    closing = asyncio.ensure_future(body())
    await poll_until(lambda: len(store.calls) == 1)
    await asyncio.sleep(0.01)
    assert not closing.done()  # the close waits for the batch in flight
    store.gate.set()
    await closing
    assert store.calls == [1]
    assert [get_reward_value(s) for s in await spans_of(store, rid, aid)] == [0.0]
    assert [get_reward_value(s) for s in handed] == [1.0]


async def test_eight_concurrent_coroutines_never_mix_their_spans(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:

    async def runner(index: int) -> tuple[str, str]:
        rid, aid = await new_attempt(store, index)
        async with tracer.trace_context(rid, rollout_id=rid, attempt_id=aid):
            for _step in range(20):
                with operation(name=f"step-{index}"):
                    emit_reward(float(index))
                await asyncio.sleep(0)
            assert get_active_tracer() is tracer
        last = tracer.get_last_trace()
        assert len(last) == 40 and {s.rollout_id for s in last} == {rid}
        return rid, aid

    results = await asyncio.gather(*(runner(i) for i in range(8)))
    for index, (rid, aid) in enumerate(results):
        stored = await spans_of(store, rid)
        assert len(stored) == 40
        assert {s.attempt_id for s in stored} == {aid}
        rewards = {get_reward_value(s) for s in stored if s.name == "agentlightning.annotation"}
        assert rewards == {float(index)}
        ops = {
            s.attributes["agentlightning.operation.name"]
            for s in stored
            if s.name == "agentlightning.operation"
        }
        assert ops == {f"step-{index}"}
        # each reward span is the child of its own operation span
        by_id = {s.span_id: s for s in stored}
        for span in stored:
            if span.name == "agentlightning.annotation":
                assert span.parent_id is not None and by_id[span.parent_id].name == "agentlightning.operation"


def test_four_threads_with_their_own_rollouts_never_mix_spans(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    ids: dict[int, tuple[str, str]] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def worker(index: int) -> None:
        async def body() -> None:
            rid, aid = await new_attempt(store, index)
            ids[index] = (rid, aid)
            async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
                await asyncio.to_thread(barrier.wait, 10)  # all four contexts are open at once
                for _ in range(50):
                    emit_reward(float(index))
                    await asyncio.sleep(0)

        try:
            asyncio.run(body())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors

    async def check() -> None:
        for index, (rid, aid) in ids.items():
            stored = await spans_of(store, rid, aid)
            assert len(stored) == 50
            assert {get_reward_value(s) for s in stored} == {float(index)}

    asyncio.run(check())


async def test_an_agent_thread_without_context_lands_in_the_only_live_session(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        thread = threading.Thread(target=emit_reward, args=(0.5,))  # a raw thread does not copy contextvars
        thread.start()
        thread.join(10)
    assert [get_reward_value(s) for s in await spans_of(store, rid, aid)] == [0.5]


async def test_with_two_live_sessions_a_contextless_thread_is_refused(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    opened = asyncio.Event()
    release = asyncio.Event()

    async def other() -> None:
        rid, aid = await new_attempt(store)
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            opened.set()
            await release.wait()

    task = asyncio.create_task(other())
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        await opened.wait()
        errors: list[BaseException] = []

        def emit() -> None:
            try:
                emit_reward(1.0)
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=emit)
        thread.start()
        thread.join(10)
        release.set()
    await task
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError)
    assert "No active tracer" in str(errors[0])


async def test_contexts_do_not_nest_and_ids_go_together() -> None:
    store = new_store()
    tracer = OtelTracer()
    with pytest.raises(RuntimeError, match="init_worker"):
        async with tracer.trace_context():
            pass
    tracer.init_worker(0)
    try:
        rid, aid = await new_attempt(store)
        with pytest.raises(ValueError, match="together"):
            async with tracer.trace_context(rollout_id=rid):
                pass
        with pytest.raises(ValueError, match="needs a store"):
            async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
                pass
        async with tracer.trace_context():
            with pytest.raises(ValueError, match="do not nest"):
                async with tracer.trace_context():
                    pass
            assert get_active_tracer() is tracer
        assert get_active_tracer() is None
        with pytest.warns(DeprecationWarning):
            async with tracer.trace_context(store=store, rollout_id=rid, attempt_id=aid):
                emit_reward(1.0)
        assert len(await spans_of(store, rid, aid)) == 1
    finally:  # its span-export thread (started for the store given here) ends with the worker
        tracer.teardown_worker(0)


async def test_without_ids_spans_are_only_recorded_locally(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    async with tracer.trace_context("local"):
        emit_reward(2.0)
        emit_message("m")
    last = tracer.get_last_trace()
    assert [s.sequence_id for s in last] == [1, 2]
    assert {s.rollout_id for s in last} == {"rollout-dummy"}
    assert (await store.statistics()).get("total_spans", 0) == 0


async def test_body_exceptions_propagate_and_spans_are_still_flushed(
    tracer_cls: type[Tracer], store: InMemoryLightningStore, start_worker: StartWorker
) -> None:
    tracer = start_worker(store, tracer_cls())
    rid, aid = await new_attempt(store)
    with pytest.raises(KeyError):
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            emit_reward(1.0)
            with operation(name="boom"):
                raise KeyError("x")
    stored = await spans_of(store, rid, aid)
    assert len(stored) == 2
    op = next(s for s in stored if s.name == "agentlightning.operation")
    assert op.status.status_code == "ERROR"
    assert get_active_tracer() is None


async def test_store_rejections_never_reach_the_agent(
    caplog: pytest.LogCaptureFixture, store: InMemoryLightningStore, tracer: Tracer
) -> None:
    with caplog.at_level(logging.ERROR):
        async with tracer.trace_context(rollout_id="ro-unknown", attempt_id="at-unknown"):
            emit_reward(1.0)
    assert [get_reward_value(s) for s in tracer.get_last_trace()] == [1.0]
    assert tracer.pipeline.stats.failed == 1
    assert "ro-unknown" in caplog.text


async def test_flush_wait_is_bounded_and_late_writes_still_arrive(
    caplog: pytest.LogCaptureFixture, start_worker: StartWorker
) -> None:
    store = GatedStore()
    tracer = start_worker(store, OtelTracer(flush_timeout=0.2))
    rid, aid = await new_attempt(store)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING):
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            emit_reward(3.0)
    assert time.monotonic() - started < 5
    assert "not written within" in caplog.text
    assert [get_reward_value(s) for s in tracer.get_last_trace()] == [3.0]
    store.gate.set()

    async def arrived() -> bool:
        return len(await spans_of(store, rid, aid)) == 1

    await poll_until(arrived)


async def test_memory_is_bounded_and_drops_are_counted(
    caplog: pytest.LogCaptureFixture, start_worker: StartWorker
) -> None:
    store = GatedStore()
    tracer = start_worker(store, OtelTracer(max_pending_spans=10, flush_timeout=5))
    rid, aid = await new_attempt(store)
    with caplog.at_level(logging.WARNING):
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            emit_reward(0.0)
            await poll_until(lambda: len(store.calls) == 1)
            for i in range(1, 50):
                emit_reward(float(i))
                assert tracer.pipeline.pending_spans <= 10
            store.gate.set()
    stats = tracer.pipeline.stats
    stored = await spans_of(store, rid, aid)
    assert len(stored) == 11 and stats.dropped == 39
    assert stats.written + stats.dropped == 50
    assert "dropped" in caplog.text


async def test_spans_flow_while_a_sync_agent_blocks_the_loop(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    rid, aid = await new_attempt(store)
    seen = threading.Event()

    def watch() -> None:
        async def look() -> None:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                if await spans_of(store, rid, aid):
                    seen.set()
                    return
                await asyncio.sleep(0.01)

        asyncio.run(look())

    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_reward(1.0)
        watcher = threading.Thread(target=watch)
        watcher.start()
        assert seen.wait(10), "the span did not reach the store while the loop was blocked"  # blocks the loop
        watcher.join(10)


@pytest.mark.parametrize("store", [LoopBoundStore], indirect=True)
async def test_a_store_that_is_not_thread_safe_is_used_from_the_callers_loop(
    store: LoopBoundStore, tracer: Tracer
) -> None:
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        for i in range(5):
            emit_reward(float(i))
            await asyncio.sleep(0)
    assert store.loops == {id(asyncio.get_running_loop())}
    assert len(await spans_of(store, rid, aid)) == 5


async def test_a_span_ending_after_its_context_closed_still_reaches_the_store(
    store: InMemoryLightningStore, tracer: Tracer
) -> None:
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        open_span = tracer.start_span("late")
    open_span.end()

    async def arrived() -> bool:
        return names(await spans_of(store, rid, aid)) == ["late"]

    await poll_until(arrived)


def test_trace_context_sync_without_an_event_loop(store: InMemoryLightningStore, tracer: Tracer) -> None:
    rid, aid = asyncio.run(new_attempt(store))
    with tracer.trace_context_sync(rollout_id=rid, attempt_id=aid):
        emit_reward(4.0)
    assert [get_reward_value(s) for s in asyncio.run(spans_of(store, rid, aid))] == [4.0]


async def test_get_last_trace_is_per_task(store: InMemoryLightningStore, tracer: Tracer) -> None:
    first_done = asyncio.Event()
    second_done = asyncio.Event()

    async def first() -> list[Span]:
        async with tracer.trace_context():
            emit_message("first")
        first_done.set()
        await second_done.wait()  # the other task's context closes after ours
        return tracer.get_last_trace()

    async def second() -> None:
        await first_done.wait()
        async with tracer.trace_context():
            emit_message("second")
        second_done.set()

    mine, _ = await asyncio.gather(first(), second())
    assert [s.attributes["agentlightning.message.body"] for s in mine] == ["first"]


def test_tracers_pickle_without_their_runtime_state() -> None:
    tracer = OtelTracer(flush_timeout=3.0)
    tracer.init_worker(0, new_store())
    copy = pickle.loads(pickle.dumps(tracer))
    assert isinstance(copy, OtelTracer) and copy.flush_timeout == 3.0 and copy.store is None
    store = new_store()
    copy.init_worker(1, store)

    async def run() -> None:
        rid, aid = await new_attempt(store)
        async with copy.trace_context(rollout_id=rid, attempt_id=aid):
            emit_reward(1.0)
        assert len(await spans_of(store, rid, aid)) == 1

    asyncio.run(run())
    copy.teardown_worker(1)
    tracer.teardown_worker(0)


async def test_pipeline_through_the_http_store_client() -> None:
    from agl.testing.store.http import serve_over_http

    inner = new_store()
    async with serve_over_http(inner) as client:
        tracer = worker_tracer(client)
        rid, aid = await new_attempt(client)
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            for i in range(120):
                with operation(name="op"):
                    emit_reward(float(i))
        stored = await spans_of(inner, rid, aid)
        assert len(stored) == 240
        assert sorted(s.sequence_id for s in stored) == list(range(1, 241))
        assert find_final_reward(stored) == 119.0
        assert tracer.pipeline.stats.batches < 240
        tracer.teardown_worker(0)


async def test_tracers_sharing_one_provider_each_keep_only_their_own_spans() -> None:
    # AgentOpsTracer copies (one per runner thread) all hang a processor on AgentOps' one global provider.
    store = new_store()
    first, second = OtelTracer(), OtelTracer()
    first.init_worker(0, store)
    second._install_provider(first.provider)  # the second tracer collects from the same provider
    second.init_worker(1, store)
    library = first.provider.get_tracer("some.library")  # what an instrumented library would use
    barrier_class: Any = getattr(asyncio, "Barrier", None)  # Python 3.11+
    both_open = barrier_class(2) if barrier_class is not None else None

    async def runner(tracer: OtelTracer, label: str) -> tuple[str, str]:
        rid, aid = await new_attempt(store, label)
        async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
            if both_open is not None:
                await both_open.wait()
            for _ in range(10):
                with library.start_as_current_span(label):
                    await asyncio.sleep(0)
        return rid, aid

    (rid1, aid1), (rid2, aid2) = await asyncio.gather(runner(first, "one"), runner(second, "two"))
    assert names(await spans_of(store, rid1, aid1)) == ["one"] * 10
    assert names(await spans_of(store, rid2, aid2)) == ["two"] * 10
    second.teardown_worker(1)
    first.teardown_worker(0)


class LostAnswerStore(InMemoryLightningStore):
    """Stores the first batch, then fails as if its answer had been lost on the way back."""

    def __init__(self) -> None:
        super().__init__(scan_debounce_seconds=0.0)
        self.lost = 0

    async def add_spans_in_order(self, spans: Sequence[Span]) -> list[Span]:
        stored = await super().add_spans_in_order(spans)
        if not self.lost:
            self.lost += 1
            raise ConnectionError("the answer was lost")
        return stored


@pytest.mark.parametrize("store", [LostAnswerStore], indirect=True)
async def test_a_retry_after_a_lost_answer_keeps_the_spans_in_the_trace_and_stores_them_once(
    store: LostAnswerStore, tracer: Tracer
) -> None:
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rollout_id=rid, attempt_id=aid):
        emit_reward(1.0)
    assert store.lost == 1
    stored = await spans_of(store, rid, aid)
    assert len(stored) == 1  # stored once, though sent twice
    assert names(tracer.get_last_trace()) == names(stored)  # and the trace still has it


async def test_stored_spans_name_their_rollout_and_attempt_in_the_resource(
    tracer_cls: type[Tracer], store: InMemoryLightningStore, start_worker: StartWorker
) -> None:
    """As the reference's exported spans: ``agentlightning.rollout_id/attempt_id`` resource attributes (issue 28),
    next to the tracer's own."""
    tracer = start_worker(store, tracer_cls())
    rid, aid = await new_attempt(store)
    async with tracer.trace_context(rid, rollout_id=rid, attempt_id=aid):
        emit_reward(1.0)
        with operation(name="step"):
            emit_message("hi")
    stored = await spans_of(store, rid, aid)
    assert len(stored) == 3
    for span in stored:
        assert span.resource.attributes["agentlightning.rollout_id"] == rid
        assert span.resource.attributes["agentlightning.attempt_id"] == aid
    if tracer_cls is OtelTracer:
        assert {s.resource.attributes["agentlightning.tracer.name"] for s in stored} == {"otel"}
