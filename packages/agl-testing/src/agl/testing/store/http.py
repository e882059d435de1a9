"""Stores over real HTTP on 127.0.0.1: a running server (around a fresh in-memory store by default), a store
served with a client connected to it (``async with serve_over_http(store) as client``), and raw requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Generator
from typing import Any

import aiohttp
from agl.store import InMemoryLightningStore, LightningStore, LightningStoreClient, LightningStoreServer

__all__ = ["call", "child_uses_store", "health", "http_session", "running_server", "serve_over_http"]


@contextlib.contextmanager
def running_server(
    store: LightningStore | None = None, **kwargs: Any
) -> Generator[LightningStoreServer, None, None]:
    """A started server on a free 127.0.0.1 port (stopped afterwards)."""
    kwargs.setdefault("port", 0)
    server = LightningStoreServer(store if store is not None else InMemoryLightningStore(), **kwargs)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextlib.asynccontextmanager
async def serve_over_http(
    store: LightningStore, **server_kwargs: Any
) -> AsyncGenerator[LightningStoreClient, None]:
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


@contextlib.asynccontextmanager
async def http_session() -> AsyncGenerator[aiohttp.ClientSession, None]:
    async with aiohttp.ClientSession() as session:
        yield session


async def call(
    session: aiohttp.ClientSession,
    server: LightningStoreServer,
    verb: str,
    path: str,
    *,
    json_body: Any = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    token: str | None = None,
) -> tuple[int, Any, dict[str, str]]:
    """One raw request; returns (status, decoded JSON body or raw bytes, headers)."""
    hdrs = dict(headers or {})
    if token:
        hdrs["Authorization"] = f"Bearer {token}"
    if json_body is not None:
        data = json.dumps(json_body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    async with session.request(verb, server.endpoint + path, data=data, headers=hdrs) as response:
        raw = await response.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        return response.status, body, {k.lower(): v for k, v in response.headers.items()}


async def health(session: aiohttp.ClientSession, server: LightningStoreServer) -> bool:
    status, body, _ = await call(session, server, "GET", "/v1/agl/health")
    return status == 200 and body == {"status": "ok"}


def child_uses_store(store: LightningStore, results: Any) -> None:
    """Run in a child process: enqueue and claim a rollout through ``store``, report what happened."""
    import asyncio
    import os

    async def work() -> tuple[str, str, int]:
        rollout = await store.enqueue_rollout({"from_pid": os.getpid()})
        claimed = await store.dequeue_rollout(worker_id="child")
        assert claimed is not None
        await store.close()
        return rollout.rollout_id, claimed.attempt.attempt_id, os.getpid()

    try:
        results.put(asyncio.run(work()))
    except BaseException as exc:
        results.put(repr(exc))
