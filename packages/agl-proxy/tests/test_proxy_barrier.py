"""A call's span is stored before its answer ends, and a call the store refuses costs only itself."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import openai
import pytest
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore, LightningStore, SqlLightningStore
from agl.testing.openai_standin import StandinServer
from agl.testing.proxy import OpenAIClients, running_proxy
from agl.types import AttemptedRollout
from agl.types.semconv import AGL_LLM_CALL
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

ProxiedAttempt = Callable[..., AbstractAsyncContextManager[tuple[AttemptedRollout, LLMProxy, AsyncOpenAI]]]
"""The type of the ``proxied_attempt`` fixture (conftest.py)."""


async def _call_spans(store: LightningStore, rollout_id: str) -> int:
    return (await store.query_spans(rollout_id, name=AGL_LLM_CALL, limit=0)).total


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
async def test_the_span_is_stored_when_the_client_has_the_answer(
    attempt_client: OpenAIClients, standin: StandinServer, tmp_path: Path, stream: bool
) -> None:
    store = SqlLightningStore(f"sqlite:///{tmp_path / 'store.db'}")
    rollouts = [await store.start_rollout(input=i) for i in range(16)]
    try:
        async with running_proxy(store, standin) as proxy:

            async def agent(index: int) -> None:
                rollout = rollouts[index]
                client = attempt_client(proxy, rollout)
                for turn in range(3):
                    messages: list[ChatCompletionMessageParam] = [
                        {"role": "user", "content": f"agent {index} turn {turn}"}
                    ]
                    if stream:
                        chunks = await client.chat.completions.create(
                            model="m", messages=messages, stream=True
                        )
                        async for _ in chunks:
                            pass
                    else:
                        await client.chat.completions.create(model="m", messages=messages)
                    # No flush: the answer is complete, so its span is in the store already.
                    assert await _call_spans(store, rollout.rollout_id) == turn + 1
                await client.close()

            await asyncio.gather(*(agent(i) for i in range(len(rollouts))))
    finally:
        await store.close()


async def test_a_call_for_an_unknown_rollout_costs_only_its_own_span(
    openai_client: OpenAIClients, proxied_attempt: ProxiedAttempt, standin: StandinServer
) -> None:
    store = InMemoryLightningStore()
    async with proxied_attempt(store, standin) as (rollout, proxy, good):
        bad = openai_client(base_url=proxy.as_resource("ro-unknown", "at-unknown").endpoint, api_key="x")

        async def call(client: openai.AsyncOpenAI, i: int) -> str | None:
            try:
                reply = await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"{i}"}]
                )
            except openai.UnprocessableEntityError as exc:
                return f"{exc.status_code}"
            return reply.choices[0].message.content

        answers = await asyncio.gather(*(call(good, i) for i in range(60)), call(bad, 60))
        assert answers[:60] == [f"echo: {i}" for i in range(60)]
        assert answers[-1] == "422"  # the unknown rollout's call is not recorded: it does not look recorded
        assert await _call_spans(store, rollout.rollout_id) == 60
        assert proxy.stats["spans_dropped"] == 1
        await good.close()
        await bad.close()
