"""Shared helpers for the proxy tests: a running stand-in, a store and a started proxy."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable
from typing import Any

import openai
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore, LightningStore
from agl.testing.openai_standin import StandinServer
from agl.types import AttemptedRollout, Span
from agl.types.semconv import AGL_LLM_CALL

OpenAIClients = Callable[..., openai.AsyncOpenAI]
"""The proxy tests' ``openai_client`` fixture: makes clients that are closed when the test ends."""


def model_list(
    *servers: StandinServer, name: str = "m", provider: str = "hosted_vllm"
) -> list[dict[str, Any]]:
    return [
        {
            "model_name": name,
            "litellm_params": {"model": f"{provider}/standin", "api_base": s.base_url, "api_key": "k"},
        }
        for s in servers
    ]


@contextlib.asynccontextmanager
async def running_proxy(
    store: LightningStore, *servers: StandinServer, **kwargs: Any
) -> AsyncGenerator[LLMProxy, None]:
    proxy = LLMProxy(model_list(*servers), store=store, **kwargs)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()


async def llm_spans(
    store: InMemoryLightningStore, rollout: AttemptedRollout, count: int, timeout: float = 10.0
) -> list[Span]:
    """The rollout's LLM-call spans once ``count`` of them are stored (polls with a deadline)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        spans = [s for s in (await store.query_spans(rollout.rollout_id)).items if s.name == AGL_LLM_CALL]
        if len(spans) >= count or asyncio.get_running_loop().time() > deadline:
            return spans
        await asyncio.sleep(0.01)
