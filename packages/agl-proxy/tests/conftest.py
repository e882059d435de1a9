from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from agl.store import InMemoryLightningStore
from agl.testing.openai_standin import StandinServer, serve_standin


@pytest.fixture
def standin() -> Iterator[StandinServer]:
    with serve_standin() as server:
        yield server


@pytest.fixture
async def store() -> AsyncIterator[InMemoryLightningStore]:
    store = InMemoryLightningStore()
    yield store
    await store.close()
