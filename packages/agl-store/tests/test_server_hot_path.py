"""The hot routes' single layer answers exactly as the general stack does (token, size cap, replay, faults)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.testing.store.http import call, http_session, running_server

HOT = "/v1/agl/queues/rollouts/enqueue"  # served by the single layer
GENERAL = "/v1/agl/resources"  # served by the general stack


@pytest.fixture
def server() -> Any:
    with running_server(InMemoryLightningStore(), token="tok", max_body_bytes=2_000) as server:
        yield server


def _same_error(a: tuple[int, Any, dict[str, str]], b: tuple[int, Any, dict[str, str]]) -> None:
    assert a[0] == b[0]
    assert a[1] == b[1]
    assert a[2].get("www-authenticate") == b[2].get("www-authenticate")


async def test_token_and_size_errors_match_the_general_stack(server: LightningStoreServer) -> None:
    async with http_session() as session:
        for token in (None, "wrong"):
            hot = await call(session, server, "POST", HOT, json_body={"rollouts": []}, token=token)
            general = await call(session, server, "POST", GENERAL, json_body={}, token=token)
            assert hot[0] == 401
            _same_error(hot, general)
        big = {"rollouts": [{"input": "x" * 3_000}]}
        hot = await call(session, server, "POST", HOT, json_body=big, token="tok")
        general = await call(session, server, "POST", GENERAL, json_body={"x": "x" * 3_000}, token="tok")
        assert hot[0] == 413
        _same_error(hot, general)

        # A streamed (chunked) body past the cap is cut off the same way.
        async def chunks() -> Any:
            for _ in range(3):
                yield b" " * 1_000

        for path in (HOT, GENERAL):
            headers = {"Authorization": "Bearer tok", "Content-Type": "application/json"}
            async with session.post(server.endpoint + path, data=chunks(), headers=headers) as response:
                assert response.status == 413
                assert json.loads(await response.read())["error_type"] == "PayloadTooLarge"
        assert (await call(session, server, "GET", "/v1/agl/health"))[0] == 200  # no token needed
        # An id that merely looks like 'health' still needs the token.
        assert (await call(session, server, "GET", "/v1/agl/rollouts/health"))[0] == 401


async def test_replays_are_shared_and_marked(server: LightningStoreServer) -> None:
    headers = {"Idempotency-Key": "k-1"}
    async with http_session() as session:
        first = await call(
            session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]}, headers=headers, token="tok"
        )
        again = await call(
            session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]}, headers=headers, token="tok"
        )
        assert first[0] == again[0] == 201 and first[1] == again[1]
        assert "agl-replayed" not in first[2] and again[2]["agl-replayed"] == "true"
        status, listed, _ = await call(session, server, "GET", "/v1/agl/rollouts", token="tok")
        assert status == 200 and len(listed["items"]) == 1  # applied once
        # The general stack's replays go through the same cache.
        body = {"p": {"resource_type": "prompt_template", "template": "t", "engine": "f-string"}}
        one = await call(session, server, "POST", GENERAL, json_body=body, headers=headers, token="tok")
        two = await call(session, server, "POST", GENERAL, json_body=body, headers=headers, token="tok")
        assert one[0] == two[0] == 201 and one[1] == two[1] and two[2]["agl-replayed"] == "true"


async def test_a_store_fault_on_a_hot_route_is_a_500_and_counted() -> None:
    class Broken(InMemoryLightningStore):
        async def enqueue_many_rollouts(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("disk on fire")

    with running_server(Broken()) as server:
        async with http_session() as session:
            status, body, _ = await call(session, server, "POST", HOT, json_body={"rollouts": [{"input": 1}]})
            assert status == 500 and body["error_type"] == "RuntimeError"
            status, text, _ = await call(session, server, "GET", "/metrics")
    assert status == 200
    line = next(
        ln
        for ln in text.decode().splitlines()
        if ln.startswith("agl_store_http_requests_total") and 'route="/v1/agl/queues/rollouts/enqueue"' in ln
    )
    assert 'status="500"' in line and line.endswith(" 1.0")
