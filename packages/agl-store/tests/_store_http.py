"""Serve a store over real HTTP on 127.0.0.1 for one test: ``async with serve_over_http(store) as client``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from agl.store import LightningStore, LightningStoreClient, LightningStoreServer


@contextlib.asynccontextmanager
async def serve_over_http(store: LightningStore, **server_kwargs: Any) -> AsyncIterator[LightningStoreClient]:
    """A ``LightningStoreServer`` on a free port around ``store``, and a client connected to it."""
    server_kwargs.setdefault("port", 0)
    token = server_kwargs.get("token")
    server = LightningStoreServer(store, **server_kwargs)
    await asyncio.to_thread(server.start)
    client = LightningStoreClient(
        server.endpoint,
        token=token,
        retry_delays=(0.05, 0.2),
        health_retry_delays=(0.05,),
        request_timeout=20.0,
    )
    try:
        yield client
    finally:
        await client.close()
        await asyncio.to_thread(server.stop)
