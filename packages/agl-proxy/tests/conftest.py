from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import openai
import pytest
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import StandinServer, serve_standin
from agl.testing.proxy import OpenAIClients


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
