"""The client's ``transport=`` seam: the whole client against the server's whole ASGI stack, no sockets."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreClient, LightningStoreServer
from agl.store.errors import StoreAuthenticationError, StoreNotFoundError, StoreServerError
from agl.store.http.client import ASGITransport
from agl.types import PromptTemplate


def _client(server: LightningStoreServer, token: str | None = "tok", **kwargs: Any) -> LightningStoreClient:
    transport = ASGITransport(server.asgi_app)
    return LightningStoreClient("http://store.invalid", token=token, transport=transport, **kwargs)


async def test_a_rollout_round_trip_without_a_socket() -> None:
    store = InMemoryLightningStore()
    server = LightningStoreServer(store, token="tok")  # never started: no port is bound
    client = _client(server)
    await client.add_resources({"p": PromptTemplate(template="t {x}", engine="f-string")})
    enqueued = await client.enqueue_rollout(input={"x": 1})
    claimed = await client.dequeue_rollout_with_resources("w-1")
    assert claimed is not None and claimed[0].rollout_id == enqueued.rollout_id
    assert claimed[1] is not None and "p" in claimed[1].resources
    attempt = claimed[0].attempt
    await client.update_attempt(enqueued.rollout_id, attempt.attempt_id, status="succeeded")
    done = await client.wait_for_rollouts(rollout_ids=[enqueued.rollout_id], timeout=1)
    assert [r.status for r in done] == ["succeeded"]
    stored = await store.get_rollout_by_id(enqueued.rollout_id)
    assert stored is not None and stored.status == "succeeded"


async def test_errors_map_as_over_http() -> None:
    server = LightningStoreServer(InMemoryLightningStore(), token="tok")
    with pytest.raises(StoreAuthenticationError):
        await _client(server, token="wrong").query_rollouts()
    with pytest.raises(StoreNotFoundError, match="no-such"):
        await _client(server).update_attempt("no-such", "no-such", status="running")


async def test_an_app_fault_is_a_server_error_that_is_retried() -> None:
    calls = 0

    async def broken(scope: Any, receive: Any, send: Any) -> None:
        nonlocal calls
        calls += 1
        raise RuntimeError("boom")

    client = LightningStoreClient(
        "http://store.invalid", transport=ASGITransport(broken), retry_delays=(0.0,), health_retry_delays=()
    )
    with pytest.raises(StoreServerError):
        await client.statistics()
    assert calls == 2  # the call, then the health probe before its retry (which fails): no retry ran


def test_the_transport_is_not_pickled() -> None:
    server = LightningStoreServer(InMemoryLightningStore())
    copy = pickle.loads(pickle.dumps(_client(server)))
    assert copy.transport is None and copy.address == "http://store.invalid"
