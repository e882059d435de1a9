"""``GET /metrics`` of the LLM proxy: calls, tokens and latency per model; requests per route; auth."""

from __future__ import annotations

import httpx
import pytest
from agl.proxy._metrics import proxy_route
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import StandinServer
from agl.testing.prometheus import metric_value, parse_metrics
from agl.testing.proxy import OpenAIClients, llm_spans, running_proxy
from agl.types.semconv import GenAIAttributes as G


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/v1/chat/completions", "/v1/chat/completions"),
        ("/rollout/ro-1/attempt/at-1/v1/chat/completions", "/rollout/{id}/attempt/{id}/v1/chat/completions"),
        ("/rollout/ro-1/attempt/at-1/v1/completions", "/rollout/{id}/attempt/{id}/v1/completions"),
        ("/metrics", "/metrics"),
        ("/v1/whatever", "other"),
    ],
)
def test_proxy_routes_keep_ids_out_of_the_labels(path: str, route: str) -> None:
    assert proxy_route(path) == route


async def test_calls_tokens_and_latency_per_model(
    attempt_client: OpenAIClients, store: InMemoryLightningStore, standin: StandinServer
) -> None:
    rollout = await store.start_rollout(input={"q": 1})
    async with running_proxy(store, standin, auth_token="tok") as proxy:
        client = attempt_client(proxy, rollout, api_key="tok")
        for text in ("hello", "again"):
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": text}])
        spans = await llm_spans(store, rollout, 2)
        async with httpx.AsyncClient() as http:
            assert (await http.get(proxy.endpoint + "/metrics")).status_code == 401
            assert (
                await http.get(proxy.endpoint + "/metrics", headers={"Authorization": "Bearer no"})
            ).status_code == 401
            resp = await http.get(proxy.endpoint + "/metrics", headers={"Authorization": "Bearer tok"})
    assert resp.status_code == 200
    samples = parse_metrics(resp.text)
    assert metric_value(samples, "agl_proxy_llm_calls_total", model="m", outcome="ok") == 2
    tokens_in = sum(s.attributes[G.USAGE_INPUT_TOKENS.value] for s in spans)
    tokens_out = sum(s.attributes[G.USAGE_OUTPUT_TOKENS.value] for s in spans)
    assert metric_value(samples, "agl_proxy_llm_tokens_total", model="m", direction="input") == tokens_in
    assert metric_value(samples, "agl_proxy_llm_tokens_total", model="m", direction="output") == tokens_out
    assert metric_value(samples, "agl_proxy_llm_call_duration_seconds_count", model="m") == 2
    routed = "/rollout/{id}/attempt/{id}/v1/chat/completions"
    assert metric_value(samples, "agl_proxy_http_requests_total", route=routed, status="200") == 2
    assert metric_value(samples, "agl_proxy_http_requests_total", route="/metrics", status="401") == 2


async def test_metrics_public_opens_only_metrics(
    store: InMemoryLightningStore, standin: StandinServer
) -> None:
    async with (
        running_proxy(store, standin, auth_token="tok", metrics_public=True) as proxy,
        httpx.AsyncClient() as http,
    ):
        resp = await http.get(proxy.endpoint + "/metrics")
        assert resp.status_code == 200 and "agl_proxy_http_requests_total" in resp.text
        chat = await http.post(
            proxy.endpoint + "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert chat.status_code == 401
