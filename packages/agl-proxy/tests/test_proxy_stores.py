"""The proxy records into every kind of store: SQLite file, and a store server reached over HTTP."""

from __future__ import annotations

import asyncio
import gc
import warnings
from pathlib import Path

import openai
from agl.store import LightningStore, LightningStoreClient, LightningStoreServer, SqlLightningStore
from agl.testing.openai_standin import StandinServer, token_ids
from agl.testing.proxy import running_proxy
from agl.types.semconv import AGL_LLM_CALL
from agl.types.semconv import LLMCallAttributes as L


async def _record_and_read(store: LightningStore, standin: StandinServer, calls: int = 6) -> list[int]:
    rollout = await store.start_rollout(input=None)
    async with running_proxy(store, standin) as proxy:  # stopping flushes
        endpoint = proxy.as_resource(rollout.rollout_id, rollout.attempt.attempt_id).endpoint
        async with openai.AsyncOpenAI(base_url=endpoint, api_key="x") as client:

            async def one(i: int) -> None:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"q{i}"}], stream=i % 2 == 0
                )

            await asyncio.gather(*(one(i) for i in range(calls)))
    spans = [s for s in (await store.query_spans(rollout.rollout_id)).items if s.name == AGL_LLM_CALL]
    assert len(spans) == calls
    for span in spans:
        assert span.attributes[L.RESPONSE_TOKEN_IDS.value][:6] == token_ids("echo: ")
    return [s.sequence_id for s in spans]


async def test_sqlite_store(tmp_path: Path, standin: StandinServer) -> None:
    store = SqlLightningStore(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        seqs = await _record_and_read(store, standin)
        assert len(set(seqs)) == len(seqs)
    finally:
        await store.close()


async def test_store_server_over_http(standin: StandinServer) -> None:
    from agl.store import InMemoryLightningStore

    server = LightningStoreServer(InMemoryLightningStore(), port=0)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(server.endpoint)
    try:
        seqs = await _record_and_read(client, standin)
        assert len(set(seqs)) == len(seqs)
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)


async def test_the_proxys_loop_closes_its_connections_to_a_store_server(standin: StandinServer) -> None:
    """Regression: the proxy's private loop closed with the HTTP store client's connections still open on it."""
    from agl.store import InMemoryLightningStore

    server = LightningStoreServer(InMemoryLightningStore(), port=0)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(server.endpoint)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            await _record_and_read(client, standin, calls=2)  # the proxy has stopped and its loop closed
            gc.collect()
        assert not [w for w in caught if issubclass(w.category, ResourceWarning)], [
            str(w.message) for w in caught
        ]
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
