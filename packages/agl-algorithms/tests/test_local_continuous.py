"""Continuous batching in the local generation engine: requests join and leave a running batch, are
cancelled mid-sequence, respect the KV cache bound, and a weight swap waits for the sequences in flight."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch
from agl.algorithms.local import GenerationEngine, GenerationResult, SamplingParams
from agl.algorithms.local.server import load_model
from agl.testing.tiny_model import build_tiny_model

PROMPTS = ["What is 12 + 30?", "Hello there", "How are you?", "What", "12 + 30 = 42. Hello, how are", "?"]


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Any]:
    torch.set_num_threads(1)
    return load_model(build_tiny_model(tmp_path_factory.mktemp("tiny")))


def make_engine(loaded: tuple[Any, Any], **kwargs: Any) -> GenerationEngine:
    model, tokenizer = loaded
    engine = GenerationEngine(model, tokenizer, **kwargs)
    engine.start()
    return engine


@pytest.fixture
def engine(loaded: tuple[Any, Any]) -> Iterator[GenerationEngine]:
    e = make_engine(loaded)
    yield e
    e.stop()


def ids(engine: GenerationEngine, text: str) -> list[int]:
    return engine.tokenizer.encode(text, add_special_tokens=False)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.001)


def alone(engine: GenerationEngine, prompt: list[int], params: SamplingParams) -> GenerationResult:
    return engine.submit(prompt, params).result(timeout=60)


def assert_same(a: GenerationResult, b: GenerationResult) -> None:
    assert a.token_ids == b.token_ids
    assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)
    assert a.finish_reason == b.finish_reason


def test_requests_joining_and_leaving_a_running_batch_get_the_tokens_they_get_alone(
    engine: GenerationEngine,
) -> None:
    long = SamplingParams(max_tokens=60, temperature=0.0)
    shorts = [SamplingParams(max_tokens=m, temperature=0.0) for m in (3, 9, 17, 5, 30)]
    prompts = [ids(engine, p) for p in PROMPTS]
    expected_long = alone(engine, prompts[0], long)
    expected = [alone(engine, p, s) for p, s in zip(prompts[1:], shorts, strict=True)]
    # the same, seeded at temperature 1
    seeded = SamplingParams(max_tokens=12, temperature=1.0, seed=5)
    expected_seeded = alone(engine, prompts[3], seeded)

    first_tokens = 0
    first_done_when_second_started: list[bool] = []

    def count(_token: int, _logprob: float) -> None:
        nonlocal first_tokens
        first_tokens += 1

    before = dict(engine.stats)
    first = engine.submit(prompts[0], long, on_token=count)
    wait_until(lambda: first_tokens >= 5)
    futures = [
        engine.submit(
            prompts[1], shorts[0], on_token=lambda *_: first_done_when_second_started.append(first.done())
        )
    ]
    futures += [engine.submit(p, s) for p, s in zip(prompts[2:4], shorts[1:3], strict=True)]
    futures[0].result(timeout=60)  # the first short one has left the batch; more join after it
    futures += [engine.submit(p, s) for p, s in zip(prompts[4:], shorts[3:], strict=True)]
    late_seeded = engine.submit(prompts[3], seeded)

    assert_same(first.result(timeout=60), expected_long)
    for future, want in zip(futures, expected, strict=True):
        assert_same(future.result(timeout=60), want)
    assert_same(late_seeded.result(timeout=60), expected_seeded)
    assert first_done_when_second_started[0] is False  # it joined while the first was decoding
    assert engine.stats["batches"] - before["batches"] == 1  # one running batch throughout
    assert engine.stats["prefills"] - before["prefills"] >= 3  # admitted at several tokens
    assert len(expected_long.token_ids) == 60


def test_a_cancelled_request_leaves_the_batch_at_the_next_token(engine: GenerationEngine) -> None:
    tokens: list[int] = []
    prompt = ids(engine, PROMPTS[0])
    other = engine.submit(prompt, SamplingParams(max_tokens=40, temperature=0.0))
    future = engine.submit(
        prompt, SamplingParams(max_tokens=200, temperature=0.0), on_token=lambda t, _: tokens.append(t)
    )
    wait_until(lambda: len(tokens) >= 3)
    assert future.cancel()
    seen = len(tokens)
    assert len(other.result(timeout=60).token_ids) == 40  # the rest of the batch carries on
    wait_until(lambda: engine.running == 0)
    assert future.cancelled()
    assert len(tokens) <= seen + 1
    assert engine.stats["cancelled"] >= 1


def test_cancelling_the_awaiting_task_cancels_the_generation(engine: GenerationEngine) -> None:
    tokens: list[int] = []
    prompt = ids(engine, PROMPTS[1])

    async def run() -> None:
        loop = asyncio.get_running_loop()
        three = asyncio.Event()

        def on_token(token: int, _logprob: float) -> None:
            tokens.append(token)
            if len(tokens) == 3:
                loop.call_soon_threadsafe(three.set)

        future = asyncio.wrap_future(
            engine.submit(prompt, SamplingParams(max_tokens=200, temperature=0.0), on_token=on_token)
        )
        task = asyncio.ensure_future(future)
        await asyncio.wait_for(three.wait(), 30)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    before = engine.stats["cancelled"]
    asyncio.run(run())
    wait_until(lambda: engine.running == 0)
    assert engine.stats["cancelled"] == before + 1
    assert len(tokens) < 200


def test_the_kv_cache_bound_holds_and_every_request_still_finishes(loaded: tuple[Any, Any]) -> None:
    reference = make_engine(loaded)
    params = [SamplingParams(max_tokens=20, temperature=0.0), SamplingParams(max_tokens=8, temperature=0.0)]
    prompts = [ids(reference, p) for p in PROMPTS]
    try:
        expected = [alone(reference, p, params[i % 2]) for i, p in enumerate(prompts)]
    finally:
        reference.stop()
    widest = max(len(p) for p in prompts) + 20
    bound = 2 * widest + 1  # room for two sequences, never three
    engine = make_engine(loaded, context_length=bound, max_cache_tokens=bound)
    try:
        futures = [engine.submit(p, params[i % 2]) for i, p in enumerate(prompts)]
        for future, want in zip(futures, expected, strict=True):
            assert_same(future.result(timeout=60), want)
        assert engine.stats["max_rows"] == 2
        assert engine.stats["max_cache_tokens_used"] <= bound
    finally:
        engine.stop()
    with pytest.raises(ValueError, match="max_cache_tokens"):
        GenerationEngine(*loaded, context_length=256, max_cache_tokens=100)


def test_max_batch_size_bounds_the_rows(loaded: tuple[Any, Any]) -> None:
    engine = make_engine(loaded, max_batch_size=3)
    try:
        prompt = ids(engine, PROMPTS[0])
        futures = [engine.submit(prompt, SamplingParams(max_tokens=6, seed=i)) for i in range(10)]
        assert all(len(f.result(timeout=60).token_ids) <= 6 for f in futures)
        assert engine.stats["max_rows"] == 3
    finally:
        engine.stop()


def test_a_weight_swap_waits_for_the_sequences_in_flight(engine: GenerationEngine) -> None:
    prompt = ids(engine, PROMPTS[0])
    params = SamplingParams(max_tokens=50, temperature=0.0)
    expected = alone(engine, prompt, params)
    tokens: list[int] = []
    future = engine.submit(prompt, params, on_token=lambda t, _: tokens.append(t))
    wait_until(lambda: len(tokens) >= 2)
    state = {k: v + 0.05 * torch.randn_like(v) for k, v in engine.model.state_dict().items()}
    swapped: list[int] = []
    swapper = threading.Thread(target=lambda: swapped.append(engine.update_weights(state)))
    swapper.start()
    result = future.result(timeout=60)
    swapper.join(timeout=60)
    assert_same(result, expected)  # generated by the old weights from start to end
    assert result.model_version == swapped[0] - 1
    after = alone(engine, prompt, params)
    assert after.model_version == swapped[0]
    assert after.logprobs != pytest.approx(expected.logprobs, abs=1e-4)


def test_a_streaming_client_that_goes_away_frees_its_row(tmp_path_factory: pytest.TempPathFactory) -> None:
    import httpx
    from agl.algorithms.local import ModelServer

    with ModelServer(
        build_tiny_model(tmp_path_factory.mktemp("tiny_stream")), served_model_name="tiny"
    ) as server:
        body = {
            "model": "tiny",
            "messages": [{"role": "user", "content": "Hello there"}],
            "max_tokens": 250,
            "temperature": 0,
            "stream": True,
        }
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", server.url + "/chat/completions", json=body) as r,
        ):
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")  # the role chunk
            wait_until(lambda: server.engine.running == 1)
        wait_until(lambda: server.engine.running == 0)
        assert server.engine.stats["cancelled"] == 1
        assert server.engine.stats["generated_tokens"] < 250


class _SilentEngine:
    """Takes each request and never answers it (nor emits a token) unless it is cancelled."""

    def __init__(self) -> None:
        self.futures: list[concurrent.futures.Future[GenerationResult]] = []

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, on_token: Any = None
    ) -> concurrent.futures.Future[GenerationResult]:
        future: concurrent.futures.Future[GenerationResult] = concurrent.futures.Future()
        self.futures.append(future)
        return future


async def test_a_stream_cancelled_while_it_waits_for_a_token_leaves_no_task_behind(
    loaded: tuple[Any, Any],
) -> None:
    # A client that goes away while no token comes: Starlette cancels the stream where it waits. Nothing of the
    # stream may stay pending on the server's loop (it would be destroyed, pending, once that loop is closed).
    from agl.algorithms.local import ModelServer

    model, tokenizer = loaded
    server = ModelServer(model, tokenizer, served_model_name="tiny")
    engine = _SilentEngine()
    server.engine = cast(Any, engine)
    params = SamplingParams(max_tokens=5)
    stream = server._stream("chatcmpl-x", [1, 2, 3], params, False, False, False)
    assert (await anext(stream)).startswith("data: ")  # the role chunk
    before = asyncio.all_tasks()
    reading = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.05)
    assert not reading.done()
    reading.cancel()
    with pytest.raises(asyncio.CancelledError):
        await reading
    await asyncio.sleep(0)
    assert engine.futures[0].cancelled()  # its row is freed
    assert asyncio.all_tasks() == before
