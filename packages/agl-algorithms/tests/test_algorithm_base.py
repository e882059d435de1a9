"""The Algorithm contract, @algo, helpers and Baseline, against a real in-memory store."""

from __future__ import annotations

import asyncio
import gc
import logging
import random
from typing import Any

import pytest
from agl.algorithms import (
    Algorithm,
    Baseline,
    FastAlgorithm,
    FunctionalAlgorithm,
    algo,
    batch_iter_over_dataset,
    running_proxy,
    with_llm_proxy,
    with_store,
)
from agl.store import InMemoryLightningStore
from agl.types import LLM, RolloutConfig, Span
from hypothesis import given
from hypothesis import strategies as st


class Holder:
    """Something that can be weakly referenced."""

    def adapt(self, source: Any) -> Any:
        return [len(source)]


class Noop(Algorithm):
    def run(self, train_dataset: Any = None, val_dataset: Any = None) -> None:
        return None


def test_references_weak_and_strong() -> None:
    algorithm = Noop()
    for getter in (algorithm.get_trainer, algorithm.get_adapter, algorithm.get_store):
        with pytest.raises(ValueError, match="not set"):
            getter()
    assert algorithm.get_llm_proxy() is None and algorithm.get_initial_resources() is None
    trainer, adapter = Holder(), Holder()
    algorithm.set_trainer(trainer)
    algorithm.set_adapter(adapter)
    store = InMemoryLightningStore()
    algorithm.set_store(store)
    assert (
        algorithm.get_trainer() is trainer
        and algorithm.get_adapter() is adapter
        and algorithm.get_store() is store
    )
    del trainer, adapter
    gc.collect()
    with pytest.raises(ValueError, match="garbage-collected"):
        algorithm.get_trainer()
    assert not algorithm.has_adapter()
    assert not algorithm.is_async()


async def test_algo_injects_only_declared_parameters() -> None:
    calls: list[dict[str, Any]] = []

    @algo
    async def train(store: Any, train_dataset: Any, initial_resources: Any) -> None:
        calls.append({"store": store, "train": train_dataset, "initial": initial_resources})

    @algo
    def evaluate(val_dataset: Any) -> str:
        return f"evaluated {len(val_dataset)}"

    assert isinstance(train, FunctionalAlgorithm) and train.is_async() and not evaluate.is_async()
    store = InMemoryLightningStore()
    train.set_store(store)
    train.set_initial_resources({"llm": LLM(endpoint="http://127.0.0.1:1", model="m")})
    pending = train.run(train_dataset=[1, 2])
    assert pending is not None
    await pending
    assert calls[0]["store"] is store and calls[0]["train"] == [1, 2] and "llm" in calls[0]["initial"]
    with pytest.raises(TypeError, match="val_dataset"):
        train.run(train_dataset=[1], val_dataset=[2])
    assert evaluate.run(val_dataset=[1, 2, 3]) == "evaluated 3"
    with pytest.raises(ValueError, match="adapter"):

        @algo
        def needs_adapter(adapter: Any) -> None: ...

        needs_adapter.run()
    assert evaluate.__name__ == "evaluate" and evaluate([1]) == "evaluated 1"


@given(st.integers(min_value=1, max_value=30), st.integers(min_value=1, max_value=40), st.integers(0, 2**16))
def test_batches_are_distinct_and_cover_each_epoch(n: int, batch_size: int, seed: int) -> None:
    data = list(range(n))
    batches = batch_iter_over_dataset(data, batch_size, rng=random.Random(seed))
    if batch_size >= n:
        for _ in range(3):
            assert sorted(next(batches)) == data
        return
    seen: list[int] = []
    for _ in range(3 * n):
        batch = next(batches)
        assert len(batch) == batch_size and len(set(batch)) == batch_size
        seen.extend(batch)
    # Over k full epochs' worth of items, each item appears k times give or take one (epochs may straddle).
    counts = [seen.count(i) for i in data]
    assert max(counts) - min(counts) <= 2


class ProxyAlgorithm(Algorithm):
    @with_llm_proxy(required=True)
    async def run(self, llm_proxy: Any, train_dataset: Any = None, val_dataset: Any = None) -> bool:  # pyright: ignore[reportIncompatibleMethodOverride]
        return llm_proxy.is_running()

    @with_store
    async def count(self, store: Any) -> int:
        return len(await store.query_rollouts())


class CountingProxy:
    """A minimal implementation of the SupportsLLMProxy protocol that counts starts and stops."""

    def __init__(self, running: bool = False) -> None:
        self.running = running
        self.starts = self.stops = 0

    def set_store(self, store: Any) -> None:
        self.store = store

    def is_running(self) -> bool:
        return self.running

    async def start(self) -> None:
        self.running, self.starts = True, self.starts + 1

    async def stop(self) -> None:
        self.running, self.stops = False, self.stops + 1


class SyncStopProxy(CountingProxy):
    def stop(self) -> None:  # pyright: ignore[reportIncompatibleMethodOverride]  # the protocol's stop is async
        self.running = False


async def test_with_llm_proxy_stops_only_what_it_started() -> None:
    algorithm = ProxyAlgorithm()
    idle, busy = CountingProxy(), CountingProxy(running=True)
    algorithm.set_llm_proxy(idle)
    assert await algorithm.run() is True
    assert (idle.starts, idle.stops, idle.running) == (1, 1, False)
    algorithm.set_llm_proxy(busy)
    assert await algorithm.run() is True
    assert (busy.starts, busy.stops, busy.running) == (0, 0, True)


