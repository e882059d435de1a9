"""The reference's serving idioms (``await server.start()``, ``LLMProxy(port=..., num_retries=...)``, pages as
sequences), with ``import agl.compat as agl`` as the only change."""

from __future__ import annotations

from collections.abc import Sequence

import agl.compat as agl
import openai
from agl.testing.openai_standin import serve_standin


async def test_a_store_server_and_a_proxy_started_as_the_reference_starts_them() -> None:
    with serve_standin() as backend:
        store = agl.InMemoryLightningStore()
        store_server = agl.LightningStoreServer(store, "127.0.0.1", 0)
        await store_server.start()
        try:
            llm_proxy = agl.LLMProxy(
                port=None,
                model_list=[
                    {
                        "model_name": "stand-in",
                        "litellm_params": {"model": "hosted_vllm/stand-in", "api_base": backend.base_url},
                    }
                ],
                store=store_server,
                num_retries=0,
                callbacks=["return_token_ids", "opentelemetry"],
            )
            await llm_proxy.start()
            try:
                rollout = await store_server.start_rollout(input={"q": "hi"})
                llm = llm_proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id)
                async with openai.AsyncOpenAI(
                    base_url=llm.endpoint, api_key="dummy", max_retries=0
                ) as client:
                    reply = await client.chat.completions.create(
                        model=llm.model, messages=[{"role": "user", "content": "hi"}]
                    )
                assert reply.choices[0].message.content == "echo: hi"
            finally:
                await llm_proxy.stop()
            spans = await store_server.query_spans(rollout.rollout_id)
            assert isinstance(spans, Sequence) and len(spans) == 1
            assert spans.index(spans[0]) == 0 and spans[0] in spans
        finally:
            await store_server.stop()
    assert not store_server.is_running
