from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import openai
import pytest
from agl.proxy import LLMProxy
from agl.store import InMemoryLightningStore, LightningStore
from agl.testing.openai_standin import StandinServer, serve_standin
from agl.testing.proxy import OpenAIClients, running_proxy
from agl.types import AttemptedRollout


@pytest.fixture
def standin() -> Iterator[StandinServer]:
    with serve_standin() as server:
        yield server


@pytest.fixture
async def store() -> AsyncIterator[InMemoryLightningStore]:
    store = InMemoryLightningStore()
    yield store
    await store.close()


@pytest.fixture
async def openai_client() -> AsyncIterator[OpenAIClients]:
    """Makes ``openai.AsyncOpenAI`` clients that are closed, on the test's loop, when the test ends.

    An unclosed client leaves its pooled sockets to the garbage collector (a ResourceWarning in a later test).
    """
    made: list[openai.AsyncOpenAI] = []

    def make(**kwargs: Any) -> openai.AsyncOpenAI:
        made.append(openai.AsyncOpenAI(**kwargs))
        return made[-1]

    yield make
    for client in made:
        await client.close()


@pytest.fixture
def attempt_client(openai_client: OpenAIClients) -> OpenAIClients:
    """Makes ``openai_client`` clients whose calls ``proxy`` records under ``rollout``'s attempt:
    ``attempt_client(proxy, rollout, **client_kwargs)`` (``api_key`` defaults to ``"x"``)."""

    def make(proxy: LLMProxy, rollout: AttemptedRollout, **kwargs: Any) -> openai.AsyncOpenAI:
        llm = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id)
        return openai_client(base_url=llm.endpoint, **{"api_key": "x", **kwargs})

    return make


@pytest.fixture
def proxied_attempt(
    attempt_client: OpenAIClients,
) -> Callable[
    ..., contextlib.AbstractAsyncContextManager[tuple[AttemptedRollout, LLMProxy, openai.AsyncOpenAI]]
]:
    """``async with proxied_attempt(store, *servers, **proxy_kwargs) as (rollout, proxy, client)``: a new
    rollout of ``store``, a proxy running in front of ``servers``, and an ``attempt_client`` for the rollout."""

    @contextlib.asynccontextmanager
    async def run(
        store: LightningStore, *servers: StandinServer, **proxy_kwargs: Any
    ) -> AsyncIterator[tuple[AttemptedRollout, LLMProxy, openai.AsyncOpenAI]]:
        rollout = await store.start_rollout(input=None)
        async with running_proxy(store, *servers, **proxy_kwargs) as proxy:
            yield rollout, proxy, attempt_client(proxy, rollout)

    return run
