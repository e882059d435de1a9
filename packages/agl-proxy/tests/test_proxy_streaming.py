"""Streamed calls: chunks relayed as they arrive, the assembled result recorded, disconnects handled."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import httpx
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import (
    Reply,
    StandinBackend,
    StandinServer,
    ToolCall,
    chat_prompt_text,
    completion_token_ids,
    serve_standin,
    token_ids,
    token_logprob,
)
from agl.testing.proxy import OpenAIClients, llm_spans, running_proxy
from agl.types import AttemptedRollout
from agl.types.semconv import GenAIAttributes as G
from agl.types.semconv import LLMCallAttributes as L
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

ProxiedAttempt = Callable[..., AbstractAsyncContextManager[tuple[AttemptedRollout, LLMProxy, AsyncOpenAI]]]
"""The type of the ``proxied_attempt`` fixture (conftest.py)."""


async def test_stream_is_relayed_and_recorded_whole(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin, request_logprobs=True) as (rollout, _, client):
        messages: list[ChatCompletionMessageParam] = [
            {"role": "user", "content": "a fairly long question to stream back"}
        ]
        stream = await client.chat.completions.create(model="m", messages=messages, stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        [span] = await llm_spans(store, rollout, 1)
    assert text == "echo: a fairly long question to stream back"
    a = span.attributes
    assert a[L.STREAM.value] is True and span.status.status_code == "OK"
    assert a[L.PROMPT_TOKEN_IDS.value] == token_ids(chat_prompt_text(cast("list[dict[str, Any]]", messages)))
    assert a[L.RESPONSE_TOKEN_IDS.value] == token_ids(text)
    assert a[L.RESPONSE_LOGPROBS.value] == [token_logprob(i) for i in range(len(text))]
    assert json.loads(a[L.RESPONSE_MESSAGES.value]) == [{"role": "assistant", "content": text}]
    assert a[G.RESPONSE_FINISH_REASONS.value] == ["stop"]
    assert a[L.TIME_TO_FIRST_CHUNK_MS.value] <= a[L.LATENCY_MS.value]


async def test_streamed_tool_calls_are_assembled(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore
) -> None:
    reply = Reply(
        content="let me check", tool_calls=[ToolCall("lookup", {"q": "x" * 50}), ToolCall("add", {"a": 1})]
    )
    with serve_standin(StandinBackend(script=lambda req: reply)) as server:
        async with proxied_attempt(store, server) as (rollout, _, client):
            stream = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "go"}], stream=True
            )
            async for _ in stream:
                pass
            [span] = await llm_spans(store, rollout, 1)
    [message] = json.loads(span.attributes[L.RESPONSE_MESSAGES.value])
    assert message["content"] == "let me check"
    assert [
        (c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message["tool_calls"]
    ] == [
        ("call_0_lookup", "lookup", {"q": "x" * 50}),
        ("call_1_add", "add", {"a": 1}),
    ]
    assert span.attributes[L.RESPONSE_TOKEN_IDS.value] == completion_token_ids(reply)
    assert span.attributes[G.RESPONSE_FINISH_REASONS.value] == ["tool_calls"]


async def test_chunks_reach_the_client_before_the_backend_finishes(store: InMemoryLightningStore) -> None:
    backend = StandinBackend(chunk_size=2, chunk_delay_s=0.05)  # 20 chunks, ~1 s in all
    with serve_standin(backend) as server:
        async with running_proxy(store, server) as proxy, httpx.AsyncClient(timeout=30) as http:
            start = time.perf_counter()
            arrivals: list[float] = []
            async with http.stream(
                "POST",
                f"{proxy.endpoint}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x" * 34}], "stream": True},
            ) as response:
                assert response.headers["content-type"].startswith("text/event-stream")
                async for line in response.aiter_lines():
                    if line.startswith("data: {"):
                        arrivals.append(time.perf_counter() - start)
    total = arrivals[-1]
    content_arrivals = arrivals[2:-1]
    # Relayed chunk by chunk: the chunks arrive spread over the backend's ~1 s, not in one burst at the end.
    assert len(arrivals) >= 20
    assert content_arrivals[0] < total / 2
    assert total >= 0.8


async def test_client_disconnect_mid_stream_is_recorded_and_leaks_nothing(
    store: InMemoryLightningStore,
) -> None:
    backend = StandinBackend(chunk_size=1, chunk_delay_s=0.02)
    with serve_standin(backend) as server:
        rollout = await store.start_rollout(input=None)
        async with running_proxy(store, server) as proxy:
            assert proxy._loop is not None
            baseline = await _task_count(proxy)
            url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
            async with (
                httpx.AsyncClient(timeout=30) as http,
                http.stream(
                    "POST",
                    f"{url}/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "y" * 200}], "stream": True},
                ) as response,
            ):
                seen = 0
                async for line in response.aiter_lines():
                    seen += line.startswith("data: {")
                    if seen == 5:
                        break  # leaving the block closes the connection mid-stream
            [span] = await llm_spans(store, rollout, 1)
            assert span.status.status_code == "ERROR"
            assert span.attributes[L.CLIENT_DISCONNECTED.value] is True
            assert "disconnected" in (span.status.description or "")
            # What arrived before the disconnect is kept.
            assert 1 <= len(span.attributes[L.RESPONSE_TOKEN_IDS.value]) < 200
            deadline = time.monotonic() + 10
            while (  # noqa: ASYNC110 - polling what another thread's loop does
                proxy.stats["active_streams"] or await _task_count(proxy) > baseline
            ) and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert proxy.stats["active_streams"] == 0
            assert await _task_count(proxy) <= baseline
        # The proxy also let go of the backend: the stand-in's stream never ran to its end.
        assert backend.streams_started == 1 and backend.streams_finished == 0


async def _task_count(proxy: LLMProxy) -> int:
    assert proxy._loop is not None

    async def count() -> int:
        return len(asyncio.all_tasks())

    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(count(), proxy._loop))


async def test_32_concurrent_streams_each_get_a_complete_span(
    attempt_client: OpenAIClients, store: InMemoryLightningStore
) -> None:
    backend = StandinBackend(chunk_size=3, chunk_delay_s=0.001)
    with serve_standin(backend) as server:
        rollout = await store.start_rollout(input=None)
        async with running_proxy(store, server) as proxy:
            client = attempt_client(proxy, rollout, max_retries=0)

            async def one(i: int) -> str:
                stream = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"request number {i}"}], stream=True
                )
                return "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])

            texts = await asyncio.gather(*(one(i) for i in range(32)))
            spans = await llm_spans(store, rollout, 32)
    assert texts == [f"echo: request number {i}" for i in range(32)]
    assert len(spans) == 32
    seqs = [s.sequence_id for s in spans]
    assert len(set(seqs)) == 32 and all(s >= 1 for s in seqs)
    assert seqs == sorted(seqs)  # stored (and returned) in sequence order
    for span in spans:
        [message] = json.loads(span.attributes[L.REQUEST_MESSAGES.value])
        expected = "echo: " + message["content"]
        assert span.attributes[L.RESPONSE_TOKEN_IDS.value] == token_ids(expected)
        assert span.attributes[L.PROMPT_TOKEN_IDS.value] == token_ids(chat_prompt_text([message]))
        assert span.status.status_code == "OK"


async def test_litellm_route_streams_too(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin, direct_forwarding=False) as (rollout, _, client):
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "s"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        [span] = await llm_spans(store, rollout, 1)
    assert text == "echo: s"
    assert span.attributes[L.ROUTE.value] == "litellm"
    assert span.attributes[L.RESPONSE_TOKEN_IDS.value] == token_ids("echo: s")
