"""The optional bearer token: required on every route but health, from the argument or AGL_STORE_TOKEN."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from agl.store import LightningStoreClient, LightningStoreServer, StoreAuthenticationError
from agl.testing.store.http import call, http_session, running_server

TOKEN = "t0ken-for-tests"


def _every_route(server: LightningStoreServer) -> list[tuple[str, str]]:
    """Every (method, concrete path) the app serves, path parameters filled in, docs included."""
    routes: list[tuple[str, str]] = []
    for route in server.app.routes:
        path = getattr(route, "path", None)
        methods = getattr(route, "methods", None) or {"GET"}
        if path is None:
            continue
        concrete = re.sub(r"\{[^}]+\}", "some-id", path)
        routes.extend((m, concrete) for m in sorted(methods) if m != "HEAD")
    return routes


@pytest.fixture
def server() -> Any:
    with running_server(token=TOKEN) as srv:
        yield srv


async def test_every_route_but_health_needs_the_token(server: LightningStoreServer) -> None:
    routes = _every_route(server)
    assert len(routes) > 30  # the whole API, /openapi.json and /docs, OTLP
    async with http_session() as session:
        for verb, path in routes:
            for token in (None, "wrong-token", TOKEN[:-1]):
                status, body, headers = await call(session, server, verb, path, json_body={}, token=token)
                if path == "/v1/agl/health":
                    assert status == 200
                    continue
                assert status == 401, (verb, path, token, status)
                assert "Bearer" in body["detail"] and headers.get("www-authenticate") == "Bearer"
            status, _, _ = await call(session, server, verb, path, json_body={}, token=TOKEN)
            assert status != 401, (verb, path)


async def test_client_with_the_token_works_and_without_it_fails_fast(server: LightningStoreServer) -> None:
    good = LightningStoreClient(server.endpoint, token=TOKEN)
    bad = LightningStoreClient(server.endpoint, token="nope", retry_delays=(5.0,))
    try:
        rollout = await good.enqueue_rollout({"q": 1})
        assert (await good.get_rollout_by_id(rollout.rollout_id)) is not None
        started = time.monotonic()
        with pytest.raises(StoreAuthenticationError) as caught:
            await bad.get_rollout_by_id(rollout.rollout_id)
        assert time.monotonic() - started < 2.0  # 401 is never retried
        assert caught.value.status == 401 and caught.value.method == "get_rollout_by_id"
    finally:
        await good.close()
        await bad.close()


async def test_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGL_STORE_TOKEN", "from-env")
    with running_server() as server:
        assert server.token == "from-env"
        client = LightningStoreClient(server.endpoint)  # reads the same variable
        try:
            assert (await client.enqueue_rollout(1)).status == "queuing"
        finally:
            await client.close()
        async with http_session() as session:
            status, _, _ = await call(session, server, "GET", "/v1/agl/statistics")
            assert status == 401


async def test_no_token_means_open(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGL_STORE_TOKEN", raising=False)
    with running_server() as server:
        assert server.token is None
        async with http_session() as session:
            status, _, _ = await call(session, server, "GET", "/v1/agl/statistics")
            assert status == 200


async def test_cors_origins() -> None:
    with running_server(cors_allow_origins=["http://ui.example"], token=TOKEN) as server:
        async with http_session() as session:
            allowed = {"Origin": "http://ui.example", "Access-Control-Request-Method": "POST"}
            status, _, headers = await call(
                session, server, "OPTIONS", "/v1/agl/rollouts/search", headers=allowed
            )
            assert status == 200 and headers["access-control-allow-origin"] == "http://ui.example"
            other = {"Origin": "http://evil.example", "Access-Control-Request-Method": "POST"}
            _, _, headers = await call(session, server, "OPTIONS", "/v1/agl/rollouts/search", headers=other)
            assert "access-control-allow-origin" not in {k.lower() for k in headers}
