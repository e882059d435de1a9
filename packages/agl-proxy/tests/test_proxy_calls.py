"""Non-streamed calls through the proxy: what is forwarded, answered and recorded."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import httpx
import pytest
from agl.proxy import LLMProxy
from agl.proxy._upstream import ABORTED_RESENDS
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
from agl.testing.proxy import OpenAIClients, llm_spans, model_list, running_proxy
from agl.types import LLM, AttemptedRollout, ProxyLLM
from agl.types.semconv import GenAIAttributes as G
from agl.types.semconv import LLMCallAttributes as L
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

ProxiedAttempt = Callable[..., AbstractAsyncContextManager[tuple[AttemptedRollout, LLMProxy, AsyncOpenAI]]]
"""The type of the ``proxied_attempt`` fixture (conftest.py)."""


WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


async def test_chat_call_is_answered_and_recorded_with_token_ids(
    attempt_client: OpenAIClients, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input={"q": 1})
    async with running_proxy(store, standin) as proxy:
        client = attempt_client(proxy, rollout, api_key="unused")
        messages: list[ChatCompletionMessageParam] = [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "hello"},
        ]
        resp = await client.chat.completions.create(
            model="m", messages=messages, temperature=0.5, max_tokens=20
        )  # type: ignore[arg-type]
        assert resp.choices[0].message.content == "echo: hello"
        [span] = await llm_spans(store, rollout, 1)
    # The backend was asked for token ids, under its own model name.
    sent = standin.backend.requests[-1]
    assert sent["return_token_ids"] is True and sent["model"] == "standin"
    a = span.attributes
    assert span.rollout_id == rollout.rollout_id and span.attempt_id == rollout.attempt.attempt_id
    assert span.sequence_id >= 1 and span.status.status_code == "OK"
    assert a[L.PROMPT_TOKEN_IDS.value] == token_ids(chat_prompt_text(cast("list[dict[str, Any]]", messages)))
    assert a[L.RESPONSE_TOKEN_IDS.value] == token_ids("echo: hello")
    assert json.loads(a[L.REQUEST_MESSAGES.value]) == messages
    assert json.loads(a[L.RESPONSE_MESSAGES.value]) == [{"role": "assistant", "content": "echo: hello"}]
    assert json.loads(a[L.REQUEST_PARAMS.value]) == {"temperature": 0.5, "max_tokens": 20}
    assert a[G.REQUEST_TEMPERATURE.value] == 0.5 and a[G.REQUEST_MAX_TOKENS.value] == 20
    assert a[G.REQUEST_MODEL.value] == "m" and a[G.RESPONSE_MODEL.value] == "standin"
    assert a[G.RESPONSE_ID.value] == resp.id
    assert a[G.RESPONSE_FINISH_REASONS.value] == ["stop"]
    assert a[G.USAGE_INPUT_TOKENS.value] == len(a[L.PROMPT_TOKEN_IDS.value])
    assert a[G.USAGE_OUTPUT_TOKENS.value] == len("echo: hello")
    assert a[L.DEPLOYMENT_MODEL.value] == "hosted_vllm/standin"
    assert a[L.LATENCY_MS.value] > 0 and span.end_time is not None and span.start_time is not None
    assert span.end_time >= span.start_time
    assert L.RESPONSE_LOGPROBS.value not in a


async def test_tool_calls_and_logprobs_are_recorded(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore
) -> None:
    backend = StandinBackend(
        script=lambda req: Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})])
    )
    with serve_standin(backend) as server:
        async with proxied_attempt(store, server, request_logprobs=True) as (rollout, _, client):
            resp = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "weather in Paris?"}],
                tools=[WEATHER_TOOL],
            )
            [span] = await llm_spans(store, rollout, 1)
    tool_calls = resp.choices[0].message.tool_calls
    assert tool_calls is not None
    call = tool_calls[0]
    assert call.type == "function"
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    a = span.attributes
    assert json.loads(a[L.REQUEST_TOOLS.value]) == [WEATHER_TOOL]
    [message] = json.loads(a[L.RESPONSE_MESSAGES.value])
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    expected_ids = completion_token_ids(Reply(tool_calls=[ToolCall("get_weather", {"city": "Paris"})]))
    assert a[L.RESPONSE_TOKEN_IDS.value] == expected_ids
    assert a[L.RESPONSE_LOGPROBS.value] == [token_logprob(i) for i in range(len(expected_ids))]
    assert a[G.RESPONSE_FINISH_REASONS.value] == ["tool_calls"]


async def test_text_completions_are_recorded(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin) as (rollout, _, client):
        resp = await client.completions.create(model="m", prompt="2+2=", logprobs=1)
        [span] = await llm_spans(store, rollout, 1)
    assert resp.choices[0].text == "echo: 2+2="
    a = span.attributes
    assert a[L.ENDPOINT.value] == "completions" and a[G.OPERATION_NAME.value] == "text_completion"
    assert a[L.PROMPT_TOKEN_IDS.value] == token_ids("2+2=")
    assert a[L.RESPONSE_TOKEN_IDS.value] == token_ids("echo: 2+2=")
    assert a[L.RESPONSE_LOGPROBS.value] == [token_logprob(i) for i in range(len("echo: 2+2="))]
    assert json.loads(a[L.REQUEST_PROMPT.value]) == "2+2="


async def test_sequential_calls_get_increasing_sequence_ids(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin) as (rollout, _, client):
        for i in range(3):
            await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": f"turn {i}"}]
            )
        spans = await llm_spans(store, rollout, 3)
    by_seq = sorted(spans, key=lambda s: s.sequence_id)
    assert [json.loads(s.attributes[L.REQUEST_MESSAGES.value])[0]["content"] for s in by_seq] == [
        "turn 0",
        "turn 1",
        "turn 2",
    ]
    assert len({s.sequence_id for s in spans}) == 3


async def test_unprefixed_calls_are_proxied_but_not_recorded(
    openai_client: OpenAIClients, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input=None)
    async with running_proxy(store, standin) as proxy:
        resource = proxy.as_resource()
        assert isinstance(resource, ProxyLLM)
        client = openai_client(base_url=resource.get_base_url(), api_key="x")
        resp = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert resp.choices[0].message.content == "echo: hi"
        await proxy.flush()
        assert proxy.stats["unattributed_calls"] == 1
        # Attribution by headers works too, for clients that cannot change their URL.
        await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-rollout-id": rollout.rollout_id, "x-attempt-id": rollout.attempt.attempt_id},
        )
        assert len(await llm_spans(store, rollout, 1)) == 1


async def test_traceparent_links_the_span_to_the_callers_trace(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input=None)
    trace_id, parent = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
    async with running_proxy(store, standin) as proxy:
        url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"{url}/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
                headers={"traceparent": f"00-{trace_id}-{parent}-01"},
            )
            assert r.status_code == 200
        [span] = await llm_spans(store, rollout, 1)
    assert span.trace_id == trace_id and span.parent_id == parent


async def test_bad_requests_get_clear_4xx_and_the_server_survives(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with running_proxy(store, standin) as proxy:
        base = proxy.endpoint
        async with httpx.AsyncClient() as http:
            r = await http.post(f"{base}/v1/chat/completions", content=b"{not json")
            assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
            r = await http.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": []})
            assert r.status_code == 400 and "messages" in r.json()["error"]["message"]
            r = await http.post(
                f"{base}/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}]}
            )
            assert r.status_code == 400 and "model" in r.json()["error"]["message"]
            r = await http.post(
                f"{base}/v1/chat/completions",
                json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
            )
            assert r.status_code == 404 and "known models: m" in r.json()["error"]["message"]
            r = await http.get(f"{base}/v1/nothing")
            assert r.status_code == 404
            r = await http.get(f"{base}/v1/chat/completions")
            assert r.status_code == 405
            r = await http.post(f"{base}/rollout/r1/v1/chat/completions", json={})
            assert (
                r.status_code == 404
                and "/rollout/{rollout_id}/attempt/{attempt_id}" in r.json()["error"]["message"]
            )
            assert (await http.get(f"{base}/health")).json() == {"status": "ok"}
            models = (await http.get(f"{base}/v1/models")).json()
            assert [m["id"] for m in models["data"]] == ["m"]


async def test_request_size_is_capped(store: InMemoryLightningStore, standin: StandinServer) -> None:
    async with running_proxy(store, standin, max_request_bytes=1000) as proxy, httpx.AsyncClient() as http:
        r = await http.post(
            f"{proxy.endpoint}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]},
        )
    assert r.status_code == 413


async def test_backend_errors_are_passed_on_and_recorded_as_errors(store: InMemoryLightningStore) -> None:
    rollout = await store.start_rollout(input=None)
    with serve_standin() as server:
        pass  # the port is now closed: a dead backend
    async with running_proxy(store, server) as proxy:
        url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
        async with httpx.AsyncClient() as http:
            r = await http.post(
                f"{url}/chat/completions", json={"model": "m", "messages": [{"role": "user", "content": "x"}]}
            )
        assert r.status_code == 502 and "failed" in r.json()["error"]["message"]
        [span] = await llm_spans(store, rollout, 1)
    assert span.status.status_code == "ERROR"
    assert span.attributes[L.HTTP_STATUS.value] == 502


async def test_backend_4xx_is_relayed_and_recorded(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input=None)
    async with running_proxy(store, standin) as proxy:
        url = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
        async with httpx.AsyncClient() as http:
            # The stand-in rejects a batch of prompts (the proxy passes it on: OpenAI's API allows it).
            r = await http.post(f"{url}/completions", json={"model": "m", "prompt": ["a", "b"]})
        assert r.status_code == 400
        [span] = await llm_spans(store, rollout, 1)
    assert span.status.status_code == "ERROR" and span.attributes[G.ERROR_TYPE.value] == "http_400"


async def test_bearer_token_is_required_when_configured(
    openai_client: OpenAIClients, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with running_proxy(store, standin, auth_token="s3cret") as proxy:
        resource = proxy.as_resource()
        assert resource.api_key == "s3cret"
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"{proxy.endpoint}/health")).status_code == 200
            assert (await http.get(f"{proxy.endpoint}/v1/models")).status_code == 401
        client = openai_client(base_url=resource.get_base_url(), api_key="s3cret")
        resp = await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "ok"}])
        assert resp.choices[0].message.content == "echo: ok"


async def test_deployments_sharing_a_name_are_load_balanced(
    openai_client: OpenAIClients, store: InMemoryLightningStore
) -> None:
    with serve_standin() as a, serve_standin() as b:
        async with running_proxy(store, a, b) as proxy:
            client = openai_client(base_url=proxy.as_resource().get_base_url(), api_key="x")
            for _ in range(30):
                await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        assert a.backend.requests and b.backend.requests
        assert len(a.backend.requests) + len(b.backend.requests) == 30


async def test_litellm_route_records_token_ids(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin, direct_forwarding=False) as (rollout, _, client):
        resp = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "via litellm"}]
        )
        assert resp.choices[0].message.content == "echo: via litellm"
        [span] = await llm_spans(store, rollout, 1)
    a = span.attributes
    assert a[L.ROUTE.value] == "litellm"
    assert a[L.RESPONSE_TOKEN_IDS.value] == token_ids("echo: via litellm")
    assert a[L.PROMPT_TOKEN_IDS.value] == token_ids(
        chat_prompt_text([{"role": "user", "content": "via litellm"}])
    )


async def test_as_resource_and_lifecycle(store: InMemoryLightningStore, standin: StandinServer) -> None:
    proxy = LLMProxy(model_list(standin), store=store)
    with pytest.raises(RuntimeError, match="not running"):
        proxy.as_resource()
    await proxy.start()
    try:
        with pytest.raises(ValueError, match="both"):
            proxy.as_resource(rollout_id="r")
        plain = proxy.as_resource()
        assert isinstance(plain, ProxyLLM) and plain.endpoint.endswith("/v1") and plain.model == "m"
        routed = proxy.as_resource("r1", "a1", sampling_parameters={"temperature": 0.1})
        assert type(routed) is LLM
        assert routed.endpoint == f"{proxy.endpoint}/rollout/r1/attempt/a1/v1"
        assert routed.sampling_parameters == {"temperature": 0.1}
        # A new model list takes effect at restart.
        proxy.update_model_list(model_list(standin, name="other"))
        await proxy.restart()
        assert proxy.as_resource().model == "other"
    finally:
        await proxy.stop()
    assert not proxy.is_running()


async def test_configuration_errors_are_clear(store: InMemoryLightningStore) -> None:
    with pytest.raises(ValueError, match="model_name"):
        LLMProxy([{"litellm_params": {"model": "x"}}])
    with pytest.raises(ValueError, match="litellm_params"):
        LLMProxy([{"model_name": "m"}])
    with pytest.raises(ValueError, match="launch_mode"):
        LLMProxy([], launch_mode="bogus")  # pyright: ignore[reportArgumentType]
    with pytest.raises(RuntimeError, match="store"):
        await LLMProxy([{"model_name": "m", "litellm_params": {"model": "openai/x"}}]).start()
    with pytest.raises(RuntimeError, match="model_list"):
        await LLMProxy([], store=store).start()
    proxy = LLMProxy(
        [{"model_name": "a", "litellm_params": {"model": "openai/x"}}] * 1
        + [{"model_name": "b", "litellm_params": {"model": "openai/y"}}]
    )
    proxy._bound_port = 1  # as if running, to reach the model check
    with pytest.raises(ValueError, match="several models"):
        proxy.as_resource()


async def test_asyncio_launch_mode_serves_on_the_callers_loop(
    proxied_attempt: ProxiedAttempt, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with proxied_attempt(store, standin, launch_mode="asyncio") as (rollout, proxy, client):
        await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
        await proxy.flush()
        spans = await llm_spans(store, rollout, 1)
    assert len(spans) == 1 and spans[0].attributes[L.RESPONSE_TOKEN_IDS.value] == token_ids("echo: x")


async def test_no_nagle_stall_between_headers_and_body(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    """Regression: on asyncio's own loop, uvicorn writes headers and body separately; without TCP_NODELAY on
    the proxy's sockets the body waited for the client's delayed ACK (~40 ms every response)."""
    import socket
    import statistics
    import time

    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    request = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    request += b"Content-Length: %d\r\n\r\n" % len(body) + body
    async with running_proxy(store, standin, launch_mode="asyncio") as proxy:
        port = int(proxy.endpoint.rsplit(":", 1)[1])

        def measure() -> list[float]:
            totals = []
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(10)
                for _ in range(7):
                    start = time.perf_counter()
                    sock.sendall(request)
                    received = b""
                    while not received.endswith(b"}"):
                        received += sock.recv(65536)
                    totals.append(time.perf_counter() - start)
            return totals

        totals = await asyncio.to_thread(measure)
    assert statistics.median(totals) < 0.030, totals


async def _one_call_to(backend: StandinBackend, store: InMemoryLightningStore, client: OpenAIClients) -> Any:
    """One chat call through a proxy in front of ``backend``: ``(answer, its span, requests the backend got)``."""
    with serve_standin(backend) as server:
        rollout = await store.start_rollout(input={"q": 1})
        async with running_proxy(store, server) as proxy:
            llm = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id)
            openai = client(base_url=llm.endpoint, api_key="unused")
            answer = await openai.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}]
            )
            [span] = await llm_spans(store, rollout, 1)
        return answer, span, len(server.backend.requests)


async def test_an_answer_the_backend_aborted_is_asked_for_again_and_only_the_whole_one_recorded(
    openai_client: OpenAIClients, store: InMemoryLightningStore
) -> None:
    """vLLM cuts a call off (``finish_reason`` ``"abort"``) when verl's asynchronous trainer pauses generation
    for a weight update; sent again, the call waits for the new weights and is served whole."""
    answers = iter([Reply("par", finish_reason="abort"), Reply("pa", finish_reason="abort"), Reply("whole")])
    resp, span, sent = await _one_call_to(
        StandinBackend(script=lambda body: next(answers)), store, openai_client
    )
    assert resp.choices[0].message.content == "whole" and resp.choices[0].finish_reason == "stop"
    assert sent == 3
    assert span.attributes[L.RESPONSE_TOKEN_IDS.value] == token_ids("whole")
    assert span.attributes[G.RESPONSE_FINISH_REASONS.value] == ["stop"]


async def test_a_backend_that_keeps_aborting_gets_a_bounded_number_of_resends(
    openai_client: OpenAIClients, store: InMemoryLightningStore
) -> None:
    backend = StandinBackend(script=lambda body: Reply("cut", finish_reason="abort"))
    resp, span, sent = await _one_call_to(backend, store, openai_client)
    assert resp.choices[0].finish_reason == "abort"  # passed on as it is, and recorded so
    assert sent == 1 + ABORTED_RESENDS
    assert span.attributes[G.RESPONSE_FINISH_REASONS.value] == ["abort"]
