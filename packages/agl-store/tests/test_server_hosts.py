"""DNS-rebinding protection: a token-less store on loopback answers only to local names and IP addresses."""

from __future__ import annotations

import http.client

import pytest
from agl.store import InMemoryLightningStore, LightningStoreServer
from agl.store.serving import host_allowed, local_host_names
from agl.testing.store.http import running_server
from hypothesis import given
from hypothesis import strategies as st


def _get(server: LightningStoreServer, path: str, host: str, token: str | None = None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        headers = {"Host": host, **({"Authorization": f"Bearer {token}"} if token else {})}
        conn.request("GET", path, headers=headers)
        return conn.getresponse().status
    finally:
        conn.close()


@pytest.mark.parametrize("plain", [False, True], ids=["agl-protocol", "plain-uvicorn"])
def test_a_rebound_name_is_refused_without_a_token(plain: bool) -> None:
    with running_server(InMemoryLightningStore(), plain_http=plain) as server:
        for path in ("/v1/agl/rollouts", "/v1/agl/rollouts/ro-1", "/v1/agl/statistics"):
            assert _get(server, path, "attacker.example") == 421
            assert _get(server, path, f"attacker.example:{server.port}") == 421
            assert _get(server, path, f"localhost:{server.port}") == 200
            assert _get(server, path, f"127.0.0.1:{server.port}") == 200
            assert _get(server, path, f"[::1]:{server.port}") == 200


def test_with_a_token_any_name_is_answered() -> None:
    with running_server(InMemoryLightningStore(), token="tok") as server:
        assert _get(server, "/v1/agl/rollouts", "store.internal", token="tok") == 200
        assert _get(server, "/v1/agl/rollouts", "store.internal") == 401


def test_which_servers_check_the_host() -> None:
    assert local_host_names("127.0.0.1", None) is not None
    assert local_host_names("localhost", None, "my-box") is not None
    assert "my-box" in (local_host_names("::1", None, "My-Box") or ())
    assert local_host_names("127.0.0.1", "tok") is None  # a token protects it
    assert local_host_names("0.0.0.0", None) is None  # reachable from the network anyway


@given(st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z]{2,6}){1,2}", fullmatch=True), st.integers(1, 65535))
def test_only_ip_addresses_and_local_names_pass(name: str, port: int) -> None:
    names = local_host_names("127.0.0.1", None)
    assert names is not None
    assert host_allowed(f"{name}:{port}".encode(), names) == (name in names)
    assert host_allowed(f"10.1.2.3:{port}".encode(), names)
    assert host_allowed(f"[fe80::1]:{port}".encode(), names)
    assert host_allowed(None, names)  # HTTP/1.0 sends none
