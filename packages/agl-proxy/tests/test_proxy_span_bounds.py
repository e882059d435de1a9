"""A call that cannot be recorded never looks recorded.

A large call is recorded with its large text bodies cut to fit the store's request cap (token ids and usage
always kept); a call whose span the store still refuses fails, instead of answering as if it were recorded.
Real proxy, real store server over HTTP, the local stand-in LLM.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import openai
import pytest
from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agl.testing.openai_standin import StandinServer, token_ids
from agl.testing.proxy import OpenAIClients, running_proxy
from agl.types.semconv import AGL_LLM_CALL, LLMCall
from agl.types.semconv import LLMCallAttributes as L
from openai.types.chat import ChatCompletionMessageParam

_MiB = 1024 * 1024


@pytest.fixture
async def store_server() -> AsyncIterator[LightningStoreServer]:
    server = LightningStoreServer(InMemoryLightningStore(), port=0)  # the default request cap (64 MiB)
    await asyncio.to_thread(server.start)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.stop)


async def test_a_call_larger_than_the_stores_request_cap_is_recorded_cut_to_fit(
    attempt_client: OpenAIClients, standin: StandinServer, store_server: LightningStoreServer
) -> None:
    """Issue 27 defect 8: a ~5 MB prompt of quotes (escaped twice in the span's JSON) echoed back makes a span
    over the store server's 64 MiB cap; it used to be dropped while the agent got a 200."""
    store = LightningStoreClient(store_server.endpoint)
    prompt = '"' * (5 * _MiB)
    try:
        rollout = await store.start_rollout(input=None)
        async with running_proxy(store, standin) as proxy:
            client = attempt_client(proxy, rollout, max_retries=0, timeout=120)
            reply = await client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": prompt}]
            )
            assert reply.choices[0].message.content == f"echo: {prompt}"
            assert proxy.stats["spans_dropped"] == 0
        spans = (await store.query_spans(rollout.rollout_id, name=AGL_LLM_CALL)).items
        assert len(spans) == 1
        attrs = spans[0].attributes
        assert attrs[L.RESPONSE_TOKEN_IDS.value] == token_ids(f"echo: {prompt}")  # token ids: whole
        assert len(attrs[L.PROMPT_TOKEN_IDS.value]) > len(prompt)
        call = LLMCall.from_attributes(attrs, strict=True)  # cut bodies stay valid JSON
        assert call.usage is not None and call.usage.output_tokens == len(prompt) + 6
        assert call.messages is not None
        sent = call.messages[0]["content"]
        assert sent.startswith('""""') and sent.endswith(" bytes]") and "…[truncated " in sent
        answer = call.choices[0].message["content"]
        assert answer.startswith("echo: ") and "…[truncated " in answer
        assert attrs["agentlightning.llm.truncated_bytes"] > 0
    finally:
        await store.close()


async def test_a_small_call_is_recorded_whole(
    attempt_client: OpenAIClients, standin: StandinServer, store_server: LightningStoreServer
) -> None:
    store = LightningStoreClient(store_server.endpoint)
    try:
        rollout = await store.start_rollout(input=None)
        async with running_proxy(store, standin) as proxy:
            client = attempt_client(proxy, rollout)
            await client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        (span,) = (await store.query_spans(rollout.rollout_id, name=AGL_LLM_CALL)).items
        call = LLMCall.from_attributes(span.attributes, strict=True)
        assert call.messages == [{"role": "user", "content": "hi"}]
        assert "agentlightning.llm.truncated_bytes" not in span.attributes
    finally:
        await store.close()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_a_call_whose_span_the_store_refuses_fails_instead_of_looking_recorded(
    openai_client: OpenAIClients, standin: StandinServer, store_server: LightningStoreServer, stream: bool
) -> None:
    store = LightningStoreClient(store_server.endpoint)
    try:
        async with running_proxy(store, standin) as proxy:
            llm = proxy.as_resource("ro-unknown", "at-unknown")  # the store refuses its span
            client = openai_client(base_url=llm.endpoint, api_key="x", max_retries=0)
            messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
            with pytest.raises(openai.APIError, match="not recorded") as caught:
                if stream:
                    async for _ in await client.chat.completions.create(
                        model="m", messages=messages, stream=True
                    ):
                        pass
                else:
                    await client.chat.completions.create(model="m", messages=messages)
            if not stream:
                assert isinstance(caught.value, openai.APIStatusError)
                assert caught.value.status_code == 422
            assert proxy.stats["spans_dropped"] == 1
    finally:
        await store.close()