async def test_running_proxy_starts_and_stops_only_an_idle_proxy_even_when_the_block_raises() -> None:
    idle, busy = CountingProxy(), CountingProxy(running=True)
    with pytest.raises(RuntimeError, match="boom"):
        async with running_proxy(idle) as yielded:
            assert yielded is idle and idle.running
            raise RuntimeError("boom")
    assert (idle.starts, idle.stops, idle.running) == (1, 1, False)
    async with running_proxy(busy):
        pass
    assert (busy.starts, busy.stops, busy.running) == (0, 0, True)
    async with running_proxy(None) as nothing:
        assert nothing is None


async def test_running_proxy_refuses_a_sync_stop_with_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"SyncStopProxy.stop\(\) must be a coroutine"):
        async with running_proxy(SyncStopProxy()):  # pyright: ignore[reportArgumentType]
            pass


@pytest.mark.slow
async def test_with_store_and_with_llm_proxy_start_and_stop_a_real_proxy() -> None:
    from agl.proxy import LLMProxy

    algorithm = ProxyAlgorithm()
    with pytest.raises(ValueError, match="LLM proxy"):
        await algorithm.run()
    store = InMemoryLightningStore()
    algorithm.set_store(store)
    await store.enqueue_rollout(input=1)
    assert await algorithm.count() == 1
    proxy = LLMProxy(
        model_list=[
            {
                "model_name": "m",
                "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://127.0.0.1:9/v1"},
            }
        ],
        store=store,
    )
    algorithm.set_llm_proxy(proxy)
    assert await algorithm.run() is True  # started for the call...
    assert not proxy.is_running()  # ...and stopped after it
    with pytest.raises(TypeError, match="coroutine"):
        with_store(lambda self, store: None)  # pyright: ignore[reportArgumentType]


async def _serve(store: InMemoryLightningStore, stop: asyncio.Event, fail_inputs: set[int]) -> None:
    """A minimal runner: claims rollouts and reports them, with one reward span each."""
    while not stop.is_set():
        attempted = await store.dequeue_rollout(worker_id="w", timeout=0.05)
        if attempted is None:
            continue
        rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
        if attempted.input in fail_inputs:
            await store.update_attempt(rid, aid, status="failed")
            continue
        seq = await store.get_next_span_sequence_id(rid, aid)
        attributes = {
            "agentlightning.reward.0.name": "primary",
            "agentlightning.reward.0.value": float(attempted.input),
        }
        await store.add_span(
            Span.from_attributes(
                attributes=attributes,
                name="agentlightning.annotation",
                rollout_id=rid,
                attempt_id=aid,
                sequence_id=seq,
            )
        )
        await store.update_attempt(rid, aid, status="succeeded")


@pytest.mark.parametrize("max_in_flight", [None, 3])
async def test_baseline_streams_every_item_and_summarises(
    max_in_flight: int | None, caplog: pytest.LogCaptureFixture
) -> None:
    store = InMemoryLightningStore()
    baseline = Baseline(n_epochs=2, max_in_flight=max_in_flight, polling_interval=0.05)
    baseline.set_store(store)
    baseline.set_adapter(adapter := Holder())
    stop = asyncio.Event()
    server = asyncio.create_task(_serve(store, stop, fail_inputs={4}))
    with caplog.at_level(logging.INFO, logger="agl.algorithms.fast"):
        await asyncio.wait_for(baseline.run(train_dataset=[0, 1, 2, 3], val_dataset=[4, 5]), timeout=30)
    stop.set()
    await server
    summary = baseline.summary
    assert summary.total == 12 and summary.succeeded == 10 and summary.failed == 2
    assert sorted(summary.rewards) == sorted([0.0, 1.0, 2.0, 3.0, 5.0] * 2)
    modes = [r.mode for r in await store.query_rollouts()]
    assert modes.count("train") == 8 and modes.count("val") == 4
    assert "agentlightning.annotation" in caplog.text and "adapted: [1]" in caplog.text
    assert "12 rollouts" in str(summary)
    del adapter


async def test_baseline_max_queue_length_bounds_the_waiting_rollouts_like_the_reference() -> None:
    store = InMemoryLightningStore()
    baseline = Baseline(max_queue_length=2, polling_interval=0.05)
    baseline.set_store(store)
    queue_lengths: list[int] = []
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            queue_lengths.append(len(await store.query_rollouts(status_in=["queuing", "requeuing"])))
            await asyncio.sleep(0)

    watcher = asyncio.create_task(watch())
    server = asyncio.create_task(_serve(store, stop, fail_inputs=set()))
    await asyncio.wait_for(baseline.run(train_dataset=list(range(10))), timeout=30)
    stop.set()
    await asyncio.gather(server, watcher)
    assert baseline.summary.total == 10 and baseline.summary.succeeded == 10
    assert queue_lengths and max(queue_lengths) <= 2, max(queue_lengths)
    with pytest.raises(ValueError, match="max_queue_length"):
        Baseline(max_queue_length=0)


async def test_baseline_validation_and_empty_input(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ValueError, match="train_split"):
        Baseline(train_split=1.0)
    with pytest.raises(ValueError, match="max_in_flight"):
        Baseline(max_in_flight=0)
    baseline = Baseline(rollout_config=RolloutConfig(max_attempts=2))
    baseline.set_store(InMemoryLightningStore())
    with caplog.at_level(logging.ERROR):
        await baseline.run(train_dataset=[], val_dataset=None)
    assert "nothing to do" in caplog.text
    assert isinstance(baseline, FastAlgorithm)
